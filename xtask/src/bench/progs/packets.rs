//! The vocabulary of `bench progs`: the programs, the data-path layouts
//! and features of a build, what a program must do with a packet on each,
//! and the frames of one TCP connection of the bench's client, in either
//! family.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use ssh_fwd_common::{
    conntrack::{TCP_ACK, TCP_SYN},
    fixtures::Frame,
    fixtures6::Frame6,
    ipv6::ETH_P_IPV6,
};

pub const CLIENT: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 2);
/// The client's IPv6 address in the bed (`ssh_fwd_tests::topology::CLIENT_IP6`).
pub const CLIENT6: Ipv6Addr = Ipv6Addr::new(0xfd00, 2, 0, 0, 0, 0, 0, 2);

const TCP_PSH: u8 = 0x08;
const CLIENT_ISN: u32 = 1_000;
const SERVER_ISN: u32 = 500_000;
const PAYLOAD: usize = 64;

/// The packet programs, by the name every layout gives them: the tc ones
/// (the bed's agent attaches in tc mode last), and XDP ingress (pinned
/// from a run of the agent in XDP mode before that, on the same maps).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Program {
    Ingress = 0,
    Reply = 1,
    Egress = 2,
    IngressXdp = 3,
}

impl Program {
    pub fn name(self) -> &'static str {
        match self {
            Program::Ingress => "ssh_fwd_ingress_tc",
            Program::Reply => "ssh_fwd_reply_tc",
            Program::Egress => "ssh_fwd_egress_tc",
            Program::IngressXdp => "ssh_fwd_ingress_xdp",
        }
    }

    /// Where it runs, for the table.
    pub fn label(self) -> &'static str {
        match self {
            Program::Ingress => "ingress tc",
            Program::Reply => "reply tc (pod's interface)",
            Program::Egress => "egress tc",
            Program::IngressXdp => "ingress XDP",
        }
    }

    pub fn is_xdp(self) -> bool {
        self == Program::IngressXdp
    }
}

/// The data path a build has: by the pinned layout it writes
/// (`<bpffs>/v<N>`), v3 is ssh-fwd before connection tracking, v4 with
/// it; a v4 with a `CLAIMS` table tracks a connection once its server
/// confirms it, not at the client's last ACK.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    V3,
    V4,
    V4Confirmed,
}

/// What a build has beside its layout, which a step may need: a build
/// without it does something else with the packet (or has no program to
/// run it), so its side of the case is skipped and says why.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Features {
    /// The guard (allowlists and the SYN limit), and the bed a guarded
    /// frontend.
    pub guard: bool,
    /// IPv6 mappings (`FRONTENDS6`), and the bed an IPv6 frontend.
    pub ipv6: bool,
    /// An IPv6 frontend carried across nodes in a Destination Options
    /// header (3f04f10): learned from a SYN, and added to a translated one.
    pub cross_node6: bool,
    /// An XDP ingress program the bench could pin.
    pub xdp: bool,
}

impl Features {
    /// Why a build with these features cannot run a step that `needs`
    /// those; `None`: it can.
    pub fn lacking(&self, needs: &Features) -> Option<&'static str> {
        if needs.guard && !self.guard {
            Some("no guard: no allowlists, no SYN limit")
        } else if needs.ipv6 && !self.ipv6 {
            Some("no IPv6 mappings")
        } else if needs.cross_node6 && !self.cross_node6 {
            Some("does not carry an IPv6 frontend across nodes")
        } else if needs.xdp && !self.xdp {
            Some("no XDP ingress program pinned")
        } else {
            None
        }
    }
}

impl std::fmt::Display for Features {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let yes = |b: bool| if b { "yes" } else { "no" };
        write!(
            f,
            "guard {}, IPv6 {}, IPv6 frontend across nodes {}, XDP {}",
            yes(self.guard),
            yes(self.ipv6),
            yes(self.cross_node6),
            yes(self.xdp)
        )
    }
}

/// What a program must do with a packet.
#[derive(Clone, Copy, Debug)]
pub struct Effect {
    pub verdict: u64,
    /// Outcome counters that grow by one per iteration.
    pub counts: &'static [&'static str],
}

/// The effect on each layout; `None`: the case does not exist there (the
/// build does something else with the packet), shown as "-".
#[derive(Clone, Copy, Debug)]
pub struct Expect {
    pub v3: Option<Effect>,
    pub v4: Option<Effect>,
    pub confirmed: Option<Effect>,
}

impl Expect {
    pub const fn both(effect: Effect) -> Self {
        Self {
            v3: Some(effect),
            v4: Some(effect),
            confirmed: Some(effect),
        }
    }

    /// `v3` before connection tracking, `v4` with it (whichever way).
    pub const fn tracking(v3: Option<Effect>, v4: Option<Effect>) -> Self {
        Self {
            v3,
            v4,
            confirmed: v4,
        }
    }

    /// An IPv6 packet's effect: only builds that track connections as
    /// their server confirms them have IPv6.
    pub const fn ipv6(effect: Effect) -> Self {
        Self {
            v3: None,
            v4: None,
            confirmed: Some(effect),
        }
    }

    pub fn on(&self, layout: Layout) -> Option<Effect> {
        match layout {
            Layout::V3 => self.v3,
            Layout::V4 => self.v4,
            Layout::V4Confirmed => self.confirmed,
        }
    }
}

/// One packet through one program.
#[derive(Clone, Debug)]
pub struct Step {
    pub program: Program,
    /// The frame's bytes.
    pub frame: Vec<u8>,
    pub expect: Expect,
    /// The skb arrived from outside, on the external interface (its
    /// `ingress_ifindex`); otherwise the test run leaves it 0.
    pub from_outside: bool,
    /// The packet arrived from another node, on the bed's cluster
    /// interface.
    pub from_another_node: bool,
    /// It runs with the cluster's key unset: a node with a key believes
    /// no plain frontend option.
    pub keyless: bool,
    /// What the build must have for it (an IPv6 frame needs IPv6, a step
    /// of the XDP program needs one); on others the case is skipped.
    pub needs: Features,
}

impl Step {
    /// The same packet, as one that came in on the external interface.
    pub fn arriving_from_outside(self) -> Self {
        Self {
            from_outside: true,
            ..self
        }
    }

    /// The same packet, as one another node sent over the cluster
    /// interface.
    pub fn arriving_from_another_node(self) -> Self {
        Self {
            from_another_node: true,
            ..self
        }
    }

    /// The same packet, on a node without the cluster's key.
    pub fn on_a_node_without_a_key(self) -> Self {
        Self {
            keyless: true,
            ..self
        }
    }

    /// The same packet, to a frontend with an allowlist and a SYN limit.
    pub fn through_the_guard(self) -> Self {
        Self {
            needs: Features {
                guard: true,
                ..self.needs
            },
            ..self
        }
    }

    /// The same packet, which only a build that carries an IPv6 frontend
    /// across nodes treats as the case says.
    pub fn across_nodes6(self) -> Self {
        Self {
            needs: Features {
                cross_node6: true,
                ..self.needs
            },
            ..self
        }
    }
}

/// A frame as a test run takes it.
pub trait Wire {
    fn wire(&self) -> Vec<u8>;
}

impl Wire for Frame {
    fn wire(&self) -> Vec<u8> {
        self.build()
    }
}

impl Wire for Frame6 {
    fn wire(&self) -> Vec<u8> {
        self.build()
    }
}

/// Bytes made from a built frame (a host reference's output).
impl Wire for Vec<u8> {
    fn wire(&self) -> Vec<u8> {
        self.clone()
    }
}

pub const fn effect(verdict: u64, counts: &'static [&'static str]) -> Effect {
    Effect { verdict, counts }
}

/// An address family of the bench's connections: its client's address,
/// and the frame of a TCP segment between two endpoints.
pub trait BenchFamily: Copy + Into<IpAddr> {
    type Frame: Wire + Clone;
    const CLIENT: Self;
    /// A segment of `payload` zero bytes with a TTL (hop limit) of 255:
    /// a test run of 200 iterations through a redirect decrements it on
    /// each.
    fn segment(
        from: (Self, u16),
        to: (Self, u16),
        tcp_flags: u8,
        seq: u32,
        ack: u32,
        payload: usize,
    ) -> Self::Frame;
}

impl BenchFamily for Ipv4Addr {
    type Frame = Frame;
    const CLIENT: Self = CLIENT;

    fn segment(
        from: (Self, u16),
        to: (Self, u16),
        tcp_flags: u8,
        seq: u32,
        ack: u32,
        payload: usize,
    ) -> Frame {
        Frame {
            src: from.0,
            dst: to.0,
            sport: from.1,
            dport: to.1,
            ttl: 255,
            tcp_flags,
            seq,
            ack,
            payload: vec![0; payload],
            ..Frame::default()
        }
    }
}

impl BenchFamily for Ipv6Addr {
    type Frame = Frame6;
    const CLIENT: Self = CLIENT6;

    fn segment(
        from: (Self, u16),
        to: (Self, u16),
        tcp_flags: u8,
        seq: u32,
        ack: u32,
        payload: usize,
    ) -> Frame6 {
        Frame6 {
            src: from.0,
            dst: to.0,
            sport: from.1,
            dport: to.1,
            hop_limit: 255,
            tcp_flags,
            seq,
            ack,
            payload: vec![0; payload],
            ..Frame6::default()
        }
    }
}

/// One TCP connection of the bench's client to a backend, with fixed
/// initial sequence numbers.
#[derive(Clone, Copy)]
pub struct Conn<A: BenchFamily = Ipv4Addr> {
    pub client_port: u16,
    pub backend: (A, u16),
}

impl<A: BenchFamily> Conn<A> {
    fn request(&self, tcp_flags: u8, seq: u32, ack: u32, payload: usize) -> A::Frame {
        let client = (A::CLIENT, self.client_port);
        A::segment(client, self.backend, tcp_flags, seq, ack, payload)
    }

    fn reply(&self, tcp_flags: u8, seq: u32, ack: u32, payload: usize) -> A::Frame {
        let client = (A::CLIENT, self.client_port);
        A::segment(self.backend, client, tcp_flags, seq, ack, payload)
    }

    /// The client's socket address, as `ssh-fwd list conns` shows it.
    pub fn client(&self) -> SocketAddr {
        SocketAddr::new(A::CLIENT.into(), self.client_port)
    }

    /// The backend's socket address.
    pub fn backend(&self) -> SocketAddr {
        SocketAddr::new(self.backend.0.into(), self.backend.1)
    }

    pub fn syn(&self) -> A::Frame {
        self.request(TCP_SYN, CLIENT_ISN, 0, 0)
    }

    pub fn syn_ack(&self) -> A::Frame {
        self.syn_ack_to(CLIENT_ISN)
    }

    /// A SYN with its own ISN: a handshake of its own on the same 4-tuple
    /// (half-open entries are keyed by the client's ISN too).
    pub fn syn_isn(&self, client_isn: u32) -> A::Frame {
        self.request(TCP_SYN, client_isn, 0, 0)
    }

    /// The server's SYN-ACK to the SYN with ISN `client_isn`.
    pub fn syn_ack_to(&self, client_isn: u32) -> A::Frame {
        self.reply(TCP_SYN | TCP_ACK, SERVER_ISN, client_isn.wrapping_add(1), 0)
    }

    /// The client's ACK of the server's SYN-ACK.
    pub fn handshake_ack(&self) -> A::Frame {
        self.request(TCP_ACK, CLIENT_ISN + 1, SERVER_ISN + 1, 0)
    }

    pub fn data(&self) -> A::Frame {
        self.request(TCP_PSH | TCP_ACK, CLIENT_ISN + 1, SERVER_ISN + 1, PAYLOAD)
    }

    pub fn reply_data(&self) -> A::Frame {
        self.reply(TCP_PSH | TCP_ACK, SERVER_ISN + 1, CLIENT_ISN + 1, PAYLOAD)
    }

    /// SYN and SYN-ACK: the handshake up to the client's last ACK.
    pub fn opening(&self, syn: Expect, syn_ack: Expect) -> Vec<Step> {
        vec![
            step(Program::Ingress, self.syn(), syn),
            step(Program::Reply, self.syn_ack(), syn_ack),
        ]
    }

    /// The whole handshake.
    pub fn handshake(&self, syn: Expect, syn_ack: Expect, last_ack: Expect) -> Vec<Step> {
        let mut steps = self.opening(syn, syn_ack);
        steps.push(step(Program::Ingress, self.handshake_ack(), last_ack));
        steps
    }
}

/// `frame` through `program`: an IPv6 frame needs a build with IPv6, the
/// XDP program a build whose XDP program was pinned.
pub fn step(program: Program, frame: impl Wire, expect: Expect) -> Step {
    let frame = frame.wire();
    let needs = Features {
        ipv6: frame.get(12..14) == Some(&ETH_P_IPV6.to_be_bytes()[..]),
        xdp: program.is_xdp(),
        ..Features::default()
    };
    Step {
        program,
        frame,
        expect,
        from_outside: false,
        from_another_node: false,
        keyless: false,
        needs,
    }
}
