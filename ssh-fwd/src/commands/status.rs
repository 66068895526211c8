//! `ssh-fwd status`: one screen on the node's forwarder: is an agent
//! running, where its mappings come from, what is attached, how many
//! mappings, the last reconcile and the last error, and the packet counters
//! by class. Read from the pinned state, so it works without the agent's
//! metrics endpoint and after the agent stopped.

use std::time::{Duration, SystemTime};

use serde::Serialize;
use ssh_fwd_common::{
    maps::{AgentStatus, get_text},
    outcome::{Class, Outcome, live_connections},
};

use super::output::{Output, print};
use crate::{
    datapath::{
        announce::{Announcements, mac_text},
        features,
        footprint::Footprint,
        maps::Maps,
        netdev,
        object::{DenyAction, RedirectMode},
        pins::{BpffsArg, PinLayout},
        preflight,
        stats::{self, Hook, Target},
        status::{SettingsMap, StatusMap, unix_ms},
    },
    mapping::printable,
};

/// An agent rewrites its status every few seconds; one silent for longer
/// than this is taken to have stopped.
const SILENT_AFTER: Duration = Duration::from_secs(30);

#[derive(Debug, clap::Args)]
pub struct StatusArgs {
    #[command(flatten)]
    pub bpffs: BpffsArg,

    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value_t = Output::Table)]
    pub output: Output,
}

#[derive(Debug, Serialize)]
pub struct Status {
    /// `running`, `stopped` (the data path keeps forwarding) or `never
    /// started` (nothing recorded yet).
    pub agent: &'static str,
    pub pid: u64,
    pub source: String,
    pub started_unix_ms: u64,
    pub heartbeat_age_seconds: Option<f64>,
    pub hooks: Vec<Hook>,
    /// `uname -r`.
    pub kernel: String,
    /// How the tc programs on interfaces are attached: `tcx`, `clsact`, or
    /// `none` (nothing attached).
    pub tc_mechanism: &'static str,
    /// The kernel features this kernel lacks, probed now, each with what
    /// the agent does without it (docs/kernels.md).
    pub missing_features: Vec<MissingFeature>,
    /// `--redirect` the running programs were loaded with: `auto`, `off`,
    /// or `unknown` (not recorded).
    pub redirect: &'static str,
    /// `--deny-action` the running programs were loaded with: `drop`,
    /// `reset`, or `unknown` (not recorded).
    pub deny_action: &'static str,
    pub mappings: usize,
    /// The kernel memory the pinned tables take, in bytes, as the kernel
    /// counts it, by table.
    pub table_memory_bytes: u64,
    pub table_memory: Vec<TableMemory>,
    pub reconciles: u64,
    pub last_reconcile_age_seconds: Option<f64>,
    pub last_reconcile_seconds: f64,
    pub reconcile_errors: u64,
    pub last_error: String,
    pub last_error_age_seconds: Option<f64>,
    pub packets_forwarded: u64,
    pub packets_passed: u64,
    pub packets_problem: u64,
    /// Established connections now (exact, from the counters).
    pub connections: u64,
    /// Half-open entries at the last sweep, and SYNs no client completed
    /// since the agent started.
    pub half_open: u64,
    pub half_open_churned: u64,
    pub last_sweep_age_seconds: Option<f64>,
    /// `--announce l2`: the SSH IPs this node answers ARP (IPv4) or
    /// neighbour solicitations (IPv6) for.
    pub announcing: Vec<Announcing>,
    /// The last other MAC heard claiming an SSH IP this node announced
    /// (by ARP, or a neighbour advertisement for an IPv6 one).
    pub arp_heard: Vec<Heard>,
}

#[derive(Debug, Serialize)]
pub struct TableMemory {
    pub table: &'static str,
    pub bytes: u64,
}

#[derive(Debug, Serialize)]
pub struct MissingFeature {
    pub feature: &'static str,
    /// The upstream release that has it.
    pub since: &'static str,
    pub lost: &'static str,
}

#[derive(Debug, Serialize)]
pub struct Announcing {
    pub ssh_ip: std::net::IpAddr,
    pub iface: String,
    pub mac: String,
    pub since_unix_ms: u64,
}

#[derive(Debug, Serialize)]
pub struct Heard {
    pub ssh_ip: std::net::IpAddr,
    pub mac: String,
}

pub fn run(args: StatusArgs) -> anyhow::Result<()> {
    let layout = PinLayout::new(&args.bpffs.bpffs);
    let status = collect(&layout, SystemTime::now())?;
    print(args.output, &status, table)
}

pub fn collect(layout: &PinLayout, now: SystemTime) -> anyhow::Result<Status> {
    let maps = Maps::open_pinned(layout)?;
    let agent = StatusMap::open_pinned(layout)?.read()?;
    let now_ms = unix_ms(now);
    let age = |ms: u64| (ms != 0).then(|| now_ms.saturating_sub(ms) as f64 / 1000.0);
    let heartbeat = age(agent.heartbeat_ms);
    let loaded = SettingsMap::open_pinned(layout).and_then(|m| m.read()).ok();
    let counters = maps.outcome_counters()?;
    let mut by_class = [0u64; 3];
    for (outcome, n) in &counters {
        let i = match outcome.class() {
            Class::Forwarded => 0,
            Class::Passed => 1,
            Class::Problem => 2,
            Class::Tracking => continue,
        };
        by_class[i] += n;
    }
    let count = |o: Outcome| {
        counters
            .iter()
            .find(|(k, _)| *k == o)
            .map_or(0, |(_, n)| *n)
    };
    let hooks = stats::hooks(layout);
    let footprint = Footprint::read(layout);
    Ok(Status {
        agent: liveness(&agent, heartbeat),
        pid: agent.pid,
        source: text(&agent.source),
        started_unix_ms: agent.started_ms,
        heartbeat_age_seconds: heartbeat,
        tc_mechanism: tc_mechanism(&hooks),
        hooks,
        kernel: preflight::kernel_release().unwrap_or_default(),
        missing_features: missing_features(),
        redirect: loaded.map_or("unknown", |loaded| RedirectMode::of(loaded).name()),
        deny_action: loaded.map_or("unknown", |loaded| DenyAction::of(loaded).name()),
        mappings: maps.read_installed()?.frontends.len(),
        table_memory_bytes: footprint.total(),
        table_memory: footprint
            .tables
            .iter()
            .map(|&(table, bytes)| TableMemory { table, bytes })
            .collect(),
        reconciles: agent.reconciles,
        last_reconcile_age_seconds: age(agent.last_reconcile_ms),
        last_reconcile_seconds: agent.last_reconcile_micros as f64 / 1e6,
        reconcile_errors: agent.reconcile_errors,
        last_error: text(&agent.last_error),
        last_error_age_seconds: age(agent.last_error_ms),
        packets_forwarded: by_class[0],
        packets_passed: by_class[1],
        packets_problem: by_class[2],
        connections: live_connections(count),
        half_open: agent.half_open_at_sweep,
        half_open_churned: agent.half_open_churned,
        last_sweep_age_seconds: age(agent.last_sweep_ms),
        announcing: announcing(layout),
        arp_heard: heard(layout),
    })
}

/// The mechanism of the interfaces' tc hooks.
fn tc_mechanism(hooks: &[Hook]) -> &'static str {
    hooks
        .iter()
        .filter(|h| h.target == Target::Interface && h.mechanism != "link")
        .map(|h| h.mechanism)
        .next()
        .unwrap_or("none")
}

/// What this kernel lacks, probed as the agent probes at start.
fn missing_features() -> Vec<MissingFeature> {
    let (probed, _) = features::probe::probe_all();
    probed
        .iter()
        .filter(|(_, present)| !present)
        .map(|(f, _)| MissingFeature {
            feature: f.name(),
            since: f.since(),
            lost: f.fallback().lost(),
        })
        .collect()
}

/// `ANNOUNCE` and `ANNOUNCE6`, empty where the pins predate them.
fn announcing(layout: &PinLayout) -> Vec<Announcing> {
    let Ok(map) = Announcements::open_pinned(layout) else {
        return Vec::new();
    };
    map.installed()
        .unwrap_or_default()
        .into_iter()
        .map(|(key, entry)| Announcing {
            ssh_ip: key.ip,
            iface: netdev::name_of(key.ifindex).unwrap_or_else(|| format!("#{}", key.ifindex)),
            mac: mac_text(entry.mac),
            since_unix_ms: entry.since_ms,
        })
        .collect()
}

fn heard(layout: &PinLayout) -> Vec<Heard> {
    let Ok(map) = Announcements::open_pinned(layout) else {
        return Vec::new();
    };
    map.heard()
        .unwrap_or_default()
        .into_iter()
        .map(|(ssh_ip, heard)| Heard {
            ssh_ip,
            mac: mac_text(heard.mac),
        })
        .collect()
}

/// The `announcing:` line: each SSH IP with where and since when.
fn announcing_line(announcing: &[Announcing], now_ms: u64) -> String {
    if announcing.is_empty() {
        return "none (this node answers ARP and neighbour solicitations for no SSH IP)".to_owned();
    }
    announcing
        .iter()
        .map(|a| {
            let age = now_ms.saturating_sub(a.since_unix_ms) as f64 / 1000.0;
            format!(
                "{} on {} ({}) since {}",
                a.ssh_ip,
                a.iface,
                a.mac,
                ago(Some(age))
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// A text field of the pinned status, escaped for a terminal: an error
/// quotes what a file or an API object said.
fn text(field: &[u8]) -> String {
    printable(get_text(field))
}

fn liveness(agent: &AgentStatus, heartbeat_age: Option<f64>) -> &'static str {
    match heartbeat_age {
        None if agent.pid == 0 => "never started",
        Some(age) if age <= SILENT_AFTER.as_secs_f64() => "running",
        _ => "stopped",
    }
}

fn ago(seconds: Option<f64>) -> String {
    match seconds {
        None => "never".into(),
        Some(s) if s < 120.0 => format!("{s:.0} s ago"),
        Some(s) if s < 7200.0 => format!("{:.0} min ago", s / 60.0),
        Some(s) => format!("{:.1} h ago", s / 3600.0),
    }
}

fn table(s: &Status) -> String {
    let agent = match s.agent {
        "running" => format!(
            "running (pid {}, heard from {})",
            s.pid,
            ago(s.heartbeat_age_seconds)
        ),
        "stopped" => format!(
            "stopped (last heard from {}); the data path keeps forwarding",
            ago(s.heartbeat_age_seconds)
        ),
        other => other.to_owned(),
    };
    let interfaces: Vec<String> = s
        .hooks
        .iter()
        .filter(|h| h.target == Target::Interface)
        .map(|h| format!("{} {}", h.iface, h.hook))
        .collect();
    let pods = s
        .hooks
        .iter()
        .filter(|h| h.target == Target::PodInterface)
        .count();
    let mut cgroups: Vec<&str> = s
        .hooks
        .iter()
        .filter(|h| h.target == Target::Cgroup)
        .map(|h| h.iface.as_str())
        .collect();
    cgroups.dedup();
    let hairpin = if cgroups.is_empty() {
        "off".to_owned()
    } else {
        format!("cgroup {}", cgroups.join(", "))
    };
    let error = if s.last_error.is_empty() {
        "none".to_owned()
    } else {
        format!("{} ({})", s.last_error, ago(s.last_error_age_seconds))
    };
    format!(
        "agent:           {agent}\n\
         source:          {}\n\
         kernel:          {}\n\
         kernel memory:   {}\n\
         hooks:           {}; reply program on {pods} pod interface(s)\n\
         hairpin:         {hairpin}\n\
         redirect:        {}\n\
         deny action:     {}\n\
         mappings:        {}\n\
         last reconcile:  {} (took {:.1} ms), {} in all\n\
         errors:          {} reconcile error(s); last: {error}\n\
         packets:         {} forwarded, {} passed through, {} problem(s)\n\
         connections:     {} established; {} half-open, {} SYNs not completed (sweep {})\n\
         announcing:      {}{}\n",
        if s.source.is_empty() { "-" } else { &s.source },
        kernel_line(s),
        memory_line(s),
        if interfaces.is_empty() {
            "none".to_owned()
        } else {
            interfaces.join(", ")
        },
        redirect_meaning(s.redirect),
        s.deny_action,
        s.mappings,
        ago(s.last_reconcile_age_seconds),
        s.last_reconcile_seconds * 1000.0,
        s.reconciles,
        s.reconcile_errors,
        s.packets_forwarded,
        s.packets_passed,
        s.packets_problem,
        s.connections,
        s.half_open,
        s.half_open_churned,
        ago(s.last_sweep_age_seconds),
        announcing_line(&s.announcing, unix_ms(SystemTime::now())),
        heard_note(s),
    )
}

/// The tables' kernel memory.
fn memory_line(s: &Status) -> String {
    Footprint {
        tables: s.table_memory.iter().map(|t| (t.table, t.bytes)).collect(),
    }
    .summary()
}

/// The kernel, how tc programs are attached, and what it lacks.
fn kernel_line(s: &Status) -> String {
    let missing = if s.missing_features.is_empty() {
        "every feature present".to_owned()
    } else {
        let names: Vec<String> = s
            .missing_features
            .iter()
            .map(|m| format!("{} (since {})", m.feature, m.since))
            .collect();
        format!("missing {}", names.join(", "))
    };
    format!("{}, tc through {}; {missing}", s.kernel, s.tc_mechanism)
}

/// Other MACs heard claiming an SSH IP this node announced.
fn heard_note(s: &Status) -> String {
    s.arp_heard
        .iter()
        .map(|h| format!("; {} last heard from {}", h.ssh_ip, h.mac))
        .collect()
}

/// `--redirect`'s mode, with what it means for the node's firewall.
fn redirect_meaning(mode: &str) -> String {
    match mode {
        "auto" => "auto (the tc programs send translated packets straight out: the node's \
                   netfilter does not see them)"
            .into(),
        "off" => "off (translated packets take the node's forwarding path and its netfilter \
                  hooks)"
            .into(),
        other => other.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_redirect_mode_is_shown_with_what_it_means_for_the_firewall() {
        assert!(redirect_meaning("auto").contains("netfilter does not see them"));
        assert!(redirect_meaning("off").contains("its netfilter hooks"));
        assert_eq!(redirect_meaning("unknown"), "unknown");
    }

    #[test]
    fn an_agent_is_running_only_while_its_heartbeat_is_fresh() {
        let mut agent = AgentStatus::EMPTY;
        assert_eq!(liveness(&agent, None), "never started");
        agent.pid = 42;
        assert_eq!(liveness(&agent, Some(3.0)), "running");
        assert_eq!(liveness(&agent, Some(31.0)), "stopped");
        assert_eq!(liveness(&agent, None), "stopped");
    }

    #[test]
    fn status_texts_reach_the_terminal_escaped() {
        let mut field = [0u8; 64];
        ssh_fwd_common::maps::put_text(&mut field, "bad `\u{1b}]0;x\u{7}\u{202e}1.2.3:80`");
        assert_eq!(text(&field), "bad `\\u{1b}]0;x\\u{7}\\u{202e}1.2.3:80`");
    }

    #[test]
    fn ages_read_as_a_person_says_them() {
        assert_eq!(ago(None), "never");
        assert_eq!(ago(Some(4.2)), "4 s ago");
        assert_eq!(ago(Some(600.0)), "10 min ago");
        assert_eq!(ago(Some(9000.0)), "2.5 h ago");
    }

    #[test]
    fn the_ssh_ips_this_node_answers_for_read_with_where_and_since_when() {
        assert!(announcing_line(&[], 0).starts_with("none"));
        let one = Announcing {
            ssh_ip: std::net::Ipv4Addr::new(198, 18, 0, 10).into(),
            iface: "ext0".into(),
            mac: "02:00:00:00:00:01".into(),
            since_unix_ms: 1_000,
        };
        let six = Announcing {
            ssh_ip: "fd00:198::10".parse().unwrap(),
            iface: "ext0".into(),
            mac: "02:00:00:00:00:01".into(),
            since_unix_ms: 6_000,
        };
        assert_eq!(
            announcing_line(&[one, six], 11_000),
            "198.18.0.10 on ext0 (02:00:00:00:00:01) since 10 s ago, \
             fd00:198::10 on ext0 (02:00:00:00:00:01) since 5 s ago"
        );
    }
}
