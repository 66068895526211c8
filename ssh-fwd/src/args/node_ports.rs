//! Ports a node's own services use, which a `--port-range` must not
//! cover: the SSH IP serves its range to pods, and a port there that a
//! node service also listens on is one mistake (the SSH IP on an
//! interface without the data path, a port left unmapped by an older data
//! path) away from exposing that service. The default range avoids them
//! all; a test holds it.

use std::ops::RangeInclusive;

/// The ports the default `--port-range` gives: above every Kubernetes
/// component's port and below the NodePort range (30000-32767) and Linux's
/// ephemeral ports (32768-60999); 8,000 ports, so two SSH IPs fit the
/// default `--max-mappings` (16,384).
pub const DEFAULT_PORT_RANGE: &str = "20000-27999";

/// A port or range of ports a node's own service is known to listen on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WellKnown {
    pub ports: (u16, u16),
    pub what: &'static str,
}

const fn one(port: u16, what: &'static str) -> WellKnown {
    WellKnown {
        ports: (port, port),
        what,
    }
}

/// Ports of node services on Kubernetes nodes: the control plane, the
/// kubelet and kube-proxy, common CNIs and exporters. docs/agent.md lists
/// them.
pub const WELL_KNOWN: &[WellKnown] = &[
    one(22, "sshd"),
    one(53, "DNS"),
    one(111, "rpcbind"),
    one(179, "BGP (Calico, MetalLB, kube-router)"),
    WellKnown {
        ports: (2379, 2381),
        what: "etcd",
    },
    one(4240, "Cilium health"),
    one(4244, "Hubble"),
    one(6443, "kube-apiserver"),
    one(7946, "MetalLB memberlist"),
    one(9099, "Calico Felix health"),
    one(9100, "node-exporter"),
    one(9153, "CoreDNS metrics"),
    WellKnown {
        ports: (9962, 9965),
        what: "Cilium metrics",
    },
    WellKnown {
        ports: (10248, 10260),
        what: "kubelet, kube-proxy, kube-controller-manager, kube-scheduler",
    },
    WellKnown {
        ports: (30000, 32767),
        what: "NodePort Services",
    },
];

/// The well-known ports `range` covers, each with what uses it.
pub fn well_known_in(range: &RangeInclusive<u16>) -> Vec<WellKnown> {
    WELL_KNOWN
        .iter()
        .filter(|w| w.ports.0 <= *range.end() && *range.start() <= w.ports.1)
        .copied()
        .collect()
}

impl std::fmt::Display for WellKnown {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.ports {
            (a, b) if a == b => write!(f, "{a} ({})", self.what),
            (a, b) => write!(f, "{a}-{b} ({})", self.what),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_range_covers_no_well_known_port() {
        let range = crate::args::port_range(DEFAULT_PORT_RANGE).unwrap();
        assert_eq!(well_known_in(&range), vec![]);
        assert_eq!(range.len(), 8_000);
        assert!(
            2 * range.len() <= ssh_fwd_common::maps::MAX_MAPPINGS as usize,
            "two SSH IPs fit --max-mappings' default"
        );
    }

    #[test]
    fn the_old_default_covers_the_kubelet() {
        let found = well_known_in(&(8000..=16000));
        assert!(found.iter().any(|w| w.ports == (10248, 10260)), "{found:?}");
        assert!(found.iter().any(|w| w.ports == (9100, 9100)), "{found:?}");
    }

    #[test]
    fn a_range_touching_an_edge_overlaps() {
        assert_eq!(well_known_in(&(1..=22)).len(), 1);
        assert_eq!(well_known_in(&(23..=52)), vec![]);
        assert_eq!(well_known_in(&(32767..=40000))[0].what, "NodePort Services");
        assert_eq!(well_known_in(&(10260..=10260)).len(), 1);
    }

    #[test]
    fn a_range_shows_with_what_uses_it() {
        assert_eq!(WELL_KNOWN[0].to_string(), "22 (sshd)");
        assert_eq!(WELL_KNOWN[4].to_string(), "2379-2381 (etcd)");
    }
}
