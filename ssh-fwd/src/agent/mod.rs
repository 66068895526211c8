//! `ssh-fwd agent`: attach, then keep the maps equal to the desired mappings.

mod file_source;
mod health;
mod kube_source;
mod logs;
mod metrics;
mod pod_ifaces;
pub mod reconcile;

use std::collections::BTreeSet;

use anyhow::Context as _;
use aya::Ebpf;

use crate::{
    attach::{self, AttachMode},
    cli::{AgentArgs, PodIfacesMode},
    dataplane::Dataplane,
    loader, mappings,
    pins::PinLayout,
    preflight,
};
use reconcile::Reconciler;

pub async fn run(args: AgentArgs) -> anyhow::Result<()> {
    let layout = PinLayout::new(&args.bpffs.bpffs);
    let health = std::sync::Arc::new(health::Health::default());
    // Validate the source before touching the kernel: a bad file or flag at
    // start-up is an error, and whatever a previous agent installed keeps
    // forwarding.
    let initial = match &args.mappings {
        Some(path) => Some(mappings::load_file(path)?),
        None => {
            kube_source::policy(&args)?;
            None
        }
    };
    let (ebpf, mut reconciler) = start(&layout, &args.ifaces, args.attach, health.clone())?;
    let mut pods = pod_ifaces::PodIfaces::new(
        ebpf,
        &layout,
        &args.ifaces,
        args.pod_ifaces == PodIfacesMode::Auto,
    )?;
    // The first scan before any mapping: a failure only costs speed.
    if let Err(e) = pods.sync() {
        tracing::warn!(
            error = format!("{e:#}"),
            "cannot scan pod interfaces; replies take the egress path until a rescan works"
        );
    }
    let pods = tokio::spawn(pods.run(pod_ifaces::SCAN_INTERVAL));
    serve_metrics(&args, &layout, &health).await?;
    let result = match (&args.mappings, initial) {
        (Some(path), Some(initial)) => {
            reconciler.reconcile(&initial, "start-up")?;
            file_source::watch(&args, path, &mut reconciler, initial).await
        }
        _ => kube_source::watch(&args, &mut reconciler, health).await,
    };
    // The links are pinned: dropping the object closes our handles only.
    pods.abort();
    tracing::info!(
        bpffs = %layout.version_dir().display(),
        "agent exiting; the data path stays attached and keeps forwarding (`ssh-fwd teardown` removes it)"
    );
    result
}

async fn serve_metrics(
    args: &AgentArgs,
    layout: &PinLayout,
    health: &std::sync::Arc<health::Health>,
) -> anyhow::Result<()> {
    match args.metrics_addr {
        Some(addr) => metrics::serve(addr, layout.clone(), health.clone()).await,
        None => Ok(()),
    }
}

/// Checks, loads, attaches. Returns the loaded object (which must live as long
/// as the agent, for its log buffer and program handles) and the reconciler.
pub fn start(
    layout: &PinLayout,
    ifaces: &[String],
    mode: AttachMode,
    health: std::sync::Arc<health::Health>,
) -> anyhow::Result<(Ebpf, Reconciler)> {
    let need_mount = crate::pins::needs_mount(layout.root());
    preflight::check_capabilities(need_mount)?;
    preflight::check_kernel()?;
    if let Some(other) = layout.other_versions().first() {
        anyhow::bail!(
            "{} holds the data path of another ssh-fwd version (a different pinned layout), which \
             may still be attached: stop that agent, run `ssh-fwd teardown --bpffs {}` (it removes \
             every layout; sessions through the old data path end), then start this agent",
            other.display(),
            layout.root().display()
        );
    }
    for iface in ifaces {
        crate::iface::index(iface)?;
    }
    layout.prepare()?;
    let adopting = layout.has_maps();
    let mut ebpf = loader::load(layout)?;
    logs::forward(&mut ebpf);
    attach::load_programs(&mut ebpf).map_err(|e| {
        match preflight::explain_bpf_error(e.root_cause()) {
            Some(hint) => e.context(hint),
            None => e,
        }
    })?;
    for iface in ifaces {
        let hook = attach::attach_interface(&mut ebpf, &layout.links_dir(), iface, mode)
            .with_context(|| format!("attaching to interface {iface}"))?;
        tracing::info!(iface, ingress = hook.name(), "attached");
    }
    let keep: BTreeSet<String> = ifaces.iter().cloned().collect();
    attach::detach_others(&layout.links_dir(), &keep)?;
    let dataplane = Dataplane::from_ebpf(&mut ebpf)?;
    let reconciler = Reconciler::new(dataplane, health);
    if adopting {
        let installed = reconciler.installed()?;
        tracing::info!(
            mappings = installed.frontends.len(),
            "adopted the pinned maps of a previous agent; open sessions keep flowing"
        );
    }
    Ok((ebpf, reconciler))
}
