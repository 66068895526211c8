//! `ssh-fwd list mappings`: each mapping, its guard, its counters and
//! its connections' activity.

use std::{collections::BTreeMap, net::SocketAddr};

use serde::Serialize;

use super::column;
use crate::{
    datapath::{conntrack::activity::Activity, maps::Maps, stats},
    mapping::printable,
};

#[derive(Debug, Serialize)]
pub struct MappingRow {
    pub name: String,
    pub frontend: String,
    pub backend: String,
    /// The backend is also behind another frontend.
    pub shared_backend: bool,
    pub packets_in: u64,
    pub bytes_in: u64,
    pub packets_out: u64,
    pub bytes_out: u64,
    /// Connections the server confirmed on this node.
    pub conns_opened: u64,
    /// Handshakes held back: their client held `--conns-per-source`.
    pub source_limited: u64,
    /// SYNs from sources outside the allowlist.
    pub denied: u64,
    /// SYNs over their source's rate.
    pub syn_limited: u64,
    /// Connections open now, counted on the pod's node.
    pub open_connections: u64,
    /// When a tracked connection last carried a packet (RFC 3339, UTC);
    /// absent when none is tracked (closed ones leave the table seconds
    /// after they close, idle ones after `--conn-idle-timeout`).
    pub last_activity: Option<String>,
    /// The source ranges that may connect; absent: every source.
    pub allow: Option<Vec<String>>,
    /// Whether the list applies to open connections too.
    pub enforce_established: bool,
    /// The backend is draining: open connections go on, new ones are
    /// refused.
    pub draining: bool,
    /// The per-source rate of new connections, `N/s`; absent: no limit.
    pub syn_rate: Option<String>,
    pub syn_burst: Option<u32>,
}

pub fn mappings(
    maps: &Maps,
    activity: &BTreeMap<SocketAddr, Activity>,
) -> anyhow::Result<Vec<MappingRow>> {
    Ok(stats::mappings(maps)?
        .into_iter()
        .map(|m| MappingRow {
            open_connections: activity.get(&m.frontend).map_or(0, |a| a.open),
            last_activity: activity.get(&m.frontend).and_then(|a| a.last).map(rfc3339),
            // Names are written by whoever wrote the source: never raw to
            // a terminal.
            name: printable(&m.name),
            frontend: m.frontend.to_string(),
            backend: m.backend.to_string(),
            shared_backend: m.shared_backend,
            packets_in: m.counters.packets_in,
            bytes_in: m.counters.bytes_in,
            packets_out: m.counters.packets_out,
            bytes_out: m.counters.bytes_out,
            conns_opened: m.conns.opened,
            source_limited: m.conns.source_limited,
            denied: m.conns.denied,
            syn_limited: m.conns.syn_limited,
            allow: (m.guard.ranges()).map(|r| r.iter().map(ToString::to_string).collect()),
            enforce_established: m.guard.enforce_established,
            draining: m.guard.draining,
            syn_rate: m.guard.rate().map(|r| format!("{}/s", r.rate())),
            syn_burst: m.guard.rate().map(|r| r.burst()),
        })
        .collect())
}

/// `t` as RFC 3339, UTC, to the second.
fn rfc3339(t: std::time::SystemTime) -> String {
    humantime::format_rfc3339_seconds(t).to_string()
}

/// A mapping's guard in one cell: `allow 192.0.2.0/24 (all segments),
/// 20/s burst 40`, or `-` for none.
fn guard_cell(r: &MappingRow) -> String {
    let mut parts = Vec::new();
    if let Some(ranges) = &r.allow {
        let list = if ranges.is_empty() {
            "nobody".to_owned()
        } else {
            ranges.join(",")
        };
        let all = if r.enforce_established {
            " (all segments)"
        } else {
            ""
        };
        parts.push(format!("allow {list}{all}"));
    }
    if let (Some(rate), Some(burst)) = (&r.syn_rate, r.syn_burst) {
        parts.push(format!("{rate} burst {burst}"));
    }
    if r.draining {
        parts.push("draining: no new connections".to_owned());
    }
    if parts.is_empty() {
        "-".to_owned()
    } else {
        parts.join(", ")
    }
}

pub fn mappings_table(rows: &Vec<MappingRow>) -> String {
    let width = rows.iter().map(|r| r.name.len()).max().unwrap_or(0).max(4);
    // IPv6 endpoints are longer: the columns widen to the longest.
    let fw = column(rows.iter().map(|r| r.frontend.len()), 21);
    let bw = column(rows.iter().map(|r| r.backend.len() + 1), 22);
    let mut out = format!(
        "{:<width$}  {:<fw$}  {:<bw$}  {:>10}  {:>12}  {:>10}  {:>12}  {:>8}  {:>7}  {:>7}  {:>7}  \
         {:>4}  {:<20}  GUARD\n",
        "NAME",
        "FRONTEND",
        "BACKEND",
        "PKTS IN",
        "BYTES IN",
        "PKTS OUT",
        "BYTES OUT",
        "CONNS",
        "LIMITED",
        "DENIED",
        "SYN-LIM",
        "OPEN",
        "LAST ACTIVITY"
    );
    for r in rows {
        let name = printable(&r.name);
        let backend = if r.shared_backend {
            format!("{}*", r.backend)
        } else {
            r.backend.clone()
        };
        out.push_str(&format!(
            "{:<width$}  {:<fw$}  {:<bw$}  {:>10}  {:>12}  {:>10}  {:>12}  {:>8}  {:>7}  {:>7}  {:>7}  \
             {:>4}  {:<20}  {}\n",
            name,
            r.frontend,
            backend,
            r.packets_in,
            r.bytes_in,
            r.packets_out,
            r.bytes_out,
            r.conns_opened,
            r.source_limited,
            r.denied,
            r.syn_limited,
            r.open_connections,
            r.last_activity.as_deref().unwrap_or("-"),
            guard_cell(r),
        ));
    }
    if rows.iter().any(|r| r.shared_backend) {
        out.push_str("* backend behind several frontends: replies follow the tracked connection\n");
    }
    if rows.iter().any(|r| r.denied > 0 || r.syn_limited > 0) {
        out.push_str(
            "DENIED: SYNs from sources outside the allowlist; SYN-LIM: SYNs over their source's \
             rate (both dropped on this node)\n",
        );
    }
    if rows.iter().any(|r| r.source_limited > 0) {
        out.push_str(
            "LIMITED: handshakes held back because their client held --conns-per-source \
             connections\n",
        );
    }
    if rows.is_empty() {
        out.push_str("(no mappings installed)\n");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mappings_guard_shows_in_one_cell() {
        let row = |allow: Option<&[&str]>, all, rate: Option<(&str, u32)>| MappingRow {
            name: String::new(),
            frontend: String::new(),
            backend: String::new(),
            shared_backend: false,
            packets_in: 0,
            bytes_in: 0,
            packets_out: 0,
            bytes_out: 0,
            conns_opened: 0,
            source_limited: 0,
            denied: 0,
            syn_limited: 0,
            open_connections: 0,
            last_activity: None,
            allow: allow.map(|a| a.iter().map(ToString::to_string).collect()),
            enforce_established: all,
            draining: false,
            syn_rate: rate.map(|(r, _)| r.to_owned()),
            syn_burst: rate.map(|(_, b)| b),
        };
        assert_eq!(guard_cell(&row(None, false, None)), "-");
        assert_eq!(
            guard_cell(&row(
                Some(&["10.0.0.0/8", "192.0.2.0/24"]),
                false,
                Some(("20/s", 40))
            )),
            "allow 10.0.0.0/8,192.0.2.0/24, 20/s burst 40"
        );
        assert_eq!(
            guard_cell(&row(Some(&[]), true, None)),
            "allow nobody (all segments)"
        );
        let draining = MappingRow {
            draining: true,
            ..row(None, false, None)
        };
        assert_eq!(guard_cell(&draining), "draining: no new connections");
    }

    #[test]
    fn a_name_with_control_characters_is_printed_escaped_never_raw() {
        let row = MappingRow {
            name: "evil\u{1b}]0;owned\u{7}\u{1b}[2J".into(),
            frontend: "198.18.0.10:8022".into(),
            backend: "10.244.1.5:22".into(),
            shared_backend: false,
            packets_in: 0,
            bytes_in: 0,
            packets_out: 0,
            bytes_out: 0,
            conns_opened: 0,
            source_limited: 0,
            denied: 0,
            syn_limited: 0,
            open_connections: 0,
            last_activity: None,
            allow: None,
            enforce_established: false,
            draining: false,
            syn_rate: None,
            syn_burst: None,
        };
        let table = mappings_table(&vec![row]);
        assert!(
            !table.chars().any(|c| c.is_control() && c != '\n'),
            "{table:?}"
        );
        assert!(
            table.contains("evil\\u{1b}]0;owned\\u{7}\\u{1b}[2J"),
            "{table}"
        );
    }
}
