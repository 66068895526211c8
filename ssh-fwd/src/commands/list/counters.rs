//! `ssh-fwd list counters`: packets and connection events by outcome,
//! grouped by how to read them.

use std::collections::BTreeMap;

use serde::Serialize;
use ssh_fwd_common::outcome::Class;

use crate::datapath::maps::Maps;

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

pub fn counters_table(rows: &BTreeMap<&'static str, CounterRow>) -> String {
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
