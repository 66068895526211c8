//! ARP and neighbour discovery frames a node starts, sent from userspace
//! on `AF_PACKET` sockets (`CAP_NET_RAW`): the kernel programs only answer
//! what arrives, they cannot start a frame. A new holder's gratuitous
//! replies (`ssh_fwd_common::arp::gratuitous`) or, for an IPv6 SSH IP,
//! unsolicited neighbour advertisements
//! (`ssh_fwd_common::ndp::unsolicited`); a standby's ARP probes of a
//! holder that stopped renewing (`ssh_fwd_common::arp::probe`), and the
//! answers to them, heard on another packet socket ([`ArpListener`]); for
//! an IPv6 SSH IP, the standby's neighbour solicitations, and the
//! advertisements that answer them, heard on a raw ICMPv6 socket
//! ([`solicit`]).

mod solicit;

use std::{
    io,
    net::{IpAddr, Ipv4Addr, Ipv6Addr},
    os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd},
};

pub use solicit::{NdpListener, answered_by_other as ndp_answered_by_other};
use ssh_fwd_common::{
    arp::{self, ARP_FRAME_LEN, Arp, BROADCAST, ETH_P_ARP},
    ipv6::ETH_P_IPV6,
    maps::Addr6,
    ndp,
};

/// The shortest Ethernet frame: a NIC pads to it anyway, a veth does not.
const MIN_FRAME: usize = 60;

/// An `AF_PACKET` socket that only sends (protocol 0: it receives
/// nothing).
pub struct NeighbourSocket(OwnedFd);

impl NeighbourSocket {
    pub fn open() -> io::Result<Self> {
        packet_socket(0, 0).map(Self)
    }

    /// Tells the segment out of `ifindex` that `mac` holds `ip` (see
    /// [`claim`]).
    pub fn send(&self, ifindex: u32, mac: [u8; 6], ip: IpAddr) -> io::Result<()> {
        let (frame, protocol, dst) = claim(mac, ip);
        self.send_frame(ifindex, &frame, protocol, dst)
    }

    /// Asks out of `ifindex`, from `mac`, who holds `ip`: the segment, or
    /// only the machine with MAC `to`.
    pub fn probe(
        &self,
        ifindex: u32,
        mac: [u8; 6],
        ip: Ipv4Addr,
        to: Option<[u8; 6]>,
    ) -> io::Result<()> {
        let mut frame = arp::probe(mac, raw(ip));
        let to = to.unwrap_or(BROADCAST);
        frame[..6].copy_from_slice(&to);
        self.send_arp(ifindex, &frame, to)
    }

    /// Solicits out of `ifindex`, from `mac` and this node's address
    /// there, the holder of `ip`: the MAC `to`, or the solicited-node
    /// group (see [`solicit::solicitation`]).
    pub fn solicit(
        &self,
        ifindex: u32,
        mac: [u8; 6],
        ip: Ipv6Addr,
        to: Option<[u8; 6]>,
    ) -> io::Result<()> {
        let src = solicit::source_on(ifindex)?;
        let frame = solicit::solicitation(mac, src, ip, to);
        let mut dst = [0; 6];
        dst.copy_from_slice(&frame[..6]);
        self.send_frame(ifindex, &frame, ETH_P_IPV6, dst)
    }

    fn send_arp(
        &self,
        ifindex: u32,
        arp_frame: &[u8; ARP_FRAME_LEN],
        dst: [u8; 6],
    ) -> io::Result<()> {
        self.send_frame(ifindex, &padded(arp_frame), ETH_P_ARP, dst)
    }

    /// `frame`, its Ethernet header included, out of `ifindex` to `dst`.
    fn send_frame(
        &self,
        ifindex: u32,
        frame: &[u8],
        protocol: u16,
        dst: [u8; 6],
    ) -> io::Result<()> {
        // SAFETY: an all-zero sockaddr_ll is valid; the fields are set below.
        let mut to: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        to.sll_family = libc::AF_PACKET as u16;
        to.sll_protocol = protocol.to_be();
        to.sll_ifindex = i32::try_from(ifindex).unwrap_or(i32::MAX);
        to.sll_halen = 6;
        to.sll_addr[..6].copy_from_slice(&dst);
        // SAFETY: the buffer and address outlive the call, lengths are theirs.
        let sent = unsafe {
            libc::sendto(
                self.0.as_raw_fd(),
                frame.as_ptr().cast(),
                frame.len(),
                0,
                (&raw const to).cast(),
                size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        };
        if sent < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

/// A non-blocking `AF_PACKET` socket that receives the ARP frames arriving
/// on every interface, read when asked ([`ArpListener::drain`]). Its
/// queue is bounded by the socket's receive buffer: frames beyond it are
/// dropped by the kernel, never held.
pub struct ArpListener(OwnedFd);

impl ArpListener {
    pub fn open() -> io::Result<Self> {
        packet_socket(ETH_P_ARP.to_be(), libc::SOCK_NONBLOCK).map(Self)
    }

    /// Every ARP frame received since the last call (not those this host
    /// sent), with the interface it came in by.
    pub fn drain(&self) -> io::Result<Vec<(u32, Arp)>> {
        let mut heard = Vec::new();
        loop {
            let mut frame = [0u8; ARP_FRAME_LEN];
            // SAFETY: an all-zero sockaddr_ll is valid for the kernel to fill.
            let mut from: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
            let mut len = size_of::<libc::sockaddr_ll>() as libc::socklen_t;
            // SAFETY: the buffers outlive the call, lengths are theirs; a
            // longer frame is truncated to the ARP part, which is all we read.
            let got = unsafe {
                libc::recvfrom(
                    self.0.as_raw_fd(),
                    frame.as_mut_ptr().cast(),
                    frame.len(),
                    0,
                    (&raw mut from).cast(),
                    &raw mut len,
                )
            };
            if got < 0 {
                let e = io::Error::last_os_error();
                return match e.kind() {
                    io::ErrorKind::WouldBlock => Ok(heard),
                    io::ErrorKind::Interrupted => continue,
                    _ => Err(e),
                };
            }
            if usize::try_from(got).unwrap_or(0) < ARP_FRAME_LEN
                || from.sll_pkttype == libc::PACKET_OUTGOING
            {
                continue;
            }
            if let Some(arp) = arp::parse(&frame) {
                heard.push((u32::try_from(from.sll_ifindex).unwrap_or(0), arp));
            }
        }
    }
}

fn packet_socket(protocol: u16, flags: libc::c_int) -> io::Result<OwnedFd> {
    // SAFETY: a plain syscall; the fd is owned below.
    let fd = unsafe {
        libc::socket(
            libc::AF_PACKET,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC | flags,
            libc::c_int::from(protocol),
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh fd nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Pure: the frame that tells the segment `mac` holds `ip`, as sent, with
/// its EtherType and destination MAC: a gratuitous ARP reply to everyone
/// for IPv4; for IPv6 an unsolicited neighbour advertisement (override
/// flag, target link-layer address) to all nodes, which updates an
/// existing neighbour entry at once (RFC 4861 7.2.6).
pub fn claim(mac: [u8; 6], ip: IpAddr) -> (Vec<u8>, u16, [u8; 6]) {
    match ip {
        IpAddr::V4(ip) => (
            padded(&arp::gratuitous(mac, raw(ip))).to_vec(),
            ETH_P_ARP,
            BROADCAST,
        ),
        IpAddr::V6(ip) => {
            let frame = ndp::unsolicited(mac, Addr6::new(ip));
            let mut to = [0; 6];
            to.copy_from_slice(&frame[..6]);
            (frame.to_vec(), ETH_P_IPV6, to)
        }
    }
}

/// An ARP frame padded to the shortest Ethernet frame: a NIC pads it
/// anyway, a veth does not.
fn padded(arp_frame: &[u8; ARP_FRAME_LEN]) -> [u8; MIN_FRAME] {
    let mut frame = [0u8; MIN_FRAME];
    frame[..ARP_FRAME_LEN].copy_from_slice(arp_frame);
    frame
}

fn raw(ip: Ipv4Addr) -> u32 {
    u32::from_ne_bytes(ip.octets())
}

#[cfg(test)]
mod tests {
    use ssh_fwd_common::ndp::{NDP_ADVERT, NDP_FRAME_LLA_LEN};

    use super::*;

    const MAC: [u8; 6] = [2, 0, 0, 0, 0, 1];

    #[test]
    fn an_ipv4_ssh_ip_is_claimed_with_a_gratuitous_arp_to_everyone() {
        let ip = Ipv4Addr::new(198, 18, 0, 10);
        let (frame, protocol, to) = claim(MAC, ip.into());
        assert_eq!(
            (frame.len(), protocol, to),
            (MIN_FRAME, ETH_P_ARP, BROADCAST)
        );
        let arp_frame: [u8; ARP_FRAME_LEN] = frame[..ARP_FRAME_LEN].try_into().unwrap();
        let seen = arp::parse(&arp_frame).unwrap();
        assert!(seen.claims_sender());
        assert_eq!((seen.sha, seen.spa), (MAC, raw(ip)));
    }

    #[test]
    fn an_ipv6_ssh_ip_is_claimed_with_an_unsolicited_advertisement_to_all_nodes() {
        let ip: Ipv6Addr = "fd00:198::10".parse().unwrap();
        let (frame, protocol, to) = claim(MAC, ip.into());
        assert_eq!(protocol, ETH_P_IPV6);
        assert_eq!(to, [0x33, 0x33, 0, 0, 0, 1], "all nodes' multicast MAC");
        assert_eq!(frame[..6], to, "the frame's own destination");
        assert_eq!(frame[6..12], MAC, "from the interface's MAC");
        let whole: [u8; NDP_FRAME_LLA_LEN] = frame.as_slice().try_into().unwrap();
        let seen = ndp::parse(&whole, NDP_FRAME_LLA_LEN).expect("a neighbour advertisement");
        assert_eq!(seen.kind, NDP_ADVERT);
        assert!(seen.claims_target());
        assert_eq!(seen.target.ip(), ip);
        assert_eq!(seen.src.ip(), ip, "from the SSH IP itself");
        assert_eq!(seen.mac, MAC, "its target link-layer address");
        assert_eq!(whole, ndp::unsolicited(MAC, Addr6::new(ip)));
    }
}
