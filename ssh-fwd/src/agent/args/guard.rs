//! `ssh-fwd agent`'s flags for who may connect and how fast: the defaults
//! of every mapping's guard (`docs/guard.md`).

use std::collections::BTreeSet;

use ssh_fwd_common::maps::SYN_BUCKET_CAPACITY;

use crate::{
    datapath::object::DenyAction,
    mapping::guard::{Cidr, Defaults, SynRate},
};

/// The most `--syn-burst` may be.
pub const MAX_SYN_BURST: u32 = 1_000_000;

#[derive(Clone, Debug, clap::Args)]
#[command(next_help_heading = "Guard: who may connect, and how fast")]
pub struct GuardArgs {
    /// A client range (CIDR, or one address; IPv4 or IPv6) that may open
    /// connections through every mapping (repeat for several); a mapping
    /// gets the ranges of its own family, and with ranges only of the
    /// other family admits no one. In Kubernetes mode this is a floor no
    /// Service can lower: a Service's `spec.loadBalancerSourceRanges` or
    /// `ssh-fwd.io/source-ranges` annotation only narrows it (the
    /// intersection; a Service asking for more gets this list, and a
    /// warning names it). A mappings-file entry's `allow:`, the operator's
    /// own, replaces it; `allow: []` opens an entry to all. A SYN from any
    /// other source is dropped before it reaches the pod (counted as
    /// `denied`). Default: every source (a Service's list applies as
    /// written).
    #[arg(long = "allow", value_name = "CIDR")]
    pub allow: Vec<Cidr>,

    /// Check the allowlist on every segment from a client, not only on
    /// SYNs: a source taken off a list loses its open connections too.
    /// Without it, a changed list applies to new connections only. Costs a
    /// lookup per packet of a mapping with a list.
    #[arg(long)]
    pub enforce_established: bool,

    /// What a segment from outside an allowlist gets. `drop`: nothing; the
    /// client's connect times out, and a scanner learns nothing, not even
    /// that the address answers. `reset`: a TCP RST from the frontend; the
    /// client's connect fails at once with "connection refused", which
    /// tells a legitimate user on the wrong network what happened. The RST
    /// is one packet per denied segment, never larger than it, so a forged
    /// source cannot use it to amplify (docs/guard.md).
    #[arg(long, value_enum, value_name = "ACTION", default_value_t = DenyAction::Drop)]
    pub deny_action: DenyAction,

    /// The most new connections one client address may open a second
    /// through a mapping (`N/s`), beyond a burst of `--syn-burst`; further
    /// SYNs are dropped (counted as `syn_limited`). A Service's
    /// `ssh-fwd.io/syn-rate` annotation may only lower it: the lower of the
    /// two applies, and `off` leaves this rate in force. Connections
    /// already open are never limited. Default: no limit (a Service's
    /// rate applies as written).
    #[arg(long, value_name = "N/s")]
    pub syn_rate: Option<SynRate>,

    /// How many new connections one client address may open at once
    /// before `--syn-rate` holds it back, for every rate (the flag's and
    /// the Services'). Default: two seconds' worth of the rate.
    #[arg(long, value_name = "CONNECTIONS", value_parser = syn_burst)]
    pub syn_burst: Option<u32>,

    /// Capacity of the per-source table of `--syn-rate` (an LRU: a flood
    /// of spoofed sources churns it; see docs/guard.md).
    #[arg(long, value_name = "ENTRIES", default_value_t = SYN_BUCKET_CAPACITY, value_parser = super::table_size)]
    pub syn_bucket_table_size: u32,
}

impl GuardArgs {
    /// What the flags add to each mapping's own guard.
    pub fn defaults(&self) -> Defaults {
        Defaults {
            allow: self.allow.iter().copied().collect::<BTreeSet<_>>(),
            syn_rate: self.syn_rate,
            syn_burst: self.syn_burst,
            enforce_established: self.enforce_established,
        }
    }
}

fn syn_burst(s: &str) -> Result<u32, String> {
    match s.trim().parse::<u32>() {
        Ok(n) if (1..=MAX_SYN_BURST).contains(&n) => Ok(n),
        _ => Err(format!(
            "`{s}`: the burst is a number of connections from 1 to {MAX_SYN_BURST}, like 40"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::super::parse;
    use crate::datapath::object::DenyAction;

    const BASE: [&str; 4] = ["--external-iface", "eth0", "--mappings", "/m.yaml"];

    #[test]
    fn guard_flags_parse_into_defaults() {
        let args = parse(BASE.into_iter().chain([
            "--allow",
            "10.0.0.0/8",
            "--allow",
            "192.0.2.7",
            "--syn-rate",
            "20/s",
            "--syn-burst",
            "40",
            "--enforce-established",
        ]))
        .unwrap();
        let d = args.guard.defaults();
        assert_eq!(d.allow.len(), 2);
        assert_eq!(d.syn_rate.map(|r| r.0), Some(20));
        assert_eq!(d.syn_burst, Some(40));
        assert!(d.enforce_established);
        assert_eq!(args.guard.deny_action, DenyAction::Drop, "the default");
        let reset = parse(BASE.into_iter().chain(["--deny-action", "reset"])).unwrap();
        assert_eq!(reset.guard.deny_action, DenyAction::Reset);
    }

    #[test]
    fn an_unknown_deny_action_is_refused_with_the_ones_there_are() {
        let err = parse(BASE.into_iter().chain(["--deny-action", "reject"]))
            .expect_err("refused")
            .to_string();
        assert!(
            err.contains("invalid value 'reject' for '--deny-action <ACTION>'")
                && err.contains("[possible values: drop, reset]"),
            "{err}"
        );
    }

    #[test]
    fn bad_guard_flags_are_refused_with_how_to_write_them() {
        for (flag, value, says) in [
            ("--allow", "10.0.0.1/8", "write 10.0.0.0/8 for the range"),
            (
                "--allow",
                "2001:db8::1/32",
                "write 2001:db8::/32 for the range",
            ),
            ("--allow", "2001:db8::/129", "/0 to /128"),
            ("--syn-rate", "20", "like 20/s"),
            ("--syn-rate", "0/s", "from 1 to"),
            ("--syn-burst", "0", "like 40"),
            ("--syn-burst", "lots", "like 40"),
        ] {
            let err = parse(BASE.into_iter().chain([flag, value]))
                .err()
                .unwrap_or_else(|| panic!("{flag} {value} was accepted"))
                .to_string();
            assert!(
                err.contains(flag) && err.contains(says),
                "{flag} {value}: {err}"
            );
        }
    }
}
