//! From Services and EndpointSlices (as [`objects`](super::objects) keeps
//! them) to the mappings a node should hold: pure functions, so every rule
//! is a unit test. Two halves, shared by the full recompute ([`compute`])
//! and the incremental index ([`super::index`]): what one Service claims
//! ([`claims_of`]), and who owns each claimed frontend ([`resolve`]).
//!
//! Rules: a Service counts if it exposes an address in `--ssh-ip` in a
//! shape `--honour-styles` honours: as a LoadBalancer of class
//! [`vocabulary::LB_CLASS`] holding the controller's grant
//! ([`crate::k8s::grant`], in its status, which a tenant cannot write), or
//! in `spec.externalIPs` (which anyone who may write a Service can set). A
//! LoadBalancer of our class that lets Kubernetes allocate NodePorts is
//! refused whole. Which Services are seen at all is decided by the API
//! server: the watches carry `--selector`. A granted Service claims the
//! granted port and no other ([`frontends`]): on each ingress address whose
//! entry lists it, and on its honoured `externalIPs`; and maps it only to
//! the endpoint of the pod it was granted to. A Service without a grant
//! claims each TCP port in `--port-range` on its honoured `externalIPs`.
//! Two Services claiming one frontend: a granted one owns it against any
//! without a grant, then the oldest owns it, ready or not
//! ([`ownership::owner`]); the frontend maps to the owner's ready endpoint,
//! and is closed while the owner has none.
//!
//! Either family: an address of a Service is IPv4 or IPv6, and a frontend
//! maps only to an endpoint of its own family, from the EndpointSlice of
//! that `addressType` (a dual-stack Service has one of each; no NAT46 or
//! NAT64). A frontend whose Service has endpoints only of the other family
//! is claimed, closed, with a note ([`Note::NoEndpointOfFamily`]). Source
//! ranges of a family guard the frontends of that family.
//!
//! A Service whose mappings would break or hijack the node
//! ([`validate`](crate::source::validate): a loopback or link-local
//! backend, one on an SSH IP or on an address of the node (a hostNetwork
//! endpoint), a control character in a name) is skipped whole: it maps
//! nothing, but still claims its frontends, so a port it owns is closed,
//! never handed to a younger claimant. Beyond [`MAX_MAPPINGS`] the newest Services' mappings are left out
//! ([`cap`]), so a new Service never takes a running one's place.
//!
//! [`vocabulary::LB_CLASS`]: crate::vocabulary::LB_CLASS

use std::{
    collections::{BTreeMap, BTreeSet},
    net::{IpAddr, SocketAddr},
    ops::RangeInclusive,
    sync::Arc,
};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::objects::{Id, ServiceView, SliceView};
use crate::{
    args::ServiceStyle,
    k8s::ownership::{self, Claimant},
    mapping::{
        Family, Guard, Mapping, MappingSet,
        guard::{Cut, Defaults},
    },
    source::validate::{self, Checker, Rules},
};

mod backends;
mod capacity;
mod frontends;
mod guard;

use backends::Backends;
pub use capacity::{Owned, cap};
pub use frontends::{Frontends, frontends, honoured_port};
pub use guard::{Guards, guard_of};

/// What the agent honours; everything else is ignored (CVE-2020-8554: never
/// let an arbitrary Service capture traffic).
#[derive(Clone, Debug)]
pub struct Policy {
    /// `--ssh-ip`, of either family.
    pub ssh_ips: BTreeSet<IpAddr>,
    pub ports: RangeInclusive<u16>,
    pub styles: Styles,
    /// How many mappings the node holds (`--max-mappings`): past it, the
    /// newest Services' are left out.
    pub capacity: usize,
    /// What the agent's flags add to each Service's guard.
    pub guard: Defaults,
}

/// The Service shapes honoured (`--honour-styles`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Styles {
    /// `type: LoadBalancer` of class `ssh-fwd.io/ssh`.
    pub load_balancer: bool,
    /// `spec.externalIPs`.
    pub external_ips: bool,
}

impl Styles {
    pub const ALL: Self = Self {
        load_balancer: true,
        external_ips: true,
    };

    /// `--honour-styles` as the rules take it.
    pub fn of(list: &[ServiceStyle]) -> Self {
        Self {
            load_balancer: list.contains(&ServiceStyle::Loadbalancer),
            external_ips: list.contains(&ServiceStyle::Externalips),
        }
    }
}

/// Why a Service or port produced no mapping, or what was chosen for it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Note {
    NoSshIp {
        service: String,
    },
    /// The Service exposes an SSH IP in a shape `--honour-styles` leaves
    /// out (`externalIPs` or `LoadBalancer`).
    StyleNotHonoured {
        service: String,
        style: &'static str,
    },
    /// A LoadBalancer of our class with `allocateLoadBalancerNodePorts`
    /// not false: refused whole.
    NodePortsAllocated {
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
    /// The Service exposes an address of `family` but has endpoints only
    /// of the other family (a single-stack Service with an external IP of
    /// the other family): its ports on that address stay closed.
    NoEndpointOfFamily {
        service: String,
        family: Family,
    },
    /// The Service lists a port on an SSH IP that the controller did not
    /// grant it (`port`), or has an SSH IP in its load-balancer status but
    /// no grant at all (`port: None`): those ports stay closed to it.
    NotGranted {
        service: String,
        port: Option<i32>,
    },
    ManyReadyEndpoints {
        service: String,
        chosen: IpAddr,
        ready: usize,
    },
    Conflict {
        frontend: SocketAddr,
        winner: String,
        loser: String,
    },
    /// The Service would break or hijack the node; none of its ports apply.
    Invalid {
        service: String,
        problem: String,
    },
    /// More mappings than a node holds: the newest Services' are left out.
    OverCapacity {
        excess: usize,
        left_out: Vec<String>,
    },
    /// The Service asks for more sources or a higher rate than the agent's
    /// `--allow` and `--syn-rate` admit: it gets those, not what it asked.
    Narrowed {
        service: String,
        cut: Vec<Cut>,
    },
}

#[derive(Debug, Default)]
pub struct Desired {
    pub mappings: MappingSet,
    pub notes: Vec<Note>,
}

/// One frontend a Service claims.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Claim {
    pub frontend: SocketAddr,
    /// The mapping's name (the Service's id, shared, for a Service of one
    /// port).
    pub name: Arc<str>,
    /// The ready endpoint, of the frontend's family; `None` while there is
    /// none (the claim still holds the frontend, closed).
    pub backend: Option<SocketAddr>,
    /// Who may connect, and how fast.
    pub guard: Guard,
    /// The controller granted the port to the Service
    /// ([`Grant`](crate::k8s::grant::Grant)): it
    /// beats every claim without a grant, however old.
    pub granted: bool,
}

/// Everything one Service claims, and why it claims less than it asks.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ServiceClaims {
    pub claims: Vec<Claim>,
    pub notes: Vec<Note>,
}

/// What a Service's mappings are checked against: `--ssh-ip`, and on a
/// node its own addresses, where no backend may be (an endpoint there is a
/// hostNetwork pod: the node's own services).
pub fn rules(policy: &Policy, node_addrs: BTreeMap<IpAddr, String>) -> Rules {
    Rules {
        ssh_ips: policy.ssh_ips.clone(),
        all_node_addrs: node_addrs,
        guard: policy.guard.clone(),
        ..Rules::default()
    }
}

/// What one Service claims, given its EndpointSlices; `rules` from
/// [`rules`].
pub fn claims_of(
    svc: &ServiceView,
    slices: &[&SliceView],
    policy: &Policy,
    rules: &Rules,
) -> ServiceClaims {
    let mut out = ServiceClaims::default();
    let id = svc.id.to_string();
    let (guards, guard_problem) = match guard_of(&svc.guard, &rules.guard) {
        Ok(guards) => (guards, None),
        Err(problem) => (Guards::default(), Some(problem)),
    };
    let multi = svc.ports.len() > 1;
    // A granted port reaches only the pod it was granted to, however
    // many endpoints the Service's selector finds.
    let only = svc.grant.as_ref().map(|g| &*g.pod_uid);
    for honoured in frontends(svc, policy, &mut out.notes) {
        let (port, number) = (honoured.port, honoured.number);
        let name: Arc<str> = match (multi, port.name.is_empty()) {
            (false, _) => svc.id.clone(),
            (true, true) => format!("{id}:{number}").into(),
            (true, false) => format!("{id}:{}", port.name).into(),
        };
        let families: BTreeSet<Family> = honoured.ips.iter().map(|ip| Family::of(*ip)).collect();
        let backends = Backends::read(slices, port, &families, only, &id, &mut out.notes);
        for family in &families {
            backends.note_missing(*family, &id, &mut out.notes);
        }
        for ip in &honoured.ips {
            let frontend = SocketAddr::new(*ip, number);
            // A port listed twice (the API server refuses that) claims once.
            if out.claims.iter().any(|c| c.frontend == frontend) {
                continue;
            }
            let family = Family::of(*ip);
            let (backend, draining) = backends.of(family);
            out.claims.push(Claim {
                frontend,
                name: name.clone(),
                backend,
                guard: Guard {
                    draining,
                    ..guards.of(family).clone()
                },
                granted: honoured.granted,
            });
        }
    }
    // Told only of a Service that claims something: one the rules leave
    // out was never going to be narrowed.
    if !guards.cut.is_empty() && !out.claims.is_empty() {
        out.notes.push(Note::Narrowed {
            service: id.clone(),
            cut: guards.cut.clone(),
        });
    }
    if let Some(problem) = guard_problem.or_else(|| danger(&out.claims, rules)) {
        // Skipped whole, but it keeps its claims, each without a backend:
        // ownership goes by age alone (as the controller judges it), so a
        // port it owns stays closed rather than going to a younger claimant.
        for claim in &mut out.claims {
            claim.backend = None;
        }
        out.notes.push(Note::Invalid {
            service: id,
            problem,
        });
    }
    out
}

/// The first reason a Service's claims would break or hijack the node.
fn danger(claims: &[Claim], rules: &Rules) -> Option<String> {
    let checker = Checker::new(rules, []);
    claims.iter().find_map(|claim| {
        let checked = match claim.backend {
            Some(backend) => checker.check(&Mapping {
                name: claim.name.clone(),
                frontend: claim.frontend,
                backend,
                guard: Guard::default(),
            }),
            // No endpoint yet: only the name can be wrong.
            None => validate::check_name(&claim.name),
        };
        checked.err().map(|e| e.to_string())
    })
}

/// One Service's claim on a frontend, as the owner rule sees it.
pub struct Contender<'a> {
    pub id: &'a Id,
    pub created: Option<&'a Time>,
    pub claim: &'a Claim,
}

impl Claimant for Contender<'_> {
    fn granted(&self) -> bool {
        self.claim.granted
    }
    fn created(&self) -> Option<&Time> {
        self.created
    }
    fn service(&self) -> &str {
        self.id
    }
}

/// Who owns `frontend` among its contenders: the mapping to the owner's
/// ready endpoint (none while it has none), with its owner, and a note per
/// younger claimant.
pub fn resolve<'a>(
    frontend: SocketAddr,
    contenders: impl IntoIterator<Item = Contender<'a>>,
) -> (Option<Owned<'a>>, Vec<Note>) {
    let contenders: Vec<Contender<'a>> = contenders.into_iter().collect();
    let Some(owner) = ownership::owner(&contenders) else {
        return (None, Vec::new());
    };
    let losers: BTreeSet<&str> = contenders
        .iter()
        .map(|c| &**c.id)
        .filter(|id| *id != &**owner.id)
        .collect();
    let notes = losers
        .into_iter()
        .map(|loser| Note::Conflict {
            frontend,
            winner: owner.id.to_string(),
            loser: loser.to_owned(),
        })
        .collect();
    let owned = owner.claim.backend.map(|backend| Owned {
        mapping: Mapping {
            name: owner.claim.name.clone(),
            frontend,
            backend,
            guard: owner.claim.guard.clone(),
        },
        id: owner.id,
        created: owner.created,
        granted: owner.claim.granted,
    });
    (owned, notes)
}

/// The whole desired state from scratch, off any node (no node addresses
/// to refuse backends on): [`compute_on`].
pub fn compute<'a>(
    services: impl IntoIterator<Item = &'a ServiceView>,
    slices: impl IntoIterator<Item = &'a SliceView>,
    policy: &Policy,
) -> Desired {
    compute_on(services, slices, policy, &rules(policy, BTreeMap::new()))
}

/// The whole desired state from scratch: the reference the incremental
/// index is checked against, and the periodic self-check.
pub fn compute_on<'a>(
    services: impl IntoIterator<Item = &'a ServiceView>,
    slices: impl IntoIterator<Item = &'a SliceView>,
    policy: &Policy,
    rules: &Rules,
) -> Desired {
    let mut by_service: BTreeMap<&str, Vec<&SliceView>> = BTreeMap::new();
    for slice in slices {
        if let Some(service) = &slice.service {
            by_service.entry(service).or_default().push(slice);
        }
    }
    let mut services: Vec<&ServiceView> = services.into_iter().collect();
    services.sort_by(|a, b| a.id.cmp(&b.id));
    let mut notes = Vec::new();
    let claimed: Vec<(&ServiceView, ServiceClaims)> = services
        .into_iter()
        .map(|svc| {
            let slices = by_service
                .get(&*svc.id)
                .map(Vec::as_slice)
                .unwrap_or_default();
            (svc, claims_of(svc, slices, policy, rules))
        })
        .collect();
    let mut frontends: BTreeMap<SocketAddr, Vec<Contender<'_>>> = BTreeMap::new();
    for (svc, claims) in &claimed {
        notes.extend(claims.notes.iter().cloned());
        for claim in &claims.claims {
            frontends
                .entry(claim.frontend)
                .or_default()
                .push(Contender {
                    id: &svc.id,
                    created: svc.created.as_ref(),
                    claim,
                });
        }
    }
    let mut owned = Vec::new();
    for (frontend, contenders) in frontends {
        let (mapping, conflicts) = resolve(frontend, contenders);
        owned.extend(mapping);
        notes.extend(conflicts);
    }
    let (mappings, over) = cap(owned, policy.capacity);
    notes.extend(over);
    Desired { mappings, notes }
}

#[cfg(test)]
mod tests;
