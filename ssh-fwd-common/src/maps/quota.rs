//! A change to what one client holds in [`SOURCES`](super::SOURCES) or
//! [`SOURCES6`](super::SOURCES6), as the agent asks the kernel to make it:
//! the frame it runs the never-attached program [`PROG_QUOTA`] on, with
//! `BPF_PROG_TEST_RUN`. The programs count up and down at any moment with
//! atomic adds; a count the agent wrote from user space would undo what
//! they counted between its read and its write, so only the kernel writes
//! counts, and the agent's part is an add like theirs.

/// The program that applies a [`QuotaChange`].
pub const PROG_QUOTA: &str = "ssh_fwd_quota";

/// One client's count, changed by `delta`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QuotaChange {
    /// The client's key in its table: an IPv4 address as `SOURCES` keys
    /// it (in the low 32 bits), or an IPv6 /64 as `SOURCES6` does.
    pub source: u64,
    /// Added, wrapping (`n.wrapping_neg()` takes `n` away). A change that
    /// takes away from a client with no entry does nothing.
    pub delta: u64,
    /// [`QuotaChange::V4`] or [`QuotaChange::V6`].
    pub family: u32,
    pub _pad: u32,
}

impl QuotaChange {
    /// The change is to `SOURCES`.
    pub const V4: u32 = 4;
    /// The change is to `SOURCES6`.
    pub const V6: u32 = 6;
    /// Where each field is in the frame.
    pub const SOURCE_AT: usize = 0;
    pub const DELTA_AT: usize = 8;
    pub const FAMILY_AT: usize = 16;
    /// The frame's length: more than an Ethernet header, the least a test
    /// run of an XDP program takes.
    pub const LEN: usize = 24;

    /// The frame, in this machine's byte order (the kernel's).
    pub fn to_frame(&self) -> [u8; Self::LEN] {
        let mut frame = [0; Self::LEN];
        frame[Self::SOURCE_AT..][..8].copy_from_slice(&self.source.to_ne_bytes());
        frame[Self::DELTA_AT..][..8].copy_from_slice(&self.delta.to_ne_bytes());
        frame[Self::FAMILY_AT..][..4].copy_from_slice(&self.family.to_ne_bytes());
        frame
    }
}

const _: () = {
    assert!(core::mem::offset_of!(QuotaChange, source) == QuotaChange::SOURCE_AT);
    assert!(core::mem::offset_of!(QuotaChange, delta) == QuotaChange::DELTA_AT);
    assert!(core::mem::offset_of!(QuotaChange, family) == QuotaChange::FAMILY_AT);
    assert!(size_of::<QuotaChange>() == QuotaChange::LEN);
};
