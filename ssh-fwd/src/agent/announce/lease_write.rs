//! What the Lease loop ([`super::leases`]) writes, pure: an SSH IP's Lease
//! taken, renewed or handed back, with the MACs its holder answers from
//! ([`vocabulary::ANNOUNCE_MACS`]), and the event that tells a takeover.

use std::net::IpAddr;

use k8s_openapi::{
    api::{
        coordination::v1::{Lease, LeaseSpec},
        core::v1::ObjectReference,
        events::v1::Event,
    },
    apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta},
    jiff::Timestamp,
};

use super::{asks, lease_name::label_value};
use crate::vocabulary;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Write {
    Take,
    Renew,
    Release,
}

/// One write of an SSH IP's Lease.
pub struct LeaseWrite<'a> {
    pub name: &'a str,
    pub ip: IpAddr,
    /// This node.
    pub me: &'a str,
    pub seconds: i32,
    /// The MACs this node answers `ip` from ([`super::macs::answering`]).
    pub macs: &'a str,
    pub now: Timestamp,
}

impl LeaseWrite<'_> {
    /// `current` (the Lease as read; `None`: made anew, with us holding
    /// it) as `how` leaves it: a holder publishes its MACs, a Lease handed
    /// back publishes none.
    pub fn lease(&self, current: Option<&Lease>, how: Write) -> Lease {
        let now = MicroTime(self.now);
        let mut lease = current.cloned().unwrap_or_else(|| Lease {
            metadata: ObjectMeta {
                name: Some(self.name.to_owned()),
                labels: Some([(vocabulary::ANNOUNCE.to_owned(), label_value(self.ip))].into()),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(self.me.to_owned()),
                acquire_time: Some(now.clone()),
                lease_transitions: Some(0),
                ..LeaseSpec::default()
            }),
        });
        let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
        match how {
            Write::Take if current.is_some() => {
                spec.holder_identity = Some(self.me.to_owned());
                spec.acquire_time = Some(now.clone());
                spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
            }
            Write::Take | Write::Renew => {}
            Write::Release => spec.holder_identity = None,
        }
        spec.lease_duration_seconds = Some(self.seconds);
        spec.renew_time = Some(now);
        let annotations = lease
            .metadata
            .annotations
            .get_or_insert_with(Default::default);
        match how {
            Write::Release => annotations.remove(vocabulary::ANNOUNCE_MACS),
            Write::Take | Write::Renew => {
                annotations.insert(vocabulary::ANNOUNCE_MACS.to_owned(), self.macs.to_owned())
            }
        };
        lease
    }
}

/// The takeover told on the SSH IP's Lease (`kubectl events`).
pub fn takeover_event(namespace: &str, me: &str, lease: &str, ip: IpAddr, now: Timestamp) -> Event {
    Event {
        metadata: ObjectMeta {
            name: Some(format!("{lease}.{:x}", now.as_nanosecond())),
            namespace: Some(namespace.to_owned()),
            ..ObjectMeta::default()
        },
        event_time: Some(MicroTime(now)),
        type_: Some("Normal".into()),
        reason: Some(vocabulary::reason::SSH_IP_TAKEN_OVER.into()),
        action: Some(vocabulary::action::TAKE_OVER.into()),
        note: Some(format!("{me} answers {} for {ip} now", asks(ip))),
        regarding: Some(ObjectReference {
            api_version: Some("coordination.k8s.io/v1".into()),
            kind: Some("Lease".into()),
            name: Some(lease.into()),
            namespace: Some(namespace.to_owned()),
            ..ObjectReference::default()
        }),
        reporting_controller: Some(vocabulary::AGENT.into()),
        reporting_instance: Some(me.to_owned()),
        ..Event::default()
    }
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use super::*;

    const MACS: &str = "02:00:00:00:00:0a";

    fn write(me: &str) -> LeaseWrite<'_> {
        LeaseWrite {
            name: "ssh-fwd-announce-198-18-0-10",
            ip: IpAddr::V4(Ipv4Addr::new(198, 18, 0, 10)),
            me,
            seconds: 2,
            macs: MACS,
            now: Timestamp::now(),
        }
    }

    fn macs_of(lease: &Lease) -> Option<&str> {
        let annotations = lease.metadata.annotations.as_ref()?;
        annotations
            .get(vocabulary::ANNOUNCE_MACS)
            .map(String::as_str)
    }

    #[test]
    fn a_holder_publishes_its_macs_with_every_write_and_none_once_it_hands_the_lease_back() {
        let made = write("a").lease(None, Write::Take);
        let spec = made.spec.clone().unwrap();
        assert_eq!(spec.holder_identity.as_deref(), Some("a"));
        assert_eq!(spec.lease_transitions, Some(0));
        assert_eq!(macs_of(&made), Some(MACS));
        let labels = made.metadata.labels.clone().unwrap();
        assert_eq!(labels[vocabulary::ANNOUNCE], "198.18.0.10");

        let taken = write("b").lease(Some(&made), Write::Take);
        let spec = taken.spec.clone().unwrap();
        assert_eq!(spec.holder_identity.as_deref(), Some("b"));
        assert_eq!(spec.lease_transitions, Some(1));
        assert_eq!(macs_of(&taken), Some(MACS));

        let renewed = write("b").lease(Some(&taken), Write::Renew);
        assert_eq!(renewed.spec.clone().unwrap().lease_transitions, Some(1));
        assert_eq!(macs_of(&renewed), Some(MACS));

        let released = write("b").lease(Some(&renewed), Write::Release);
        assert_eq!(released.spec.clone().unwrap().holder_identity, None);
        assert_eq!(macs_of(&released), None);
    }
}
