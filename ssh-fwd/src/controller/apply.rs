//! Carries out a plan against the API. Each write stands alone: one that
//! fails is logged and counted, and the next reconcile (which recomputes
//! everything) tries again. Writes name the object they mean by uid where
//! the API allows it, so one made since under the same name is left alone.

use std::{collections::BTreeSet, sync::Arc};

use k8s_openapi::{
    api::{
        coordination::v1::Lease,
        core::v1::{Pod, Service},
        events::v1::Event as K8sEvent,
    },
    jiff::Timestamp,
};
use kube::{
    Api, Client,
    api::{DeleteParams, Patch, PatchParams, Preconditions},
    runtime::events::{EventType, Reporter},
};
use serde_json::json;

mod cut;
mod event;
mod grant;

use super::{
    api_error::{self, Grant},
    election::Term,
    expect::Done,
    metrics::ControllerMetrics,
    plan::{Action, DeleteReason, Problem},
    pod::PodRef,
    reservation::write::{self, lease_port, release, reserve_port},
    service,
    ssh_ips::{self, SshIps},
    warn::Scope,
};
use crate::{k8s::answer::Unread, vocabulary};

/// What the writes need to know beyond the plan.
pub struct Context {
    pub client: Client,
    /// The port reservations, in the controller's own namespace.
    pub reservations: Api<Lease>,
    /// Who sends the events (each is written once: [`event`]).
    pub reporter: Reporter,
    /// The SSH IPs the Services expose, the published one first.
    pub ssh_ips: SshIps,
    /// The shape of the Services made.
    pub style: crate::args::ServiceStyle,
    /// Whose Services hold ports on the SSH IP: the agents' rules.
    pub policy: crate::source::kubernetes::desired::Policy,
    pub host: String,
    pub user: String,
    pub range: std::ops::RangeInclusive<u16>,
    pub metrics: ControllerMetrics,
    /// This replica's term as leader: every write is bounded by it.
    pub term: Arc<Term>,
    /// `--host-certs`: the CA the pods' host certificates are issued by.
    pub host_certs: Option<Arc<super::host_certs::HostCerts>>,
}

impl Context {
    /// What the Services made look like.
    pub fn settings(&self) -> service::Settings {
        service::Settings {
            ssh_ips: self.ssh_ips.clone(),
            style: self.style,
        }
    }
}

/// The outcome of one pass.
#[derive(Debug, Default)]
pub struct Applied {
    /// Writes that succeeded (the caches may not show them yet).
    pub done: Vec<Done>,
    pub failures: usize,
    /// Creates blocked by a Service of the same name that is someone
    /// else's (the watches do not show it: it is not selected); retried
    /// with backoff, so its removal is noticed.
    pub blocked: usize,
}

/// Writes in flight at once. A pass's actions are independent (each
/// touches one pod or one Service, and the steps one pod needs in order
/// fall into separate passes), so they need not wait for each other.
/// Beyond its share, the API server's priority and fairness queues them.
/// 32 rather than 16: 5,000 pods published in 2.0-2.6 s instead of
/// 2.2-2.8 s (`cargo xtask bench controller`, 4 runs each, a build
/// without LTO; within this VM's noise, but lower at every rank).
const CONCURRENT_WRITES: usize = 32;

/// Pods (by uid) already warned of a problem, so a lasting one (a full
/// range, a bad annotation) does not turn into an event storm.
pub type Warned = BTreeSet<(String, Problem)>;

/// What a successful write leaves to remember.
enum Outcome {
    Nothing,
    Done(Done),
    /// The pod's Service created on `port`, and whether its LoadBalancer
    /// status, written right after, failed (a later pass writes it again).
    Created {
        uid: String,
        port: u16,
        status_failed: Option<anyhow::Error>,
    },
    Warned(String, Problem),
    /// The pod's Service name is taken (the pod was warned, now or before).
    Blocked(String, Problem),
    /// Lost a race for a port: the next pass, soon, picks another.
    Raced,
}

/// Runs `actions`. A warning already in `warned` is not sent again; one is
/// added only once its event is written, and a pod's warnings are forgotten
/// once it gets a Service.
///
/// Each write is a task of its own, so that building requests and reading
/// answers spread over the runtime's workers rather than queue on the one
/// thread that runs the pass. They are the pass's: dropping it (the term
/// ended) aborts them.
pub async fn apply(ctx: &Arc<Context>, actions: Vec<Action>, warned: &mut Warned) -> Applied {
    let told = |pod: &PodRef, problem: Problem| warned.contains(&(pod.uid.clone(), problem));
    // With each action, whether its pod was told already that the name of
    // the Service it would create is someone else's.
    let mut queued = actions.into_iter().filter_map(|action| match &action {
        Action::Warn { pod, problem } if told(pod, problem.clone()) => None,
        Action::Create { pod, service, .. } => {
            let name = service.metadata.name.clone().unwrap_or_default();
            let told_taken = told(pod, Problem::NameTaken { service: name });
            Some((action, told_taken))
        }
        _ => Some((action, false)),
    });
    let mut running = tokio::task::JoinSet::new();
    let mut outcomes: Vec<anyhow::Result<Outcome>> = Vec::new();
    loop {
        while running.len() < CONCURRENT_WRITES {
            let Some((action, told_taken)) = queued.next() else {
                break;
            };
            let ctx = ctx.clone();
            running.spawn(async move {
                let call = run(&ctx, action, told_taken);
                ctx.term.bounded("writing to the API", call).await
            });
        }
        match running.join_next().await {
            Some(Ok(outcome)) => outcomes.push(outcome),
            Some(Err(e)) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            Some(Err(e)) => outcomes.push(Err(anyhow::anyhow!("a write was cancelled: {e}"))),
            None => break,
        }
    }
    let mut applied = Applied::default();
    for outcome in outcomes {
        match outcome {
            Ok(Outcome::Nothing) => {}
            Ok(Outcome::Done(done)) => applied.done.push(done),
            Ok(Outcome::Created {
                uid,
                port,
                status_failed,
            }) => {
                warned.retain(|(warned, _)| *warned != uid);
                applied.done.push(Done::Created { uid, port });
                if let Some(e) = status_failed {
                    applied.failed(ctx, &e);
                }
            }
            Ok(Outcome::Warned(uid, problem)) => {
                warned.insert((uid, problem));
            }
            Ok(Outcome::Blocked(uid, problem)) => {
                applied.blocked += 1;
                warned.insert((uid, problem));
            }
            Ok(Outcome::Raced) => applied.failures += 1,
            Err(e) => applied.failed(ctx, &e),
        }
    }
    applied
}

impl Applied {
    /// A write that failed: counted, logged, retried by a later pass.
    fn failed(&mut self, ctx: &Context, e: &anyhow::Error) {
        self.failures += 1;
        ctx.metrics.api_errors.inc();
        tracing::warn!(error = %format!("{e:#}"), "API write failed; the next reconcile retries");
    }
}

/// One action; returns what to remember of it. `told_taken`: the pod was
/// warned already that its Service's name is someone else's.
async fn run(ctx: &Context, action: Action, told_taken: bool) -> anyhow::Result<Outcome> {
    match action {
        Action::Create {
            pod,
            port,
            service,
            reserve,
            reclaim,
        } => {
            if let Some(lease) = reserve {
                let reclaimed = match reclaim {
                    Some(r) => write::reclaim(&ctx.reservations, &r).await?,
                    None => true,
                };
                if !reclaimed || !reserve_port(&ctx.reservations, &lease, port).await? {
                    tracing::info!(pod = %format!("{}/{}", pod.namespace, pod.name), port, "the port was reserved by someone else a moment ago; the next pass picks another");
                    return Ok(Outcome::Raced);
                }
                cut::tell(ctx, &pod, &lease).await;
            }
            return match create(ctx, &pod, port, &service).await? {
                Created::New => {
                    // Our own write needs no cache to show it: the status
                    // goes on now instead of a pass later. Publishing still
                    // waits for the cache (an older Service on the port
                    // would show there).
                    let name = service.metadata.name.as_deref().unwrap_or_default();
                    let status_failed = grant::set_grant(ctx, &pod, name, port).await.err();
                    Ok(Outcome::Created {
                        uid: pod.uid,
                        port,
                        status_failed,
                    })
                }
                Created::Ours => Ok(Outcome::Nothing),
                Created::Taken(name) => {
                    let problem = Problem::NameTaken { service: name };
                    if !told_taken {
                        warn(ctx, &pod, &problem).await?;
                    }
                    Ok(Outcome::Blocked(pod.uid, problem))
                }
            };
        }
        Action::Delete {
            namespace,
            name,
            uid,
            why,
            unpublish: pod,
        } => {
            // In this order: a Service deleted first would leave a failed
            // withdrawal with nothing to retry it.
            if let Some(pod) = pod {
                unpublish(ctx, &pod).await?;
            }
            delete(ctx, &namespace, &name, uid, &why).await?;
        }
        Action::SetGrant { pod, name, port } => grant::set_grant(ctx, &pod, &name, port).await?,
        Action::Restore {
            pod,
            name,
            fields,
            patch,
        } => grant::restore(ctx, &pod, &name, &fields, &patch).await?,
        Action::Reserve { lease } => {
            let port = lease_port(&lease);
            if reserve_port(&ctx.reservations, &lease, port).await? {
                tracing::info!(port, holder = ?lease.spec.as_ref().and_then(|s| s.holder_identity.as_deref()), "reserved a port a Service holds");
            }
        }
        Action::Bind { lease, pod } => {
            if write::bind(&ctx.reservations, &lease).await? {
                cut::tell(ctx, &pod, &lease).await;
            }
        }
        Action::Quarantine { lease } => drop(write::quarantine(&ctx.reservations, &lease).await?),
        Action::Release {
            name,
            port,
            uid,
            resource_version,
        } => release(&ctx.reservations, &name, port, uid, resource_version).await?,
        Action::Publish {
            pod,
            service,
            port,
            announce,
            unconfirmed,
        } => {
            if let Some(why) = unconfirmed
                && announce
            {
                let note = format!(
                    "publishing the ssh command without the agents' word that port {port} reaches this pod: {why}"
                );
                tracing::warn!(pod = %format!("{}/{}", pod.namespace, pod.name), "{note}");
                let reason = vocabulary::reason::SSH_UNCONFIRMED;
                ctx.metrics
                    .warnings
                    .get_or_create(&super::metrics::ReasonLabel { reason })
                    .inc();
                event(
                    ctx,
                    &pod,
                    EventType::Warning,
                    vocabulary::reason::SSH_UNCONFIRMED,
                    vocabulary::action::PUBLISH,
                    note,
                )
                .await?;
            }
            let endpoint = publish(ctx, &pod, &service, port, announce).await?;
            return Ok(Outcome::Done(Done::Published {
                uid: pod.uid,
                endpoint,
            }));
        }
        Action::Label { pod, service, why } => {
            label(ctx, &pod, &service).await?;
            tracing::debug!(pod = %format!("{}/{}", pod.namespace, pod.name), ?why, "labelled into its Service; the ssh command waits");
        }
        Action::Await { .. } => {}
        Action::IssueHostKey {
            pod,
            secret,
            port,
            deadline,
        } => match &ctx.host_certs {
            Some(certs) => (certs.issue(&ctx.client, &pod, &secret, port, deadline)).await?,
            None => {
                tracing::debug!(pod = %format!("{}/{}", pod.namespace, pod.name), "the pod asks for a host key, but this controller runs without --host-certs")
            }
        },
        Action::Warn { pod, problem } => {
            warn(ctx, &pod, &problem).await?;
            return Ok(Outcome::Warned(pod.uid, problem));
        }
    }
    Ok(Outcome::Nothing)
}

/// What a create found.
enum Created {
    New,
    /// Ours already, from a pass the cache had not caught up with.
    Ours,
    /// Someone else's Service has the name (the controller does not watch
    /// Services it does not select, so it learns this here).
    Taken(String),
}

async fn create(
    ctx: &Context,
    pod: &PodRef,
    port: u16,
    service: &Service,
) -> anyhow::Result<Created> {
    let api: Api<Service> = Api::namespaced(ctx.client.clone(), &pod.namespace);
    let name = service.metadata.name.as_deref().unwrap_or("");
    match crate::k8s::answer::create(&api, service).await {
        Ok(()) => {
            ctx.metrics.services_created.inc();
            tracing::info!(pod = %format!("{}/{}", pod.namespace, pod.name), service = name, port, "created the SSH Service");
            Ok(Created::New)
        }
        Err(kube::Error::Api(s)) if s.is_already_exists() => {
            let existing = api.get_opt(name).await.map_err(|e| {
                let what = format!("reading Service {}/{name}", pod.namespace);
                api_error::context(e, what, Grant::Cluster)
            })?;
            Ok(match existing {
                Some(svc) if service::served_pod(&svc) != Some(&pod.uid) => {
                    Created::Taken(name.to_owned())
                }
                _ => Created::Ours,
            })
        }
        Err(e) => Err(api_error::context(
            e,
            format!(
                "creating Service {}/{name} for pod {} on port {port}",
                pod.namespace, pod.name
            ),
            Grant::Cluster,
        )),
    }
}

/// Deletes the Service `namespace/name` if it is still the one with `uid`.
async fn delete(
    ctx: &Context,
    namespace: &str,
    name: &str,
    uid: Option<String>,
    why: &DeleteReason,
) -> anyhow::Result<()> {
    let api: Api<Service> = Api::namespaced(ctx.client.clone(), namespace);
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            uid,
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    match api.delete(name, &params).await {
        Ok(_) => {
            ctx.metrics.services_deleted.inc();
            match why {
                DeleteReason::PodGone => {
                    tracing::info!(service = %format!("{namespace}/{name}"), "deleted the SSH Service: its pod is gone or no longer asks for SSH; the port is free again")
                }
                DeleteReason::Duplicate => {
                    tracing::warn!(service = %format!("{namespace}/{name}"), "deleted an extra SSH Service for a pod that has an older one")
                }
                DeleteReason::LostPort { port, holder } => {
                    tracing::warn!(service = %format!("{namespace}/{name}"), port, %holder, "deleted the SSH Service: its pod holds no reservation of its port, which is reserved for another; its pod gets another")
                }
            }
            Ok(())
        }
        // Gone already, or a namesake made since (the uid precondition).
        Err(kube::Error::Api(s)) if s.is_not_found() || s.is_conflict() => Ok(()),
        Err(e) => Err(api_error::context(
            e,
            format!("deleting Service {namespace}/{name}"),
            Grant::Cluster,
        )),
    }
}

async fn publish(
    ctx: &Context,
    pod: &PodRef,
    service: &str,
    port: u16,
    announce: bool,
) -> anyhow::Result<String> {
    let endpoint = ssh_ips::endpoint(&ctx.host, port);
    let api: Api<Unread<Pod>> = Api::namespaced(ctx.client.clone(), &pod.namespace);
    let patch = |mut fields: serde_json::Value| {
        let api = api.clone();
        // The uid makes the patch fail on a namesake made since.
        fields["uid"] = json!(pod.uid);
        async move {
            api.patch(
                &pod.name,
                &PatchParams::default(),
                &Patch::Merge(&json!({"metadata": fields})),
            )
            .await
            .map(drop)
            .map_err(|e| {
                let what = format!("patching pod {}/{}", pod.namespace, pod.name);
                api_error::context(e, what, Grant::Cluster)
            })
        }
    };
    // The event first, then one patch with the selector label and the
    // annotations, which record that the user was told: a crash in between
    // repeats the event rather than losing it. The label lands a request
    // after the event; the endpoint slice and the agents take longer than
    // that anyway.
    if announce {
        let mut note = format!(
            "SSH: Connected! Available at: {}",
            ssh_ips::command(&ctx.user, &ctx.host, port)
        );
        if let Some(certs) = &ctx.host_certs {
            note += &format!(
                ". Trust its host key once, with this line in ~/.ssh/known_hosts: {}",
                certs.trust.line()
            );
        }
        event(
            ctx,
            pod,
            EventType::Normal,
            vocabulary::reason::SSH_READY,
            vocabulary::action::PUBLISH,
            note,
        )
        .await?;
        tracing::info!(pod = %format!("{}/{}", pod.namespace, pod.name), %endpoint, "published the SSH endpoint");
    }
    patch(json!({
        "labels": {vocabulary::SERVICE: service},
        "annotations": {vocabulary::ENDPOINT: &endpoint, vocabulary::ANNOUNCED: &endpoint},
    }))
    .await?;
    Ok(endpoint)
}

/// Puts the pod in its Service's endpoints: the selector label alone,
/// before its endpoint may be told.
async fn label(ctx: &Context, pod: &PodRef, service: &str) -> anyhow::Result<()> {
    let api: Api<Unread<Pod>> = Api::namespaced(ctx.client.clone(), &pod.namespace);
    // The uid makes the patch fail on a namesake made since.
    let patch = json!({"metadata": {"uid": pod.uid, "labels": {vocabulary::SERVICE: service}}});
    api.patch(&pod.name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map(drop)
        .map_err(|e| {
            let what = format!("labelling pod {}/{}", pod.namespace, pod.name);
            api_error::context(e, what, Grant::Cluster)
        })
}

/// Takes the endpoint off a pod whose Service goes; a pod that is gone, or
/// replaced by a namesake, has nothing to take off.
async fn unpublish(ctx: &Context, pod: &PodRef) -> anyhow::Result<()> {
    let patch = json!({"metadata": {
        "uid": pod.uid,
        "labels": {vocabulary::SERVICE: null},
        "annotations": {vocabulary::ENDPOINT: null, vocabulary::ANNOUNCED: null},
    }});
    let api: Api<Unread<Pod>> = Api::namespaced(ctx.client.clone(), &pod.namespace);
    match api
        .patch(&pod.name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => Ok(()),
        Err(e) if api_error::is_gone(&e) => Ok(()),
        Err(e) => {
            let what = format!(
                "removing the SSH endpoint from pod {}/{}",
                pod.namespace, pod.name
            );
            Err(api_error::context(e, what, Grant::Cluster))
        }
    }
}

async fn warn(ctx: &Context, pod: &PodRef, problem: &Problem) -> anyhow::Result<()> {
    let scope = Scope {
        ssh_ip: ctx.ssh_ips.published(),
        range: &ctx.range,
        namespace: &pod.namespace,
    };
    let note = problem.note(&scope);
    tracing::warn!(pod = %format!("{}/{}", pod.namespace, pod.name), "{note}");
    let (reason, action) = (problem.reason(), problem.action());
    event(ctx, pod, EventType::Warning, reason, action, note).await?;
    ctx.metrics
        .warnings
        .get_or_create(&super::metrics::ReasonLabel { reason })
        .inc();
    Ok(())
}

async fn event(
    ctx: &Context,
    pod: &PodRef,
    type_: EventType,
    reason: &str,
    action: &str,
    note: String,
) -> anyhow::Result<()> {
    let told = event::Told {
        type_,
        reason,
        action,
        note: super::warn::bounded(note),
    };
    let event = event::object(&ctx.reporter, pod, told, Timestamp::now());
    let api: Api<K8sEvent> = Api::namespaced(ctx.client.clone(), &pod.namespace);
    crate::k8s::answer::create(&api, &event).await.map_err(|e| {
        let what = format!(
            "sending a {reason} event to pod {}/{}",
            pod.namespace, pod.name
        );
        api_error::context(e, what, Grant::Cluster)
    })
}
