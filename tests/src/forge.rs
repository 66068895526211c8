//! Hand-made TCP segments, sent from a raw socket inside one of the test's
//! namespaces: spoofed sources, wrong checksums, a chosen TTL. Whatever a
//! segment claims, it stays inside the test's namespaces (their router has
//! no way out).

use std::net::{Ipv4Addr, SocketAddrV4};

use anyhow::{Context as _, bail};

use crate::NetNs;

pub const FIN: u8 = 0x01;
pub const SYN: u8 = 0x02;
pub const RST: u8 = 0x04;
pub const PSH: u8 = 0x08;
pub const ACK: u8 = 0x10;

/// One TCP segment as it leaves the sender.
#[derive(Clone, Debug)]
pub struct Segment {
    pub src: SocketAddrV4,
    pub dst: SocketAddrV4,
    pub seq: u32,
    pub ack: u32,
    pub flags: u8,
    pub ttl: u8,
    pub payload: Vec<u8>,
    /// XORed into the correct TCP checksum: anything but 0 makes it wrong.
    pub tcp_checksum_error: u16,
    /// XORed into the correct IPv4 header checksum (the kernel recomputes
    /// it for a raw socket's packet; an `AF_PACKET` sender keeps it).
    pub ip_checksum_error: u16,
}

impl Segment {
    /// A segment with a TTL of 64 and correct checksums.
    pub fn new(src: SocketAddrV4, dst: SocketAddrV4, flags: u8, seq: u32, ack: u32) -> Self {
        Self {
            src,
            dst,
            seq,
            ack,
            flags,
            ttl: 64,
            payload: Vec::new(),
            tcp_checksum_error: 0,
            ip_checksum_error: 0,
        }
    }

    /// The IPv4 packet: a 20-byte header, a 20-byte TCP header, the payload.
    pub fn bytes(&self) -> Vec<u8> {
        let total = 40 + self.payload.len();
        let mut p = vec![0u8; total];
        p[0] = 0x45;
        p[2..4].copy_from_slice(&(total as u16).to_be_bytes());
        p[6] = 0x40; // DF
        p[8] = self.ttl;
        p[9] = 6;
        p[12..16].copy_from_slice(&self.src.ip().octets());
        p[16..20].copy_from_slice(&self.dst.ip().octets());
        let ip_check = checksum(&p[..20], 0) ^ self.ip_checksum_error;
        p[10..12].copy_from_slice(&ip_check.to_be_bytes());
        let tcp = &mut p[20..];
        tcp[0..2].copy_from_slice(&self.src.port().to_be_bytes());
        tcp[2..4].copy_from_slice(&self.dst.port().to_be_bytes());
        tcp[4..8].copy_from_slice(&self.seq.to_be_bytes());
        tcp[8..12].copy_from_slice(&self.ack.to_be_bytes());
        tcp[12] = 5 << 4;
        tcp[13] = self.flags;
        tcp[14..16].copy_from_slice(&64_240u16.to_be_bytes());
        tcp[20..].copy_from_slice(&self.payload);
        let pseudo = pseudo_header(*self.src.ip(), *self.dst.ip(), tcp.len());
        let tcp_check = checksum(tcp, pseudo) ^ self.tcp_checksum_error;
        tcp[16..18].copy_from_slice(&tcp_check.to_be_bytes());
        p
    }
}

fn pseudo_header(src: Ipv4Addr, dst: Ipv4Addr, len: usize) -> u32 {
    [src.octets(), dst.octets()]
        .iter()
        .flat_map(|a| {
            [
                u16::from_be_bytes([a[0], a[1]]),
                u16::from_be_bytes([a[2], a[3]]),
            ]
        })
        .map(u32::from)
        .sum::<u32>()
        + 6
        + len as u32
}

/// The Internet checksum of `data` (big-endian words) plus `sum`.
pub fn checksum(data: &[u8], mut sum: u32) -> u16 {
    for pair in data.chunks(2) {
        sum += u32::from(u16::from_be_bytes([pair[0], *pair.get(1).unwrap_or(&0)]));
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// A raw IPv4 socket (`IPPROTO_RAW`: the caller writes the IP header) in
/// the namespace it was opened in.
pub struct RawSender {
    fd: i32,
}

impl RawSender {
    /// Opens the socket in `ns` (the calling thread moves there and back).
    pub fn open_in(ns: &NetNs) -> anyhow::Result<Self> {
        in_namespace(ns, || {
            // SAFETY: a plain socket call; the fd is owned by the result.
            let fd = unsafe {
                libc::socket(
                    libc::AF_INET,
                    libc::SOCK_RAW | libc::SOCK_CLOEXEC,
                    libc::IPPROTO_RAW,
                )
            };
            if fd < 0 {
                bail!("raw socket: {}", std::io::Error::last_os_error());
            }
            Ok(Self { fd })
        })
    }

    /// Sends one segment; `false` if the kernel's queue was full.
    pub fn send(&self, segment: &Segment) -> anyhow::Result<bool> {
        let bytes = segment.bytes();
        let to = sockaddr(segment.dst);
        // SAFETY: `bytes` and `to` outlive the call; sizes are theirs.
        let n = unsafe {
            libc::sendto(
                self.fd,
                bytes.as_ptr().cast(),
                bytes.len(),
                0,
                (&raw const to).cast(),
                size_of::<libc::sockaddr_in>() as libc::socklen_t,
            )
        };
        if n >= 0 {
            return Ok(true);
        }
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::ENOBUFS) {
            return Ok(false);
        }
        Err(e).context("sending a forged segment")
    }
}

impl Drop for RawSender {
    fn drop(&mut self) {
        // SAFETY: our own fd.
        unsafe { libc::close(self.fd) };
    }
}

/// What a raw TCP receiver saw of one incoming segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Seen {
    pub src: SocketAddrV4,
    pub dst: SocketAddrV4,
    pub seq: u32,
    pub ack: u32,
    pub flags: u8,
}

/// A raw TCP socket that sees a copy of every TCP segment the namespace
/// receives.
pub struct RawReceiver {
    fd: i32,
}

impl RawReceiver {
    pub fn open_in(ns: &NetNs) -> anyhow::Result<Self> {
        in_namespace(ns, || {
            // SAFETY: as in `RawSender::open_in`.
            let fd = unsafe {
                libc::socket(
                    libc::AF_INET,
                    libc::SOCK_RAW | libc::SOCK_CLOEXEC,
                    libc::IPPROTO_TCP,
                )
            };
            if fd < 0 {
                bail!("raw TCP socket: {}", std::io::Error::last_os_error());
            }
            let timeout = libc::timeval {
                tv_sec: 0,
                tv_usec: 100_000,
            };
            // SAFETY: a valid fd and a timeval that outlives the call.
            unsafe {
                libc::setsockopt(
                    fd,
                    libc::SOL_SOCKET,
                    libc::SO_RCVTIMEO,
                    (&raw const timeout).cast(),
                    size_of::<libc::timeval>() as libc::socklen_t,
                )
            };
            Ok(Self { fd })
        })
    }

    /// The next segment, or `None` after 100 ms without one.
    pub fn next(&self) -> Option<Seen> {
        let mut buf = [0u8; 2048];
        // SAFETY: `buf` outlives the call, its size is given.
        let n = unsafe { libc::recv(self.fd, buf.as_mut_ptr().cast(), buf.len(), 0) };
        let n = usize::try_from(n).ok()?;
        parse(&buf[..n])
    }
}

impl Drop for RawReceiver {
    fn drop(&mut self) {
        // SAFETY: our own fd.
        unsafe { libc::close(self.fd) };
    }
}

fn parse(p: &[u8]) -> Option<Seen> {
    let ihl = usize::from(p.first()? & 0x0f) * 4;
    let tcp = p.get(ihl..ihl + 20)?;
    let addr = |at: usize| Ipv4Addr::new(p[at], p[at + 1], p[at + 2], p[at + 3]);
    let port = |at: usize| u16::from_be_bytes([tcp[at], tcp[at + 1]]);
    let word = |at: usize| u32::from_be_bytes([tcp[at], tcp[at + 1], tcp[at + 2], tcp[at + 3]]);
    Some(Seen {
        src: SocketAddrV4::new(addr(12), port(0)),
        dst: SocketAddrV4::new(addr(16), port(2)),
        seq: word(4),
        ack: word(8),
        flags: tcp[13],
    })
}

fn sockaddr(to: SocketAddrV4) -> libc::sockaddr_in {
    libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: 0,
        sin_addr: libc::in_addr {
            s_addr: u32::from_ne_bytes(to.ip().octets()),
        },
        sin_zero: [0; 8],
    }
}

/// Runs `f` with the calling thread in `ns`, then moves it back. A socket
/// keeps the namespace it was made in.
fn in_namespace<T>(ns: &NetNs, f: impl FnOnce() -> anyhow::Result<T>) -> anyhow::Result<T> {
    use std::os::fd::AsRawFd as _;
    let home = std::fs::File::open("/proc/thread-self/ns/net").context("own netns")?;
    ns.enter_on_this_thread()?;
    let result = f();
    // SAFETY: a valid namespace fd; CLONE_NEWNET affects only this thread.
    if unsafe { libc::setns(home.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
        bail!(
            "returning from netns {}: {}",
            ns.name(),
            std::io::Error::last_os_error()
        );
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    fn segment() -> Segment {
        Segment::new(
            "192.0.2.66:40000".parse().unwrap(),
            "198.18.0.10:9022".parse().unwrap(),
            ACK,
            7,
            9,
        )
    }

    #[test]
    fn a_segment_carries_valid_checksums_unless_told_otherwise() {
        let mut s = segment();
        s.payload = b"hello".to_vec();
        let b = s.bytes();
        assert_eq!(checksum(&b[..20], 0), 0, "IPv4 header");
        let pseudo = pseudo_header(*s.src.ip(), *s.dst.ip(), b.len() - 20);
        assert_eq!(checksum(&b[20..], pseudo), 0, "TCP");
        s.tcp_checksum_error = 0x0101;
        let bad = s.bytes();
        assert_ne!(checksum(&bad[20..], pseudo), 0, "a wrong TCP checksum");
        assert_eq!(checksum(&bad[..20], 0), 0, "the IPv4 header still right");
    }

    #[test]
    fn a_parsed_segment_reads_back_what_was_built() {
        let s = segment();
        let seen = parse(&s.bytes()).unwrap();
        assert_eq!((seen.src, seen.dst), (s.src, s.dst));
        assert_eq!((seen.seq, seen.ack, seen.flags), (7, 9, ACK));
    }
}
