//! Global outcome counters: one per-CPU `u64` per variant in
//! [`crate::maps::GLOBAL_STATS`], indexed by the discriminant.

/// What the data path did with a packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum Outcome {
    /// Ingress: destination rewritten to a backend.
    Dnat = 0,
    /// Egress: source rewritten back to the frontend.
    ReverseNat = 1,
    /// Not IPv4 (IPv6, ARP, VLAN-tagged...): passed untouched.
    PassNotIpv4 = 2,
    /// IPv4 but not TCP: passed untouched.
    PassNotTcp = 3,
    /// IPv4 fragment: passed untouched (ports are only in the first one).
    PassFragment = 4,
    /// Ingress TCP to an address/port that is not a frontend.
    PassNoFrontend = 5,
    /// Egress TCP from an address/port that is not a backend.
    PassNoBackend = 6,
    /// Too short for its headers, or an IHL below 5: passed untouched.
    Malformed = 7,
    /// A reply from a shared backend with no connection entry; the primary
    /// frontend was used.
    ReverseFallback = 8,
    /// A connection entry was created for a shared backend.
    ConnTracked = 9,
    /// A helper failed while rewriting; the packet was dropped.
    RewriteError = 10,
    /// Ingress, after a DNAT: sent straight out of the interface the route
    /// to the backend uses (FIB lookup + redirect), skipping the node's IP
    /// stack. A DNATed packet not counted here was routed by the stack.
    Redirected = 11,
    /// Ingress: of the [`Outcome::Redirected`], those delivered straight
    /// into the pod's network namespace (`bpf_redirect_peer`), skipping the
    /// pod veth's transmit queue as well.
    RedirectedPeer = 12,
    /// Pod interface: a reply reverse-NATed as it left the pod and sent
    /// straight out of the external interface its route uses, skipping the
    /// node's IP stack.
    ReplyRedirected = 13,
    /// Pod interface: a reply from a backend left to the stack untouched,
    /// because its route does not leave through an external interface
    /// (in-cluster traffic to the pod's port, such as MPI ranks using ssh)
    /// or the route lookup could not settle it. The egress program still
    /// rewrites it if it does leave through an external interface.
    ReplyToStack = 14,
}

/// How an operator should read an outcome's counter.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Class {
    /// ssh-fwd rewrote or delivered the packet: its work.
    Forwarded,
    /// Left untouched because it is not ssh-fwd's to handle (other traffic,
    /// a reply another program already rewrote). Normal, and most packets.
    Passed,
    /// Something went wrong or degraded: malformed packets, failed
    /// rewrites, replies without the state to restore their frontend.
    Problem,
}

impl Class {
    pub const fn name(self) -> &'static str {
        match self {
            Self::Forwarded => "forwarded",
            Self::Passed => "passed",
            Self::Problem => "problem",
        }
    }
}

impl Outcome {
    pub const COUNT: u32 = 15;

    pub const ALL: [Outcome; Self::COUNT as usize] = [
        Self::Dnat,
        Self::ReverseNat,
        Self::PassNotIpv4,
        Self::PassNotTcp,
        Self::PassFragment,
        Self::PassNoFrontend,
        Self::PassNoBackend,
        Self::Malformed,
        Self::ReverseFallback,
        Self::ConnTracked,
        Self::RewriteError,
        Self::Redirected,
        Self::RedirectedPeer,
        Self::ReplyRedirected,
        Self::ReplyToStack,
    ];

    /// Which group the counter belongs to.
    pub const fn class(self) -> Class {
        match self {
            Self::Dnat
            | Self::ReverseNat
            | Self::ConnTracked
            | Self::Redirected
            | Self::RedirectedPeer
            | Self::ReplyRedirected => Class::Forwarded,
            Self::PassNotIpv4
            | Self::PassNotTcp
            | Self::PassFragment
            | Self::PassNoFrontend
            | Self::PassNoBackend
            | Self::ReplyToStack => Class::Passed,
            Self::Malformed | Self::ReverseFallback | Self::RewriteError => Class::Problem,
        }
    }

    /// Stable snake_case name for logs, `ssh-fwd list` and metrics.
    pub const fn name(self) -> &'static str {
        match self {
            Self::Dnat => "dnat",
            Self::ReverseNat => "reverse_nat",
            Self::PassNotIpv4 => "not_ipv4",
            Self::PassNotTcp => "not_tcp",
            Self::PassFragment => "fragment",
            Self::PassNoFrontend => "not_to_a_frontend",
            Self::PassNoBackend => "not_from_a_backend",
            Self::Malformed => "malformed",
            Self::ReverseFallback => "reverse_fallback",
            Self::ConnTracked => "conn_tracked",
            Self::RewriteError => "rewrite_error",
            Self::Redirected => "redirected",
            Self::RedirectedPeer => "redirected_peer",
            Self::ReplyRedirected => "reply_redirected",
            Self::ReplyToStack => "reply_left_to_stack",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_lists_every_outcome_at_its_index() {
        for (i, o) in Outcome::ALL.iter().enumerate() {
            assert_eq!(*o as usize, i);
        }
    }
}
