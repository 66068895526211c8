//! Port reservations: one coordination.k8s.io Lease per port on the SSH IP,
//! in the controller's own namespace, named after the IP and the port. The
//! API server is the arbiter: a create of a name that exists fails with 409
//! AlreadyExists, so two replicas' webhooks, or a webhook and the leader,
//! can never both hold a port. A Lease is used because it is small, needs no
//! schema of our own, and `kubectl get leases` shows its holder.
//!
//! A reservation is made by the webhook at admission (it carries a random
//! token that the pod gets as the annotation [`vocabulary::RESERVATION`];
//! the pod's name may not exist yet), by the leader for a pod that was not
//! admitted with a port (it carries the pod's uid), or by the leader for a
//! port some Service already holds (it carries the Service's name), so that
//! the reservations alone tell the webhook every port in use. One made at
//! admission is provisional until the leader binds it to the uid of the
//! pod it was made for ([`binding`]), and lapses if no such pod appears
//! within the grace ([`upkeep`]).
//!
//! When the job holding a port ends, its reservation is not deleted but
//! **quarantined** (its holder replaced by the time it ended,
//! [`vocabulary::RELEASED_AT`]) for `--port-reuse-after`, so every replica
//! sees the port as in use and no other job gets it straight away; the
//! leader deletes it once the quarantine is over. When no port is free, an
//! allocation takes the port quarantined longest ([`ports::pick`]) by
//! deleting that reservation, only if it is still the one read (uid and
//! resourceVersion), then creating its own as for any port
//! ([`reclaim`]): of two replicas taking it, one delete fails (409), and
//! the create is still what the API server arbitrates.
//!
//! Everything about them is here: the Lease's format (this file), what the
//! caches keep of it ([`view`]), its watch ([`watch`]) and when this process
//! first saw each ([`first_seen`]), which pod each is for ([`binding`]),
//! the leader's rules for making, binding and releasing them ([`upkeep`])
//! and its writes ([`write`](mod@write)), and taking a port (`take.rs`:
//! from the webhook, or from a quarantine). The world's index
//! of them is [`Book`](crate::controller::world::book::Book).

use std::{collections::BTreeMap, net::IpAddr};

use k8s_openapi::{
    api::coordination::v1::{Lease, LeaseSpec},
    apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta},
    jiff::Timestamp,
};
use rand::Rng;

use super::ports;
use crate::vocabulary;

pub mod binding;
pub(crate) mod first_seen;
mod take;
mod view;
pub mod watch;
pub mod write;

pub use first_seen::FirstSeen;
pub use take::{ReserveError, build_picked, create, reclaim, reserve_free};
pub use view::LeaseView;

/// Who a reservation is for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Holder {
    /// A pod admitted by the webhook: its name may be a `generateName`
    /// prefix; it will carry `token`.
    Admitted {
        namespace: String,
        name: String,
        token: String,
    },
    /// The pod with this uid, and no other: one the leader gave a port
    /// after admission, or the one a reservation made at admission was
    /// bound to (then `token` is the admission's, kept for the record).
    Pod {
        namespace: String,
        name: String,
        uid: String,
        token: Option<String>,
    },
    /// A Service already holding the port.
    Service { key: String },
    /// Nobody: the job that held the port ended at `since`, and no other
    /// gets it for `--port-reuse-after` after, unless no port is free.
    Quarantined { since: Timestamp },
}

/// The Lease name for a port: `ssh-port-<ip>-<port>` (a DNS subdomain),
/// the IP as [`ip_key`] writes it.
pub fn name(ip: IpAddr, port: u16) -> String {
    format!("ssh-port-{}-{port}", ip_key(ip))
}

/// An SSH IP as a Lease name and a label value take it: an IPv4 address
/// as it is (`198.18.0.10`); an IPv6 address with its eight groups written
/// out in full and joined by `-` (`2001-0db8-0000-0000-0000-0000-0000-0010`),
/// since neither takes a `:`, and a label value must start and end with a
/// letter or digit (`::1` would not). One text per address, either way.
pub fn ip_key(ip: IpAddr) -> String {
    match ip {
        IpAddr::V4(ip) => ip.to_string(),
        IpAddr::V6(ip) => {
            let groups: Vec<String> = ip.segments().iter().map(|g| format!("{g:04x}")).collect();
            groups.join("-")
        }
    }
}

/// A fresh unguessable token (128 bits, hex).
pub fn new_token() -> String {
    format!("{:032x}", rand::rng().random::<u128>())
}

/// The reservation of `port` on `ip` for `holder`.
pub fn build(ip: IpAddr, port: u16, holder: &Holder) -> Lease {
    let mut annotations = BTreeMap::from([(vocabulary::PORT.to_owned(), port.to_string())]);
    let shown = match holder {
        Holder::Admitted {
            namespace,
            name,
            token,
        } => {
            annotations.insert(vocabulary::TOKEN.into(), token.clone());
            annotations.insert(vocabulary::NAMESPACE.into(), namespace.clone());
            format!("pod {namespace}/{name}")
        }
        Holder::Pod {
            namespace,
            name,
            uid,
            token,
        } => {
            annotations.insert(vocabulary::POD_UID.into(), uid.clone());
            if let Some(token) = token {
                annotations.insert(vocabulary::TOKEN.into(), token.clone());
            }
            annotations.insert(vocabulary::NAMESPACE.into(), namespace.clone());
            format!("pod {namespace}/{name}")
        }
        Holder::Service { key } => {
            annotations.insert(vocabulary::SERVICE.into(), key.clone());
            format!("service {key}")
        }
        Holder::Quarantined { since } => {
            annotations.insert(vocabulary::RELEASED_AT.into(), since.to_string());
            format!("quarantined since {since}")
        }
    };
    Lease {
        metadata: ObjectMeta {
            name: Some(name(ip, port)),
            labels: Some(BTreeMap::from([
                (vocabulary::PORT_RESERVATION.to_owned(), ip_key(ip)),
                (
                    vocabulary::MANAGED_BY_LABEL.to_owned(),
                    vocabulary::CONTROLLER.to_owned(),
                ),
            ])),
            annotations: Some(annotations),
            ..ObjectMeta::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some(shown),
            acquire_time: Some(MicroTime(Timestamp::now())),
            ..LeaseSpec::default()
        }),
    }
}

/// The label selector of the reservations on `ip`.
pub fn selector(ip: IpAddr) -> String {
    format!("{}={}", vocabulary::PORT_RESERVATION, ip_key(ip))
}

/// A reservation as read back from its Lease.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reservation {
    pub name: String,
    pub port: u16,
    pub token: Option<String>,
    pub namespace: Option<String>,
    pub pod_uid: Option<String>,
    /// Quarantined: when the job that held the port ended.
    pub released_at: Option<Timestamp>,
    /// Made at admission on a port whose quarantine gave way: when its
    /// previous job ended.
    pub quarantine_cut: Option<Timestamp>,
    pub uid: Option<String>,
    pub resource_version: Option<String>,
}

impl Reservation {
    /// The port as [`ports::pick`] takes it when quarantined.
    pub fn resting(&self) -> Option<ports::Resting> {
        Some(ports::Resting {
            port: self.port,
            since: self.released_at?,
        })
    }
}

/// Reads a reservation; `None` for a Lease that is not a well-formed one
/// of ours (its name must match its port, so a hand-made Lease cannot
/// claim one port under another's name).
pub fn read(lease: &LeaseView, ip: IpAddr) -> Option<Reservation> {
    let annotation = |key: &str| lease.annotation(key).map(str::to_owned);
    let port: u16 = annotation(vocabulary::PORT)?.parse().ok()?;
    let lease_name = lease.name.clone()?;
    if lease_name != name(ip, port) {
        return None;
    }
    Some(Reservation {
        name: lease_name,
        port,
        token: annotation(vocabulary::TOKEN),
        namespace: annotation(vocabulary::NAMESPACE),
        pod_uid: annotation(vocabulary::POD_UID),
        released_at: annotation(vocabulary::RELEASED_AT).and_then(|t| t.parse().ok()),
        quarantine_cut: annotation(vocabulary::QUARANTINE_CUT).and_then(|t| t.parse().ok()),
        uid: lease.uid.clone(),
        resource_version: lease.resource_version.clone(),
    })
}

/// What the caches would keep of `lease`: for tests that build Leases.
#[cfg(test)]
pub fn kept(lease: &Lease) -> LeaseView {
    LeaseView::from(lease.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    const IP: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(198, 18, 0, 10));

    #[test]
    fn an_ipv6_reservation_has_a_name_and_label_kubernetes_takes() {
        let ip: IpAddr = "2001:db8::10".parse().unwrap();
        let holder = Holder::Service {
            key: "jobs/a".into(),
        };
        let lease = build(ip, 8123, &holder);
        let name = lease.metadata.name.clone().unwrap();
        assert_eq!(
            name,
            "ssh-port-2001-0db8-0000-0000-0000-0000-0000-0010-8123"
        );
        // A label value: at most 63 characters of [A-Za-z0-9._-], a letter
        // or digit at both ends; `::1`'s key too.
        for ip in [
            ip,
            "::1".parse().unwrap(),
            "::ffff:1.2.3.4".parse().unwrap(),
        ] {
            let key = ip_key(ip);
            assert!(key.len() <= 63, "{key}");
            assert!(
                key.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-'),
                "{key}"
            );
            assert!(
                key.starts_with(|c: char| c.is_ascii_alphanumeric()),
                "{key}"
            );
            assert!(key.ends_with(|c: char| c.is_ascii_alphanumeric()), "{key}");
        }
        assert_eq!(
            selector(ip),
            format!("{}={}", vocabulary::PORT_RESERVATION, ip_key(ip))
        );
        assert_eq!(read(&lease.into(), ip).map(|r| r.port), Some(8123));
    }

    #[test]
    fn a_reservation_reads_back_what_was_built() {
        let holder = Holder::Admitted {
            namespace: "jobs".into(),
            name: "job-".into(),
            token: "t0k3n".into(),
        };
        let lease = build(IP, 8123, &holder);
        assert_eq!(
            lease.metadata.name.as_deref(),
            Some("ssh-port-198.18.0.10-8123")
        );
        assert_eq!(
            lease.spec.as_ref().unwrap().holder_identity.as_deref(),
            Some("pod jobs/job-")
        );
        let read = read(&lease.into(), IP).unwrap();
        assert_eq!(read.port, 8123);
        assert_eq!(read.token.as_deref(), Some("t0k3n"));
        assert_eq!(read.namespace.as_deref(), Some("jobs"));
        assert_eq!(read.pod_uid, None);
    }

    #[test]
    fn a_lease_whose_name_does_not_match_its_port_or_ip_is_not_a_reservation() {
        let mut lease = build(IP, 8123, &Holder::Service { key: "a/b".into() });
        lease
            .metadata
            .annotations
            .as_mut()
            .unwrap()
            .insert(vocabulary::PORT.into(), "8124".into());
        assert_eq!(read(&lease.into(), IP), None);
        let lease = build(IP, 8123, &Holder::Service { key: "a/b".into() });
        assert_eq!(read(&lease.into(), "198.18.0.11".parse().unwrap()), None);
    }

    #[test]
    fn the_kept_view_reads_as_built_with_its_identity_and_age() {
        let holders = [
            Holder::Admitted {
                namespace: "jobs".into(),
                name: "job-".into(),
                token: "t0k3n".into(),
            },
            Holder::Pod {
                namespace: "jobs".into(),
                name: "job-1".into(),
                uid: "u-1".into(),
                token: None,
            },
            Holder::Service {
                key: "jobs/job-1-ssh".into(),
            },
        ];
        for holder in holders {
            let mut lease = build(IP, 8123, &holder);
            lease.metadata.uid = Some("lease-uid".into());
            lease.metadata.resource_version = Some("42".into());
            lease.metadata.creation_timestamp = Some(
                k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(Timestamp::now()),
            );
            let whole = lease.clone();
            let kept = LeaseView::from(lease);
            let (token, namespace, pod_uid) = match holder {
                Holder::Admitted {
                    namespace, token, ..
                } => (Some(token), Some(namespace), None),
                Holder::Pod { namespace, uid, .. } => (None, Some(namespace), Some(uid)),
                Holder::Service { .. } | Holder::Quarantined { .. } => (None, None, None),
            };
            let expected = Reservation {
                name: "ssh-port-198.18.0.10-8123".into(),
                port: 8123,
                token,
                namespace,
                pod_uid,
                released_at: None,
                quarantine_cut: None,
                uid: Some("lease-uid".into()),
                resource_version: Some("42".into()),
            };
            assert_eq!(read(&kept, IP), Some(expected));
            assert_eq!(kept.creation_timestamp, whole.metadata.creation_timestamp);
        }
    }

    #[test]
    fn the_cache_files_a_kept_reservation_as_a_lease() {
        use kube::runtime::reflector::Lookup;
        assert_eq!(
            (LeaseView::group(&()), LeaseView::plural(&())),
            ("coordination.k8s.io".into(), "leases".into())
        );
        let mut lease = build(IP, 8123, &Holder::Service { key: "a/b".into() });
        lease.metadata.namespace = Some("ssh-fwd".into());
        let kept = LeaseView::from(lease);
        assert_eq!(kept.name().as_deref(), Some("ssh-port-198.18.0.10-8123"));
        assert_eq!(kept.namespace().as_deref(), Some("ssh-fwd"));
    }

    #[test]
    fn tokens_are_long_and_distinct() {
        let a = new_token();
        assert_eq!(a.len(), 32);
        assert_ne!(a, new_token());
    }
}
