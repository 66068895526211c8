//! Mappings that would break or hijack the node, refused by every source:
//! the file rejects itself whole, Kubernetes skips the Service. Pure; the
//! agent gathers the node's addresses.

use std::{
    collections::{BTreeMap, BTreeSet},
    net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr},
};

use crate::mapping::{Family, Mapping, guard::Defaults, printable, unprintable};

/// What a mapping is checked against.
#[derive(Clone, Debug, Default)]
pub struct Rules {
    /// `--ssh-ip`: when any is declared, every frontend must be on one.
    pub ssh_ips: BTreeSet<IpAddr>,
    /// The node's own addresses, with their interface, other than those on
    /// `lo` and dummy devices (where an SSH IP is meant to sit): without
    /// `--ssh-ip`, a frontend there would capture the node's own services.
    pub node_addrs: BTreeMap<IpAddr, String>,
    /// Every address assigned to the node, with its interface, `lo` and
    /// dummy devices included: a backend there is the node's own service
    /// (`EXT:8022 -> NODE_IP:22` is its sshd), never a pod.
    pub all_node_addrs: BTreeMap<IpAddr, String>,
    /// What the agent's flags add to each mapping's guard (`--allow`,
    /// `--syn-rate`, ...).
    pub guard: Defaults,
}

/// Why a mapping is refused; each says what to do instead.
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
pub enum Danger {
    #[error(
        "frontend {frontend} is {} and backend {backend} is {}; ssh-fwd translates addresses, \
         not families (no NAT46 or NAT64): use a frontend of the backend's family",
        Family::of(frontend.ip()),
        Family::of(backend.ip())
    )]
    MixedFamily {
        frontend: SocketAddr,
        backend: SocketAddr,
    },
    #[error(
        "backend {0} is the entry's own frontend: packets would be translated until their TTL \
         runs out; point the backend at the pod (POD_IP:22)"
    )]
    ToItself(SocketAddr),
    #[error(
        "backend {0} is a frontend: forwarding there breaks that mapping; point the backend at \
         the pod behind it"
    )]
    BackendIsFrontend(SocketAddr),
    #[error(
        "backend {0} is on frontend address {1}, so it would reach the node's own services; \
         point the backend at the pod"
    )]
    BackendOnFrontendIp(SocketAddr, IpAddr),
    #[error("backend {0} is {1}, never a pod; point the backend at the pod's address")]
    ReservedBackend(SocketAddr, &'static str),
    #[error(
        "frontend {0} is {1}: the node's own programs connect there (with hairpin, every such \
         connect would reach the backend instead); put the frontend on the node's SSH IP"
    )]
    ReservedFrontend(SocketAddr, &'static str),
    #[error(
        "backend {backend} is an address of this node (interface {iface}), so it would reach \
         the node's own services, not a pod (in Kubernetes: an endpoint with hostNetwork); \
         point the backend at the pod's own address"
    )]
    BackendOnNode { backend: SocketAddr, iface: String },
    #[error(
        "frontend {frontend} is not on a declared --ssh-ip ({declared}); use one of them, or add \
         --ssh-ip {ip}"
    )]
    FrontendNotSshIp {
        frontend: SocketAddr,
        ip: IpAddr,
        declared: String,
    },
    #[error(
        "frontend {frontend} is an address of interface {iface}, where it would capture the \
         node's own service on that port; put the SSH IP on lo (or a dummy device), or declare \
         it with --ssh-ip"
    )]
    FrontendOnNodeAddress { frontend: SocketAddr, iface: String },
    #[error(
        "name `{0}` has a control character or a Unicode format character (shown escaped); \
         use printable characters only"
    )]
    ControlCharacter(String),
}

/// Checks mappings against the rules and against each other.
pub struct Checker<'a> {
    rules: &'a Rules,
    frontends: BTreeSet<SocketAddr>,
    frontend_ips: BTreeSet<IpAddr>,
}

impl<'a> Checker<'a> {
    /// `frontends`: every frontend of the set being checked.
    pub fn new(rules: &'a Rules, frontends: impl IntoIterator<Item = SocketAddr>) -> Self {
        let frontends: BTreeSet<SocketAddr> = frontends.into_iter().collect();
        let frontend_ips = frontends
            .iter()
            .map(|f| f.ip())
            .chain(rules.ssh_ips.iter().copied())
            .collect();
        Self {
            rules,
            frontends,
            frontend_ips,
        }
    }

    pub fn check(&self, m: &Mapping) -> Result<(), Danger> {
        check_name(&m.name)?;
        let backend = m.backend;
        if Family::of(backend.ip()) != m.family() {
            return Err(Danger::MixedFamily {
                frontend: m.frontend,
                backend,
            });
        }
        if backend == m.frontend {
            return Err(Danger::ToItself(backend));
        }
        if self.frontends.contains(&backend) {
            return Err(Danger::BackendIsFrontend(backend));
        }
        if self.frontend_ips.contains(&backend.ip()) {
            return Err(Danger::BackendOnFrontendIp(backend, backend.ip()));
        }
        check_backend(backend)?;
        if let Some(iface) = self.rules.all_node_addrs.get(&backend.ip()) {
            return Err(Danger::BackendOnNode {
                backend,
                iface: iface.clone(),
            });
        }
        self.check_frontend(m.frontend)
    }

    fn check_frontend(&self, frontend: SocketAddr) -> Result<(), Danger> {
        let ip = frontend.ip();
        if let Some(range) = reserved(ip) {
            return Err(Danger::ReservedFrontend(frontend, range));
        }
        if !self.rules.ssh_ips.is_empty() {
            if self.rules.ssh_ips.contains(&ip) {
                return Ok(());
            }
            let declared: Vec<String> = self.rules.ssh_ips.iter().map(IpAddr::to_string).collect();
            return Err(Danger::FrontendNotSshIp {
                frontend,
                ip,
                declared: declared.join(", "),
            });
        }
        match self.rules.node_addrs.get(&ip) {
            Some(iface) => Err(Danger::FrontendOnNodeAddress {
                frontend,
                iface: iface.clone(),
            }),
            None => Ok(()),
        }
    }
}

/// Names reach operators' terminals (`ssh-fwd list`, logs).
pub fn check_name(name: &str) -> Result<(), Danger> {
    if name.chars().any(unprintable) {
        return Err(Danger::ControlCharacter(printable(name)));
    }
    Ok(())
}

/// Addresses that are never a pod: the packet would go to the node itself,
/// to a metadata service, or nowhere.
pub fn check_backend(backend: SocketAddr) -> Result<(), Danger> {
    reserved(backend.ip()).map_or(Ok(()), |r| Err(Danger::ReservedBackend(backend, r)))
}

/// The range `ip` is in, if it is one that is never a pod nor an SSH IP:
/// the node itself, a metadata service, or nowhere.
fn reserved(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(ip) => reserved4(ip),
        IpAddr::V6(ip) => reserved6(ip),
    }
}

fn reserved4(ip: Ipv4Addr) -> Option<&'static str> {
    if ip.octets()[0] == 0 {
        Some("in 0.0.0.0/8 (\"this network\")")
    } else if ip.is_loopback() {
        Some("a loopback address (127.0.0.0/8)")
    } else if ip.is_link_local() {
        Some("link-local (169.254.0.0/16, where cloud metadata services answer)")
    } else if ip.is_multicast() {
        Some("multicast (224.0.0.0/4)")
    } else if ip.is_broadcast() {
        Some("the broadcast address")
    } else {
        None
    }
}

/// As [`reserved4`], for IPv6: the same kinds of range, and the two that
/// are IPv4 in disguise (a translator or a dual-stack socket would turn
/// them into IPv4, which a mapping of one family must not do).
fn reserved6(ip: Ipv6Addr) -> Option<&'static str> {
    let [first, second, ..] = ip.segments();
    if ip.is_unspecified() {
        Some("the unspecified address (::)")
    } else if ip.is_loopback() {
        Some("the loopback address (::1)")
    } else if first & 0xffc0 == 0xfe80 {
        Some("link-local (fe80::/10, an address valid on one link only)")
    } else if ip.is_multicast() {
        Some("multicast (ff00::/8)")
    } else if ip.to_ipv4_mapped().is_some() {
        Some("an IPv4-mapped address (::ffff:0:0/96); write the IPv4 address itself")
    } else if first == 0x64 && second == 0xff9b {
        Some("a NAT64 address (in 64:ff9b::/32), which a translator turns into IPv4")
    } else {
        None
    }
}

#[cfg(test)]
mod tests;
