//! `ssh-fwd list`: what is installed, with counters, from the pinned maps.

use std::collections::BTreeMap;

use serde::Serialize;
use ssh_fwd_common::maps::FLAG_SHARED_BACKEND;

use crate::{
    attach,
    cli::{ListArgs, OutputFormat},
    dataplane::{Dataplane, show},
    pins::PinLayout,
};

#[derive(Debug, Serialize)]
pub struct Listing {
    pub mappings: Vec<Row>,
    pub interfaces: Vec<Interface>,
    /// Pods' interfaces holding the reply program (`--pod-ifaces auto`).
    pub pod_interfaces: Vec<PodInterface>,
    pub tracked_connections: usize,
    pub counters: BTreeMap<&'static str, u64>,
}

#[derive(Debug, Serialize)]
pub struct Row {
    pub name: String,
    pub frontend: String,
    pub backend: String,
    /// The backend is also behind another frontend.
    pub shared_backend: bool,
    pub packets_in: u64,
    pub bytes_in: u64,
    pub packets_out: u64,
    pub bytes_out: u64,
}

#[derive(Debug, Serialize)]
pub struct Interface {
    pub iface: String,
    pub link: String,
}

#[derive(Debug, Serialize)]
pub struct PodInterface {
    pub index: u32,
    /// Empty if the interface is gone (the next agent scan drops the link).
    pub iface: String,
}

pub fn run(args: ListArgs) -> anyhow::Result<()> {
    let layout = PinLayout::new(&args.bpffs.bpffs);
    let listing = collect(&layout)?;
    match args.output {
        OutputFormat::Json => println!("{}", serde_json::to_string_pretty(&listing)?),
        OutputFormat::Table => print_table(&listing),
    }
    Ok(())
}

pub fn collect(layout: &PinLayout) -> anyhow::Result<Listing> {
    let dataplane = Dataplane::open_pinned(layout)?;
    let installed = dataplane.read_installed()?;
    let mut mappings = Vec::new();
    for (frontend, target) in &installed.frontends {
        let c = dataplane.mapping_counters(target.slot)?;
        mappings.push(Row {
            name: installed
                .names
                .get(&target.slot)
                .cloned()
                .unwrap_or_default(),
            frontend: show(frontend),
            backend: show(&target.endpoint),
            shared_backend: target.flags & FLAG_SHARED_BACKEND != 0,
            packets_in: c.packets_in,
            bytes_in: c.bytes_in,
            packets_out: c.packets_out,
            bytes_out: c.bytes_out,
        });
    }
    let interfaces = attach::attached(&layout.links_dir())
        .into_iter()
        .map(|(iface, link)| Interface { iface, link })
        .collect();
    let pod_interfaces = layout
        .pod_links()
        .into_iter()
        .map(|index| PodInterface {
            index,
            iface: crate::iface::name_of(index).unwrap_or_default(),
        })
        .collect();
    Ok(Listing {
        mappings,
        interfaces,
        pod_interfaces,
        tracked_connections: dataplane.conn_count(),
        counters: dataplane.global_counters()?,
    })
}

fn print_table(l: &Listing) {
    let width = l
        .mappings
        .iter()
        .map(|r| r.name.len())
        .max()
        .unwrap_or(0)
        .max(4);
    println!(
        "{:<width$}  {:<21}  {:<21}  {:>10}  {:>12}  {:>10}  {:>12}",
        "NAME", "FRONTEND", "BACKEND", "PKTS IN", "BYTES IN", "PKTS OUT", "BYTES OUT"
    );
    for r in &l.mappings {
        let backend = if r.shared_backend {
            format!("{}*", r.backend)
        } else {
            r.backend.clone()
        };
        println!(
            "{:<width$}  {:<21}  {:<21}  {:>10}  {:>12}  {:>10}  {:>12}",
            r.name, r.frontend, backend, r.packets_in, r.bytes_in, r.packets_out, r.bytes_out
        );
    }
    if l.mappings.iter().any(|r| r.shared_backend) {
        println!(
            "* backend shared by several frontends; {} connections tracked",
            l.tracked_connections
        );
    }
    let links: Vec<String> = l
        .interfaces
        .iter()
        .map(|i| format!("{} ({})", i.iface, i.link))
        .collect();
    println!(
        "\nattached: {}",
        if links.is_empty() {
            "nothing".into()
        } else {
            links.join(", ")
        }
    );
    if !l.pod_interfaces.is_empty() {
        let names: Vec<&str> = l.pod_interfaces.iter().map(|p| p.iface.as_str()).collect();
        println!(
            "reply program on {} pod interface(s): {}",
            names.len(),
            names.join(", ")
        );
    }
    let counters: Vec<String> = l.counters.iter().map(|(k, v)| format!("{k}={v}")).collect();
    println!("packets: {}", counters.join(" "));
}
