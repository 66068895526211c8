//! `--port-range` against the node's own services, checked at start: the
//! ports it covers that a node service is known to use
//! ([`crate::args::node_ports`]) or that a socket listens on in the
//! agent's network namespace (the node's, `hostNetwork`), read from
//! `/proc/net/tcp` and `/proc/net/tcp6`. Either refuses the start unless
//! `--allow-port-overlap` says they are known and harmless; the message
//! names the ports, the processes where the agent can see them, and the
//! fix.
//!
//! The data path already keeps the node's services off the SSH IP (an
//! unmapped port is dropped, `unmapped_port`), so the overlap is refused as
//! a mistake, not a hole: a granted port on which a node service listens
//! makes that service unreachable on it, and is one misconfiguration away
//! from exposing it.

use std::{
    collections::BTreeMap,
    net::{IpAddr, Ipv4Addr, Ipv6Addr},
    ops::RangeInclusive,
    path::Path,
};

use anyhow::bail;

use crate::args::node_ports::{self, WellKnown};

/// A TCP socket in LISTEN state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Listener {
    pub addr: IpAddr,
    pub port: u16,
    /// Its inode, by which `/proc/PID/fd` names it.
    pub inode: u64,
}

/// The state `/proc/net/tcp` writes for a listening socket.
const TCP_LISTEN: &str = "0A";

/// The listening sockets of one `/proc/net/tcp` or `/proc/net/tcp6`
/// table. Lines that do not parse are skipped: the kernel writes them, and
/// a check that misses a line only warns less.
pub fn parse_table(text: &str) -> Vec<Listener> {
    text.lines()
        .skip(1)
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let (local, state, inode) = (fields.get(1)?, fields.get(3)?, fields.get(9)?);
            if *state != TCP_LISTEN {
                return None;
            }
            let (addr, port) = local.split_once(':')?;
            Some(Listener {
                addr: parse_addr(addr)?,
                port: u16::from_str_radix(port, 16).ok()?,
                inode: inode.parse().ok()?,
            })
        })
        .collect()
}

/// An address as the kernel prints it: the raw network-order words, each
/// as a native-endian hex number.
fn parse_addr(hex: &str) -> Option<IpAddr> {
    let word = |i: usize| {
        u32::from_str_radix(hex.get(i * 8..i * 8 + 8)?, 16)
            .ok()
            .map(u32::to_ne_bytes)
    };
    match hex.len() {
        8 => Some(IpAddr::V4(Ipv4Addr::from(word(0)?))),
        32 => {
            let mut bytes = [0u8; 16];
            for i in 0..4 {
                bytes[i * 4..i * 4 + 4].copy_from_slice(&word(i)?);
            }
            Some(IpAddr::V6(Ipv6Addr::from(bytes)))
        }
        _ => None,
    }
}

/// The listeners in `range` that an outside address could reach: every
/// one but those on loopback.
pub fn in_range<'a>(listeners: &'a [Listener], range: &RangeInclusive<u16>) -> Vec<&'a Listener> {
    listeners
        .iter()
        .filter(|l| range.contains(&l.port) && !l.addr.is_loopback())
        .collect()
}

/// What the check found: both kinds of overlap, the sockets with their
/// processes' names where known.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Overlap {
    pub well_known: Vec<WellKnown>,
    /// Port -> the addresses and processes listening on it.
    pub listening: BTreeMap<u16, Vec<String>>,
}

impl Overlap {
    pub fn is_empty(&self) -> bool {
        self.well_known.is_empty() && self.listening.is_empty()
    }

    /// One sentence per kind, for the error or the warning.
    pub fn describe(&self, range: &RangeInclusive<u16>) -> String {
        let mut parts = Vec::new();
        if !self.well_known.is_empty() {
            let list: Vec<String> = self.well_known.iter().map(ToString::to_string).collect();
            parts.push(format!(
                "node services' well-known ports {}",
                list.join(", ")
            ));
        }
        if !self.listening.is_empty() {
            let list: Vec<String> = self
                .listening
                .iter()
                .map(|(port, who)| format!("{port} ({})", who.join(", ")))
                .collect();
            parts.push(format!(
                "ports sockets listen on in the node's network namespace: {}",
                list.join(", ")
            ));
        }
        format!(
            "--port-range {}-{} covers {}",
            range.start(),
            range.end(),
            parts.join("; and ")
        )
    }
}

/// The overlap of `range` with `well_known` and `listeners`, each
/// listener named by `process` (its inode -> a process name).
pub fn overlap(
    range: &RangeInclusive<u16>,
    listeners: &[Listener],
    process: &BTreeMap<u64, String>,
) -> Overlap {
    let mut listening: BTreeMap<u16, Vec<String>> = BTreeMap::new();
    for l in in_range(listeners, range) {
        let who = process.get(&l.inode).map_or_else(
            || format!("{} by socket inode {}", l.addr, l.inode),
            |p| format!("{} by {p}", l.addr),
        );
        let entry = listening.entry(l.port).or_default();
        if !entry.contains(&who) {
            entry.push(who);
        }
    }
    Overlap {
        well_known: node_ports::well_known_in(range),
        listening,
    }
}

/// Refuses `range` if it overlaps the node's services, unless `allow`
/// (then warns). Reads the tables of this process's network namespace.
pub fn check(range: &RangeInclusive<u16>, allow: bool) -> anyhow::Result<()> {
    let mut listeners = Vec::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        match std::fs::read_to_string(table) {
            Ok(text) => listeners.extend(parse_table(&text)),
            // No IPv6 in the kernel: no tcp6.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => tracing::warn!(table, error = %e, "cannot read the listening sockets"),
        }
    }
    let found = overlap(range, &listeners, &processes(Path::new("/proc")));
    if found.is_empty() {
        return Ok(());
    }
    let what = found.describe(range);
    if allow {
        tracing::warn!("{what}; going on as --allow-port-overlap says");
        return Ok(());
    }
    bail!(
        "{what}. A port granted there is served by a pod on the SSH IP while a node service \
         listens on it. Choose a --port-range (here and on the controller) that avoids them, such \
         as the default {}, or pass --allow-port-overlap if they are known and harmless",
        node_ports::DEFAULT_PORT_RANGE
    )
}

/// Socket inode -> `NAME (pid N)`, for the processes this one can see
/// (all of them with `hostPID`, its own otherwise). Best effort: a process
/// that ends meanwhile or whose descriptors are not readable is left out.
fn processes(proc: &Path) -> BTreeMap<u64, String> {
    let mut found = BTreeMap::new();
    let Ok(entries) = std::fs::read_dir(proc) else {
        return found;
    };
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(fds) = std::fs::read_dir(entry.path().join("fd")) else {
            continue;
        };
        let name = std::fs::read_to_string(entry.path().join("comm"))
            .map(|s| s.trim().to_owned())
            .unwrap_or_default();
        for fd in fds.flatten() {
            let Ok(target) = std::fs::read_link(fd.path()) else {
                continue;
            };
            let inode = target
                .to_str()
                .and_then(|t| t.strip_prefix("socket:["))
                .and_then(|t| t.strip_suffix(']'))
                .and_then(|t| t.parse::<u64>().ok());
            if let Some(inode) = inode {
                found.insert(inode, format!("{name} (pid {pid})"));
            }
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Written as a little-endian kernel writes them.
    const TCP: &str = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000:2802 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 4711 1 0000000000000000 100 0 0 10 0
   1: 0100007F:4E21 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 4712 1 0000000000000000 100 0 0 10 0
   2: 0A0012C6:4E22 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 4713 1 0000000000000000 100 0 0 10 0
   3: 0100A8C0:4E23 0200A8C0:D431 01 00000000:00000000 00:00000000 00000000     0        0 4714 1 0000000000000000 100 0 0 10 0
";
    const TCP6: &str = "  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000000000000000000000000000:4E24 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 4801 1 0000000000000000 100 0 0 10 0
   1: 00000000000000000000000001000000:4E25 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 4802 1 0000000000000000 100 0 0 10 0
";

    #[cfg(target_endian = "little")]
    #[test]
    fn listening_sockets_are_read_from_both_tables() {
        let v4 = parse_table(TCP);
        assert_eq!(
            v4,
            vec![
                Listener {
                    addr: "0.0.0.0".parse().unwrap(),
                    port: 10242,
                    inode: 4711
                },
                Listener {
                    addr: "127.0.0.1".parse().unwrap(),
                    port: 20001,
                    inode: 4712
                },
                Listener {
                    addr: "198.18.0.10".parse().unwrap(),
                    port: 20002,
                    inode: 4713
                },
            ],
            "the established socket (state 01) is not a listener"
        );
        let v6 = parse_table(TCP6);
        assert_eq!(v6[0].addr, "::".parse::<IpAddr>().unwrap());
        assert_eq!(v6[0].port, 20004);
        assert_eq!(v6[1].addr, "::1".parse::<IpAddr>().unwrap());
    }

    #[cfg(target_endian = "little")]
    #[test]
    fn listeners_in_the_range_are_named_loopback_ones_are_not() {
        let mut listeners = parse_table(TCP);
        listeners.extend(parse_table(TCP6));
        let names = BTreeMap::from([(4713, "node-agent (pid 42)".to_owned())]);
        let found = overlap(&(20000..=27999), &listeners, &names);
        assert_eq!(found.well_known, vec![]);
        assert_eq!(
            found.listening,
            BTreeMap::from([
                (20002, vec!["198.18.0.10 by node-agent (pid 42)".to_owned()]),
                (20004, vec![":: by socket inode 4801".to_owned()]),
            ])
        );
        let text = found.describe(&(20000..=27999));
        assert!(
            text.contains("20002 (198.18.0.10 by node-agent (pid 42))"),
            "{text}"
        );
    }

    #[test]
    fn the_old_default_range_is_refused_for_the_kubelet_with_the_fix() {
        let found = overlap(&(8000..=16000), &[], &BTreeMap::new());
        let text = found.describe(&(8000..=16000));
        assert!(text.contains("10248-10260 (kubelet"), "{text}");
        assert!(text.contains("9100 (node-exporter)"), "{text}");
    }

    #[test]
    fn a_range_clear_of_both_passes() {
        let listeners = [Listener {
            addr: "0.0.0.0".parse().unwrap(),
            port: 10250,
            inode: 1,
        }];
        assert!(overlap(&(20000..=27999), &listeners, &BTreeMap::new()).is_empty());
    }
}
