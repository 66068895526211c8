//! The vocabulary of `bench progs`: the programs, the data-path layouts,
//! what a program must do with a packet on each, and the frames of one TCP
//! connection of the bench's client.

use std::net::Ipv4Addr;

use ssh_fwd_common::{
    conntrack::{TCP_ACK, TCP_SYN},
    fixtures::Frame,
};

pub const CLIENT: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 2);

const TCP_PSH: u8 = 0x08;
const CLIENT_ISN: u32 = 1_000;
const SERVER_ISN: u32 = 500_000;
const PAYLOAD: usize = 64;

/// The tc programs (the bed attaches in tc mode), by the name both layouts
/// give them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Program {
    Ingress = 0,
    Reply = 1,
    Egress = 2,
}

impl Program {
    pub fn name(self) -> &'static str {
        match self {
            Program::Ingress => "ssh_fwd_ingress_tc",
            Program::Reply => "ssh_fwd_reply_tc",
            Program::Egress => "ssh_fwd_egress_tc",
        }
    }

    /// Where it runs, for the table.
    pub fn label(self) -> &'static str {
        match self {
            Program::Ingress => "ingress tc",
            Program::Reply => "reply tc (pod's interface)",
            Program::Egress => "egress tc",
        }
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
    pub frame: Frame,
    pub expect: Expect,
    /// The skb arrived from outside, on the external interface (its
    /// `ingress_ifindex`); otherwise the test run leaves it 0.
    pub from_outside: bool,
    /// The skb arrived from another node, on the bed's cluster interface.
    pub from_another_node: bool,
    /// The packet goes to the bed's guarded frontend, which only a build
    /// with the guard has: on others the case is shown as "-".
    pub guarded: bool,
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

    /// The same packet, to a frontend with an allowlist and a SYN limit.
    pub fn through_the_guard(self) -> Self {
        Self {
            guarded: true,
            ..self
        }
    }
}

pub const fn effect(verdict: u64, counts: &'static [&'static str]) -> Effect {
    Effect { verdict, counts }
}

/// One TCP connection of the bench's client to a backend, with fixed
/// initial sequence numbers.
#[derive(Clone, Copy)]
pub struct Conn {
    pub client_port: u16,
    pub backend: (Ipv4Addr, u16),
}

impl Conn {
    fn request(&self, tcp_flags: u8, seq: u32, ack: u32, payload: usize) -> Frame {
        Frame {
            src: CLIENT,
            dst: self.backend.0,
            sport: self.client_port,
            dport: self.backend.1,
            ttl: 255,
            tcp_flags,
            seq,
            ack,
            payload: vec![0; payload],
            ..Frame::default()
        }
    }

    fn reply(&self, tcp_flags: u8, seq: u32, ack: u32, payload: usize) -> Frame {
        Frame {
            src: self.backend.0,
            dst: CLIENT,
            sport: self.backend.1,
            dport: self.client_port,
            ttl: 255,
            tcp_flags,
            seq,
            ack,
            payload: vec![0; payload],
            ..Frame::default()
        }
    }

    pub fn syn(&self) -> Frame {
        self.request(TCP_SYN, CLIENT_ISN, 0, 0)
    }

    pub fn syn_ack(&self) -> Frame {
        self.syn_ack_to(CLIENT_ISN)
    }

    /// A SYN with its own ISN: a handshake of its own on the same 4-tuple
    /// (half-open entries are keyed by the client's ISN too).
    pub fn syn_isn(&self, client_isn: u32) -> Frame {
        self.request(TCP_SYN, client_isn, 0, 0)
    }

    /// The server's SYN-ACK to the SYN with ISN `client_isn`.
    pub fn syn_ack_to(&self, client_isn: u32) -> Frame {
        self.reply(TCP_SYN | TCP_ACK, SERVER_ISN, client_isn.wrapping_add(1), 0)
    }

    /// The client's ACK of the server's SYN-ACK.
    pub fn handshake_ack(&self) -> Frame {
        self.request(TCP_ACK, CLIENT_ISN + 1, SERVER_ISN + 1, 0)
    }

    pub fn data(&self) -> Frame {
        self.request(TCP_PSH | TCP_ACK, CLIENT_ISN + 1, SERVER_ISN + 1, PAYLOAD)
    }

    pub fn reply_data(&self) -> Frame {
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

pub fn step(program: Program, frame: Frame, expect: Expect) -> Step {
    Step {
        program,
        frame,
        expect,
        from_outside: false,
        from_another_node: false,
        guarded: false,
    }
}
