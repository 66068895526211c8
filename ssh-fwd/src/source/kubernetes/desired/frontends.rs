//! What a Service claims on the SSH IPs before any endpoint is read: the
//! addresses it exposes in the shapes honoured, the ports it may claim
//! there, and whether the controller granted them. The agents' rule and
//! the controller's both go through [`frontends`], so they see the same
//! claimants.

use std::collections::BTreeSet;
use std::net::IpAddr;

use super::{Note, Policy};
use crate::source::kubernetes::objects::{Ingress, PortView, ServiceView};

/// One port a Service claims on the SSH IPs.
pub struct Frontends<'a> {
    pub port: &'a PortView,
    pub number: u16,
    /// The SSH IPs it claims the port on.
    pub ips: BTreeSet<IpAddr>,
    /// Whether the controller granted the port.
    pub granted: bool,
}

/// The ports a Service claims on the SSH IPs, with the addresses each is
/// claimed on and whether it is granted; the reasons for what it does not
/// claim in `notes`. The controller weighs Services by this too, so it and
/// the agents see the same claimants.
///
/// A Service with a grant claims the granted port and no other: on each
/// ingress address whose entry lists it, and on its `externalIPs` where
/// those are honoured. A Service without one claims nothing through its
/// load-balancer status, and its `externalIPs` ports (where honoured)
/// without a grant: those trust whoever may write the Service, so they
/// give way to any grant.
pub fn frontends<'a>(
    svc: &'a ServiceView,
    policy: &Policy,
    notes: &mut Vec<Note>,
) -> Vec<Frontends<'a>> {
    let Some((external, ingress)) = honoured_addresses(svc, policy, notes) else {
        return Vec::new();
    };
    let id = svc.id.to_string();
    if svc.grant.is_none() && !ingress.is_empty() {
        notes.push(Note::NotGranted {
            service: id.clone(),
            port: None,
        });
    }
    let mut out = Vec::new();
    for port in &svc.ports {
        let Some(number) = honoured_port(&id, port, policy, notes) else {
            continue;
        };
        let granted = svc.grant.as_ref().map(|g| g.port == number);
        if granted == Some(false) {
            notes.push(Note::NotGranted {
                service: id.clone(),
                port: Some(port.port),
            });
            continue;
        }
        let mut ips = external.clone();
        if granted.is_some() {
            let listed = ingress.iter().filter(|i| i.ports.contains(&number));
            ips.extend(listed.map(|i| i.ip));
        }
        if !ips.is_empty() {
            out.push(Frontends {
                port,
                number,
                ips,
                granted: granted.is_some(),
            });
        }
    }
    out
}

/// The SSH IPs a Service exposes in the shapes and the LoadBalancer class
/// honoured (its `externalIPs`, and its ingress entries); `None`, with the
/// reason in `notes`, when it exposes none (a LoadBalancer of our class
/// that lets Kubernetes allocate NodePorts exposes none at all).
fn honoured_addresses<'a>(
    svc: &'a ServiceView,
    policy: &Policy,
    notes: &mut Vec<Note>,
) -> Option<(BTreeSet<IpAddr>, Vec<&'a Ingress>)> {
    let id = || svc.id.to_string();
    if svc.ours && !svc.node_ports_off {
        notes.push(Note::NodePortsAllocated { service: id() });
        return None;
    }
    let before = notes.len();
    let (external, ingress) = addresses(svc, policy, notes);
    if external.is_empty() && ingress.is_empty() {
        if notes.len() == before {
            notes.push(Note::NoSshIp { service: id() });
        }
        return None;
    }
    Some((external, ingress))
}

/// The port number a Service port claims: a TCP port in the range.
pub fn honoured_port(
    id: &str,
    port: &PortView,
    policy: &Policy,
    notes: &mut Vec<Note>,
) -> Option<u16> {
    if !port.tcp {
        notes.push(Note::NotTcp {
            service: id.to_owned(),
            port: port.port,
        });
        return None;
    }
    let number = u16::try_from(port.port).ok()?;
    if !policy.ports.contains(&number) {
        notes.push(Note::PortOutsideRange {
            service: id.to_owned(),
            port: port.port,
        });
        return None;
    }
    Some(number)
}

/// The SSH IPs the Service exposes in the shapes honoured: its
/// `externalIPs`, and its ingress entries.
fn addresses<'a>(
    svc: &'a ServiceView,
    policy: &Policy,
    notes: &mut Vec<Note>,
) -> (BTreeSet<IpAddr>, Vec<&'a Ingress>) {
    let mut external: BTreeSet<IpAddr> = (svc.external_ips.iter().copied())
        .filter(|ip| policy.ssh_ips.contains(ip))
        .collect();
    let mut ingress: Vec<&Ingress> = (svc.ingress.iter())
        .filter(|i| policy.ssh_ips.contains(&i.ip))
        .collect();
    let mut refuse = |empty: bool, honoured: bool, style: &'static str| {
        let refused = !honoured && !empty;
        if refused {
            notes.push(Note::StyleNotHonoured {
                service: svc.id.to_string(),
                style,
            });
        }
        refused
    };
    if refuse(
        external.is_empty(),
        policy.styles.external_ips,
        "externalIPs",
    ) {
        external.clear();
    }
    if refuse(
        ingress.is_empty(),
        policy.styles.load_balancer,
        "LoadBalancer",
    ) {
        ingress.clear();
    }
    (external, ingress)
}
