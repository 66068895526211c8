//! The MACs the agents publish with their Leases (annotation
//! [`vocabulary::ANNOUNCE_MACS`]): each holder on its SSH IP's Lease, the
//! MACs it answers from; and every agent on a Lease of its own
//! ([`super::node_lease`]), its external interfaces' MACs, so the others
//! know them before it ever takes an SSH IP. Pure.
//!
//! Trust: a Lease's annotation is believed as the MACs of the node its
//! `holderIdentity` names. Only agents write the announcement Leases, and
//! the admission policy lets an agent write one only with itself as
//! holder, so no tenant, pod or host of the segment can add a MAC here.
//! A MAC from this list is what a holder gives way to, and what answers a
//! standby's probe for the holder; a claim from any other is foreign.

use std::{collections::BTreeSet, net::IpAddr};

use k8s_openapi::api::coordination::v1::Lease;
use ssh_fwd_common::maps::{MAC_OF_AGENT, MAC_OF_NODE};

use crate::{
    datapath::announce::{Desired, claimants::Macs, mac_text},
    vocabulary,
};

/// `macs` as the annotation holds them: sorted, comma-separated,
/// `02:00:00:00:00:01`.
pub fn format(macs: impl IntoIterator<Item = [u8; 6]>) -> String {
    let sorted: BTreeSet<[u8; 6]> = macs.into_iter().collect();
    sorted
        .into_iter()
        .map(mac_text)
        .collect::<Vec<_>>()
        .join(",")
}

/// The MACs in an annotation's `text`; a part that is no MAC is left out.
pub fn parse(text: &str) -> Vec<[u8; 6]> {
    text.split(',')
        .filter_map(|part| mac(part.trim()))
        .collect()
}

fn mac(text: &str) -> Option<[u8; 6]> {
    let mut mac = [0; 6];
    let mut parts = text.split(':');
    for byte in &mut mac {
        let part = parts.next()?;
        if part.len() != 2 {
            return None;
        }
        *byte = u8::from_str_radix(part, 16).ok()?;
    }
    parts.next().is_none().then_some(mac)
}

/// The Lease's holder, if any, and the MACs it published (none from an
/// agent older than the annotation).
pub fn holder(lease: &Lease) -> Option<(&str, Vec<[u8; 6]>)> {
    let holder = lease.spec.as_ref()?.holder_identity.as_deref()?;
    if holder.is_empty() {
        return None;
    }
    let text = lease
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(vocabulary::ANNOUNCE_MACS));
    Some((holder, text.map(|t| parse(t)).unwrap_or_default()))
}

/// What `AGENT_MACS` should hold: the MACs every other agent published on
/// any of `leases`, and this node's own (`own`: its external interfaces'),
/// which no other node's Lease can make another agent's.
pub fn agent_macs<'a>(
    leases: impl IntoIterator<Item = &'a Lease>,
    me: &str,
    own: &BTreeSet<[u8; 6]>,
) -> Macs {
    let others = leases
        .into_iter()
        .filter_map(holder)
        .filter(|(holder, _)| *holder != me)
        .flat_map(|(_, macs)| macs)
        .map(|mac| (mac, MAC_OF_AGENT));
    let ours = own.iter().map(|mac| (*mac, MAC_OF_NODE));
    others.chain(ours).collect()
}

/// The MACs this node answers `ip` from: what its SSH IP's Lease
/// publishes while it holds it.
pub fn answering(local: &Desired, ip: IpAddr) -> String {
    format(
        local
            .iter()
            .filter(|(key, _)| key.ip == ip)
            .map(|(_, mac)| *mac),
    )
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use k8s_openapi::{
        api::coordination::v1::LeaseSpec, apimachinery::pkg::apis::meta::v1::ObjectMeta,
    };

    use super::*;
    use crate::datapath::announce::AnnounceAt;

    const A: [u8; 6] = [2, 0, 0, 0, 0, 0xa];
    const B: [u8; 6] = [2, 0, 0, 0, 0, 0xb];

    fn lease(holder: &str, macs: Option<&str>) -> Lease {
        Lease {
            metadata: ObjectMeta {
                annotations: macs
                    .map(|m| [(vocabulary::ANNOUNCE_MACS.to_owned(), m.to_owned())].into()),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(holder.into()),
                ..LeaseSpec::default()
            }),
        }
    }

    #[test]
    fn macs_read_back_as_written_and_a_bad_part_is_left_out() {
        let text = format([B, A, B]);
        assert_eq!(text, "02:00:00:00:00:0a,02:00:00:00:00:0b");
        assert_eq!(parse(&text), vec![A, B]);
        assert_eq!(
            parse("02:00:00:00:00:0a, zz:00:00:00:00:01,02:00:00:00:00,02:00:00:00:00:0b:01,"),
            vec![A]
        );
    }

    #[test]
    fn other_agents_macs_are_theirs_and_this_nodes_are_its_own_whatever_a_lease_says() {
        let leases = [
            lease("node-b", Some(&format([B]))),
            lease("node-a", Some(&format([A]))),
            // Claims this node's MAC: still this node's.
            lease("node-c", Some(&format([A]))),
            lease("", Some(&format([[2, 0, 0, 0, 0, 0xc]]))),
            lease("node-d", None),
        ];
        let macs = agent_macs(&leases, "node-a", &BTreeSet::from([A]));
        assert_eq!(macs, Macs::from([(A, MAC_OF_NODE), (B, MAC_OF_AGENT)]));
    }

    #[test]
    fn a_holder_publishes_the_macs_it_answers_the_ssh_ip_from() {
        let ip = IpAddr::V4(Ipv4Addr::new(198, 18, 0, 10));
        let local = Desired::from([
            (AnnounceAt::new(3, ip), B),
            (AnnounceAt::new(4, ip), A),
            (
                AnnounceAt::new(3, "fd00:198::10".parse::<IpAddr>().unwrap()),
                B,
            ),
        ]);
        assert_eq!(answering(&local, ip), format([A, B]));
        let published = lease("node-a", Some(&answering(&local, ip)));
        assert_eq!(holder(&published), Some(("node-a", vec![A, B])));
        assert_eq!(holder(&lease("node-b", None)), Some(("node-b", vec![])));
        assert_eq!(holder(&lease("", Some("02:00:00:00:00:0a"))), None);
    }
}
