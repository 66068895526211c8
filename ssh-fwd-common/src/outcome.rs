//! Global outcome counters: one per-CPU `u64` per variant in
//! [`crate::maps::GLOBAL_STATS`], indexed by the discriminant.

/// What the data path did with a packet, or what happened to a tracked
/// connection. The last few are counted by the agent's sweep, not by the
/// kernel programs (see [`Outcome::by_agent`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum Outcome {
    /// Ingress: destination rewritten to a backend.
    Dnat = 0,
    /// Egress or pod interface: source rewritten back to the frontend.
    ReverseNat = 1,
    /// Neither IPv4 nor IPv6 (ARP, VLAN-tagged...): passed untouched.
    PassNotIp = 2,
    /// IP but neither TCP nor an ICMP error: passed untouched.
    PassNotTcp = 3,
    /// A fragment, IPv4 or IPv6 (the first one and atomic ones too for
    /// IPv6): passed untouched (ports are only in the first one).
    PassFragment = 4,
    /// Ingress TCP to an address/port that is not a frontend.
    PassNoFrontend = 5,
    /// Egress TCP from an address/port that is not a backend (including
    /// replies a pod-interface program already rewrote).
    PassNoBackend = 6,
    /// Too short for its headers, or an IHL below 5: passed untouched.
    Malformed = 7,
    /// `--cross-node plain`: a reply from a backend with no tracked
    /// connection got the backend's primary frontend (it may be the wrong
    /// one for a backend behind several frontends).
    ReverseFallback = 8,
    /// A SYN through a frontend: a half-open entry was recorded.
    HalfOpened = 9,
    /// A helper failed while rewriting; the packet was dropped.
    RewriteError = 10,
    /// Ingress, after a DNAT: sent straight out of the interface the route
    /// to the backend uses (FIB lookup + redirect), skipping the node's IP
    /// stack. A DNATed packet not counted here was routed by the stack.
    Redirected = 11,
    /// Ingress: of the [`Outcome::Redirected`], those delivered straight
    /// into the pod's network namespace (`bpf_redirect_peer`).
    RedirectedPeer = 12,
    /// Pod interface: a reply reverse-NATed as it left the pod and sent
    /// straight out of the interface its route uses.
    ReplyRedirected = 13,
    /// Pod interface: a reply of a tracked connection left to the stack
    /// (the route lookup could not settle it, or `--redirect off`); the
    /// egress program rewrites it.
    ReplyToStack = 14,
    /// The server's segment confirmed a claim: the connection is tracked.
    ConnEstablished = 15,
    /// A RST exactly in sequence ended a tracked connection.
    ConnReset = 16,
    /// A RST not exactly in sequence was seen; the connection stays (the
    /// endpoints' TCP ignores it too). Spoofed RSTs show here.
    ResetIgnored = 17,
    /// A confirmed connection replaced the entry of a closed one on its
    /// 4-tuple (or of the same frontend, when a client reused its port).
    ConnReplaced = 18,
    /// A connection the server confirmed found the connection table full:
    /// the server's segment was dropped, and its retransmission tries
    /// again. Counted per try. Raise `--conn-table-size`.
    ConnTableFull = 19,
    /// A packet for a 4-tuple established through another frontend was
    /// dropped: spoofed (an attempt to take over a live connection) or a
    /// client reusing its port while its old connection lives.
    ConflictDropped = 20,
    /// A packet from a backend that belongs to no connection ssh-fwd
    /// forwarded (in-cluster traffic to the pod's port): left untouched.
    ReplyUntracked = 21,
    /// An ICMP error of a forwarded connection was translated (either way).
    IcmpTranslated = 22,
    /// An ICMP error quoting a backend that could not be mapped back to its
    /// frontend was dropped, rather than show the pod's address.
    IcmpDropped = 23,
    /// A SYN leaving for the backend's node carries its frontend (an IPv4
    /// option, or an IPv6 Destination Options header).
    OptionAdded = 24,
    /// A SYN arrived with its frontend from another node: recorded.
    OptionLearned = 25,
    /// A frontend option that does not map to the packet's backend was
    /// ignored (stripped).
    OptionRejected = 26,
    /// The backend refused a handshake (RST to the SYN).
    HalfOpenRefused = 27,
    /// Agent sweep: a connection closed by FINs both ways was removed.
    ConnClosed = 28,
    /// Agent sweep: a connection idle past `--conn-idle-timeout`, or one
    /// side closed and quiet for two minutes, was removed.
    ConnExpired = 29,
    /// Agent sweep of an older data path's table: a handshake that never
    /// completed was removed (half-open entries now go by eviction only).
    HalfOpenExpired = 30,
    /// Agent: a connection through a frontend that was removed or pointed
    /// at another backend was removed.
    ConnPurged = 31,
    /// After an upgrade from a data path that tracked nothing: the server's
    /// ACK of a connection the older one forwarded made it tracked.
    ConnAdopted = 32,
    /// After an upgrade: a reply of a connection the older data path
    /// forwarded got its frontend back without being tracked yet.
    LegacyReply = 33,
    /// A segment that would have created, refreshed, advanced or ended
    /// connection state had a wrong IPv4 or TCP checksum: dropped (the pod
    /// would have dropped it too), the state untouched.
    BadChecksum = 34,
    /// A segment to a frontend arrived with a TTL of 1 or 0, which a router
    /// does not forward: left to the node's stack untranslated (it answers
    /// with ICMP time exceeded), the state untouched.
    TtlExpired = 35,
    /// A segment to a frontend from a source no router forwards (0.0.0.0/8,
    /// loopback, multicast, class E, or the frontend's own address):
    /// dropped.
    MartianSource = 36,
    /// The client's segment for a connection the node does not track yet
    /// (the last ACK of a handshake, usually) was recorded as a claim,
    /// until the server confirms it.
    ConnClaimed = 37,
    /// A handshake's last ACK was held back: its client holds
    /// `--conns-per-source` connections on this node already.
    SourceLimited = 38,
    /// A packet from a pod's address came in by another interface than the
    /// pod's own (another pod spoofing it): dropped.
    SpoofedReply = 39,
    /// A reply from a backend address the agent has not seen on any pod
    /// interface of this node yet: left untouched, no state moved.
    ReplyNoOwner = 40,
    /// A SYN carried a plain frontend option on an interface that is not
    /// only a cluster interface, or any option under `--cross-node plain`:
    /// the option was removed and ignored.
    OptionUntrusted = 41,
    /// A translated SYN leaving for the pod's node had no room left in its
    /// IPv4 header for the frontend option, or had IPv6 extension headers
    /// of its own: dropped (the client's next SYN tries again; clients that
    /// send IP options or extension headers on a SYN are rare).
    OptionNoRoom = 42,
    /// An ICMP error into a pod quoted a sequence number outside the window
    /// of the tracked connection, or a connection the pod's node does not
    /// track: dropped.
    IcmpOutOfWindow = 43,
    /// A claimed connection the server reset right away: the RST got its
    /// frontend back, the claim went.
    ClaimReset = 44,
    /// A segment larger than 64 KiB (BIG TCP: an IPv4 total length of 0)
    /// was translated by its real length.
    BigTcp = 45,
    /// A SYN carried a sealed frontend option whose tag is wrong under this
    /// node's `--cross-node-key` (or this node has no key): removed and
    /// ignored. Nodes with different keys, or a forger.
    OptionForged = 46,
    /// A SYN to a frontend with a source allowlist came from an address
    /// outside it (or, with `--enforce-established`, any client segment of
    /// such a source): dropped before any state was written, or with
    /// `--deny-action reset` answered ([`Outcome::DeniedReset`]).
    Denied = 47,
    /// A SYN to a frontend with a per-source rate (`--syn-rate`) came from
    /// an address whose bucket was empty: dropped before any state was
    /// written.
    SynLimited = 48,
    /// `--deny-action reset`: of the [`Outcome::Denied`], those answered
    /// with a TCP RST from the frontend (the segment itself never reaches
    /// the pod).
    DeniedReset = 49,
    /// `--deny-action reset`: a denied segment that could not be turned
    /// into a RST (a helper failed, or the frame's link layer is not one
    /// the programs can answer on): dropped, as with `drop`. Also counted
    /// as [`Outcome::Denied`].
    ResetFailed = 50,
    /// A record of the connection log found its ring buffer full (the
    /// agent is not draining it, or a flood outpaces it): the record is
    /// lost, the packet goes on.
    EventsLost = 51,
    /// A refused SYN's record was not written: its CPU wrote
    /// `--conn-log-rate` of them this second already, or they fill their
    /// half of the ring (a flood; the other half is kept for connections).
    /// The SYN is counted per mapping all the same.
    EventsThrottled = 52,
    /// `--announce l2`: an ARP request for an SSH IP this node announces
    /// on the interface it came in by was answered (the reply written over
    /// it and sent back out there).
    ArpAnswered = 53,
    /// `--announce l2`: another MAC claimed an SSH IP this node announces
    /// (its gratuitous ARP, or its answer to a request): another node
    /// took it over, or two answer at once. Recorded in `ARP_HEARD`.
    ArpHeard = 54,
    /// `--announce l2`: an ARP request this node should answer could not
    /// be (a VLAN tag the device took off, a helper failed): passed on.
    ArpFailed = 55,
    /// The server's bare ACK of a handshake in progress (its request socket
    /// answering a second SYN of the 4-tuple, a spoofed one or the
    /// client's after a spoofed one) left with the frontend of the SYN it
    /// acknowledges.
    HandshakeAnswered = 56,
    /// A SYN to a frontend whose backend is draining (a pod being deleted
    /// that still serves its open connections): dropped before anything
    /// was written.
    Draining = 57,
    /// IPv6 whose extension headers the programs do not walk to the
    /// transport header: an Authentication Header or ESP (a rewrite would
    /// break them), a Routing header with segments left (the destination
    /// is a waypoint), No Next Header, more than four extension headers
    /// or more than 256 bytes of them. Passed untouched.
    PassIpv6Extensions = 58,
    /// `--announce l2`: a neighbour solicitation for an IPv6 SSH IP this
    /// node announces on the interface it came in by was answered (the
    /// advertisement written over it and sent back out there).
    NdpAnswered = 59,
    /// `--announce l2`: another MAC advertised an IPv6 SSH IP this node
    /// announces. Recorded in `NDP_HEARD`.
    NdpHeard = 60,
    /// `--announce l2`: a solicitation this node should answer could not
    /// be (a VLAN tag the device took off, a helper failed): passed on.
    NdpFailed = 61,
    /// A SYN too long to check (its segment past the bytes the data path
    /// sums: data on a SYN, as TCP Fast Open sends): dropped. It could write
    /// no state, and its answer would leave the node with the pod's own
    /// address.
    SynUnverified = 62,
    /// A packet to an SSH IP that no mapping translated (TCP to a port with
    /// no mapping, UDP or another protocol but ICMP, a fragment; see
    /// `crate::exposure`): dropped, so the SSH IP exposes only its mapped
    /// ports, never the node's own services, whatever addresses the node
    /// holds. Scans of the SSH IP show here.
    UnmappedPort = 63,
    /// A frame to another host's MAC (a switch flooding one it has not
    /// learned, such as a failed holder's after a failover) or to a
    /// broadcast or multicast MAC: not translated, passed untouched (to an
    /// SSH IP, a group-addressed one is dropped as
    /// [`Outcome::UnmappedPort`]).
    PassNotForNode = 64,
}

/// How an operator should read an outcome's counter.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Class {
    /// ssh-fwd rewrote or delivered the packet: its work.
    Forwarded,
    /// Left untouched because it is not ssh-fwd's to handle (other traffic,
    /// a reply another program already rewrote). Normal, and most packets.
    Passed,
    /// The life of tracked connections: opened, established, closed.
    Tracking,
    /// Something went wrong, degraded, or looks like an attack: malformed
    /// packets, failed rewrites, spoofed RSTs and takeovers, a full table.
    Problem,
}

impl Class {
    pub const ALL: [Class; 4] = [Self::Forwarded, Self::Passed, Self::Tracking, Self::Problem];

    pub const fn name(self) -> &'static str {
        match self {
            Self::Forwarded => "forwarded",
            Self::Passed => "passed",
            Self::Tracking => "tracking",
            Self::Problem => "problem",
        }
    }
}

/// The established connections live now, from the counters: every entry
/// the kernel created, less every one removed, by the kernel or the agent.
/// Exact, and free to read (no walk of the table).
pub fn live_connections(count: impl Fn(Outcome) -> u64) -> u64 {
    let created = count(Outcome::ConnEstablished) + count(Outcome::ConnAdopted);
    // A confirmation that replaced an entry is counted as established and
    // as replaced: one entry either way.
    let removed = count(Outcome::ConnReset)
        + count(Outcome::ConnReplaced)
        + count(Outcome::ConnClosed)
        + count(Outcome::ConnExpired)
        + count(Outcome::ConnPurged);
    created.saturating_sub(removed)
}

impl Outcome {
    pub const COUNT: u32 = 65;

    pub const ALL: [Outcome; Self::COUNT as usize] = [
        Self::Dnat,
        Self::ReverseNat,
        Self::PassNotIp,
        Self::PassNotTcp,
        Self::PassFragment,
        Self::PassNoFrontend,
        Self::PassNoBackend,
        Self::Malformed,
        Self::ReverseFallback,
        Self::HalfOpened,
        Self::RewriteError,
        Self::Redirected,
        Self::RedirectedPeer,
        Self::ReplyRedirected,
        Self::ReplyToStack,
        Self::ConnEstablished,
        Self::ConnReset,
        Self::ResetIgnored,
        Self::ConnReplaced,
        Self::ConnTableFull,
        Self::ConflictDropped,
        Self::ReplyUntracked,
        Self::IcmpTranslated,
        Self::IcmpDropped,
        Self::OptionAdded,
        Self::OptionLearned,
        Self::OptionRejected,
        Self::HalfOpenRefused,
        Self::ConnClosed,
        Self::ConnExpired,
        Self::HalfOpenExpired,
        Self::ConnPurged,
        Self::ConnAdopted,
        Self::LegacyReply,
        Self::BadChecksum,
        Self::TtlExpired,
        Self::MartianSource,
        Self::ConnClaimed,
        Self::SourceLimited,
        Self::SpoofedReply,
        Self::ReplyNoOwner,
        Self::OptionUntrusted,
        Self::OptionNoRoom,
        Self::IcmpOutOfWindow,
        Self::ClaimReset,
        Self::BigTcp,
        Self::OptionForged,
        Self::Denied,
        Self::SynLimited,
        Self::DeniedReset,
        Self::ResetFailed,
        Self::EventsLost,
        Self::EventsThrottled,
        Self::ArpAnswered,
        Self::ArpHeard,
        Self::ArpFailed,
        Self::HandshakeAnswered,
        Self::Draining,
        Self::PassIpv6Extensions,
        Self::NdpAnswered,
        Self::NdpHeard,
        Self::NdpFailed,
        Self::SynUnverified,
        Self::UnmappedPort,
        Self::PassNotForNode,
    ];

    /// Counted by the agent's sweep (it adds to CPU 0's slot); the kernel
    /// programs never touch these.
    pub const fn by_agent(self) -> bool {
        matches!(
            self,
            Self::ConnClosed | Self::ConnExpired | Self::HalfOpenExpired | Self::ConnPurged
        )
    }

    /// Which group the counter belongs to.
    pub const fn class(self) -> Class {
        match self {
            Self::Dnat
            | Self::ReverseNat
            | Self::Redirected
            | Self::RedirectedPeer
            | Self::ReplyRedirected
            | Self::ReplyToStack
            | Self::IcmpTranslated
            | Self::OptionAdded
            | Self::LegacyReply
            | Self::BigTcp
            | Self::ArpAnswered
            | Self::NdpAnswered => Class::Forwarded,
            Self::PassNotIp
            | Self::PassNotTcp
            | Self::PassFragment
            | Self::PassIpv6Extensions
            | Self::PassNoFrontend
            | Self::PassNoBackend
            | Self::PassNotForNode
            | Self::ReplyUntracked
            | Self::TtlExpired => Class::Passed,
            Self::HalfOpened
            | Self::ConnEstablished
            | Self::ConnReset
            | Self::ConnReplaced
            | Self::OptionLearned
            | Self::HalfOpenRefused
            | Self::ConnClosed
            | Self::ConnExpired
            | Self::HalfOpenExpired
            | Self::ConnPurged
            | Self::ConnAdopted
            | Self::ConnClaimed
            | Self::ClaimReset
            | Self::HandshakeAnswered
            | Self::Draining => Class::Tracking,
            Self::Malformed
            | Self::ReverseFallback
            | Self::RewriteError
            | Self::ResetIgnored
            | Self::ConnTableFull
            | Self::ConflictDropped
            | Self::IcmpDropped
            | Self::OptionRejected
            | Self::BadChecksum
            | Self::MartianSource
            | Self::SourceLimited
            | Self::SpoofedReply
            | Self::ReplyNoOwner
            | Self::OptionUntrusted
            | Self::OptionNoRoom
            | Self::IcmpOutOfWindow
            | Self::OptionForged
            | Self::Denied
            | Self::SynLimited
            | Self::DeniedReset
            | Self::ResetFailed
            | Self::EventsLost
            | Self::EventsThrottled
            | Self::ArpHeard
            | Self::ArpFailed
            | Self::NdpHeard
            | Self::NdpFailed
            | Self::SynUnverified
            | Self::UnmappedPort => Class::Problem,
        }
    }

    /// Stable snake_case name for logs, `ssh-fwd list` and metrics.
    pub const fn name(self) -> &'static str {
        match self {
            Self::Dnat => "dnat",
            Self::ReverseNat => "reverse_nat",
            Self::PassNotIp => "not_ip",
            Self::PassNotTcp => "not_tcp",
            Self::PassFragment => "fragment",
            Self::PassNoFrontend => "not_to_a_frontend",
            Self::PassNoBackend => "not_from_a_backend",
            Self::Malformed => "malformed",
            Self::ReverseFallback => "reverse_fallback",
            Self::HalfOpened => "half_opened",
            Self::RewriteError => "rewrite_error",
            Self::Redirected => "redirected",
            Self::RedirectedPeer => "redirected_peer",
            Self::ReplyRedirected => "reply_redirected",
            Self::ReplyToStack => "reply_left_to_stack",
            Self::ConnEstablished => "conn_established",
            Self::ConnReset => "conn_reset",
            Self::ResetIgnored => "reset_ignored",
            Self::ConnReplaced => "conn_replaced",
            Self::ConnTableFull => "conn_table_full",
            Self::ConflictDropped => "conflict_dropped",
            Self::ReplyUntracked => "reply_untracked",
            Self::IcmpTranslated => "icmp_translated",
            Self::IcmpDropped => "icmp_dropped",
            Self::OptionAdded => "frontend_option_added",
            Self::OptionLearned => "frontend_option_learned",
            Self::OptionRejected => "frontend_option_rejected",
            Self::HalfOpenRefused => "half_open_refused",
            Self::ConnClosed => "conn_closed",
            Self::ConnExpired => "conn_expired",
            Self::HalfOpenExpired => "half_open_expired",
            Self::ConnPurged => "conn_purged",
            Self::ConnAdopted => "conn_adopted",
            Self::LegacyReply => "legacy_reply",
            Self::BadChecksum => "bad_checksum",
            Self::TtlExpired => "ttl_expired",
            Self::MartianSource => "martian_source",
            Self::ConnClaimed => "conn_claimed",
            Self::SourceLimited => "source_limited",
            Self::SpoofedReply => "spoofed_reply",
            Self::ReplyNoOwner => "reply_no_owner",
            Self::OptionUntrusted => "frontend_option_untrusted",
            Self::OptionNoRoom => "frontend_option_no_room",
            Self::IcmpOutOfWindow => "icmp_out_of_window",
            Self::ClaimReset => "claim_reset",
            Self::BigTcp => "big_tcp",
            Self::OptionForged => "frontend_option_forged",
            Self::Denied => "denied",
            Self::SynLimited => "syn_limited",
            Self::Draining => "draining",
            Self::DeniedReset => "denied_reset",
            Self::ResetFailed => "reset_failed",
            Self::EventsLost => "events_lost",
            Self::EventsThrottled => "events_throttled",
            Self::ArpAnswered => "arp_answered",
            Self::ArpHeard => "arp_heard",
            Self::ArpFailed => "arp_failed",
            Self::HandshakeAnswered => "handshake_answered",
            Self::PassIpv6Extensions => "ipv6_extensions",
            Self::NdpAnswered => "ndp_answered",
            Self::NdpHeard => "ndp_heard",
            Self::NdpFailed => "ndp_failed",
            Self::SynUnverified => "syn_unverified",
            Self::UnmappedPort => "unmapped_port",
            Self::PassNotForNode => "not_for_node",
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
