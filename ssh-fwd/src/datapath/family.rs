//! The maps' endpoints of either family to and from std's socket
//! addresses: the plan and the agent see one table of `SocketAddr`s; the
//! maps hold IPv4 entries in `FRONTENDS`, `REVERSE`, `CONNS`... and IPv6
//! ones in their `*6` twins. Pure.

use std::{
    fmt::Debug,
    net::{SocketAddr, SocketAddrV4, SocketAddrV6},
};

use ssh_fwd_common::{
    conntrack::trust::source_key6,
    maps::{Addr, Addr6, ConnKey, Endpoint, Endpoint6, NatTarget, NatTarget6, QuotaChange},
};

use super::plan::Target;

/// What the agent's code over the connection tables needs of a family:
/// an endpoint as a socket address, and the key its quota table
/// (`SOURCES`, `SOURCES6`) counts a client by.
pub trait MapFamily: Addr {
    /// A client's key in the quota table: its address (IPv4), its /64
    /// (IPv6).
    type Source: Copy + Ord + Debug + aya::Pod + Into<u64>;
    /// The family a `QuotaChange` names.
    const QUOTA: u32;
    fn socket(e: &Endpoint<Self>) -> SocketAddr;
    fn source(key: &ConnKey<Self>) -> Self::Source;
}

impl MapFamily for u32 {
    type Source = u32;
    const QUOTA: u32 = QuotaChange::V4;
    fn socket(e: &Endpoint) -> SocketAddr {
        socket4(e)
    }
    fn source(key: &ConnKey) -> u32 {
        key.client_addr
    }
}

impl MapFamily for Addr6 {
    type Source = u64;
    const QUOTA: u32 = QuotaChange::V6;
    fn socket(e: &Endpoint6) -> SocketAddr {
        socket6(e)
    }
    fn source(key: &ConnKey<Addr6>) -> u64 {
        source_key6(key.client_addr)
    }
}

/// An IPv4 address and port as the maps hold it.
pub fn endpoint4(a: SocketAddrV4) -> Endpoint {
    Endpoint::new(*a.ip(), a.port())
}

/// An IPv6 address and port as the maps hold it (flow and scope dropped:
/// the maps have neither).
pub fn endpoint6(a: SocketAddrV6) -> Endpoint6 {
    Endpoint6::new6(*a.ip(), a.port())
}

pub fn socket4(e: &Endpoint) -> SocketAddr {
    SocketAddr::V4(SocketAddrV4::new(e.ip(), e.port()))
}

pub fn socket6(e: &Endpoint6) -> SocketAddr {
    SocketAddr::V6(SocketAddrV6::new(e.ip6(), e.port(), 0, 0))
}

pub fn target4(t: &NatTarget) -> Target {
    Target {
        endpoint: socket4(&t.endpoint),
        slot: t.slot,
        flags: t.flags,
    }
}

pub fn target6(t: &NatTarget6) -> Target {
    Target {
        endpoint: socket6(&t.endpoint),
        slot: t.slot,
        flags: t.flags,
    }
}

/// Keys of both families, each in its maps' layout.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Keys {
    pub v4: Vec<Endpoint>,
    pub v6: Vec<Endpoint6>,
}

pub fn split_keys<'a>(keys: impl IntoIterator<Item = &'a SocketAddr>) -> Keys {
    let mut out = Keys::default();
    for key in keys {
        match key {
            SocketAddr::V4(a) => out.v4.push(endpoint4(*a)),
            SocketAddr::V6(a) => out.v6.push(endpoint6(*a)),
        }
    }
    out
}

/// Entries of both families, each in its maps' layout, keys and values
/// apart (as a batch update takes them).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Entries {
    pub v4: (Vec<Endpoint>, Vec<NatTarget>),
    pub v6: (Vec<Endpoint6>, Vec<NatTarget6>),
}

/// A key whose target is of the other family: the planner never makes
/// one (every source refuses a mapping that mixes families).
#[derive(Debug, thiserror::Error)]
#[error(
    "entry {key} -> {target} mixes address families; this is a bug in ssh-fwd (every source \
     refuses such a mapping): please report it"
)]
pub struct MixedFamily {
    key: SocketAddr,
    target: SocketAddr,
}

pub fn split_entries<'a>(
    entries: impl IntoIterator<Item = &'a (SocketAddr, Target)>,
) -> Result<Entries, MixedFamily> {
    let mut out = Entries::default();
    for (key, t) in entries {
        match (key, t.endpoint) {
            (SocketAddr::V4(k), SocketAddr::V4(e)) => {
                out.v4.0.push(endpoint4(*k));
                out.v4.1.push(NatTarget {
                    endpoint: endpoint4(e),
                    slot: t.slot,
                    flags: t.flags,
                });
            }
            (SocketAddr::V6(k), SocketAddr::V6(e)) => {
                out.v6.0.push(endpoint6(*k));
                out.v6.1.push(NatTarget6 {
                    endpoint: endpoint6(e),
                    slot: t.slot,
                    flags: t.flags,
                });
            }
            _ => {
                return Err(MixedFamily {
                    key: *key,
                    target: t.endpoint,
                });
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sa(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[test]
    fn entries_go_to_the_maps_of_their_family_and_come_back_unchanged() {
        let t = |e: &str, slot| Target {
            endpoint: sa(e),
            slot,
            flags: 1,
        };
        let entries = [
            (sa("198.18.0.10:8022"), t("10.244.1.5:22", 3)),
            (sa("[2001:db8::10]:8022"), t("[fd00::5]:22", 4)),
        ];
        let split = split_entries(&entries).unwrap();
        assert_eq!(split.v4.0, [endpoint4("198.18.0.10:8022".parse().unwrap())]);
        assert_eq!(
            split.v6.0[0].ip6(),
            "2001:db8::10".parse::<std::net::Ipv6Addr>().unwrap()
        );
        assert_eq!((split.v6.1[0].slot, split.v6.1[0].endpoint.port()), (4, 22));
        assert_eq!(socket6(&split.v6.0[0]), entries[1].0);
        assert_eq!(target6(&split.v6.1[0]), entries[1].1);
        assert_eq!(target4(&split.v4.1[0]), entries[0].1);
        let keys = split_keys(entries.iter().map(|(k, _)| k));
        assert_eq!((keys.v4.len(), keys.v6.len()), (1, 1));
    }

    #[test]
    fn an_entry_that_mixes_families_is_refused_not_written() {
        let entries = [(
            sa("198.18.0.10:8022"),
            Target {
                endpoint: sa("[fd00::5]:22"),
                slot: 0,
                flags: 0,
            },
        )];
        let err = split_entries(&entries).unwrap_err().to_string();
        assert!(err.contains("mixes address families"), "{err}");
    }
}
