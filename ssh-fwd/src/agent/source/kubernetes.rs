//! The Kubernetes caches, followed once their first lists are complete.

use anyhow::Context as _;

use super::{
    super::{args::AgentArgs, metrics::AgentMetrics},
    Change, events, node_addrs,
};
use crate::{
    k8s,
    mapping::{MappingSet, printable},
    source::kubernetes::{
        desired::{Note, Policy},
        watch::KubeSource,
    },
    vocabulary,
};

/// The Kubernetes watches and the desired state they keep.
pub struct KubeFollower {
    pub(super) source: KubeSource,
    /// For the agent's other calls (the cross-node key's Secret).
    pub(super) client: kube::Client,
    pub(super) selector: String,
    /// A change was returned already (the first is the complete lists).
    pub(super) started: bool,
    pub(super) metrics: AgentMetrics,
    /// Events on the Services skipped or served in part.
    pub(super) events: events::Events,
}

impl KubeFollower {
    pub(super) async fn open(args: &AgentArgs, metrics: &AgentMetrics) -> anyhow::Result<Self> {
        let api = k8s::client::open(args.kubeconfig.as_deref()).await?;
        k8s::selector_check::check(&api.client, &args.selector)
            .await
            .with_context(|| format!("Kubernetes API server {}", api.server))?;
        let policy = Policy {
            ssh_ips: args.ssh_ips.iter().copied().collect(),
            ports: args.port_range.clone(),
            styles: args.styles(),
            capacity: args.max_mappings as usize,
            guard: args.guard.defaults(),
        };
        if policy.styles.external_ips {
            tracing::warn!(
                "--honour-styles honours externalips: any Service with the SSH IP in spec.externalIPs takes the ports it lists that the controller granted to nobody, forwarded to whatever its selector finds; everyone who may write a Service in any namespace is trusted with the SSH IP. Leave externalips out unless that is so"
            );
        }
        // The node's addresses, where no endpoint may be (a hostNetwork
        // pod's): read again at each resync and when they change.
        let client = api.client.clone();
        let source = KubeSource::start(
            api.client,
            &args.selector,
            policy,
            node_addrs().await?,
            &metrics.api_errors,
        );
        tracing::info!(
            selector = args.selector,
            "waiting for complete lists of Services and EndpointSlices; until then the maps stay as they are"
        );
        let node = args
            .node_name
            .clone()
            .unwrap_or_else(|| vocabulary::AGENT.to_owned());
        Ok(Self {
            source,
            events: events::Events::start(client.clone(), node),
            client,
            selector: args.selector.clone(),
            started: false,
            metrics: metrics.clone(),
        })
    }

    /// The next change: no delay on a quiet system; whatever arrived while
    /// the last change was being written comes as one.
    pub(super) async fn next(&mut self) -> anyhow::Result<Change> {
        // The watchers retry API errors themselves; this fails only if they
        // stopped.
        let (since, touched) = self.source.changed().await?;
        self.report();
        let why = if self.started {
            "cluster changed"
        } else {
            "first complete list"
        };
        self.started = true;
        Ok(Change {
            why,
            since,
            touched,
        })
    }

    /// Checks backends against the node's addresses as they are now; a
    /// failed read keeps the last ones.
    pub(super) async fn refresh_node_addrs(&mut self) {
        match node_addrs().await {
            Ok(addrs) => {
                self.source.set_node_addrs(addrs);
                self.report();
            }
            Err(e) => tracing::warn!(
                error = format!("{e:#}"),
                "cannot read the node's addresses; checking endpoints against the last ones read"
            ),
        }
    }

    /// The current desired state, checked against a full recompute.
    pub(super) fn current(&mut self) -> Option<&MappingSet> {
        if !self.source.is_ready() {
            return None;
        }
        if let Err(drift) = self.source.check() {
            tracing::error!(
                differing = drift.differing,
                "the incremental desired state differed from a full recompute; rebuilt it (please report this bug)"
            );
        }
        self.report();
        Some(self.source.mappings())
    }

    /// Logs the notes raised and sets the gauges of Services skipped and
    /// mappings left out.
    pub(super) fn report(&mut self) {
        let notes = self.source.take_notes();
        report(&notes);
        for note in &notes {
            self.events.note(note);
        }
        let invalid = i64::try_from(self.source.invalid_services()).unwrap_or(i64::MAX);
        let left_out = i64::try_from(self.source.left_out()).unwrap_or(i64::MAX);
        self.metrics.invalid_services.set(invalid);
        self.metrics.mappings_left_out.set(left_out);
    }
}

/// Logs notes as they are raised (each once while it holds): conflicts,
/// ambiguities and refusals as warnings, ignored Services at debug level.
fn report(notes: &[Note]) {
    for note in notes {
        match note {
            Note::Conflict {
                frontend,
                winner,
                loser,
            } => {
                tracing::warn!(%frontend, winner, loser, "two Services claim one frontend; the older one owns it, ready or not")
            }
            Note::ManyReadyEndpoints {
                service,
                chosen,
                ready,
            } => {
                tracing::warn!(service, %chosen, ready, "Service has several ready endpoints; an SSH Service should select one pod")
            }
            Note::NoReadyEndpoint { service } => tracing::info!(
                service,
                "no ready endpoint; its port stays closed until one is ready"
            ),
            Note::NoEndpointOfFamily { service, family } => tracing::warn!(
                service,
                %family,
                "Service exposes an address of this family but has endpoints only of the other; its ports there stay closed: make it dual-stack (spec.ipFamilyPolicy: PreferDualStack, or ipFamilies listing both) or drop the address"
            ),
            Note::NodePortsAllocated { service } => tracing::warn!(
                service,
                class = vocabulary::LB_CLASS,
                "LoadBalancer Service of this class ignored: it lets Kubernetes open NodePorts on every node; set spec.allocateLoadBalancerNodePorts: false"
            ),
            Note::NotGranted {
                service,
                port: Some(port),
            } => tracing::warn!(
                service,
                port,
                "Service lists a port on the SSH IP that the controller did not grant it; that port stays closed to it (the controller puts its own Services back as it made them)"
            ),
            Note::NotGranted {
                service,
                port: None,
            } => tracing::info!(
                service,
                "Service has the SSH IP in its load-balancer status but no grant from the controller yet; its ports stay closed until the controller grants one"
            ),
            Note::StyleNotHonoured { service, style } => tracing::warn!(
                service,
                style,
                "Service ignored: --honour-styles does not honour this shape; add it to --honour-styles or change the Service"
            ),
            Note::Invalid { service, problem } => tracing::warn!(
                service = printable(service),
                problem,
                "Service skipped: it would break or hijack the node; the others apply"
            ),
            Note::OverCapacity { excess, left_out } => tracing::warn!(
                excess,
                left_out = printable(&left_out.join(", ")),
                "more mappings than this node holds (--max-mappings); the newest Services' are left out, the rest apply: raise --max-mappings (after `ssh-fwd teardown`) or narrow the port range"
            ),
            Note::Narrowed { service, cut } => tracing::warn!(
                service = printable(service),
                cut = printable(
                    &cut.iter()
                        .map(ToString::to_string)
                        .collect::<Vec<_>>()
                        .join("; ")
                ),
                "Service asks for more than the agent's --allow or --syn-rate admit: it gets those, narrowed, not what it asked; a Service may only narrow the operator's guard"
            ),
            other => tracing::debug!(note = ?other, "Service ignored"),
        }
    }
}
