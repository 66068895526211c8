//! From cached Services and EndpointSlices to the mappings a node should
//! hold: a pure function, so every rule is a unit test.
//!
//! Rules: a Service counts if it exposes an external address in `--ssh-ip`,
//! either legacy (`spec.externalIPs`) or as a LoadBalancer of class
//! [`LB_CLASS`] (`status.loadBalancer.ingress[].ip`). Which Services are seen
//! at all is decided by the API server: the watches carry `--selector`.
//! Each TCP port in `--port-range` maps to the Service's ready endpoint. Two
//! Services claiming one address and port: the oldest wins, then by name.

use std::{
    borrow::Borrow,
    collections::{BTreeMap, BTreeSet},
    net::{Ipv4Addr, SocketAddrV4},
    ops::RangeInclusive,
};

use k8s_openapi::{
    api::{core::v1::Service, discovery::v1::EndpointSlice},
    apimachinery::pkg::apis::meta::v1::Time,
};

use ssh_fwd_common::maps::MAX_MAPPINGS;

use crate::{
    k8s::{LB_CLASS, ownership::seniority},
    mapping::{Mapping, MappingSet},
    source::validate::{Checker, Rules},
};

/// Label linking an EndpointSlice to its Service.
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";

/// What the agent honours; everything else is ignored (CVE-2020-8554: never
/// let an arbitrary Service capture traffic).
#[derive(Clone, Debug)]
pub struct Policy {
    pub ssh_ips: BTreeSet<Ipv4Addr>,
    pub ports: RangeInclusive<u16>,
}

/// Why a Service or port produced no mapping, or what was chosen for it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Note {
    NoSshIp {
        service: String,
    },
    PortOutsideRange {
        service: String,
        port: i32,
    },
    NotTcp {
        service: String,
        port: i32,
    },
    NoReadyEndpoint {
        service: String,
    },
    ManyReadyEndpoints {
        service: String,
        chosen: Ipv4Addr,
        ready: usize,
    },
    Conflict {
        frontend: SocketAddrV4,
        winner: String,
        loser: String,
    },
    /// The Service would break or hijack the node; none of its ports apply.
    Invalid {
        service: String,
        problem: String,
    },
    /// More mappings than a node holds: the newest Services are left out.
    OverCapacity {
        excess: usize,
        left_out: Vec<String>,
    },
}

#[derive(Debug, Default)]
pub struct Desired {
    pub mappings: MappingSet,
    pub notes: Vec<Note>,
}

struct Claim {
    mapping: Mapping,
    created: Option<Time>,
    service: String,
}

pub fn compute<S: Borrow<Service>, E: Borrow<EndpointSlice>>(
    services: &[S],
    slices: &[E],
    policy: &Policy,
) -> Desired {
    let mut notes = Vec::new();
    let mut by_service: BTreeMap<(String, String), Vec<&EndpointSlice>> = BTreeMap::new();
    for slice in slices.iter().map(Borrow::borrow) {
        let meta = &slice.metadata;
        if let (Some(ns), Some(svc)) = (
            &meta.namespace,
            meta.labels.as_ref().and_then(|l| l.get(SERVICE_NAME_LABEL)),
        ) {
            by_service
                .entry((ns.clone(), svc.clone()))
                .or_default()
                .push(slice);
        }
    }
    let mut claims: BTreeMap<SocketAddrV4, Vec<Claim>> = BTreeMap::new();
    let rules = Rules {
        ssh_ips: policy.ssh_ips.clone(),
        ..Rules::default()
    };
    let checker = Checker::new(&rules, []);
    for svc in services.iter().map(Borrow::borrow) {
        let ns = svc.metadata.namespace.clone().unwrap_or_default();
        let name = svc.metadata.name.clone().unwrap_or_default();
        let id = format!("{ns}/{name}");
        let ips: Vec<Ipv4Addr> = external_ips(svc)
            .into_iter()
            .filter(|ip| policy.ssh_ips.contains(ip))
            .collect();
        if ips.is_empty() {
            notes.push(Note::NoSshIp { service: id });
            continue;
        }
        let slices = by_service
            .get(&(ns, name))
            .map(Vec::as_slice)
            .unwrap_or_default();
        let ports = svc
            .spec
            .as_ref()
            .and_then(|s| s.ports.as_deref())
            .unwrap_or_default();
        let multi = ports.len() > 1;
        let mut mine: Vec<Claim> = Vec::new();
        for port in ports {
            if port.protocol.as_deref().unwrap_or("TCP") != "TCP" {
                notes.push(Note::NotTcp {
                    service: id.clone(),
                    port: port.port,
                });
                continue;
            }
            let Ok(number) = u16::try_from(port.port) else {
                continue;
            };
            if !policy.ports.contains(&number) {
                notes.push(Note::PortOutsideRange {
                    service: id.clone(),
                    port: port.port,
                });
                continue;
            }
            let port_name = port.name.clone().unwrap_or_default();
            let Some(backend) = ready_backend(slices, &port_name, port, &id, &mut notes) else {
                notes.push(Note::NoReadyEndpoint {
                    service: id.clone(),
                });
                continue;
            };
            for ip in &ips {
                let frontend = SocketAddrV4::new(*ip, number);
                let label = if multi {
                    format!(
                        "{id}:{}",
                        if port_name.is_empty() {
                            number.to_string()
                        } else {
                            port_name.clone()
                        }
                    )
                } else {
                    id.clone()
                };
                mine.push(Claim {
                    mapping: Mapping {
                        name: label,
                        frontend,
                        backend,
                    },
                    created: svc.metadata.creation_timestamp.clone(),
                    service: id.clone(),
                });
            }
        }
        // A Service that would break or hijack the node is skipped whole.
        if let Some(problem) = mine.iter().find_map(|c| checker.check(&c.mapping).err()) {
            notes.push(Note::Invalid {
                service: id,
                problem: problem.to_string(),
            });
            continue;
        }
        for claim in mine {
            claims
                .entry(claim.mapping.frontend)
                .or_default()
                .push(claim);
        }
    }
    let mut winners = Vec::new();
    for (frontend, mut contenders) in claims {
        // Oldest first; a missing timestamp sorts last; then by name. Stable
        // across restarts and event order, so the winner never flaps.
        contenders.sort_by(|a, b| {
            seniority(&a.created, &a.service).cmp(&seniority(&b.created, &b.service))
        });
        let mut contenders = contenders.into_iter();
        let Some(winner) = contenders.next() else {
            continue;
        };
        for loser in contenders {
            notes.push(Note::Conflict {
                frontend,
                winner: winner.service.clone(),
                loser: loser.service,
            });
        }
        winners.push(winner);
    }
    let mappings = cap(winners, &mut notes);
    Desired {
        mappings: MappingSet::from_unique(mappings),
        notes,
    }
}

/// At most [`MAX_MAPPINGS`] mappings: the oldest Services' are kept, so a
/// new Service never takes a running one's place.
fn cap(mut winners: Vec<Claim>, notes: &mut Vec<Note>) -> Vec<Mapping> {
    let max = MAX_MAPPINGS as usize;
    if winners.len() > max {
        winners.sort_by(|a, b| {
            seniority(&a.created, &a.service).cmp(&seniority(&b.created, &b.service))
        });
        let newest = winners.split_off(max);
        notes.push(Note::OverCapacity {
            excess: newest.len(),
            left_out: newest.into_iter().map(|c| c.mapping.name).collect(),
        });
    }
    winners.into_iter().map(|c| c.mapping).collect()
}

/// The Service's external IPv4 addresses in either shape.
fn external_ips(svc: &Service) -> Vec<Ipv4Addr> {
    let Some(spec) = &svc.spec else { return vec![] };
    let mut out: Vec<Ipv4Addr> = spec
        .external_ips
        .iter()
        .flatten()
        .filter_map(|ip| ip.parse().ok())
        .collect();
    let is_ours = spec.type_.as_deref() == Some("LoadBalancer")
        && spec.load_balancer_class.as_deref() == Some(LB_CLASS);
    if is_ours {
        let ingress = svc
            .status
            .as_ref()
            .and_then(|s| s.load_balancer.as_ref())
            .and_then(|lb| lb.ingress.as_ref());
        out.extend(
            ingress
                .into_iter()
                .flatten()
                .filter_map(|i| i.ip.as_deref()?.parse::<Ipv4Addr>().ok()),
        );
    }
    out
}

/// The ready endpoint and resolved target port for one Service port. The
/// EndpointSlice carries the port by the Service port's name, already
/// resolved for named targetPorts, as kube-proxy reads it.
fn ready_backend(
    slices: &[&EndpointSlice],
    port_name: &str,
    port: &k8s_openapi::api::core::v1::ServicePort,
    service: &str,
    notes: &mut Vec<Note>,
) -> Option<SocketAddrV4> {
    let mut ready: BTreeSet<(Ipv4Addr, u16)> = BTreeSet::new();
    for slice in slices.iter().filter(|s| s.address_type == "IPv4") {
        let slice_port = slice
            .ports
            .iter()
            .flatten()
            .find(|p| p.name.as_deref().unwrap_or("") == port_name)
            .and_then(|p| p.port)
            .and_then(|p| u16::try_from(p).ok())
            .or_else(|| numeric_target(port));
        let Some(target) = slice_port else { continue };
        for endpoint in slice.endpoints.iter().flatten() {
            // An absent `ready` means ready (API semantics).
            if endpoint.conditions.as_ref().and_then(|c| c.ready) == Some(false) {
                continue;
            }
            ready.extend(
                endpoint
                    .addresses
                    .iter()
                    .filter_map(|a| a.parse::<Ipv4Addr>().ok())
                    .map(|ip| (ip, target)),
            );
        }
    }
    let (ip, target) = *ready.first()?;
    if ready.len() > 1 {
        notes.push(Note::ManyReadyEndpoints {
            service: service.into(),
            chosen: ip,
            ready: ready.len(),
        });
    }
    Some(SocketAddrV4::new(ip, target))
}

fn numeric_target(port: &k8s_openapi::api::core::v1::ServicePort) -> Option<u16> {
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
    match &port.target_port {
        Some(IntOrString::Int(n)) => u16::try_from(*n).ok(),
        Some(IntOrString::String(_)) => None,
        None => u16::try_from(port.port).ok(),
    }
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod validity_tests;
