//! What the agent writes about itself for `ssh-fwd status`: the values of
//! [`AGENT_STATUS`](super::AGENT_STATUS) and
//! [`LOADED_SETTINGS`](super::LOADED_SETTINGS), never read by the programs.

/// Longest source description kept in [`AgentStatus`], in bytes.
pub const STATUS_SOURCE_LEN: usize = 128;
/// Longest error message kept in [`AgentStatus`], in bytes.
pub const STATUS_ERROR_LEN: usize = 256;

/// Value of [`AGENT_STATUS`](super::AGENT_STATUS). Times are Unix
/// milliseconds (0: never); texts are UTF-8, zero-padded.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AgentStatus {
    /// When the agent last wrote this: an agent that stopped writing has
    /// stopped (it rewrites it every few seconds).
    pub heartbeat_ms: u64,
    pub started_ms: u64,
    pub pid: u64,
    pub last_reconcile_ms: u64,
    pub last_reconcile_micros: u64,
    pub reconciles: u64,
    pub reconcile_errors: u64,
    pub mappings: u64,
    pub last_error_ms: u64,
    /// When the connection sweep last ran, and what it found.
    pub last_sweep_ms: u64,
    /// Established connections the sweep walked (also exact from the
    /// counters at any time).
    pub conns_at_sweep: u64,
    /// Half-open entries the sweep counted (an LRU: only a walk counts it).
    pub half_open_at_sweep: u64,
    /// SYNs no client completed through this node since the agent started,
    /// as of the last sweep (`half_open_churned` in the agent).
    pub half_open_churned: u64,
    /// Where the mappings come from: `file PATH` or `kubernetes ...`.
    pub source: [u8; STATUS_SOURCE_LEN],
    pub last_error: [u8; STATUS_ERROR_LEN],
}

impl AgentStatus {
    pub const EMPTY: Self = Self {
        heartbeat_ms: 0,
        started_ms: 0,
        pid: 0,
        last_reconcile_ms: 0,
        last_reconcile_micros: 0,
        reconciles: 0,
        reconcile_errors: 0,
        mappings: 0,
        last_error_ms: 0,
        last_sweep_ms: 0,
        conns_at_sweep: 0,
        half_open_at_sweep: 0,
        half_open_churned: 0,
        source: [0; STATUS_SOURCE_LEN],
        last_error: [0; STATUS_ERROR_LEN],
    };
}

/// Value of [`LOADED_SETTINGS`](super::LOADED_SETTINGS): `LOADED_*` flags.
/// All zero, what a data path pinned before the map existed shows, is the
/// default of every setting.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LoadedSettings {
    pub flags: u32,
}

/// `--redirect off`: the programs send no translated packet on themselves.
pub const LOADED_NO_REDIRECT: u32 = 1;
/// `--deny-action reset`: a denied segment is answered with a TCP RST.
pub const LOADED_DENY_RESET: u32 = 2;
/// The data path counts every connection it confirms in `SOURCES`, and its
/// agent never writes a count (see `QuotaChange`). An agent that adopts
/// the tables of a data path without it counts their open connections
/// once.
pub const LOADED_QUOTA_BY_KERNEL: u32 = 4;

/// Copies `text` into a zero-padded field, cut at a character boundary.
pub fn put_text(field: &mut [u8], text: &str) {
    let mut end = text.len().min(field.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    field.fill(0);
    field[..end].copy_from_slice(&text.as_bytes()[..end]);
}

/// The text in a zero-padded field (empty if it is not UTF-8).
pub fn get_text(field: &[u8]) -> &str {
    let end = field.iter().position(|b| *b == 0).unwrap_or(field.len());
    core::str::from_utf8(&field[..end]).unwrap_or("")
}

const _: () = assert!(size_of::<AgentStatus>() == 13 * 8 + STATUS_SOURCE_LEN + STATUS_ERROR_LEN);
const _: () = assert!(size_of::<LoadedSettings>() == 4);

#[cfg(feature = "user")]
mod pod {
    use super::*;
    // SAFETY: #[repr(C)], integers and byte arrays only, no implicit padding
    // (checked by the size assertions).
    unsafe impl aya::Pod for AgentStatus {}
    // SAFETY: as above.
    unsafe impl aya::Pod for LoadedSettings {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_texts_round_trip_and_are_cut_at_a_char_boundary() {
        let mut status = AgentStatus::EMPTY;
        put_text(&mut status.source, "file /etc/ssh-fwd/mappings.yaml");
        assert_eq!(get_text(&status.source), "file /etc/ssh-fwd/mappings.yaml");
        put_text(&mut status.source, &"é".repeat(100));
        assert_eq!(get_text(&status.source).len(), STATUS_SOURCE_LEN);
        put_text(&mut status.source, "short");
        assert_eq!(get_text(&status.source), "short", "the old text is cleared");
    }
}
