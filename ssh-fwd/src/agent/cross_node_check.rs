//! What cannot work across nodes, refused when the mappings file is read
//! (at start, before the node is touched, and at each reload, which then
//! keeps the running mappings): a backend this node reaches through an
//! external interface while the frontend option it adds goes out plain
//! (file mode, `--cross-node option`, no `--cross-node-key`).
//!
//! The backend's node believes a plain option only on a cluster interface
//! that is not external (`ssh_fwd_common::conntrack::trust::
//! option_trusted`): on an external interface anyone can send one. Where
//! the nodes reach each other's pods over their external interfaces
//! (host-gw or BGP routing without a network of their own), it ignores
//! the option (`frontend_option_untrusted`), restores no frontend to the
//! pod's answer, and every login through this node to that backend times
//! out. This node cannot see where the other receives the SYN; its own
//! route out is the sign, and in those setups both ends are external.
//! Where they are not (the other node receives this traffic on an
//! interface that is a `--cluster-iface` and not external),
//! `--allow-unsealed-cross-node` turns the refusal into a warning.
//!
//! Kubernetes mode is not checked: its agents share a key from a Secret.

use std::{
    collections::BTreeMap,
    fmt,
    net::{IpAddr, SocketAddr},
};

use netlink_packet_route::route::{RouteAttribute, RouteMessage};

use super::args::{AgentArgs, CrossNode};
use crate::{
    datapath::netdev::{self, Netlink},
    mapping::MappingSet,
};

/// The check the agent's flags call for.
#[derive(Debug)]
pub struct CrossNodeCheck {
    /// The external interfaces, by index.
    external: BTreeMap<u32, String>,
    /// `--allow-unsealed-cross-node`: a warning instead of a refusal.
    allow: bool,
}

/// A mapping whose backend's node would ignore the option.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unsealed {
    pub mapping: String,
    pub backend: SocketAddr,
    /// The external interface the route to the backend leaves through.
    pub iface: String,
}

impl fmt::Display for Unsealed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "mapping {}: its backend {} is reached through the external interface {}",
            self.mapping, self.backend, self.iface
        )
    }
}

/// Why, and what to do.
const FIX: &str = "no --cross-node-key seals the frontend option, and a node believes a plain \
one only on a cluster interface that is not external, so the backend's node ignores it \
(frontend_option_untrusted) and logins through this node time out. Give every agent the same \
--cross-node-key (`openssl rand -hex 16 > FILE`), carry node-to-node traffic on a \
--cluster-iface that is not external, or run every agent with --cross-node plain; if the \
backend's node receives this traffic on such an interface, --allow-unsealed-cross-node starts \
anyway";

impl CrossNodeCheck {
    /// `None` where nothing is to check: a key seals the option (`keyed`),
    /// no option is sent (`--cross-node plain`), or the mappings come from
    /// Kubernetes. `external`: the external interfaces' names.
    pub fn new(args: &AgentArgs, keyed: bool, external: &[String]) -> anyhow::Result<Option<Self>> {
        if args.mappings.is_none() || keyed || args.cross_node == CrossNode::Plain {
            return Ok(None);
        }
        let external = (external.iter())
            .map(|name| Ok((netdev::index(name)?, name.clone())))
            .collect::<anyhow::Result<_>>()?;
        Ok(Some(Self {
            external,
            allow: args.allow_unsealed_cross_node,
        }))
    }

    /// Looks up the route to each backend of `set`: an error naming those
    /// that leave through an external interface, or with
    /// `--allow-unsealed-cross-node` a warning.
    pub async fn check(&self, set: &MappingSet) -> anyhow::Result<()> {
        let netlink = Netlink::open()?;
        let mut routes: BTreeMap<IpAddr, Option<u32>> = BTreeMap::new();
        let mut found = Vec::new();
        for mapping in set.iter() {
            let ip = mapping.backend.ip();
            let oif = match routes.get(&ip) {
                Some(oif) => *oif,
                None => {
                    let oif = netlink.route_to(ip).await?.as_ref().and_then(out_interface);
                    routes.insert(ip, oif);
                    oif
                }
            };
            if let Some(iface) = oif.and_then(|i| self.external.get(&i)) {
                found.push(Unsealed {
                    mapping: mapping.name.to_string(),
                    backend: mapping.backend,
                    iface: iface.clone(),
                });
            }
        }
        verdict(&found, self.allow)
    }
}

/// The interface a route leaves through.
fn out_interface(route: &RouteMessage) -> Option<u32> {
    route.attributes.iter().find_map(|a| match a {
        RouteAttribute::Oif(index) => Some(*index),
        _ => None,
    })
}

/// An error naming every mapping of `found` and the fix; with `allow`, a
/// warning instead.
pub fn verdict(found: &[Unsealed], allow: bool) -> anyhow::Result<()> {
    if found.is_empty() {
        return Ok(());
    }
    let named: Vec<String> = found.iter().map(ToString::to_string).collect();
    let message = format!("{}; {FIX}", named.join("; "));
    if allow {
        tracing::warn!(
            mappings = found.len(),
            "--allow-unsealed-cross-node: starting although {message}"
        );
        return Ok(());
    }
    anyhow::bail!("{message}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unsealed(name: &str) -> Unsealed {
        Unsealed {
            mapping: name.to_owned(),
            backend: "10.244.2.5:22".parse().unwrap(),
            iface: "ext0".to_owned(),
        }
    }

    #[test]
    fn a_backend_beyond_an_external_interface_is_refused_naming_it_and_the_fix() {
        assert!(verdict(&[], false).is_ok());
        let err = verdict(&[unsealed("job-1"), unsealed("job-2")], false)
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with(
                "mapping job-1: its backend 10.244.2.5:22 is reached through the external \
                 interface ext0; mapping job-2: "
            ),
            "{err}"
        );
        for fix in ["--cross-node-key", "--cluster-iface", "--cross-node plain"] {
            assert!(err.contains(fix), "{fix}: {err}");
        }
        assert!(err.contains("--allow-unsealed-cross-node"), "{err}");
    }

    #[test]
    fn allowed_it_starts() {
        assert!(verdict(&[unsealed("job-1")], true).is_ok());
    }
}
