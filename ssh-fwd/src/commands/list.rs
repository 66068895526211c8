//! `ssh-fwd list mappings|conns|hooks|counters`: what is installed, read
//! from the pinned maps and links, as a table, JSON or YAML.

use std::{collections::BTreeMap, net::SocketAddr};

use serde::Serialize;
use ssh_fwd_common::{
    maps::ConnKey,
    outcome::{Class, Outcome},
};

use super::output::{Output, print};
use crate::{
    datapath::{
        conntrack::{
            ConnTables, Entry,
            activity::{Activity, Clock},
            clock_ns, half_open_churned,
        },
        family::MapFamily,
        maps::Maps,
        pins::{BpffsArg, PinLayout},
        stats::{self, Hook},
    },
    mapping::printable,
};

#[derive(Debug, clap::Args)]
pub struct ListArgs {
    /// What to list: `mappings` (frontend, backend and per-mapping packet
    /// and byte counters), `conns` (tracked connections: established,
    /// closing and half-open), `hooks` (the programs attached, and where),
    /// `counters` (packets and connection events by outcome, grouped:
    /// forwarded, passed through as normal, connection tracking, problems).
    #[arg(value_enum, default_value_t = What::Mappings)]
    pub what: What,

    #[command(flatten)]
    pub bpffs: BpffsArg,

    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value_t = Output::Table)]
    pub output: Output,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum What {
    Mappings,
    Conns,
    Hooks,
    Counters,
}

pub fn run(args: ListArgs) -> anyhow::Result<()> {
    let layout = PinLayout::new(&args.bpffs.bpffs);
    match args.what {
        What::Mappings => {
            let tallies = ConnTables::open_pinned(&layout)?.tallies();
            let activity = Clock::now().activity(&tallies);
            let rows = mappings(&Maps::open_pinned(&layout)?, &activity)?;
            print(args.output, &rows, mappings_table)
        }
        What::Conns => {
            let tables = ConnTables::open_pinned(&layout)?;
            let rows = conns(&tables);
            let summary = conns_summary(&tables, &Maps::open_pinned(&layout)?)?;
            print(args.output, &ConnsListing { rows, summary }, conns_table)
        }
        What::Hooks => print(args.output, &stats::hooks(&layout), hooks_table),
        What::Counters => {
            let rows = counters(&Maps::open_pinned(&layout)?)?;
            print(args.output, &rows, counters_table)
        }
    }
}

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

fn mappings_table(rows: &Vec<MappingRow>) -> String {
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

#[derive(Clone, Debug, Serialize)]
pub struct ConnRow {
    /// `established`, `closing` (both sides sent FIN), `half-open` (a SYN
    /// the server has not answered) or `claimed` (the client's ACK, not
    /// confirmed by the server yet).
    pub state: &'static str,
    pub client: String,
    pub frontend: String,
    pub backend: String,
    /// Seconds since the last packet.
    pub idle_seconds: u64,
}

/// Every connection, and the SYNs and claims no connection has come of
/// yet (those of a tracked connection wait in their tables to be evicted,
/// and would only repeat its row).
pub fn conns(tables: &ConnTables) -> Vec<ConnRow> {
    let now = clock_ns();
    let mut rows = conn_rows(tables.entries(), now);
    rows.extend(conn_rows(tables.entries6(), now));
    rows.sort_by(|a, b| (&a.frontend, &a.client).cmp(&(&b.frontend, &b.client)));
    rows
}

/// The rows of one family's entries, as [`conns`] lists them.
fn conn_rows<A: MapFamily>(entries: Vec<Entry<A>>, now: u64) -> Vec<ConnRow> {
    let tracked: std::collections::BTreeSet<ConnKey<A>> = entries
        .iter()
        .filter_map(|e| match e {
            Entry::Established(k, _) => Some(*k),
            _ => None,
        })
        .collect();
    entries
        .into_iter()
        .filter(|entry| match entry {
            Entry::Established(..) => true,
            Entry::HalfOpen(k, _) => !tracked.contains(k),
            Entry::Claimed(k, _) => !tracked.contains(&k.conn),
        })
        .map(|entry| {
            let (key, frontend, last_seen) = match entry {
                Entry::Established(k, c) => (k, c.frontend, c.last_seen_ns),
                Entry::HalfOpen(k, h) => (k, h.frontend, h.last_seen_ns),
                Entry::Claimed(k, c) => (k.conn, c.frontend, c.seen_ns),
            };
            ConnRow {
                state: entry.state(),
                client: A::socket(&key.client()).to_string(),
                frontend: A::socket(&frontend).to_string(),
                backend: A::socket(&key.backend()).to_string(),
                idle_seconds: now.saturating_sub(last_seen) / 1_000_000_000,
            }
        })
        .collect()
}

/// `list conns`: the rows (all that JSON and YAML show: the counters are
/// in `list counters`), and for the table the tables' fill and losses.
#[derive(Debug, Serialize)]
#[serde(transparent)]
pub struct ConnsListing {
    pub rows: Vec<ConnRow>,
    #[serde(skip)]
    pub summary: ConnsSummary,
}

/// How full the tables are and what they could not keep.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct ConnsSummary {
    pub conns_capacity: u32,
    pub half_open_capacity: u32,
    /// Confirmations the full established table refused.
    pub conn_table_full: u64,
    /// SYNs no client completed through this node (a SYN flood).
    pub half_open_churned: u64,
    /// Handshakes held back: their client held `--conns-per-source`.
    pub source_limited: u64,
}

pub fn conns_summary(tables: &ConnTables, maps: &Maps) -> anyhow::Result<ConnsSummary> {
    let counts = maps.outcome_counters()?;
    let count = |o: Outcome| counts.iter().find(|(k, _)| *k == o).map_or(0, |(_, n)| *n);
    let (conns_capacity, half_open_capacity) = tables.capacities()?;
    Ok(ConnsSummary {
        conns_capacity,
        half_open_capacity,
        conn_table_full: count(Outcome::ConnTableFull),
        half_open_churned: half_open_churned(count),
        source_limited: count(Outcome::SourceLimited),
    })
}

/// A column's width: its longest cell, at least `min` (an IPv4 endpoint's).
fn column(lens: impl Iterator<Item = usize>, min: usize) -> usize {
    lens.max().unwrap_or(0).max(min)
}

fn conns_table(listing: &ConnsListing) -> String {
    let (rows, summary) = (&listing.rows, &listing.summary);
    let cw = column(rows.iter().map(|r| r.client.len()), 21);
    let fw = column(rows.iter().map(|r| r.frontend.len()), 21);
    let bw = column(rows.iter().map(|r| r.backend.len()), 21);
    let mut out = format!(
        "{:<11}  {:<cw$}  {:<fw$}  {:<bw$}  {:>8}\n",
        "STATE", "CLIENT", "FRONTEND", "BACKEND", "IDLE"
    );
    for r in rows {
        out.push_str(&format!(
            "{:<11}  {:<cw$}  {:<fw$}  {:<bw$}  {:>7}s\n",
            r.state, r.client, r.frontend, r.backend, r.idle_seconds
        ));
    }
    let count = |state| rows.iter().filter(|r| r.state == state).count();
    out.push_str(&format!(
        "{} established, {} closing, {} half-open, {} claimed\n",
        count("established"),
        count("closing"),
        count("half-open"),
        count("claimed")
    ));
    // Each family has its own tables, of the same capacity: with IPv6
    // connections listed, each is filled against its own.
    let ipv6 = |r: &&ConnRow| r.client.starts_with('[');
    let any_ipv6 = rows.iter().any(|r| ipv6(&r));
    let fill = |states: &[&str], capacity: u32| {
        let of = |v6: bool| {
            rows.iter()
                .filter(|r| states.contains(&r.state) && ipv6(r) == v6)
                .count()
        };
        if any_ipv6 {
            format!(
                "{} of {capacity} entries (IPv4), {} of {capacity} (IPv6)",
                of(false),
                of(true)
            )
        } else {
            format!("{} of {capacity} entries", of(false))
        }
    };
    out.push_str(&format!(
        "established table: {}; refused when full: {} (conn_table_full; raise \
         --conn-table-size)\n",
        fill(&["established", "closing"], summary.conns_capacity),
        summary.conn_table_full
    ));
    out.push_str(&format!(
        "half-open table: {}; SYNs no client completed: {} (half_open_churned; a SYN flood \
         shows here)\n",
        fill(&["half-open"], summary.half_open_capacity),
        summary.half_open_churned
    ));
    out.push_str(&format!(
        "claims table: {}; handshakes held back at a client's limit: {} (source_limited; see \
         --conns-per-source)\n",
        fill(&["claimed"], summary.half_open_capacity),
        summary.source_limited
    ));
    out
}

fn hooks_table(rows: &Vec<Hook>) -> String {
    let mut out = format!(
        "{:<14}  {:<16}  {:>7}  {:<9}  {}\n",
        "WHERE", "IFACE", "IFINDEX", "MECHANISM", "HOOK"
    );
    for h in rows {
        let target = match h.target {
            stats::Target::Interface => "interface",
            stats::Target::PodInterface => "pod interface",
            stats::Target::Cgroup => "cgroup",
        };
        let iface = if h.iface.is_empty() {
            "(gone)"
        } else {
            &h.iface
        };
        let index = h.ifindex.map_or("-".into(), |i| i.to_string());
        out.push_str(&format!(
            "{target:<14}  {iface:<16}  {index:>7}  {:<9}  {}\n",
            h.mechanism, h.hook
        ));
    }
    if rows.is_empty() {
        out.push_str("(nothing attached)\n");
    }
    out
}

/// One outcome counter, and how to read it.
#[derive(Debug, Serialize)]
pub struct CounterRow {
    pub class: &'static str,
    pub packets: u64,
}

/// Packets by outcome name.
pub fn counters(maps: &Maps) -> anyhow::Result<BTreeMap<&'static str, CounterRow>> {
    Ok(maps
        .outcome_counters()?
        .into_iter()
        .map(|(outcome, packets)| {
            (
                outcome.name(),
                CounterRow {
                    class: outcome.class().name(),
                    packets,
                },
            )
        })
        .collect())
}

fn counters_table(rows: &BTreeMap<&'static str, CounterRow>) -> String {
    let mut out = String::new();
    for (class, heading) in [
        (Class::Forwarded, "forwarded (ssh-fwd's work)"),
        (
            Class::Passed,
            "passed through untouched (not ssh-fwd's traffic, or already handled: normal)",
        ),
        (Class::Tracking, "connection tracking (events)"),
        (Class::Problem, "problems"),
    ] {
        out.push_str(heading);
        out.push('\n');
        for (name, row) in rows.iter().filter(|(_, r)| r.class == class.name()) {
            out.push_str(&format!("  {name:<22} {:>14}\n", row.packets));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use ssh_fwd_common::maps::{Conn6, ConnKey6, Endpoint6};

    use super::*;

    #[test]
    fn ipv6_connections_are_listed_with_their_addresses_in_brackets() {
        let ep = |s: &str, port| Endpoint6::new6(s.parse().unwrap(), port);
        let key = ConnKey6::new(ep("2001:db8:1::7", 40_000), ep("fd00:10:244::5", 22));
        let conn = Conn6 {
            frontend: ep("2001:db8::10", 8022),
            last_seen_ns: 1_000_000_000,
            ..Conn6::ZERO
        };
        let rows = conn_rows(vec![Entry::Established(key, conn)], 4_000_000_000);
        let row = &rows[0];
        assert_eq!(row.client, "[2001:db8:1::7]:40000");
        assert_eq!(row.frontend, "[2001:db8::10]:8022");
        assert_eq!(row.backend, "[fd00:10:244::5]:22");
        assert_eq!((row.state, row.idle_seconds), ("established", 3));
        // The table widens its columns to the longest address.
        let long = ConnRow {
            client: "[2001:db8:aaaa:bbbb:cccc:dddd:eeee:1]:40000".into(),
            ..rows[0].clone()
        };
        let table = conns_table(&ConnsListing {
            rows: vec![long, rows[0].clone()],
            summary: ConnsSummary::default(),
        });
        let lines: Vec<&str> = table.lines().take(3).collect();
        let at = |l: &str| l.find("[2001:db8::10]:8022");
        assert_eq!(at(lines[1]), at(lines[2]), "{table}");
    }

    #[test]
    fn the_conns_table_shows_the_fill_and_the_losses_of_both_tables() {
        let row = |state| ConnRow {
            state,
            client: "192.0.2.2:40000".into(),
            frontend: "198.18.0.10:8022".into(),
            backend: "10.244.1.5:22".into(),
            idle_seconds: 3,
        };
        let listing = ConnsListing {
            rows: vec![
                row("established"),
                row("closing"),
                row("half-open"),
                row("claimed"),
            ],
            summary: ConnsSummary {
                conns_capacity: 1024,
                half_open_capacity: 2048,
                conn_table_full: 7,
                half_open_churned: 12,
                source_limited: 3,
            },
        };
        let table = conns_table(&listing);
        assert!(
            table.contains("1 established, 1 closing, 1 half-open, 1 claimed\n"),
            "{table}"
        );
        assert!(
            table.contains("established table: 2 of 1024 entries; refused when full: 7"),
            "{table}"
        );
        assert!(
            table.contains("half-open table: 1 of 2048 entries; SYNs no client completed: 12"),
            "{table}"
        );
        assert!(
            table.contains(
                "claims table: 1 of 2048 entries; handshakes held back at a client's limit: 3"
            ),
            "{table}"
        );
        // JSON and YAML stay the list of rows.
        let json = serde_json::to_value(&listing).unwrap();
        assert_eq!(json.as_array().map(Vec::len), Some(4), "{json}");
    }

    #[test]
    fn each_familys_table_is_filled_against_its_own_capacity() {
        let row = |state, client: &str| ConnRow {
            state,
            client: client.into(),
            frontend: String::new(),
            backend: String::new(),
            idle_seconds: 0,
        };
        let listing = ConnsListing {
            rows: vec![
                row("established", "192.0.2.2:40000"),
                row("established", "[2001:db8::2]:40000"),
                row("closing", "[2001:db8::2]:40001"),
                row("half-open", "[2001:db8::2]:40002"),
                row("claimed", "192.0.2.2:40003"),
            ],
            summary: ConnsSummary {
                conns_capacity: 1024,
                half_open_capacity: 2048,
                ..ConnsSummary::default()
            },
        };
        let table = conns_table(&listing);
        for line in [
            "established table: 1 of 1024 entries (IPv4), 2 of 1024 (IPv6);",
            "half-open table: 0 of 2048 entries (IPv4), 1 of 2048 (IPv6);",
            "claims table: 1 of 2048 entries (IPv4), 0 of 2048 (IPv6);",
        ] {
            assert!(table.contains(line), "{line}\n{table}");
        }
    }

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
