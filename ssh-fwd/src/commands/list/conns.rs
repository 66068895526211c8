//! `ssh-fwd list conns`: the tracked connections, and how full the
//! tables are and what they lost.

use serde::Serialize;
use ssh_fwd_common::{maps::ConnKey, outcome::Outcome};

use super::column;
use crate::datapath::{
    conntrack::{ConnTables, Entry, clock_ns, half_open_churned},
    family::MapFamily,
    maps::Maps,
};

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

pub fn conns_table(listing: &ConnsListing) -> String {
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
}
