//! When a pod's ssh command may be published: `--publish-when`. By
//! default once the pod is Ready and every node that receives the SSH IP
//! reports the pod's mapping in its data path ([`crate::k8s::served`]), so
//! "Connected!" is never sent for a port that does not yet reach the pod.
//! A node receives the SSH IP when its report says so: under
//! `--announce l2` the node answering ARP for it, else every node.
//!
//! The reports are the agents' word. One node's agent that lies, or dies
//! holding the announcement, can only delay a publication: after
//! `--publish-wait` of the pod being Ready the command is published
//! anyway, with a Warning naming the nodes that did not report it.

use std::{
    collections::BTreeMap,
    net::IpAddr,
    time::{Duration, SystemTime},
};

use k8s_openapi::api::core::v1::ConfigMap;

use crate::{
    controller::{activity::CLOCK_SKEW, pod::PodView},
    k8s::served::{LIVE_FOR, Report},
};

/// `--publish-when`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum PublishWhen {
    /// Once the grant is written, without waiting for the pod or the
    /// agents.
    Granted,
    /// Once the pod is Ready as well.
    Ready,
    /// Once the pod is Ready and the nodes that receive the SSH IP report
    /// its mapping in their data path.
    #[default]
    Served,
}

/// The agents' reports, by ConfigMap name.
#[derive(Debug, Default)]
pub struct Served {
    reports: BTreeMap<String, (String, Report)>,
}

/// Nobody's reports: what a gate that reads none holds.
pub static NONE: Served = Served {
    reports: BTreeMap::new(),
};

/// What a pod's publication reads beyond its Service.
#[derive(Clone, Copy, Debug)]
pub struct Gate<'a> {
    pub when: PublishWhen,
    /// `--publish-wait`.
    pub wait: Duration,
    pub served: &'a Served,
    pub now: SystemTime,
}

#[cfg(test)]
impl Gate<'static> {
    /// Publishes on the grant alone.
    pub fn granted() -> Self {
        Self {
            when: PublishWhen::Granted,
            wait: Duration::ZERO,
            served: &NONE,
            now: SystemTime::UNIX_EPOCH,
        }
    }
}

/// Whether a pod's endpoint may be published now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    Open,
    /// Not yet: why.
    Wait(Wait),
    /// `--publish-wait` passed without the reports: published, with a
    /// Warning saying why.
    Late(Wait),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Wait {
    /// The pod is not Ready.
    NotReady,
    /// No live agent says it receives the SSH IP.
    NoReceiver,
    /// These nodes receive the SSH IP and do not forward the port to the
    /// pod yet.
    Missing(Vec<String>),
}

impl Wait {
    /// What a Warning says about a publication without the reports.
    pub fn text(&self, ip: IpAddr, port: u16) -> String {
        match self {
            Self::NotReady => "the pod is not Ready".to_owned(),
            Self::NoReceiver => format!(
                "no ssh-fwd agent reports receiving the SSH IP {ip} (agents not running, not in \
                 Kubernetes mode, or older than the controller; see `kubectl -n ssh-fwd get \
                 configmaps -l ssh-fwd.io/served`)"
            ),
            Self::Missing(nodes) => format!(
                "node(s) {} receive the SSH IP {ip} but report no mapping of port {port} to this \
                 pod (see those nodes' ssh-fwd agent logs)",
                nodes.join(", ")
            ),
        }
    }
}

impl Gate<'_> {
    /// The verdict on publishing `port` on `ip` for `pod`.
    pub fn verdict(&self, pod: &PodView, ip: IpAddr, port: u16) -> Verdict {
        if self.when == PublishWhen::Granted {
            return Verdict::Open;
        }
        let Some(since) = pod.ready_since() else {
            return Verdict::Wait(Wait::NotReady);
        };
        if self.when == PublishWhen::Ready {
            return Verdict::Open;
        }
        let Err(why) = self.served.serves(ip, port, &pod.ips(), self.now) else {
            return Verdict::Open;
        };
        // A pod whose readiness has no time and no creation time (no API
        // server writes such a pod) waits for the reports alone.
        if since.is_some_and(|t| self.now >= t + self.wait) {
            Verdict::Late(why)
        } else {
            Verdict::Wait(why)
        }
    }
}

impl Served {
    /// Puts the ConfigMap `name` as it is now (`None`: gone).
    pub fn set(&mut self, name: &str, now: Option<&ConfigMap>) {
        let Some(cm) = now else {
            self.reports.remove(name);
            return;
        };
        let node = (name.strip_prefix(crate::vocabulary::SERVED_PREFIX))
            .unwrap_or(name)
            .to_owned();
        let report = Report::read(cm.data.iter().flatten());
        self.reports.insert(name.to_owned(), (node, report));
    }

    /// Whether every live report that receives `ip` forwards `port` on it
    /// to one of `pod_ips`, and there is one; else why not. A report is
    /// live for [`LIVE_FOR`] after it was renewed, and one renewed further
    /// ahead than [`CLOCK_SKEW`] is not believed.
    pub fn serves(
        &self,
        ip: IpAddr,
        port: u16,
        pod_ips: &[IpAddr],
        now: SystemTime,
    ) -> Result<(), Wait> {
        let live = |r: &Report| {
            r.renewed.is_some_and(|at| {
                at <= now + CLOCK_SKEW && now.duration_since(at).unwrap_or_default() < LIVE_FOR
            })
        };
        let receivers =
            (self.reports.values()).filter(|(_, r)| live(r) && r.receives.contains(&ip));
        let mut any = false;
        let mut missing = Vec::new();
        for (node, report) in receivers {
            any = true;
            let to_pod =
                (report.frontends.get(&(ip, port))).is_some_and(|b| pod_ips.contains(&b.ip()));
            if !to_pod {
                missing.push(node.clone());
            }
        }
        match (any, missing.is_empty()) {
            (false, _) => Err(Wait::NoReceiver),
            (true, true) => Ok(()),
            (true, false) => Err(Wait::Missing(missing)),
        }
    }
}

#[cfg(test)]
mod tests;
pub mod watch;
