//! The frames these tests send and read on the segment themselves: another
//! machine's claims of the SSH IP, forged at a steady rate from a host of
//! the segment that is no node ([`Forger`]), and the client's questions
//! with the MACs that answer each ([`Bed::probe_each`]: ARP requests, or
//! for an IPv6 SSH IP neighbour solicitations).

use std::{
    net::{Ipv4Addr, Ipv6Addr},
    os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd},
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    thread::JoinHandle,
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};
use ssh_fwd_common::{
    arp, csum,
    ipv6::{self, ETH_P_IPV6, NEXTHDR_ICMPV6},
    maps::Addr6,
    ndp::{self, NDP_ADVERT, NDP_FRAME_LLA_LEN, NDP_SOLICIT},
    packet::ETH_HLEN,
};
use ssh_fwd_tests::{NetNs, topology::CLIENT_IP6};

use super::Bed;

/// The MAC the forged frames come from: no node's.
pub const FORGED_MAC: [u8; 6] = [0x02, 0x66, 0x66, 0, 0, 0x01];
/// [`FORGED_MAC`] as the agents write it.
pub const FORGED_MAC_TEXT: &str = "02:66:66:00:00:01";
/// The longest a [`Forger`] sends, whatever happens to the test.
const FORGE_AT_MOST: Duration = Duration::from_secs(90);

/// `mac` as `ip link` and the agents write it.
pub fn mac_text(mac: [u8; 6]) -> String {
    mac.map(|b| format!("{b:02x}")).join(":")
}

/// `text` (`02:5f:00:00:00:01`) as six bytes.
pub fn mac_bytes(text: &str) -> [u8; 6] {
    let mut mac = [0; 6];
    for (byte, part) in mac.iter_mut().zip(text.split(':')) {
        *byte = u8::from_str_radix(part, 16).unwrap_or(0);
    }
    mac
}

/// A gratuitous ARP reply: `mac` holds `ip`, to everyone.
pub fn gratuitous_reply(mac: [u8; 6], ip: Ipv4Addr) -> Vec<u8> {
    padded(&arp::gratuitous(mac, u32::from_ne_bytes(ip.octets())))
}

/// An ARP reply from `mac` claiming `ip`, to `to`, as it would answer
/// `to`'s ARP probe (target address 0.0.0.0).
pub fn probe_answer(mac: [u8; 6], ip: Ipv4Addr, to: [u8; 6]) -> Vec<u8> {
    let mut frame = gratuitous_reply(mac, ip);
    frame[..6].copy_from_slice(&to);
    frame[ETH_HLEN + 18..ETH_HLEN + 24].copy_from_slice(&to);
    frame[ETH_HLEN + 24..ETH_HLEN + 28].fill(0);
    frame
}

/// An unsolicited, overriding neighbour advertisement: `mac` holds `ip`,
/// to all nodes.
pub fn unsolicited_advert(mac: [u8; 6], ip: Ipv6Addr) -> Vec<u8> {
    ndp::unsolicited(mac, Addr6::new(ip)).to_vec()
}

fn padded(frame: &[u8]) -> Vec<u8> {
    let mut out = frame.to_vec();
    out.resize(60, 0);
    out
}

/// An `AF_PACKET` socket of `protocol` in the namespace at `ns_path`,
/// bound to its `eth0` (the calling thread moves there for good: call it
/// on a thread of its own).
fn packet_socket_in(ns_path: &str, protocol: u16) -> anyhow::Result<(OwnedFd, i32)> {
    let ns = std::fs::File::open(ns_path).with_context(|| ns_path.to_owned())?;
    // SAFETY: a valid namespace fd; CLONE_NEWNET moves this thread only.
    if unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
        bail!("entering {ns_path}: {}", std::io::Error::last_os_error());
    }
    // SAFETY: a plain syscall; the fd is owned below.
    let fd = unsafe {
        libc::socket(
            libc::AF_PACKET,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC,
            i32::from(protocol.to_be()),
        )
    };
    if fd < 0 {
        bail!("packet socket: {}", std::io::Error::last_os_error());
    }
    // SAFETY: a fresh fd nobody else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: a NUL-terminated name.
    let ifindex = unsafe { libc::if_nametoindex(c"eth0".as_ptr()) };
    if ifindex == 0 {
        bail!("no eth0 in {ns_path}");
    }
    let mut at = link_address(ifindex as i32, protocol, [0; 6]);
    // SAFETY: `at` outlives the call; the length is its own.
    let bound = unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (&raw mut at).cast(),
            size_of::<libc::sockaddr_ll>() as libc::socklen_t,
        )
    };
    if bound != 0 {
        bail!("binding to eth0: {}", std::io::Error::last_os_error());
    }
    Ok((fd, ifindex as i32))
}

fn link_address(ifindex: i32, protocol: u16, to: [u8; 6]) -> libc::sockaddr_ll {
    // SAFETY: an all-zero sockaddr_ll is valid.
    let mut at: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    at.sll_family = libc::AF_PACKET as u16;
    at.sll_protocol = protocol.to_be();
    at.sll_ifindex = ifindex;
    at.sll_halen = 6;
    at.sll_addr[..6].copy_from_slice(&to);
    at
}

/// Sends `frame` whole (its Ethernet header included) out of `ifindex`.
fn send(fd: &OwnedFd, ifindex: i32, frame: &[u8]) -> bool {
    let protocol = u16::from_be_bytes([frame[12], frame[13]]);
    let mut to = [0; 6];
    to.copy_from_slice(&frame[..6]);
    let at = link_address(ifindex, protocol, to);
    // SAFETY: the buffers outlive the call; the lengths are theirs.
    let sent = unsafe {
        libc::sendto(
            fd.as_raw_fd(),
            frame.as_ptr().cast(),
            frame.len(),
            0,
            (&raw const at).cast(),
            size_of::<libc::sockaddr_ll>() as libc::socklen_t,
        )
    };
    sent >= 0
}

/// One frame sent out of a namespace's `eth0` at a steady rate, on a
/// thread of its own, until [`Forger::stop`] (or at most
/// [`FORGE_AT_MOST`]).
pub struct Forger {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<anyhow::Result<u64>>>,
}

impl Forger {
    pub fn start(ns: &NetNs, frame: Vec<u8>, per_second: u32) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let path = ns.path();
        let every = Duration::from_secs(1) / per_second.max(1);
        let thread = std::thread::spawn(move || {
            let protocol = u16::from_be_bytes([frame[12], frame[13]]);
            let (fd, ifindex) = packet_socket_in(&path, protocol)?;
            let (start, mut sent) = (Instant::now(), 0);
            while !stopped.load(Ordering::Relaxed) && start.elapsed() < FORGE_AT_MOST {
                if send(&fd, ifindex, &frame) {
                    sent += 1;
                }
                std::thread::sleep(every);
            }
            Ok(sent)
        });
        Self {
            stop,
            thread: Some(thread),
        }
    }

    /// Stops; the frames sent.
    pub fn stop(mut self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        let thread = self.thread.take().expect("running");
        thread.join().expect("forger").expect("forging")
    }
}

impl Drop for Forger {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// A neighbour solicitation from the client (`mac`, [`CLIENT_IP6`]) for
/// `target`, to its solicited-node group, with the source link-layer
/// address option: what the client's kernel sends (RFC 4861 7.2.2).
fn solicitation(mac: [u8; 6], target: Ipv6Addr) -> Vec<u8> {
    let src: Ipv6Addr = CLIENT_IP6.parse().expect("an IPv6 address");
    let t = target.octets();
    let dst = Ipv6Addr::from([
        0xff, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0xff, t[13], t[14], t[15],
    ]);
    let mut frame = ndp::unsolicited(mac, Addr6::new(target));
    let icmp = ETH_HLEN + ipv6::IPV6_HLEN;
    frame[..6].copy_from_slice(&[0x33, 0x33, 0xff, t[13], t[14], t[15]]);
    frame[ETH_HLEN + 8..ETH_HLEN + 24].copy_from_slice(&src.octets());
    frame[ETH_HLEN + 24..ETH_HLEN + 40].copy_from_slice(&dst.octets());
    frame[icmp] = NDP_SOLICIT;
    frame[icmp + 4..icmp + 8].fill(0);
    frame[icmp + 24] = 1; // the source link-layer address option
    frame[icmp + 2..icmp + 4].fill(0);
    let len = NDP_FRAME_LLA_LEN - icmp;
    let pseudo = ipv6::pseudo_header_sum(src.octets(), dst.octets(), len as u32, NEXTHDR_ICMPV6);
    let check = csum::checksum(&frame[icmp..], pseudo);
    frame[icmp + 2..icmp + 4].copy_from_slice(&check.to_ne_bytes());
    frame.to_vec()
}

/// The MACs of the solicited advertisements for `target` to the client
/// in `frames` (the forged unsolicited ones, to all nodes, are not
/// answers).
fn answers_in(frames: &[Vec<u8>], target: Ipv6Addr) -> Vec<String> {
    let client: Ipv6Addr = CLIENT_IP6.parse().expect("an IPv6 address");
    let icmp = ETH_HLEN + ipv6::IPV6_HLEN;
    frames
        .iter()
        .filter(|f| f.len() >= NDP_FRAME_LLA_LEN)
        .filter_map(|f| {
            let whole: [u8; NDP_FRAME_LLA_LEN] = f[..NDP_FRAME_LLA_LEN].try_into().ok()?;
            let seen = ndp::parse(&whole, NDP_FRAME_LLA_LEN)?;
            let to_client = f[ETH_HLEN + 24..ETH_HLEN + 40] == client.octets();
            let solicited = f[icmp + 4] & 0x40 != 0;
            (seen.kind == NDP_ADVERT && seen.target.ip() == target && to_client && solicited)
                .then(|| mac_text(seen.mac))
        })
        .collect()
}

/// Sends `count` solicitations for `target` from the client in `ns`, 200
/// ms apart, and returns the MACs that answered each.
fn solicit_each(
    ns: &NetNs,
    mac: [u8; 6],
    target: Ipv6Addr,
    count: u32,
) -> anyhow::Result<Vec<Vec<String>>> {
    let path = ns.path();
    std::thread::spawn(move || {
        let (fd, ifindex) = packet_socket_in(&path, ETH_P_IPV6)?;
        let wait = libc::timeval {
            tv_sec: 0,
            tv_usec: 20_000,
        };
        // SAFETY: `wait` outlives the call; the length is its own.
        unsafe {
            libc::setsockopt(
                fd.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVTIMEO,
                (&raw const wait).cast(),
                size_of::<libc::timeval>() as libc::socklen_t,
            )
        };
        let question = solicitation(mac, target);
        let mut each = Vec::new();
        for _ in 0..count {
            let asked = Instant::now();
            if !send(&fd, ifindex, &question) {
                bail!(
                    "sending a solicitation: {}",
                    std::io::Error::last_os_error()
                );
            }
            let mut frames = Vec::new();
            while asked.elapsed() < Duration::from_millis(200) {
                let mut buf = [0u8; 256];
                // SAFETY: the buffer outlives the call; its length is its own.
                let got =
                    unsafe { libc::recv(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
                if let Ok(len) = usize::try_from(got) {
                    frames.push(buf[..len].to_vec());
                }
            }
            each.push(answers_in(&frames, target));
        }
        Ok(each)
    })
    .join()
    .map_err(|_| anyhow::anyhow!("the soliciting thread panicked"))?
}

impl Bed {
    /// The MACs that answer each of `count` questions for the SSH IP from
    /// the client, 200 ms apart: broadcast ARP requests, or for an IPv6
    /// SSH IP solicitations to its solicited-node group.
    pub fn probe_each(&self, count: u32) -> Vec<Vec<String>> {
        match self.ssh_ip.parse::<Ipv6Addr>() {
            Ok(target) => {
                let mac = mac_bytes(
                    &ssh_fwd_tests::segment::Segment::mac(&self.seg.client, "eth0").unwrap(),
                );
                solicit_each(&self.seg.client, mac, target, count).unwrap()
            }
            Err(_) => self.seg.arping_each(self.ssh_ip, count).unwrap(),
        }
    }

    /// A claim of the SSH IP by [`FORGED_MAC`], to everyone: a gratuitous
    /// ARP reply, or an unsolicited neighbour advertisement.
    pub fn forged_claim(&self) -> Vec<u8> {
        match self.ssh_ip.parse::<Ipv6Addr>() {
            Ok(ip) => unsolicited_advert(FORGED_MAC, ip),
            Err(_) => gratuitous_reply(FORGED_MAC, self.ssh_ip.parse().unwrap()),
        }
    }
}
