//! A standby's watch on an IPv6 SSH IP's holder, the twin of the ARP
//! probe: a neighbour solicitation for the SSH IP ([`solicitation`]),
//! and the holder's advertisement that answers it ([`NdpListener`]).
//!
//! Not the ARP probe's exact twin. An RFC 5227 probe is from 0.0.0.0; a
//! solicitation from the unspecified address is duplicate address
//! detection, which the data path does not answer. So the solicitation
//! comes from the standby's own address on the interface ([`source_on`]),
//! with its MAC in the source link-layer address option, and the answer
//! is addressed to the standby. The solicitation is answered by the
//! holder's data path in place: the holder's kernel never sees it, and
//! learns no neighbour from it.
//!
//! The answer is heard on a raw ICMPv6 socket whose type filter passes
//! only advertisements: the kernel hands it the advertisements delivered
//! to this node and nothing else. A packet socket, as for ARP, would be
//! handed every IPv6 frame the node receives.

use std::{
    io,
    net::{Ipv6Addr, SocketAddr, SocketAddrV6, UdpSocket},
    os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd},
};

use ssh_fwd_common::{
    csum,
    ipv6::{self, ETH_P_IPV6, IPV6_HLEN, IPV6_HOP_LIMIT_OFF, NEXTHDR_ICMPV6},
    maps::Addr6,
    ndp::{self, NDP_ADVERT, NDP_BODY_LEN, NDP_FRAME_LLA_LEN, NDP_LLA_LEN, NDP_SOLICIT, Ndp},
    packet::ETH_HLEN,
};

/// Where the ICMPv6 message starts in a frame, and its fields.
const ICMP_OFF: usize = ETH_HLEN + IPV6_HLEN;
const CHECK_OFF: usize = ICMP_OFF + 2;
const FLAGS_OFF: usize = ICMP_OFF + 4;
const OPT_OFF: usize = ICMP_OFF + NDP_BODY_LEN;
/// A solicitation or advertisement with its link-layer address option.
const MESSAGE_LEN: usize = NDP_BODY_LEN + NDP_LLA_LEN;
const SADDR_OFF: usize = ETH_HLEN + ipv6::IPV6_SADDR_OFF;
const DADDR_OFF: usize = ETH_HLEN + ipv6::IPV6_DADDR_OFF;
/// The source link-layer address option (RFC 4861 4.6.1).
const OPT_SOURCE_LLA: u8 = 1;
/// `ICMPV6_FILTER` of `<linux/icmpv6.h>`, which libc lacks.
const ICMPV6_FILTER: libc::c_int = 1;

/// Pure: a neighbour solicitation from `mac` and `src` (the standby's
/// address on the interface) asking who holds `target`, with `mac` in its
/// source link-layer address option: to the MAC `to`, then at `target`
/// itself, or to `target`'s solicited-node multicast address (RFC 4291
/// 2.7.1) when no MAC is known. Hop limit 255. Built over
/// [`ndp::unsolicited`], which shares everything but the addresses, the
/// type, the flags and the option's type, so the frame's layout is the
/// one the data path is tested with.
pub fn solicitation(
    mac: [u8; 6],
    src: Ipv6Addr,
    target: Ipv6Addr,
    to: Option<[u8; 6]>,
) -> [u8; NDP_FRAME_LLA_LEN] {
    let dst = if to.is_some() {
        target
    } else {
        solicited_node(target)
    };
    let mut frame = ndp::unsolicited(mac, Addr6::new(target));
    frame[..6].copy_from_slice(&to.unwrap_or_else(|| multicast_mac(dst)));
    frame[SADDR_OFF..SADDR_OFF + 16].copy_from_slice(&src.octets());
    frame[DADDR_OFF..DADDR_OFF + 16].copy_from_slice(&dst.octets());
    frame[ICMP_OFF] = NDP_SOLICIT;
    frame[FLAGS_OFF..FLAGS_OFF + 4].fill(0);
    frame[OPT_OFF] = OPT_SOURCE_LLA;
    frame[CHECK_OFF..CHECK_OFF + 2].fill(0);
    let pseudo = ipv6::pseudo_header_sum(
        src.octets(),
        dst.octets(),
        MESSAGE_LEN as u32,
        NEXTHDR_ICMPV6,
    );
    let check = csum::checksum(&frame[ICMP_OFF..], pseudo);
    frame[CHECK_OFF..CHECK_OFF + 2].copy_from_slice(&check.to_ne_bytes());
    frame
}

/// `ff02::1:ffXX:XXXX`, the low 24 bits `addr`'s.
fn solicited_node(addr: Ipv6Addr) -> Ipv6Addr {
    let o = addr.octets();
    Ipv6Addr::from([
        0xff, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0xff, o[13], o[14], o[15],
    ])
}

/// The Ethernet address of an IPv6 multicast address (RFC 2464 7).
fn multicast_mac(addr: Ipv6Addr) -> [u8; 6] {
    let o = addr.octets();
    [0x33, 0x33, o[12], o[13], o[14], o[15]]
}

/// This node's address on `ifindex` to solicit from: the source the
/// kernel picks for a link-local destination out of it (RFC 6724), its
/// link-local address when it has one, never a tentative one. Connecting
/// a UDP socket sends nothing; an interface without a usable IPv6 address
/// is an error (`EADDRNOTAVAIL`).
pub fn source_on(ifindex: u32) -> io::Result<Ipv6Addr> {
    let socket = UdpSocket::bind((Ipv6Addr::UNSPECIFIED, 0))?;
    let all_nodes = Ipv6Addr::from(ndp::ALL_NODES);
    socket.connect(SocketAddrV6::new(all_nodes, 9, 0, ifindex))?;
    match socket.local_addr()? {
        SocketAddr::V6(addr) if !addr.ip().is_unspecified() => Ok(*addr.ip()),
        other => Err(io::Error::new(
            io::ErrorKind::AddrNotAvailable,
            format!("no IPv6 source address on interface {ifindex} (got {other})"),
        )),
    }
}

/// Pure: whether `ndp` is another machine's answer for its target: an
/// advertisement whose link-layer address is none of the MACs in `ours`.
/// The twin of `ssh_fwd_common::arp::answered_by_other`.
pub fn answered_by_other(ndp: &Ndp, ours: &[[u8; 6]]) -> bool {
    ndp.claims_target() && !ours.contains(&ndp.mac)
}

/// Pure: the frame an ICMPv6 `message` from `src` to `dst` with
/// `hop_limit` came in (its MACs unknown, left zero), to read with
/// [`ndp::parse`], the data path's own rules (hop limit 255, code 0, the
/// link-layer address option only). `None` unless the message has the
/// length of one with that option: the MAC of the answer is read from it.
pub fn as_frame(
    src: Ipv6Addr,
    dst: Ipv6Addr,
    hop_limit: u8,
    message: &[u8],
) -> Option<[u8; NDP_FRAME_LLA_LEN]> {
    if message.len() != MESSAGE_LEN {
        return None;
    }
    let mut frame = [0u8; NDP_FRAME_LLA_LEN];
    frame[12..14].copy_from_slice(&ETH_P_IPV6.to_be_bytes());
    frame[ETH_HLEN] = 0x60;
    frame[ETH_HLEN + ipv6::IPV6_PAYLOAD_LEN_OFF..ETH_HLEN + ipv6::IPV6_PAYLOAD_LEN_OFF + 2]
        .copy_from_slice(&(MESSAGE_LEN as u16).to_be_bytes());
    frame[ETH_HLEN + ipv6::IPV6_NEXT_HEADER_OFF] = NEXTHDR_ICMPV6;
    frame[ETH_HLEN + IPV6_HOP_LIMIT_OFF] = hop_limit;
    frame[SADDR_OFF..SADDR_OFF + 16].copy_from_slice(&src.octets());
    frame[DADDR_OFF..DADDR_OFF + 16].copy_from_slice(&dst.octets());
    frame[ICMP_OFF..].copy_from_slice(message);
    Some(frame)
}

/// A non-blocking raw ICMPv6 socket that receives the neighbour
/// advertisements delivered to this node on any interface (the kernel
/// checks their checksum), read when asked ([`NdpListener::drain`]). Its
/// queue is bounded by the socket's receive buffer.
pub struct NdpListener(OwnedFd);

impl NdpListener {
    pub fn open() -> io::Result<Self> {
        // SAFETY: a plain syscall; the fd is owned below.
        let fd = unsafe {
            libc::socket(
                libc::AF_INET6,
                libc::SOCK_RAW | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                libc::IPPROTO_ICMPV6,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a fresh fd nobody else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // Linux's filter: a set bit blocks its type.
        let mut filter = [u32::MAX; 8];
        filter[usize::from(NDP_ADVERT >> 5)] &= !(1 << (NDP_ADVERT & 31));
        set(&fd, libc::IPPROTO_ICMPV6, ICMPV6_FILTER, &filter)?;
        set(&fd, libc::IPPROTO_IPV6, libc::IPV6_RECVPKTINFO, &1)?;
        set(&fd, libc::IPPROTO_IPV6, libc::IPV6_RECVHOPLIMIT, &1)?;
        Ok(Self(fd))
    }

    /// Every neighbour advertisement with a link-layer address option
    /// received since the last call, with the interface it came in by.
    pub fn drain(&self) -> io::Result<Vec<(u32, Ndp)>> {
        let mut heard = Vec::new();
        loop {
            let got = match self.receive() {
                Ok(got) => got,
                Err(e) => {
                    return match e.kind() {
                        io::ErrorKind::WouldBlock => Ok(heard),
                        io::ErrorKind::Interrupted => continue,
                        _ => Err(e),
                    };
                }
            };
            let Some(Received {
                ifindex,
                src,
                dst,
                hop_limit,
                message,
                len,
            }) = got
            else {
                continue;
            };
            let seen = as_frame(src, dst, hop_limit, &message[..len])
                .and_then(|frame| ndp::parse(&frame, NDP_FRAME_LLA_LEN));
            if let Some(seen) = seen {
                heard.push((ifindex, seen));
            }
        }
    }

    /// One message; `None` for one cut short or without the ancillary
    /// data asked for.
    fn receive(&self) -> io::Result<Option<Received>> {
        let mut message = [0u8; 64];
        // SAFETY: an all-zero sockaddr_in6 is valid for the kernel to fill.
        let mut from: libc::sockaddr_in6 = unsafe { std::mem::zeroed() };
        // Room for IPV6_PKTINFO and IPV6_HOPLIMIT, aligned for cmsghdr.
        let mut control = [0u64; 16];
        let mut iov = libc::iovec {
            iov_base: message.as_mut_ptr().cast(),
            iov_len: message.len(),
        };
        // SAFETY: an all-zero msghdr is valid; the fields are set below.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_name = (&raw mut from).cast();
        msg.msg_namelen = size_of::<libc::sockaddr_in6>() as libc::socklen_t;
        msg.msg_iov = &raw mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = fit(size_of_val(&control));
        // SAFETY: every buffer msg points to outlives the call, with its
        // length.
        let got = unsafe { libc::recvmsg(self.0.as_raw_fd(), &raw mut msg, 0) };
        if got < 0 {
            return Err(io::Error::last_os_error());
        }
        if msg.msg_flags & (libc::MSG_TRUNC | libc::MSG_CTRUNC) != 0 {
            return Ok(None);
        }
        let (mut info, mut hop_limit) = (None, None);
        // SAFETY: msg was filled by recvmsg; the CMSG macros walk its
        // control buffer within msg_controllen, and each payload is read
        // unaligned at its own length.
        unsafe {
            let mut cmsg = libc::CMSG_FIRSTHDR(&raw const msg);
            while !cmsg.is_null() {
                let data = libc::CMSG_DATA(cmsg);
                match ((*cmsg).cmsg_level, (*cmsg).cmsg_type) {
                    (libc::IPPROTO_IPV6, libc::IPV6_PKTINFO) => {
                        info = Some(data.cast::<libc::in6_pktinfo>().read_unaligned());
                    }
                    (libc::IPPROTO_IPV6, libc::IPV6_HOPLIMIT) => {
                        hop_limit = Some(data.cast::<libc::c_int>().read_unaligned());
                    }
                    _ => {}
                }
                cmsg = libc::CMSG_NXTHDR(&raw const msg, cmsg);
            }
        }
        let (Some(info), Some(hop_limit)) = (info, hop_limit) else {
            return Ok(None);
        };
        Ok(Some(Received {
            ifindex: info.ipi6_ifindex,
            src: Ipv6Addr::from(from.sin6_addr.s6_addr),
            dst: Ipv6Addr::from(info.ipi6_addr.s6_addr),
            hop_limit: u8::try_from(hop_limit).unwrap_or(0),
            message,
            len: usize::try_from(got).unwrap_or(0),
        }))
    }
}

/// One ICMPv6 message as the socket handed it over.
struct Received {
    ifindex: u32,
    src: Ipv6Addr,
    dst: Ipv6Addr,
    hop_limit: u8,
    message: [u8; 64],
    len: usize,
}

/// `n` as a `msghdr` length field, whose type differs between C libraries
/// (`size_t` in glibc, `socklen_t` in musl).
fn fit<T: TryFrom<usize> + Default>(n: usize) -> T {
    T::try_from(n).unwrap_or_default()
}

/// `setsockopt` of a plain value.
fn set<T>(fd: &OwnedFd, level: libc::c_int, name: libc::c_int, value: &T) -> io::Result<()> {
    // SAFETY: `value` is valid for reads of its size for the call.
    let done = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            std::ptr::from_ref(value).cast(),
            size_of::<T>() as libc::socklen_t,
        )
    };
    if done < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests;
