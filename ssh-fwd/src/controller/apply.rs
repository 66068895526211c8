//! Carries out a plan against the API. Each write stands alone: one that
//! fails is logged and counted, and the next reconcile (which recomputes
//! everything) tries again.

use std::{
    collections::BTreeSet,
    sync::atomic::{AtomicU64, Ordering},
};

use futures::StreamExt as _;
use k8s_openapi::api::core::v1::{ObjectReference, Pod, Service};
use kube::{
    Api, Client,
    api::{DeleteParams, Patch, PatchParams, PostParams},
    runtime::events::{Event, EventType, Recorder},
};
use serde_json::json;

use super::{
    expect::Done,
    plan::{Action, DeleteReason, PodRef},
    service::{ENDPOINT_ANNOTATION, SERVICE_LABEL},
};

/// What the writes need to know beyond the plan.
pub struct Context {
    pub client: Client,
    pub recorder: Recorder,
    pub ssh_ip: std::net::Ipv4Addr,
    pub host: String,
    pub user: String,
    pub range: std::ops::RangeInclusive<u16>,
    pub api_errors: AtomicU64,
    pub services_created: AtomicU64,
    pub services_deleted: AtomicU64,
}

/// The outcome of one pass.
#[derive(Debug, Default)]
pub struct Applied {
    /// Writes that succeeded (the caches may not show them yet).
    pub done: Vec<Done>,
    pub failures: usize,
}

/// Writes in flight at once. A pass's actions are independent (each
/// touches one pod or one Service, and the steps one pod needs in order
/// fall into separate passes), so they need not wait for each other.
const CONCURRENT_WRITES: usize = 16;

/// Runs `actions`. `warned` holds the pods already told there is no free
/// port, so a full range does not turn into an event storm.
pub async fn apply(ctx: &Context, actions: Vec<Action>, warned: &mut BTreeSet<String>) -> Applied {
    let actions: Vec<Action> = actions
        .into_iter()
        .filter(|action| match action {
            Action::NoFreePort { pod } => warned.insert(pod.uid.clone()),
            Action::Create { pod, .. } => {
                warned.remove(&pod.uid);
                true
            }
            _ => true,
        })
        .collect();
    let outcomes: Vec<anyhow::Result<Option<Done>>> = futures::stream::iter(actions)
        .map(|action| run(ctx, action))
        .buffer_unordered(CONCURRENT_WRITES)
        .collect()
        .await;
    let mut applied = Applied::default();
    for outcome in outcomes {
        match outcome {
            Ok(done) => applied.done.extend(done),
            Err(e) => {
                applied.failures += 1;
                ctx.api_errors.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(error = %format!("{e:#}"), "API write failed; the next reconcile retries");
            }
        }
    }
    applied
}

/// One action; returns what the caches should show for it.
async fn run(ctx: &Context, action: Action) -> anyhow::Result<Option<Done>> {
    match action {
        Action::Create { pod, port, service } => {
            let created = create(ctx, &pod, port, &service).await?;
            return Ok(created.then_some(Done::Created { uid: pod.uid, port }));
        }
        Action::Delete {
            namespace,
            name,
            why,
        } => delete(ctx, &namespace, &name, &why).await?,
        Action::SetIngress { namespace, name } => set_ingress(ctx, &namespace, &name).await?,
        Action::Publish {
            pod,
            service,
            port,
            announce,
        } => {
            let endpoint = publish(ctx, &pod, &service, port, announce).await?;
            return Ok(Some(Done::Published {
                uid: pod.uid,
                endpoint,
            }));
        }
        Action::Unpublish { namespace, name } => unpublish(ctx, &namespace, &name).await?,
        Action::NoFreePort { pod } => no_free_port(ctx, &pod).await?,
    }
    Ok(None)
}

/// Whether a Service was created (it may exist already, from a pass the
/// cache had not caught up with).
async fn create(ctx: &Context, pod: &PodRef, port: u16, service: &Service) -> anyhow::Result<bool> {
    let api: Api<Service> = Api::namespaced(ctx.client.clone(), &pod.namespace);
    let name = service.metadata.name.as_deref().unwrap_or("");
    match api.create(&PostParams::default(), service).await {
        Ok(_) => {
            ctx.services_created.fetch_add(1, Ordering::Relaxed);
            tracing::info!(pod = %format!("{}/{}", pod.namespace, pod.name), service = name, port, "created the SSH Service");
            Ok(true)
        }
        // Made by an earlier pass whose create the cache had not shown yet.
        Err(kube::Error::Api(s)) if s.is_already_exists() => Ok(false),
        Err(e) => Err(anyhow::Error::new(e).context(format!(
            "creating Service {}/{name} for pod {} on port {port}",
            pod.namespace, pod.name
        ))),
    }
}

async fn delete(
    ctx: &Context,
    namespace: &str,
    name: &str,
    why: &DeleteReason,
) -> anyhow::Result<()> {
    let api: Api<Service> = Api::namespaced(ctx.client.clone(), namespace);
    match api.delete(name, &DeleteParams::default()).await {
        Ok(_) => {
            ctx.services_deleted.fetch_add(1, Ordering::Relaxed);
            match why {
                DeleteReason::PodGone => {
                    tracing::info!(service = %format!("{namespace}/{name}"), "deleted the SSH Service: its pod is gone or no longer asks for SSH; the port is free again")
                }
                DeleteReason::Duplicate => {
                    tracing::warn!(service = %format!("{namespace}/{name}"), "deleted an extra SSH Service for a pod that has an older one")
                }
                DeleteReason::LostPort { port, holder } => {
                    tracing::warn!(service = %format!("{namespace}/{name}"), port, %holder, "deleted the SSH Service: an older Service holds its port; its pod gets another")
                }
            }
            Ok(())
        }
        Err(kube::Error::Api(s)) if s.is_not_found() => Ok(()),
        Err(e) => {
            Err(anyhow::Error::new(e).context(format!("deleting Service {namespace}/{name}")))
        }
    }
}

async fn set_ingress(ctx: &Context, namespace: &str, name: &str) -> anyhow::Result<()> {
    let api: Api<Service> = Api::namespaced(ctx.client.clone(), namespace);
    let status = json!({"status": {"loadBalancer": {"ingress": [{"ip": ctx.ssh_ip.to_string()}]}}});
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .map(drop)
        .map_err(|e| {
            anyhow::Error::new(e).context(format!(
                "writing the load-balancer status of Service {namespace}/{name}"
            ))
        })
}

async fn publish(
    ctx: &Context,
    pod: &PodRef,
    service: &str,
    port: u16,
    announce: bool,
) -> anyhow::Result<String> {
    let endpoint = format!("{}:{port}", ctx.host);
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), &pod.namespace);
    let patch = |fields: serde_json::Value| {
        let api = api.clone();
        async move {
            api.patch(
                &pod.name,
                &PatchParams::default(),
                &Patch::Merge(&json!({"metadata": fields})),
            )
            .await
            .map(drop)
            .map_err(|e| {
                anyhow::Error::new(e)
                    .context(format!("patching pod {}/{}", pod.namespace, pod.name))
            })
        }
    };
    // The selector label first, so the Service has its endpoint by the time
    // the user reads the command; the annotation last, because it records
    // that the user was told: a crash in between repeats the event rather
    // than losing it.
    patch(json!({"labels": {SERVICE_LABEL: service}})).await?;
    if announce {
        let note = format!(
            "SSH: Connected! Available at: ssh {}@{} -p {port}",
            ctx.user, ctx.host
        );
        event(ctx, pod, EventType::Normal, "SSHReady", "Publish", note).await?;
        tracing::info!(pod = %format!("{}/{}", pod.namespace, pod.name), %endpoint, "published the SSH endpoint");
    }
    patch(json!({"annotations": {ENDPOINT_ANNOTATION: &endpoint}})).await?;
    Ok(endpoint)
}

async fn unpublish(ctx: &Context, namespace: &str, name: &str) -> anyhow::Result<()> {
    let patch = json!({"metadata": {
        "labels": {SERVICE_LABEL: null},
        "annotations": {ENDPOINT_ANNOTATION: null},
    }});
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), namespace);
    match api
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.is_not_found() => Ok(()),
        Err(e) => Err(anyhow::Error::new(e).context(format!(
            "removing the SSH endpoint from pod {namespace}/{name}"
        ))),
    }
}

async fn no_free_port(ctx: &Context, pod: &PodRef) -> anyhow::Result<()> {
    let (first, last) = (ctx.range.start(), ctx.range.end());
    let note = format!(
        "No free SSH port: all of {first}-{last} on {} are taken. The pod gets one as soon as another SSH job ends; an operator can widen --port-range (and the agents' --port-range).",
        ctx.ssh_ip
    );
    tracing::warn!(pod = %format!("{}/{}", pod.namespace, pod.name), "{note}");
    event(ctx, pod, EventType::Warning, "NoFreePort", "Allocate", note).await
}

async fn event(
    ctx: &Context,
    pod: &PodRef,
    type_: EventType,
    reason: &str,
    action: &str,
    note: String,
) -> anyhow::Result<()> {
    let regarding = ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Pod".into()),
        name: Some(pod.name.clone()),
        namespace: Some(pod.namespace.clone()),
        uid: Some(pod.uid.clone()),
        ..ObjectReference::default()
    };
    let event = Event {
        type_,
        reason: reason.into(),
        note: Some(note),
        action: action.into(),
        secondary: None,
    };
    ctx.recorder.publish(&event, &regarding).await.map_err(|e| {
        anyhow::Error::new(e).context(format!(
            "sending a {reason} event to pod {}/{}",
            pod.namespace, pod.name
        ))
    })
}
