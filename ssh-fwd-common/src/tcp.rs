//! What the data path reads of a TCP segment: its flags, sequence numbers
//! and payload length, as the parser hands them to the connection
//! tracker.

pub const TCP_FIN: u8 = 0x01;
pub const TCP_SYN: u8 = 0x02;
pub const TCP_RST: u8 = 0x04;
pub const TCP_ACK: u8 = 0x10;
pub const TCP_URG: u8 = 0x20;

/// What the data path reads of a TCP segment (sequence numbers host order).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Segment {
    pub flags: u8,
    pub seq: u32,
    pub ack: u32,
    /// Payload bytes (IP total length minus both headers).
    pub payload: u32,
}

impl Segment {
    /// `flag` is set.
    pub const fn has(&self, flag: u8) -> bool {
        self.flags & flag != 0
    }

    /// A connection request: SYN without ACK.
    pub const fn is_syn(&self) -> bool {
        self.flags & (TCP_SYN | TCP_ACK) == TCP_SYN
    }

    /// URG is set: the urgent pointer is read.
    pub const fn is_urgent(&self) -> bool {
        self.has(TCP_URG)
    }

    /// The sequence number after this segment: payload, SYN and FIN each
    /// take sequence space.
    pub const fn end(&self) -> u32 {
        let mut end = self.seq.wrapping_add(self.payload);
        if self.has(TCP_SYN) {
            end = end.wrapping_add(1);
        }
        if self.has(TCP_FIN) {
            end = end.wrapping_add(1);
        }
        end
    }
}
