//! Gratuitous ARP replies, sent from userspace on an `AF_PACKET` socket
//! (`CAP_NET_RAW`): the kernel programs only answer what arrives, they
//! cannot start a frame. The frame is `ssh_fwd_common::arp::gratuitous`.

use std::{io, net::Ipv4Addr, os::fd::AsRawFd as _};

use ssh_fwd_common::arp::{self, BROADCAST, ETH_P_ARP};

/// The shortest Ethernet frame: a NIC pads to it anyway, a veth does not.
const MIN_FRAME: usize = 60;

/// An `AF_PACKET` socket that only sends (protocol 0: it receives
/// nothing).
pub struct GarpSocket(std::os::fd::OwnedFd);

impl GarpSocket {
    pub fn open() -> io::Result<Self> {
        // SAFETY: a plain syscall; the fd is owned below.
        let fd = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a fresh fd nobody else owns.
        Ok(Self(unsafe {
            <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd)
        }))
    }

    /// Sends one gratuitous ARP reply out of `ifindex`: `mac` holds `ip`.
    pub fn send(&self, ifindex: u32, mac: [u8; 6], ip: Ipv4Addr) -> io::Result<()> {
        let mut frame = [0u8; MIN_FRAME];
        frame[..arp::ARP_FRAME_LEN]
            .copy_from_slice(&arp::gratuitous(mac, u32::from_ne_bytes(ip.octets())));
        // SAFETY: an all-zero sockaddr_ll is valid; the fields are set below.
        let mut to: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        to.sll_family = libc::AF_PACKET as u16;
        to.sll_protocol = ETH_P_ARP.to_be();
        to.sll_ifindex = i32::try_from(ifindex).unwrap_or(i32::MAX);
        to.sll_halen = 6;
        to.sll_addr[..6].copy_from_slice(&BROADCAST);
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
