//! Value types of flags that several commands share, parsed the same way
//! everywhere: port ranges (and the node's ports they must avoid,
//! `node_ports`), durations and Service shapes; and `--config`, which the
//! agent and the controller both take.

use std::{ops::RangeInclusive, path::PathBuf, time::Duration};

pub mod node_ports;

/// Parses `20000-27999`.
pub fn port_range(s: &str) -> Result<RangeInclusive<u16>, String> {
    let bad = || format!("`{s}` is not a port range like 20000-27999");
    let (first, last) = s.split_once('-').ok_or_else(bad)?;
    let first: u16 = first.trim().parse().map_err(|_| bad())?;
    let last: u16 = last.trim().parse().map_err(|_| bad())?;
    if first == 0 || first > last {
        return Err(format!(
            "`{s}`: the first port must be 1 or more and not above the last"
        ));
    }
    Ok(first..=last)
}

/// Parses a duration as humantime writes them (`500ms`, `30s`, `5m`,
/// `24h`, `1h 30m`); zero is refused, since every duration here is a
/// period or a timeout.
pub fn duration(s: &str) -> Result<Duration, String> {
    let d = humantime::parse_duration(s.trim())
        .map_err(|e| format!("`{s}` is not a duration like 500ms, 30s, 5m or 24h: {e}"))?;
    if d.is_zero() {
        return Err(format!("`{s}`: the duration must be greater than zero"));
    }
    Ok(d)
}

/// Parses a duration as [`duration`] does, where `0s` (any zero) means
/// off: for a period that may be turned off.
pub fn duration_or_off(s: &str) -> Result<Duration, String> {
    let d = humantime::parse_duration(s.trim())
        .map_err(|e| format!("`{s}` is not a duration like 30s, 5m or 0s (off): {e}"))?;
    Ok(d)
}

/// A shape of Service that exposes the SSH IP: the one the controller
/// creates (`--expose-as`), and those whose SSH IP the agents and the
/// controller honour (`--honour-styles`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ServiceStyle {
    /// `type: LoadBalancer` of class `ssh-fwd.io/ssh`, the address in its
    /// status.
    Loadbalancer,
    /// `spec.externalIPs`.
    Externalips,
}

impl std::fmt::Display for ServiceStyle {
    /// As it is written on the command line.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        use clap::ValueEnum as _;
        match self.to_possible_value() {
            Some(value) => f.write_str(value.get_name()),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_with_units() {
        assert_eq!(duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(duration("24h"), Ok(Duration::from_secs(86_400)));
        assert_eq!(duration("1h 30m"), Ok(Duration::from_secs(5_400)));
        assert!(duration("0s").unwrap_err().contains("greater than zero"));
        assert!(duration("7").unwrap_err().contains("like 500ms"));
        assert!(duration("5 parsecs").is_err());
    }

    #[test]
    fn a_period_that_may_be_off_takes_zero() {
        assert_eq!(duration_or_off("0s"), Ok(Duration::ZERO));
        assert_eq!(duration_or_off("5m"), Ok(Duration::from_secs(300)));
        assert!(duration_or_off("off").unwrap_err().contains("0s (off)"));
    }

    #[test]
    fn port_ranges_are_checked() {
        assert_eq!(port_range("9000-9100"), Ok(9000..=9100));
        assert!(port_range("9000-8000").is_err());
        assert!(port_range("0-10").is_err());
        assert!(port_range("8000").unwrap_err().contains("like 20000-27999"));
    }
}

/// The environment variable that names the configuration file, like
/// `--config`.
pub const CONFIG_ENV: &str = "SSH_FWD_CONFIG";

/// The flag naming the file, in both commands' `--help`.
#[derive(Debug, Clone, clap::Args)]
pub struct ConfigFlag {
    /// A YAML file of settings whose keys are this command's flag names
    /// (`port-range: 9000-9999`, `iface: [eno1]`, `kubernetes: true`), or a
    /// directory of one file per key holding its value (a ConfigMap mounted
    /// as a volume; names beginning with `.` are skipped); the agent and the
    /// controller can share one. A flag on the command line, or its
    /// environment variable, wins over the file. Check one with `ssh-fwd
    /// config check PATH`.
    #[arg(long = "config", env = CONFIG_ENV, value_name = "PATH", help_heading = "Configuration file")]
    pub file: Option<PathBuf>,
}
