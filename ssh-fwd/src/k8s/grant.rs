//! The grant: the controller's word that a port on the SSH IP is a
//! Service's, and for which pod. It is the one authority the agents honour
//! a port by (and the controller recognises its own Services by), so it
//! lives where a tenant cannot write: the Service's status, which only
//! holders of `services/status` change (the API server keeps the status of
//! every write to the Service itself, and the `edit` role does not grant
//! the subresource).
//!
//! It is a condition of type [`vocabulary::GRANTED`], status `True`, whose
//! message names the port and the pod's uid:
//! `port 8123 granted to pod jobs/job-1 (uid 2f0c...)`. A LoadBalancer
//! Service also lists the port under each SSH IP's
//! `status.loadBalancer.ingress[].ports`, where `kubectl` shows it; the
//! agents take an ingress address only where its entry lists the granted
//! port.

use crate::vocabulary;

/// A port granted to a Service, for one pod.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Grant {
    pub port: u16,
    /// The uid of the pod the port was granted to: the only endpoint the
    /// port may reach.
    pub pod_uid: Box<str>,
}

/// The condition's `reason`.
pub const REASON: &str = "PortGranted";

const PREFIX: &str = "port ";
const TO_POD: &str = " granted to pod ";
const UID: &str = " (uid ";

impl Grant {
    /// The condition's message; `pod` is `namespace/name`, for people.
    pub fn message(&self, pod: &str) -> String {
        format!("{PREFIX}{}{TO_POD}{pod}{UID}{})", self.port, self.pod_uid)
    }

    /// Reads a message [`Grant::message`] wrote; `None` for any other
    /// text.
    pub fn parse(message: &str) -> Option<Self> {
        let rest = message.strip_prefix(PREFIX)?;
        let (port, rest) = rest.split_once(TO_POD)?;
        let port: u16 = port.parse().ok().filter(|p| *p != 0)?;
        let (_pod, uid) = rest.rsplit_once(UID)?;
        let uid = uid.strip_suffix(')')?;
        let plain = |b: u8| b.is_ascii_alphanumeric() || b == b'-';
        (!uid.is_empty() && uid.bytes().all(plain)).then(|| Self {
            port,
            pod_uid: uid.into(),
        })
    }

    /// The grant among a status's conditions, each given as `(type,
    /// status, message)`: the one of type [`vocabulary::GRANTED`] whose
    /// status is `True`, if its message reads as a grant.
    pub fn of<'a>(
        conditions: impl IntoIterator<Item = (&'a str, &'a str, &'a str)>,
    ) -> Option<Self> {
        conditions
            .into_iter()
            .find(|(kind, _, _)| *kind == vocabulary::GRANTED)
            .filter(|(_, status, _)| *status == "True")
            .and_then(|(_, _, message)| Self::parse(message))
    }
}

/// A Service's `status` granting `port` to the pod with `pod_uid`, with
/// an ingress entry for each of `ips` listing the port, as the controller
/// writes it: for tests that build Services as the API server returns them
/// (the test bed's builder, which [`tests`] holds to this format).
#[cfg(test)]
pub fn status_json(ips: &[&str], port: u16, pod_uid: &str) -> serde_json::Value {
    ssh_fwd_tests::grant::status(ips, port, pod_uid)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grant() -> Grant {
        Grant {
            port: 8123,
            pod_uid: "2f0c1d9e-0000-4000-8000-000000000001".into(),
        }
    }

    #[test]
    fn a_grant_reads_back_from_its_message() {
        let message = grant().message("jobs/job-1");
        assert_eq!(
            message,
            "port 8123 granted to pod jobs/job-1 (uid 2f0c1d9e-0000-4000-8000-000000000001)"
        );
        assert_eq!(Grant::parse(&message), Some(grant()));
    }

    #[test]
    fn other_text_is_no_grant() {
        for text in [
            "",
            "port 0 granted to pod a/b (uid x)",
            "port 70000 granted to pod a/b (uid x)",
            "port 8123 granted to pod a/b (uid )",
            "port 8123 granted to pod a/b (uid x y)",
            "port 8123 granted to pod a/b uid x",
            "port 8123 to pod a/b (uid x)",
            "Port 8123 granted to pod a/b (uid x)",
        ] {
            assert_eq!(Grant::parse(text), None, "{text}");
        }
    }

    #[test]
    fn only_a_true_condition_of_the_grant_type_counts() {
        let message = grant().message("jobs/job-1");
        let read = |kind, status| Grant::of([("Other", "True", "x"), (kind, status, &*message)]);
        assert_eq!(read(vocabulary::GRANTED, "True"), Some(grant()));
        assert_eq!(read(vocabulary::GRANTED, "False"), None);
        assert_eq!(read(vocabulary::GRANTED, "Unknown"), None);
        assert_eq!(read("Granted", "True"), None);
    }

    #[test]
    fn the_test_beds_grant_reads_as_a_grant() {
        let status = status_json(&["198.18.0.10"], 8123, "u-1");
        let condition = &status["conditions"][0];
        let text = |key: &str| condition[key].as_str().unwrap_or_default();
        let read = Grant::of([(text("type"), text("status"), text("message"))]);
        assert_eq!(
            read,
            Some(Grant {
                port: 8123,
                pod_uid: "u-1".into()
            })
        );
        assert_eq!(text("reason"), REASON);
    }
}
