//! ARP for `--announce l2` (RFC 826): which frames are requests the node
//! answers for an announced SSH IP, the reply written over the request,
//! and the gratuitous reply a new owner sends. Only Ethernet and IPv4
//! (`htype` 1, `ptype` 0x0800, lengths 6 and 4); anything else is not ours.
//!
//! Addresses are `u32`s in network byte order, as the frame holds them
//! (the crate's byte-order contract), MACs as their six bytes.

use crate::packet::{ETH_HLEN, ETH_P_IP, ETH_TYPE_OFF};

/// EtherType of ARP.
pub const ETH_P_ARP: u16 = 0x0806;
/// The ARP packet for Ethernet and IPv4.
pub const ARP_LEN: usize = 28;
/// An ARP frame without padding: what the programs read and write. A
/// received frame is often padded to 60 bytes; the padding is left as is.
pub const ARP_FRAME_LEN: usize = ETH_HLEN + ARP_LEN;
/// `oper` of a request.
pub const ARP_REQUEST: u16 = 1;
/// `oper` of a reply.
pub const ARP_REPLY: u16 = 2;
/// The broadcast MAC a gratuitous reply goes to.
pub const BROADCAST: [u8; 6] = [0xff; 6];

const HTYPE_ETHERNET: u16 = 1;
const OP_OFF: usize = ETH_HLEN + 6;
const SHA_OFF: usize = ETH_HLEN + 8;
const SPA_OFF: usize = ETH_HLEN + 14;
const THA_OFF: usize = ETH_HLEN + 18;
const TPA_OFF: usize = ETH_HLEN + 24;

/// The fields of an Ethernet/IPv4 ARP frame the rules read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Arp {
    pub op: u16,
    /// Sender hardware and protocol address.
    pub sha: [u8; 6],
    pub spa: u32,
    /// Target protocol address.
    pub tpa: u32,
}

impl Arp {
    /// A request the owner of `tpa` answers: not the sender announcing or
    /// probing its own address (`spa == tpa`), which is news about the
    /// sender, not a question.
    pub const fn asks(&self) -> bool {
        self.op == ARP_REQUEST && self.spa != self.tpa
    }

    /// Whether the frame says that `sha` holds `spa`: any request or
    /// reply with a sender address does (an ARP probe, with sender
    /// 0.0.0.0, says nothing).
    pub const fn claims_sender(&self) -> bool {
        self.spa != 0 && (self.op == ARP_REQUEST || self.op == ARP_REPLY)
    }
}

/// Reads an ARP frame; `None` for any frame that is not Ethernet/IPv4 ARP.
pub fn parse(frame: &[u8; ARP_FRAME_LEN]) -> Option<Arp> {
    let be16 = |at: usize| u16::from_be_bytes([frame[at], frame[at + 1]]);
    let ne32 =
        |at: usize| u32::from_ne_bytes([frame[at], frame[at + 1], frame[at + 2], frame[at + 3]]);
    let header_ok = be16(ETH_TYPE_OFF) == ETH_P_ARP
        && be16(ETH_HLEN) == HTYPE_ETHERNET
        && be16(ETH_HLEN + 2) == ETH_P_IP
        && frame[ETH_HLEN + 4] == 6
        && frame[ETH_HLEN + 5] == 4;
    if !header_ok {
        return None;
    }
    Some(Arp {
        op: be16(OP_OFF),
        sha: mac_at(frame, SHA_OFF),
        spa: ne32(SPA_OFF),
        tpa: ne32(TPA_OFF),
    })
}

/// Rewrites the request in `frame` into the reply from `mac`, which holds
/// the address asked for: back to the asker's MAC and address (RFC 826:
/// swap the sender and target fields, then put ours in as the sender).
/// The caller has checked [`Arp::asks`].
pub fn answer(frame: &mut [u8; ARP_FRAME_LEN], arp: &Arp, mac: [u8; 6]) {
    frame[..6].copy_from_slice(&arp.sha);
    frame[6..12].copy_from_slice(&mac);
    frame[OP_OFF..OP_OFF + 2].copy_from_slice(&ARP_REPLY.to_be_bytes());
    frame[SHA_OFF..SHA_OFF + 6].copy_from_slice(&mac);
    frame[SPA_OFF..SPA_OFF + 4].copy_from_slice(&arp.tpa.to_ne_bytes());
    frame[THA_OFF..THA_OFF + 6].copy_from_slice(&arp.sha);
    frame[TPA_OFF..TPA_OFF + 4].copy_from_slice(&arp.spa.to_ne_bytes());
}

/// A gratuitous ARP reply: `mac` holds `addr`, to everyone on the
/// segment. The target hardware address is the sender's too, which is
/// what makes Linux take a reply as gratuitous (and update its neighbour
/// entry at once, whatever `locktime` says).
pub fn gratuitous(mac: [u8; 6], addr: u32) -> [u8; ARP_FRAME_LEN] {
    let mut frame = [0u8; ARP_FRAME_LEN];
    frame[..6].copy_from_slice(&BROADCAST);
    frame[6..12].copy_from_slice(&mac);
    frame[ETH_TYPE_OFF..ETH_TYPE_OFF + 2].copy_from_slice(&ETH_P_ARP.to_be_bytes());
    frame[ETH_HLEN..ETH_HLEN + 2].copy_from_slice(&HTYPE_ETHERNET.to_be_bytes());
    frame[ETH_HLEN + 2..ETH_HLEN + 4].copy_from_slice(&ETH_P_IP.to_be_bytes());
    frame[ETH_HLEN + 4] = 6;
    frame[ETH_HLEN + 5] = 4;
    frame[OP_OFF..OP_OFF + 2].copy_from_slice(&ARP_REPLY.to_be_bytes());
    frame[SHA_OFF..SHA_OFF + 6].copy_from_slice(&mac);
    frame[SPA_OFF..SPA_OFF + 4].copy_from_slice(&addr.to_ne_bytes());
    frame[THA_OFF..THA_OFF + 6].copy_from_slice(&mac);
    frame[TPA_OFF..TPA_OFF + 4].copy_from_slice(&addr.to_ne_bytes());
    frame
}

/// An ARP probe (RFC 5227) for `addr` from `mac`: a broadcast request
/// with sender address 0.0.0.0, which the holder of `addr` answers and
/// which teaches no neighbour anything about the asker.
pub fn probe(mac: [u8; 6], addr: u32) -> [u8; ARP_FRAME_LEN] {
    let mut frame = gratuitous(mac, addr);
    frame[OP_OFF..OP_OFF + 2].copy_from_slice(&ARP_REQUEST.to_be_bytes());
    frame[SPA_OFF..SPA_OFF + 4].fill(0);
    frame[THA_OFF..THA_OFF + 6].fill(0);
    frame
}

/// Whether `arp` is another machine's answer for `addr`: a reply whose
/// sender holds `addr` and is none of the MACs in `ours`.
pub fn answered_by_other(arp: &Arp, addr: u32, ours: &[[u8; 6]]) -> bool {
    arp.op == ARP_REPLY && arp.spa == addr && !ours.contains(&arp.sha)
}

fn mac_at(frame: &[u8; ARP_FRAME_LEN], at: usize) -> [u8; 6] {
    [
        frame[at],
        frame[at + 1],
        frame[at + 2],
        frame[at + 3],
        frame[at + 4],
        frame[at + 5],
    ]
}

#[cfg(test)]
mod tests;
