//! A Service port's backends: of each family, the endpoint a frontend of
//! that family maps to, from the EndpointSlices of that `addressType`.

use std::{
    collections::BTreeSet,
    net::{IpAddr, SocketAddr},
};

use super::Note;
use crate::{
    mapping::Family,
    source::kubernetes::objects::{PortView, SliceView},
};

/// The backends of one Service port, one per family, each with whether
/// it is draining. The EndpointSlice carries the port by the Service
/// port's name, already resolved for named targetPorts, as kube-proxy reads
/// it. Of each family: a ready endpoint (several: the lowest address, with
/// a note); else one that is terminating but still serving, draining: a
/// pod in its grace period keeps its open sessions, but takes no new
/// login, since its address may go to another pod before the slice says it
/// stopped serving. A frontend maps only to a backend of its own family
/// (no NAT46 or NAT64): a dual-stack Service has a slice of each. A
/// granted port maps only to the endpoint whose `targetRef` is the pod it
/// was granted to: a pod that joins the Service by its labels is never
/// the backend.
pub struct Backends {
    v4: Option<(SocketAddr, bool)>,
    v6: Option<(SocketAddr, bool)>,
}

impl Backends {
    /// Both families' backends; the notes only of those in `exposed`
    /// (the other is read only to tell why a frontend has none).
    pub fn read(
        slices: &[&SliceView],
        port: &PortView,
        exposed: &BTreeSet<Family>,
        only: Option<&str>,
        service: &str,
        notes: &mut Vec<Note>,
    ) -> Self {
        let mut backend = |family| {
            let mut unexposed = Vec::new();
            let notes = if exposed.contains(&family) {
                &mut *notes
            } else {
                &mut unexposed
            };
            usable_backend(slices, port, family, only, service, notes)
        };
        Self {
            v4: backend(Family::V4),
            v6: backend(Family::V6),
        }
    }

    /// The backend of `family`, if any, and whether it is draining.
    pub fn of(&self, family: Family) -> (Option<SocketAddr>, bool) {
        let backend = match family {
            Family::V4 => self.v4,
            Family::V6 => self.v6,
        };
        backend.map_or((None, false), |(backend, draining)| {
            (Some(backend), draining)
        })
    }

    /// Notes why a frontend of `family` has no backend: none at all, or
    /// only of the other family.
    pub fn note_missing(&self, family: Family, service: &str, notes: &mut Vec<Note>) {
        if self.of(family).0.is_some() {
            return;
        }
        let note = if self.v4.is_some() || self.v6.is_some() {
            Note::NoEndpointOfFamily {
                service: service.into(),
                family,
            }
        } else {
            Note::NoReadyEndpoint {
                service: service.into(),
            }
        };
        if !notes.contains(&note) {
            notes.push(note);
        }
    }
}

/// The backend of `family` for one Service port (see [`Backends`]),
/// among the endpoints of the pod with uid `only` if given.
fn usable_backend(
    slices: &[&SliceView],
    port: &PortView,
    family: Family,
    only: Option<&str>,
    service: &str,
    notes: &mut Vec<Note>,
) -> Option<(SocketAddr, bool)> {
    let mut ready: BTreeSet<(IpAddr, u16)> = BTreeSet::new();
    let mut terminating: BTreeSet<(IpAddr, u16)> = BTreeSet::new();
    for slice in slices.iter().filter(|s| s.family == Some(family)) {
        let target = slice
            .ports
            .iter()
            .find(|(name, _)| *name == port.name)
            .and_then(|(_, number)| *number)
            .or(port.numeric_target);
        let Some(target) = target else { continue };
        let of_pod = |ip: &&IpAddr| {
            only.is_none_or(|uid| {
                (slice.pods.iter()).any(|p| p.ip == **ip && p.uid.as_deref() == Some(uid))
            })
        };
        ready.extend(slice.ready.iter().filter(of_pod).map(|ip| (*ip, target)));
        terminating.extend(
            slice
                .terminating
                .iter()
                .filter(of_pod)
                .map(|ip| (*ip, target)),
        );
    }
    let draining = ready.is_empty();
    let candidates = if draining { terminating } else { ready };
    let (ip, target) = *candidates.first()?;
    if candidates.len() > 1 && !draining {
        notes.push(Note::ManyReadyEndpoints {
            service: service.into(),
            chosen: ip,
            ready: candidates.len(),
        });
    }
    Some((SocketAddr::new(ip, target), draining))
}
