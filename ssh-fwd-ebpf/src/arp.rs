//! `--announce l2`: ARP on an external interface. A request for an SSH IP
//! the agent put in `ANNOUNCE` for this interface is answered with the
//! interface's MAC, the reply written over the request
//! (`ssh_fwd_common::arp::answer`) and sent back out where it came in
//! (`XDP_TX`, or in tc a redirect to the arrival interface's egress); the
//! SSH IP itself is on no interface, so the node's own stack never
//! answers for it. Another MAC claiming an announced SSH IP is another
//! agent's, recorded in `ARP_HEARD`, or foreign, counted in `ARP_FOREIGN`
//! (`crate::claim`). Every other frame passes untouched.
//!
//! ARP and neighbour discovery (`crate::ndp`) stay two modules: they are
//! different protocols, not one protocol over two address families. ARP
//! is a frame of its own ethertype with no checksum; a solicitation is
//! ICMPv6 inside IPv6, with its options and a checksum over the
//! pseudo-header. What they share, the claims, is `crate::claim`'s.

use aya_ebpf::{
    bindings::{BPF_F_RECOMPUTE_CSUM, TC_ACT_UNSPEC, xdp_action},
    helpers::bpf_redirect,
    programs::{TcContext, XdpContext},
};
use ssh_fwd_common::{
    arp::{self, ARP_FRAME_LEN, ETH_P_ARP},
    maps::AnnounceKey,
    outcome::Outcome,
    packet::ETH_TYPE_OFF,
};

use crate::{
    claim::{self, claimed},
    counters::count,
    maps::{ANNOUNCE, ARP_FOREIGN, ARP_HEARD},
    packet::{Packet, bytes_at, read},
};

/// What to do with an ARP frame.
enum Seen {
    /// Not ours to answer: passed on, counted as this.
    Pass(Outcome),
    /// The reply to write over the frame and send back.
    Answer([u8; ARP_FRAME_LEN]),
}

/// XDP: the verdict for an ARP frame (counted), `None` for any other.
#[inline(always)]
pub fn xdp(ctx: &XdpContext) -> Option<u32> {
    let reply = match see(ctx)? {
        Seen::Pass(outcome) => {
            count(outcome);
            return Some(xdp_action::XDP_PASS);
        }
        Seen::Answer(reply) => reply,
    };
    let Some(at) = bytes_at::<XdpContext, ARP_FRAME_LEN>(ctx, 0) else {
        count(Outcome::ArpFailed);
        return Some(xdp_action::XDP_PASS);
    };
    // SAFETY: bytes_at checked the frame holds these bytes.
    unsafe { at.cast::<[u8; ARP_FRAME_LEN]>().write_unaligned(reply) };
    count(Outcome::ArpAnswered);
    Some(xdp_action::XDP_TX)
}

/// tc: the action for an ARP frame (counted), `None` for any other. A
/// frame whose VLAN tag the device took off is not answered: where its tag
/// would go back on is not this program's to know.
#[inline(always)]
pub fn tc(ctx: &TcContext) -> Option<i32> {
    let reply = match see(ctx)? {
        Seen::Pass(outcome) => {
            count(outcome);
            return Some(TC_ACT_UNSPEC);
        }
        Seen::Answer(reply) => reply,
    };
    // SAFETY: the context pointer is the live skb of this program run.
    let (vlan, ifindex) = unsafe { ((*ctx.skb.skb).vlan_present, (*ctx.skb.skb).ifindex) };
    if vlan != 0 || ctx.store(0, &reply, BPF_F_RECOMPUTE_CSUM as u64).is_err() {
        count(Outcome::ArpFailed);
        return Some(TC_ACT_UNSPEC);
    }
    count(Outcome::ArpAnswered);
    // SAFETY: a helper call with plain integer arguments.
    Some(unsafe { bpf_redirect(ifindex, 0) } as i32)
}

/// Reads an ARP frame and decides; `None`: not ARP.
#[inline(always)]
fn see<P: Packet>(p: &P) -> Option<Seen> {
    let ether_type = read::<P, 2>(p, ETH_TYPE_OFF)?;
    if u16::from_be_bytes(ether_type) != ETH_P_ARP {
        return None;
    }
    // Counted as what it is, as without `--announce`: not IP (a
    // neighbour solicitation not ours is `PassNotTcp`, being IP).
    let not_ours = Some(Seen::Pass(Outcome::PassNotIp));
    let Some(mut frame) = read::<P, ARP_FRAME_LEN>(p, 0) else {
        return not_ours;
    };
    let Some(seen) = arp::parse(&frame) else {
        return not_ours;
    };
    let ifindex = p.arrival_ifindex();
    if seen.claims_sender() {
        let key = AnnounceKey {
            ifindex,
            addr: seen.spa,
        };
        let maps = claim::Maps {
            announce: &ANNOUNCE,
            heard: &ARP_HEARD,
            foreign: &ARP_FOREIGN,
        };
        // SAFETY: copied out immediately.
        let ours = unsafe { ANNOUNCE.get(key) }.copied();
        if let Some(ours) = ours
            && claimed(&maps, &key, &ours, &seen.spa, seen.sha)
        {
            return Some(Seen::Pass(Outcome::ArpHeard));
        }
    }
    if !seen.asks() {
        return not_ours;
    }
    // SAFETY: copied out immediately.
    let Some(ours) = (unsafe {
        ANNOUNCE.get(AnnounceKey {
            ifindex,
            addr: seen.tpa,
        })
    })
    .copied() else {
        return not_ours;
    };
    arp::answer(&mut frame, &seen, ours.mac);
    Some(Seen::Answer(frame))
}
