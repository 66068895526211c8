//! The activity ConfigMaps, as the agents write them and the controller
//! reads them: one per node (`ssh-fwd-activity-NODE`, labelled
//! [`ACTIVITY`](vocabulary::ACTIVITY)), a data key per frontend, each value
//! a small JSON object. A ConfigMap key may hold only `[-._a-zA-Z0-9]`, so
//! a frontend `IP:PORT` is keyed `IP_PORT`, an IPv6 address with its colons
//! as dashes (`fd00-198--10_2222`; an IPv4 address has no dash).

use std::{
    net::{IpAddr, Ipv4Addr, Ipv6Addr},
    time::SystemTime,
};

use serde::{Deserialize, Serialize};

use crate::vocabulary;

/// What one node saw of one frontend's connections.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    /// RFC 3339, UTC, to the second; absent before any packet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_activity: Option<String>,
    pub open_connections: u64,
}

impl Report {
    pub fn new(last: Option<SystemTime>, open: u64) -> Self {
        Self {
            last_activity: last.map(rfc3339),
            open_connections: open,
        }
    }

    /// The last packet's time; `None` when absent or unreadable.
    pub fn last(&self) -> Option<SystemTime> {
        self.last_activity.as_deref().and_then(parse_rfc3339)
    }
}

/// The ConfigMap of the agent of `node`.
pub fn config_map_name(node: &str) -> String {
    format!("{}{node}", vocabulary::ACTIVITY_PREFIX)
}

/// The data key of a frontend.
pub fn data_key(ip: IpAddr, port: u16) -> String {
    match ip {
        IpAddr::V4(ip) => format!("{ip}_{port}"),
        IpAddr::V6(ip) => format!("{}_{port}", ip.to_string().replace(':', "-")),
    }
}

/// The frontend of a data key; `None` for one no agent writes.
pub fn parse_key(key: &str) -> Option<(IpAddr, u16)> {
    let (ip, port) = key.split_once('_')?;
    let ip = if ip.contains('-') {
        IpAddr::V6(ip.replace('-', ":").parse::<Ipv6Addr>().ok()?)
    } else {
        IpAddr::V4(ip.parse::<Ipv4Addr>().ok()?)
    };
    Some((ip, port.parse().ok()?))
}

/// `t` as RFC 3339, UTC, to the second (`2026-01-02T03:04:05Z`).
pub fn rfc3339(t: SystemTime) -> String {
    humantime::format_rfc3339_seconds(t).to_string()
}

/// An RFC 3339 time, with or without fractions.
pub fn parse_rfc3339(text: &str) -> Option<SystemTime> {
    humantime::parse_rfc3339_weak(text.trim()).ok()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn a_frontend_is_a_valid_config_map_key_and_reads_back() {
        let key = data_key(IpAddr::V4(Ipv4Addr::new(203, 0, 113, 10)), 2222);
        assert_eq!(key, "203.0.113.10_2222");
        assert!(
            key.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-._".contains(&b))
        );
        assert_eq!(
            parse_key(&key),
            Some((IpAddr::V4(Ipv4Addr::new(203, 0, 113, 10)), 2222))
        );
        assert_eq!(parse_key("203.0.113.10:2222"), None);
    }

    #[test]
    fn an_ipv6_frontend_is_a_valid_config_map_key_and_reads_back() {
        let ip = IpAddr::V6(Ipv6Addr::new(0xfd00, 0x198, 0, 0, 0, 0, 0, 0x10));
        let key = data_key(ip, 2222);
        assert_eq!(key, "fd00-198--10_2222");
        assert!(
            key.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-._".contains(&b))
        );
        assert_eq!(parse_key(&key), Some((ip, 2222)));
        let mapped = IpAddr::V6(Ipv4Addr::new(203, 0, 113, 10).to_ipv6_mapped());
        assert_eq!(parse_key(&data_key(mapped, 1)), Some((mapped, 1)));
        assert_eq!(parse_key("fd00:198::10_2222"), None, "not a valid key");
    }

    #[test]
    fn a_report_is_camel_case_json_with_an_rfc3339_time() {
        let at = SystemTime::UNIX_EPOCH + Duration::from_secs(1_767_323_045);
        let report = Report::new(Some(at), 2);
        let json = serde_json::to_string(&report).unwrap();
        assert_eq!(
            json,
            r#"{"lastActivity":"2026-01-02T03:04:05Z","openConnections":2}"#
        );
        let back: Report = serde_json::from_str(&json).unwrap();
        assert_eq!(back.last(), Some(at));
    }
}
