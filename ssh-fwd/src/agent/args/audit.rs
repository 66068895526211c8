//! `ssh-fwd agent`'s flags for the connection log (`docs/audit.md`).

use crate::datapath::events::ConnLog;

/// The most lines a second `--conn-log-rate` may allow.
const MAX_LOG_RATE: u32 = 100_000;

#[derive(Clone, Debug, clap::Args)]
#[command(next_help_heading = "Connection log")]
pub struct AuditArgs {
    /// Which connections are logged, one line each (target
    /// `ssh_fwd::connections`): who connected from where, through which
    /// frontend, to which backend, mapping, Service and pod. `accepted`:
    /// each connection the pod's server answered. `all`: also SYNs refused
    /// by an allowlist or `--syn-rate`, and each connection that ended,
    /// with how (fin, reset, idle), its duration and its packets and bytes
    /// each way (counted per packet, which costs a map update per packet).
    /// `off`: none.
    #[arg(long, value_enum, default_value_t = ConnLog::Accepted)]
    pub conn_log: ConnLog,

    /// The most connection lines a second the log takes of each class,
    /// beyond a burst of as many: a flood cannot fill the disk. Refused
    /// SYNs and connections (accepted, closed) have a budget each, so a
    /// flood of forged SYNs never costs a login its line. Lines over it are
    /// counted by kind (`ssh_fwd_connection_records_dropped_total`) and
    /// summed up in the log every 10 seconds instead. Each CPU also writes
    /// at most this many records of refused SYNs a second (the rest are
    /// counted as `events_throttled`).
    #[arg(long, value_name = "LINES", default_value_t = 100, value_parser = log_rate)]
    pub conn_log_rate: u32,
}

fn log_rate(s: &str) -> Result<u32, String> {
    let n: u32 = s
        .parse()
        .map_err(|_| format!("`{s}` is not a number of lines a second"))?;
    if n == 0 || n > MAX_LOG_RATE {
        return Err(format!(
            "`{s}`: use between 1 and {MAX_LOG_RATE} lines a second (`--conn-log off` logs none)"
        ));
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::super::parse;
    use super::*;

    const BASE: [&str; 4] = ["--external-iface", "eth0", "--mappings", "m.yaml"];

    fn with(more: [&str; 2]) -> Result<super::super::AgentArgs, clap::Error> {
        parse(BASE.into_iter().chain(more))
    }

    #[test]
    fn the_defaults_log_accepted_connections_at_a_bounded_rate() {
        let args = parse(BASE).unwrap();
        assert_eq!(args.audit.conn_log, ConnLog::Accepted);
        assert_eq!(args.audit.conn_log_rate, 100);
    }

    #[test]
    fn a_bad_level_or_rate_is_refused_with_what_to_write() {
        let e = with(["--conn-log", "verbose"]).unwrap_err().to_string();
        assert!(
            e.contains("off") && e.contains("accepted") && e.contains("all"),
            "{e}"
        );
        let e = with(["--conn-log-rate", "0"]).unwrap_err().to_string();
        assert!(e.contains("between 1 and 100000"), "{e}");
        let e = with(["--conn-log-rate", "fast"]).unwrap_err().to_string();
        assert!(e.contains("not a number"), "{e}");
    }
}
