//! The served reports, as the agents write them and the controller reads
//! them: one ConfigMap per node (`ssh-fwd-served-NODE`, labelled
//! [`SERVED`](vocabulary::SERVED)) saying what that node's data path
//! holds, so the controller tells a user "Connected!" only once the node
//! that receives the SSH IP forwards the port to the pod.
//!
//! Its data: a key per installed frontend, keyed as the activity
//! ConfigMaps key theirs (`IP_PORT`, [`data_key`]), whose value is the
//! backend (`10.0.1.5:22`, `[fd00::5]:22`); [`RECEIVES`], the SSH IPs
//! this node takes traffic for, comma-separated (under `--announce l2`
//! those it answers ARP or neighbour solicitations for now, else all of
//! its `--ssh-ip`); and [`RENEWED`], when the agent last wrote it, which
//! tells a live agent's report from a dead one's.

use std::{
    collections::{BTreeMap, BTreeSet},
    net::{IpAddr, SocketAddr},
    time::{Duration, SystemTime},
};

pub use super::activity::{data_key, parse_key, parse_rfc3339, rfc3339};
use crate::vocabulary;

/// The data key of the SSH IPs the node receives.
pub const RECEIVES: &str = "receives";
/// The data key of the time of the agent's last write.
pub const RENEWED: &str = "renewed";
/// How long a report stays an agent's word after its last write: three
/// times the agents' renewal, so a write that is late or lost once does
/// not count a live agent as gone.
pub const LIVE_FOR: Duration = Duration::from_secs(60);

/// The ConfigMap of the agent of `node`.
pub fn config_map_name(node: &str) -> String {
    format!("{}{node}", vocabulary::SERVED_PREFIX)
}

/// One node's report, read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Report {
    pub renewed: Option<SystemTime>,
    pub receives: BTreeSet<IpAddr>,
    /// Frontend (`IP`, port) to backend.
    pub frontends: BTreeMap<(IpAddr, u16), SocketAddr>,
}

impl Report {
    /// The report in a ConfigMap's data; what no agent writes is skipped.
    pub fn read<'a>(data: impl IntoIterator<Item = (&'a String, &'a String)>) -> Self {
        let mut report = Self::default();
        for (key, value) in data {
            match key.as_str() {
                RENEWED => report.renewed = parse_rfc3339(value),
                RECEIVES => {
                    report.receives = (value.split(','))
                        .filter_map(|ip| ip.trim().parse().ok())
                        .collect();
                }
                _ => {
                    if let (Some(frontend), Ok(backend)) = (parse_key(key), value.parse()) {
                        report.frontends.insert(frontend, backend);
                    }
                }
            }
        }
        report
    }
}

/// The data of the SSH IPs a node receives.
pub fn receives_value(ips: &BTreeSet<IpAddr>) -> String {
    let ips: Vec<String> = ips.iter().map(IpAddr::to_string).collect();
    ips.join(",")
}

/// The data key of a frontend.
pub fn frontend_key(frontend: SocketAddr) -> String {
    data_key(frontend.ip(), frontend.port())
}

#[cfg(test)]
mod tests {
    use std::net::{Ipv4Addr, Ipv6Addr};

    use super::*;

    #[test]
    fn a_report_reads_back_as_written_in_both_families() {
        let v4 = SocketAddr::from((Ipv4Addr::new(203, 0, 113, 10), 20123));
        let v6 = SocketAddr::from((Ipv6Addr::new(0xfd00, 0x198, 0, 0, 0, 0, 0, 0x10), 20123));
        let at = SystemTime::UNIX_EPOCH + Duration::from_secs(1_767_323_045);
        let receives: BTreeSet<IpAddr> = [v4.ip(), v6.ip()].into();
        let data: BTreeMap<String, String> = [
            (frontend_key(v4), "10.0.1.5:22".to_owned()),
            (frontend_key(v6), "[fd00::5]:22".to_owned()),
            (RECEIVES.to_owned(), receives_value(&receives)),
            (RENEWED.to_owned(), rfc3339(at)),
            // Written by nobody: skipped.
            ("203.0.113.10_x".to_owned(), "10.0.1.5:22".to_owned()),
            ("203.0.113.10_20124".to_owned(), "not an address".to_owned()),
        ]
        .into();
        let report = Report::read(&data);
        assert_eq!(report.renewed, Some(at));
        assert_eq!(report.receives, receives);
        assert_eq!(
            report.frontends,
            [
                ((v4.ip(), 20123), "10.0.1.5:22".parse().unwrap()),
                ((v6.ip(), 20123), "[fd00::5]:22".parse().unwrap()),
            ]
            .into()
        );
    }
}
