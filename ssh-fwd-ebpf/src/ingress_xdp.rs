//! XDP ingress: the same work as the tc ingress program, before the kernel
//! builds an skb: rewrite `frontend -> backend` in place with the
//! connection tracking (IPv4 and IPv6), learn the frontend a SYN from
//! another node carries, translate ICMP and ICMPv6 errors addressed to
//! frontends; then hand the packet to the
//! stack, which routes it to the pod through netfilter (PREROUTING,
//! FORWARD, POSTROUTING): this program never redirects, so `--redirect`
//! changes nothing here.

use aya_ebpf::{bindings::xdp_action, macros::xdp, programs::XdpContext};
use ssh_fwd_common::{
    conntrack::trust::ttl_expires,
    csum,
    exposure::Addressed,
    ipv6::{ETH_P_IPV6, IPV6_DADDR_OFF, words_diff},
    maps::{Addr6, Endpoint},
    outcome::Outcome,
    packet::{
        ETH_HLEN, IPV4_CHECK_OFF, IPV4_DADDR_OFF, TCP_CHECK_OFF, TCP_DPORT_OFF, TCP_URG_PTR_OFF,
    },
};

use crate::{
    arp, backend, conntrack,
    counters::{Direction, count, count_mapping},
    exposure::{self, Exposed},
    family::Family,
    guard,
    icmp::{self, Quoting},
    ipopt::Carrier,
    maps::HEADERS6,
    ndp,
    packet::{
        Headers, Reloaded, Transport, ethertype, parse, parse6, put_addr, put_addr6, put_word, word,
    },
    partial::{self, Field},
    reset,
};

#[xdp]
pub fn ssh_fwd_ingress_xdp(ctx: XdpContext) -> u32 {
    if ethertype(&ctx) == Some(ETH_P_IPV6.to_be()) {
        if ndp::is_ndp(&ctx) {
            return ndp::xdp(ctx);
        }
        match ipv6(&ctx) {
            reset::PENDING_XDP => reset::xdp6(ctx),
            action => action,
        }
    } else {
        ipv4(&ctx)
    }
}

/// Each family in a function of its own: a BPF-to-BPF call with its own
/// stack frame, so that the two paths' frames need not fit in one (the
/// verifier allows 512 bytes for a call chain). ARP goes with IPv4;
/// neighbour discovery has a function of its own (`crate::ndp`).
#[inline(never)]
fn ipv4(ctx: &XdpContext) -> u32 {
    if let Some(action) = arp::xdp(ctx) {
        return action;
    }
    if let Some(action) = not_for_node::<u32>(ctx) {
        return action;
    }
    // A translated ICMP error was counted as such already.
    let Some(outcome) = ingress(ctx) else {
        return xdp_action::XDP_PASS;
    };
    act(exposure::closed::<u32, _>(ctx, outcome))
}

/// A frame for another host's MAC, or a group one, is not translated
/// (`crate::exposure`); `None`: the frame is the node's.
#[inline(always)]
fn not_for_node<A: Exposed>(ctx: &XdpContext) -> Option<u32> {
    match exposure::frame(ctx) {
        Addressed::Node => None,
        Addressed::Other => Some(act(Outcome::PassNotForNode)),
        Addressed::Group => Some(act(exposure::closed::<A, _>(ctx, Outcome::PassNotForNode))),
    }
}

/// IPv6 as a dispatcher of small frames: the headers go to a per-CPU
/// scratch (`HEADERS6`), and each path runs in a function of its own. The
/// path to a frontend and the path to a backend of this node each fill
/// most of the 512 bytes of stack the verifier allows a call chain, so
/// neither can sit in a frame that holds the other, or the headers.
#[inline(never)]
fn ipv6(ctx: &XdpContext) -> u32 {
    if let Some(action) = not_for_node::<Addr6>(ctx) {
        return action;
    }
    let h = match parse6_scratch(ctx) {
        Ok(h) => h,
        Err(outcome) => return act(closed6(ctx, outcome)),
    };
    let outcome = match h.transport {
        Transport::Tcp => match frontend6(ctx, h) {
            Some(Outcome::Denied) if reset::wanted6(h, Outcome::Denied) => {
                return reset::PENDING_XDP;
            }
            Some(outcome) => outcome,
            None => backend6(ctx, h),
        },
        Transport::Icmp => match icmp6_inbound(ctx, h) {
            Some(outcome) => outcome,
            None => return xdp_action::XDP_PASS,
        },
    };
    act(closed6(ctx, outcome))
}

/// [`exposure::closed`] for IPv6, in a frame of its own.
#[inline(never)]
fn closed6(ctx: &XdpContext, outcome: Outcome) -> Outcome {
    exposure::closed::<Addr6, _>(&Reloaded(ctx), outcome)
}

/// The packet's IPv6 headers, parsed into this CPU's scratch.
#[inline(never)]
fn parse6_scratch(ctx: &XdpContext) -> Result<&'static Headers<Addr6>, Outcome> {
    let h = match parse6(&Reloaded(ctx)) {
        Some(Ok(h)) => h,
        Some(Err(outcome)) => return Err(outcome),
        None => return Err(Outcome::Malformed),
    };
    let slot = HEADERS6.get_ptr_mut(0).ok_or(Outcome::Malformed)?;
    // SAFETY: this CPU's value of the map, valid for this program run and
    // written only here.
    unsafe {
        slot.write(h);
        Ok(&*slot)
    }
}

/// [`icmp_inbound`] for IPv6, in a frame of its own.
#[inline(never)]
fn icmp6_inbound(ctx: &XdpContext, h: &Headers<Addr6>) -> Option<Outcome> {
    icmp_inbound(ctx, h)
}

/// Errors about forwarded connections are translated (and counted as
/// such: `None`), and the stack routes them; the rest of ICMP (neighbour
/// discovery among ICMPv6) is the stack's.
#[inline(always)]
fn icmp_inbound<A: Quoting>(ctx: &XdpContext, h: &Headers<A>) -> Option<Outcome> {
    match icmp::inbound(ctx, h) {
        icmp::In::Translated(_) => None,
        icmp::In::Drop => Some(Outcome::IcmpOutOfWindow),
        icmp::In::NotOurs => Some(Outcome::PassNotTcp),
    }
}

/// [`to_frontend`] for IPv6, in a frame of its own.
#[inline(never)]
fn frontend6(ctx: &XdpContext, h: &Headers<Addr6>) -> Option<Outcome> {
    to_frontend(ctx, h)
}

/// [`to_backend`] for IPv6, in a frame of its own.
#[inline(never)]
fn backend6(ctx: &XdpContext, h: &Headers<Addr6>) -> Outcome {
    to_backend(ctx, h)
}

/// The XDP action for a packet counted as `outcome`.
#[inline(always)]
fn act(outcome: Outcome) -> u32 {
    count(outcome);
    match outcome {
        // The 4-tuple is another frontend's, a segment that fails the
        // checks before it may write state, a handshake held back, an ICMP
        // error outside its connection's window, a source the frontend's
        // guard refuses, a new connection to a draining backend, or a
        // rewrite went wrong.
        Outcome::ConflictDropped
        | Outcome::Denied
        | Outcome::SynLimited
        | Outcome::Draining
        | Outcome::BadChecksum
        | Outcome::MartianSource
        | Outcome::SourceLimited
        | Outcome::IcmpOutOfWindow
        | Outcome::RewriteError
        | Outcome::SynUnverified
        | Outcome::ResetFailed
        // To an SSH IP, and no mapping's: the node's services stay off it.
        | Outcome::UnmappedPort => xdp_action::XDP_DROP,
        // The frame now holds the RST that answers it.
        Outcome::DeniedReset => xdp_action::XDP_TX,
        // Every other outcome passes: a packet we do not own is the stack's
        // business.
        _ => xdp_action::XDP_PASS,
    }
}

#[inline(always)]
fn ingress(ctx: &XdpContext) -> Option<Outcome> {
    let h = match parse(ctx) {
        Some(Ok(h)) => h,
        Some(Err(outcome)) => return Some(outcome),
        None => return Some(Outcome::Malformed),
    };
    match h.transport {
        // Translated or not, the stack routes it.
        Transport::Icmp => icmp_inbound(ctx, &h),
        Transport::Tcp => Some(to_frontend(ctx, &h).unwrap_or_else(|| to_backend(ctx, &h))),
    }
}

/// A segment to a frontend, translated in place; `None` if its
/// destination is no frontend. Written once over the family, as
/// `crate::ingress_tc`'s is: a fix reaches both.
#[inline(always)]
fn to_frontend<A: InPlace>(ctx: &XdpContext, h: &Headers<A>) -> Option<Outcome> {
    let frontend = h.destination;
    // SAFETY: copied out immediately.
    let target = unsafe { A::frontends().get(frontend) }.copied()?;
    // Before anything answers or is written: a denied source gets nothing
    // but, with `--deny-action reset`, a RST.
    if let Err(outcome) = guard::check(h, &target) {
        return Some(A::denied(ctx, h, outcome));
    }
    // A router would not forward it: the stack answers, untranslated.
    if ttl_expires(h.ttl) {
        return Some(Outcome::TtlExpired);
    }
    let backend = target.endpoint;
    if let Err(outcome) = conntrack::request(ctx, h, frontend, backend, target.slot) {
        return Some(outcome);
    }
    if dnat(ctx, h, frontend, backend).is_none() {
        return Some(Outcome::RewriteError);
    }
    let bytes = (ctx.data_end() - ctx.data()) as u64;
    count_mapping(target.slot, Direction::ToBackend, bytes);
    Some(Outcome::Dnat)
}

/// A segment to a backend of this node, not through a frontend (see
/// `crate::backend`).
#[inline(always)]
fn to_backend<A: Carrier>(ctx: &XdpContext, h: &Headers<A>) -> Outcome {
    // SAFETY: only tested for presence.
    if unsafe { A::reverse().get(h.destination) }.is_none() {
        return Outcome::PassNoFrontend;
    }
    match backend::request(ctx, h) {
        Ok(()) => Outcome::PassNoFrontend,
        Err(outcome) => outcome,
    }
}

/// Rewrites the destination and the checksums in place. `None`: the
/// headers were not where parsing found them (the packet is dropped). A
/// TCP checksum still to be completed holds the pseudo-header sum only:
/// it takes the address change, and no complement (`partial.rs`). A field
/// that may be either is updated as a sum, and the urgent pointer, which
/// TCP reads only with URG, makes it a valid checksum too. Every read,
/// the segment's sum among them, comes before the first write.
#[inline(always)]
fn dnat<A: InPlace>(
    ctx: &XdpContext,
    h: &Headers<A>,
    frontend: Endpoint<A>,
    backend: Endpoint<A>,
) -> Option<()> {
    let addr_diff = A::addr_diff(frontend.addr, backend.addr);
    let port_diff = csum::diff16(frontend.port, backend.port);
    let l4 = h.l4();
    let ip_check = A::ip_check(ctx, addr_diff)?;
    let tcp_check = word(ctx, l4 + TCP_CHECK_OFF)?;
    let urgent = word(ctx, l4 + TCP_URG_PTR_OFF)?;
    let (new_tcp_check, new_urgent) = match A::field(ctx, h, tcp_check) {
        Field::Sum => (csum::add(tcp_check, addr_diff), urgent),
        Field::Both if !h.seg.is_urgent() => (
            csum::add(tcp_check, addr_diff),
            csum::add(urgent, csum::urgent_balance(addr_diff, port_diff)),
        ),
        Field::Checksum | Field::Both => (csum::apply(tcp_check, addr_diff + port_diff), urgent),
    };
    put_word(ctx, l4 + TCP_CHECK_OFF, new_tcp_check)?;
    if new_urgent != urgent {
        put_word(ctx, l4 + TCP_URG_PTR_OFF, new_urgent)?;
    }
    A::put_ip(ctx, ip_check, backend.addr)?;
    put_word(ctx, l4 + TCP_DPORT_OFF, backend.port)
}

/// What the in-place translation needs of an address family: the only
/// places IPv4 and IPv6 differ in [`to_frontend`] and [`dnat`].
trait InPlace: Family + Carrier {
    /// The IP header's checksum once the destination changes by
    /// `addr_diff`, read before anything is written; IPv6 has none.
    type IpCheck: Copy;

    /// What a segment the guard refused as `outcome` is counted as.
    fn denied(ctx: &XdpContext, h: &Headers<Self>, outcome: Outcome) -> Outcome;
    /// The one's complement change of the address `from -> to`, at most
    /// 4 * 0xffff, so that a port's change can be added to it.
    fn addr_diff(from: Self, to: Self) -> u32;
    /// What the segment's TCP checksum field `check` holds
    /// (`crate::partial`): the pseudo-header is the family's.
    fn field(ctx: &XdpContext, h: &Headers<Self>, check: u16) -> Field;
    /// The packet's [`InPlace::IpCheck`]; `None`: the header is not
    /// there.
    fn ip_check(ctx: &XdpContext, addr_diff: u32) -> Option<Self::IpCheck>;
    /// Writes the destination address, and the checksum
    /// [`InPlace::ip_check`] gave, into the IP header.
    fn put_ip(ctx: &XdpContext, check: Self::IpCheck, addr: Self) -> Option<()>;
}

impl InPlace for u32 {
    type IpCheck = u16;

    #[inline(always)]
    fn denied(ctx: &XdpContext, h: &Headers, outcome: Outcome) -> Outcome {
        reset::xdp(ctx, h, outcome)
    }

    #[inline(always)]
    fn addr_diff(from: u32, to: u32) -> u32 {
        csum::diff32(from, to)
    }

    #[inline(always)]
    fn field(ctx: &XdpContext, h: &Headers, check: u16) -> Field {
        partial::field(ctx, h, check)
    }

    #[inline(always)]
    fn ip_check(ctx: &XdpContext, addr_diff: u32) -> Option<u16> {
        let check = word(ctx, ETH_HLEN + IPV4_CHECK_OFF)?;
        Some(csum::apply(check, addr_diff))
    }

    #[inline(always)]
    fn put_ip(ctx: &XdpContext, check: u16, addr: u32) -> Option<()> {
        put_word(ctx, ETH_HLEN + IPV4_CHECK_OFF, check)?;
        put_addr(ctx, ETH_HLEN + IPV4_DADDR_OFF, addr)
    }
}

impl InPlace for Addr6 {
    type IpCheck = ();

    /// A denied segment `--deny-action reset` answers is the entry
    /// point's (`ipv6`): this path has no stack room for the RST.
    #[inline(always)]
    fn denied(_: &XdpContext, _: &Headers<Addr6>, outcome: Outcome) -> Outcome {
        outcome
    }

    /// Folded: the change of eight words could overflow what
    /// `csum::apply` takes with the port's added.
    #[inline(always)]
    fn addr_diff(from: Addr6, to: Addr6) -> u32 {
        csum::fold(words_diff(from, to)) as u32
    }

    #[inline(always)]
    fn field(ctx: &XdpContext, h: &Headers<Addr6>, check: u16) -> Field {
        partial::field6(ctx, h, check)
    }

    /// No header checksum: the address's change reaches the TCP checksum
    /// through the pseudo-header alone.
    #[inline(always)]
    fn ip_check(_: &XdpContext, _: u32) -> Option<()> {
        Some(())
    }

    #[inline(always)]
    fn put_ip(ctx: &XdpContext, _: (), addr: Addr6) -> Option<()> {
        put_addr6(ctx, ETH_HLEN + IPV6_DADDR_OFF, addr)
    }
}
