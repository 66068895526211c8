//! Why a pod cannot be served, as the Warning event it gets: the reason is
//! what `kubectl get events` filters on, the note names the cause and the
//! fix. Each is sent once per pod and problem, and again only after the pod
//! was served in between.

use super::service::InvalidTargetPort;

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Problem {
    /// Every port of the range on the SSH IP is taken.
    NoFreePort,
    /// The target-port annotation is one the API server would refuse.
    InvalidTargetPort { value: String },
    /// A Service not made by ssh-fwd has the name this pod's would get.
    NameTaken { service: String },
    /// The pod gets its port only after it was created, so its containers
    /// lack the endpoint variable (or name `told`, a port it lost).
    EnvMissing { variable: String, told: Option<u16> },
}

/// What a note needs beyond the problem.
pub struct Scope<'a> {
    pub ssh_ip: std::net::Ipv4Addr,
    pub range: &'a std::ops::RangeInclusive<u16>,
    pub namespace: &'a str,
}

impl Problem {
    /// The event's `reason`.
    pub fn reason(&self) -> &'static str {
        match self {
            Problem::NoFreePort => "NoFreePort",
            Problem::InvalidTargetPort { .. } => "InvalidTargetPort",
            Problem::NameTaken { .. } => "ServiceNameTaken",
            Problem::EnvMissing { .. } => "SSHEnvMissing",
        }
    }

    /// The event's `action`.
    pub fn action(&self) -> &'static str {
        match self {
            Problem::NoFreePort => "Allocate",
            Problem::InvalidTargetPort { .. } | Problem::NameTaken { .. } => "CreateService",
            Problem::EnvMissing { .. } => "Allocate",
        }
    }

    /// The event's note: the cause and the fix.
    pub fn note(&self, scope: &Scope<'_>) -> String {
        match self {
            Problem::NoFreePort => format!(
                "No free SSH port: all of {}-{} on {} are taken. The pod gets one as soon as another SSH job ends; an operator can widen --port-range (and the agents' --port-range).",
                scope.range.start(),
                scope.range.end(),
                scope.ssh_ip
            ),
            Problem::InvalidTargetPort { value } => {
                format!("No SSH Service: {}.", InvalidTargetPort(value.clone()))
            }
            Problem::NameTaken { service } => format!(
                "No SSH Service: Service {}/{service} exists and was not made by ssh-fwd, so this pod cannot get its own. Rename or delete that Service, and the pod gets a port.",
                scope.namespace
            ),
            Problem::EnvMissing {
                variable,
                told: None,
            } => format!(
                "This pod was created without {variable}: the ssh-fwd admission webhook did not give it a port (the webhook was unreachable and its failurePolicy is Ignore, or it answered without a port; see the annotation ssh-fwd.io/admission). Its port is assigned now and shown in the annotation ssh-fwd.io/endpoint and the SSHReady event; recreate the pod to have {variable} set."
            ),
            Problem::EnvMissing {
                variable,
                told: Some(port),
            } => format!(
                "{variable} in this pod names port {port}, but another Service holds that port now, so the pod gets another one, shown in the annotation ssh-fwd.io/endpoint and the SSHReady event; {variable} is out of date: recreate the pod to have it right."
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_warning_names_its_cause_and_fix() {
        let range = 9000..=9001;
        let scope = Scope {
            ssh_ip: "198.18.0.10".parse().unwrap(),
            range: &range,
            namespace: "jobs",
        };
        let full = Problem::NoFreePort.note(&scope);
        assert!(full.contains("9000-9001 on 198.18.0.10") && full.contains("--port-range"));
        let bad = Problem::InvalidTargetPort {
            value: "99999".into(),
        };
        let note = bad.note(&scope);
        assert!(note.contains("ssh-fwd.io/target-port is `99999`"), "{note}");
        assert!(note.contains("remove it for port 22"), "{note}");
        assert_eq!(bad.reason(), "InvalidTargetPort");
        let taken = Problem::NameTaken {
            service: "ssh-job".into(),
        };
        let note = taken.note(&scope);
        assert!(note.contains("Service jobs/ssh-job exists and was not made by ssh-fwd"));
        assert!(note.contains("Rename or delete that Service"), "{note}");
    }
}
