//! Requests addressed to a backend of this node rather than to a frontend:
//! connections another node translated (its SYN carrying the frontend in
//! an IPv4 option or an IPv6 Destination Options header, `crate::ipopt`),
//! and a peer in the cluster dialling the pod's address. The same in XDP
//! and tc, for both families.

use aya_ebpf::EbpfContext;
use ssh_fwd_common::{
    conntrack::trust::{Seal, option_trusted, seal_of, ttl_expires},
    ipopt::Carried,
    outcome::Outcome,
};

use crate::{
    config::{cross_node_key, cross_node_plain},
    conntrack,
    counters::count,
    forward::iface_flags,
    ipopt::{Carrier, Strip},
    mss,
    packet::Headers,
    verify::Checked,
};

/// A request with headers `h` to a backend of this node: its state here,
/// or the frontend its SYN carries, believed only if sealed with the
/// cluster's key or from an interface only other nodes reach (and removed
/// in any case: the pod sees the SYN as the client sent it). A segment the
/// node will not forward (its TTL expires here) touches nothing. `Err`:
/// drop it.
#[inline(always)]
pub fn request<P: Checked + Strip + EbpfContext, A: Carrier>(
    p: &P,
    h: &Headers<A>,
) -> Result<(), Outcome> {
    let option = if h.seg.is_syn() {
        A::carried(p, h)
    } else {
        None
    };
    let trusted = option.is_some_and(|o| believed(p, h, &o));
    let keep = if ttl_expires(h.ttl) {
        Ok(())
    } else {
        let frontend = option.filter(|_| trusted).map(|o| o.frontend);
        conntrack::to_backend(p, h, frontend, || A::mss_cap(mss::link_mtu(p)))
    };
    if let Some(o) = option {
        A::strip(p, &o);
    }
    keep
}

/// Whether `option`, on the SYN `h` that arrived at `p`'s interface, is
/// to be believed; counts why not.
#[inline(always)]
fn believed<P: EbpfContext + Checked, A: Carrier>(
    p: &P,
    h: &Headers<A>,
    option: &Carried<A>,
) -> bool {
    let key = cross_node_key();
    let expected = if option.is_sealed() {
        key.map(|key| A::tag(key, h.source, h.destination, h.seg.seq, option.frontend))
    } else {
        None
    };
    let seal = seal_of(option.is_sealed(), option.tag, expected);
    let plain = cross_node_plain();
    if option_trusted(iface_flags(p.arrival_ifindex()), plain, key.is_some(), seal) {
        return true;
    }
    count(if seal == Seal::Forged && !plain {
        Outcome::OptionForged
    } else {
        Outcome::OptionUntrusted
    });
    false
}
