//! The answers to a standby's probes of a holder's data path, in either
//! family: ARP replies and neighbour advertisements another machine sent
//! for an SSH IP on one of this node's external interfaces that are up,
//! and when each SSH IP was last answered, by which MAC. Only a MAC the
//! holder published ([`super::macs`]) answers for it: one no agent
//! published is foreign, so a host of the segment that answers in the
//! holder's place cannot keep a dead holder alive. [`super::owner`]
//! judges the holder by the time; the next probe goes to the MAC.

use std::{
    collections::BTreeMap,
    io,
    net::{IpAddr, Ipv4Addr},
    time::Instant,
};

use ssh_fwd_common::{arp::Arp, maps::MAC_OF_AGENT, ndp::Ndp};

use crate::datapath::{
    announce::{AnnounceAt, Desired, claimants::Macs},
    neighbour::{ArpListener, NdpListener, ndp_answered_by_other},
};

/// Each SSH IP another node holds, with the MACs its holder published
/// (none from an agent older than the annotation: then any MAC answers).
pub type Holders = BTreeMap<IpAddr, Vec<[u8; 6]>>;

/// The listeners, one per family with an SSH IP, and what they heard.
pub struct Answers {
    /// `None` when there is no IPv4 SSH IP, or it could not be opened (a
    /// silent holder is then taken over only once its Lease expires).
    arp: Option<ArpListener>,
    /// The same for IPv6.
    ndp: Option<NdpListener>,
    last: BTreeMap<IpAddr, (Instant, [u8; 6])>,
}

impl Answers {
    /// Listens for the families of `ssh_ips`; a listener that cannot be
    /// opened is told once, and its family's holders are waited for.
    pub fn open(ssh_ips: &[IpAddr]) -> Self {
        let arp = ssh_ips
            .iter()
            .any(IpAddr::is_ipv4)
            .then(|| opened(ArpListener::open(), "ARP replies", "an IPv4"))
            .flatten();
        let ndp = ssh_ips
            .iter()
            .any(IpAddr::is_ipv6)
            .then(|| opened(NdpListener::open(), "neighbour advertisements", "an IPv6"))
            .flatten();
        Self {
            arp,
            ndp,
            last: BTreeMap::new(),
        }
    }

    /// Reads what arrived since the last look, as of `now`: the answers
    /// for the SSH IPs in `holders`, each from a MAC its holder published,
    /// are kept; those from a MAC no agent published (none in `agents`)
    /// are returned, foreign.
    pub fn hear(
        &mut self,
        local: &Desired,
        holders: &Holders,
        agents: &Macs,
        now: Instant,
    ) -> Vec<(IpAddr, [u8; 6])> {
        let arp = drain(self.arp.as_ref().map(ArpListener::drain), "ARP replies");
        let ndp = drain(
            self.ndp.as_ref().map(NdpListener::drain),
            "neighbour advertisements",
        );
        let mut foreign = Vec::new();
        for (ip, mac) in answered(local, &arp, &ndp) {
            match judge(holders, agents, ip, mac) {
                Answer::Holder => {
                    self.last.insert(ip, (now, mac));
                }
                Answer::Foreign => foreign.push((ip, mac)),
                Answer::Neither => {}
            }
        }
        foreign
    }

    /// When another machine last answered for `ip`, and with which MAC.
    pub fn last(&self, ip: IpAddr) -> Option<(Instant, [u8; 6])> {
        self.last.get(&ip).copied()
    }
}

fn opened<L>(listener: io::Result<L>, what: &str, family: &str) -> Option<L> {
    listener
        .inspect_err(|e| {
            tracing::warn!(
                error = %e,
                "cannot listen for {what}; a holder of {family} SSH IP whose node dies is taken over only once its Lease expires"
            );
        })
        .ok()
}

fn drain<T>(frames: Option<io::Result<Vec<T>>>, what: &str) -> Vec<T> {
    match frames {
        Some(Ok(frames)) => frames,
        Some(Err(e)) => {
            tracing::debug!(error = %e, "cannot read {what}");
            Vec::new()
        }
        None => Vec::new(),
    }
}

/// What an answer for an SSH IP from a MAC is.
#[derive(Debug, PartialEq, Eq)]
enum Answer {
    /// The holder's.
    Holder,
    /// From a MAC no agent published.
    Foreign,
    /// Another agent's, or for an SSH IP no other node holds.
    Neither,
}

/// Pure: what `mac`'s answer for `ip` is.
fn judge(holders: &Holders, agents: &Macs, ip: IpAddr, mac: [u8; 6]) -> Answer {
    match holders.get(&ip) {
        None => Answer::Neither,
        Some(published) if published.is_empty() || published.contains(&mac) => Answer::Holder,
        Some(_) if agents.get(&mac) == Some(&MAC_OF_AGENT) => Answer::Neither,
        Some(_) => Answer::Foreign,
    }
}

/// Pure: the SSH IPs another machine answered for among `arp` and `ndp`
/// (each with the interface it came in by), with that machine's MAC: a
/// reply or an advertisement for an SSH IP announced on that interface
/// (`local`: this node's external interfaces that are up, with their
/// MACs), from none of this node's MACs.
fn answered(local: &Desired, arp: &[(u32, Arp)], ndp: &[(u32, Ndp)]) -> Vec<(IpAddr, [u8; 6])> {
    let ours: Vec<[u8; 6]> = local.values().copied().collect();
    let replies = arp
        .iter()
        .filter(|(_, a)| ssh_fwd_common::arp::answered_by_other(a, a.spa, &ours))
        .map(|(ifindex, a)| {
            let ip = IpAddr::V4(Ipv4Addr::from(a.spa.to_ne_bytes()));
            (*ifindex, ip, a.sha)
        });
    let adverts = ndp
        .iter()
        .filter(|(_, n)| ndp_answered_by_other(n, &ours))
        .map(|(ifindex, n)| (*ifindex, IpAddr::V6(n.target.ip()), n.mac));
    replies
        .chain(adverts)
        .filter(|(ifindex, ip, _)| local.contains_key(&AnnounceAt::new(*ifindex, *ip)))
        .map(|(_, ip, mac)| (ip, mac))
        .collect()
}

#[cfg(test)]
mod tests {
    use std::net::Ipv6Addr;

    use ssh_fwd_common::{
        arp::{self, ARP_REPLY},
        maps::Addr6,
        ndp::{NDP_ADVERT, NDP_FRAME_LLA_LEN, NDP_SOLICIT},
    };

    use super::*;

    const OURS: [u8; 6] = [2, 0, 0, 0, 0, 1];
    const HOLDER: [u8; 6] = [2, 0, 0, 0, 0, 2];
    const V4: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 10);
    const V6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x198, 0, 0, 0, 0, 0, 0x10);
    const EXT: u32 = 3;

    fn reply(mac: [u8; 6], ip: Ipv4Addr) -> Arp {
        Arp {
            op: ARP_REPLY,
            sha: mac,
            spa: u32::from_ne_bytes(ip.octets()),
            tpa: 0,
        }
    }

    fn ndp(kind: u8, mac: [u8; 6], ip: Ipv6Addr) -> Ndp {
        Ndp {
            kind,
            src: Addr6::new(ip),
            target: Addr6::new(ip),
            mac,
            len: NDP_FRAME_LLA_LEN,
        }
    }

    fn local() -> Desired {
        Desired::from([
            (AnnounceAt::new(EXT, V4), OURS),
            (AnnounceAt::new(EXT, V6), OURS),
        ])
    }

    #[test]
    fn another_machines_reply_or_advertisement_on_an_external_interface_is_an_answer() {
        let heard = answered(
            &local(),
            &[(EXT, reply(HOLDER, V4))],
            &[(EXT, ndp(NDP_ADVERT, HOLDER, V6))],
        );
        assert_eq!(
            heard,
            vec![(IpAddr::V4(V4), HOLDER), (IpAddr::V6(V6), HOLDER)]
        );
    }

    #[test]
    fn only_a_mac_the_holder_published_answers_for_it_and_one_no_agent_published_is_foreign() {
        const FORGED: [u8; 6] = [2, 0x66, 0x66, 0, 0, 1];
        const AGENT: [u8; 6] = [2, 0, 0, 0, 0, 3];
        let (v4, v6) = (IpAddr::V4(V4), IpAddr::V6(V6));
        let holders = Holders::from([(v4, vec![HOLDER]), (v6, vec![])]);
        let agents = Macs::from([(HOLDER, MAC_OF_AGENT), (AGENT, MAC_OF_AGENT)]);
        assert_eq!(judge(&holders, &agents, v4, HOLDER), Answer::Holder);
        assert_eq!(judge(&holders, &agents, v4, FORGED), Answer::Foreign);
        assert_eq!(judge(&holders, &agents, v4, AGENT), Answer::Neither);
        assert_eq!(
            judge(&holders, &agents, v6, FORGED),
            Answer::Holder,
            "a holder that published nothing: any MAC, as before"
        );
        let other = IpAddr::V4(Ipv4Addr::new(198, 18, 0, 11));
        assert_eq!(
            judge(&holders, &agents, other, FORGED),
            Answer::Neither,
            "ours, or nobody's"
        );
    }

    #[test]
    fn our_own_mac_another_interface_a_question_or_another_address_is_no_answer() {
        let other: Ipv6Addr = "fd00:198::11".parse().unwrap();
        let request = Arp {
            op: arp::ARP_REQUEST,
            ..reply(HOLDER, V4)
        };
        let heard = answered(
            &local(),
            &[
                (EXT, reply(OURS, V4)),
                (EXT + 1, reply(HOLDER, V4)),
                (EXT, request),
            ],
            &[
                (EXT, ndp(NDP_ADVERT, OURS, V6)),
                (EXT + 1, ndp(NDP_ADVERT, HOLDER, V6)),
                (EXT, ndp(NDP_SOLICIT, HOLDER, V6)),
                (EXT, ndp(NDP_ADVERT, HOLDER, other)),
            ],
        );
        assert_eq!(heard, vec![]);
    }
}
