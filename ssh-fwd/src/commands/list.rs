//! `ssh-fwd list mappings|conns|hooks|counters`: what is installed, read
//! from the pinned maps and links, as a table, JSON or YAML; each listing
//! in a module of its own.

mod conns;
mod counters;
mod hooks;
mod mappings;

use super::output::{Output, print};
use crate::datapath::{
    conntrack::{ConnTables, activity::Clock},
    maps::Maps,
    pins::{BpffsArg, PinLayout},
    stats,
};
use conns::{ConnsListing, conns, conns_summary, conns_table};
use counters::{counters, counters_table};
use hooks::hooks_table;
use mappings::{mappings, mappings_table};

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

/// A column's width: its longest cell, at least `min` (an IPv4 endpoint's).
fn column(lens: impl Iterator<Item = usize>, min: usize) -> usize {
    lens.max().unwrap_or(0).max(min)
}
