//! ssh-fwd: an eBPF/XDP-accelerated node-level TCP forwarder that lands
//! `ssh -p PORT user@EXTERNAL_IP` in a job's pod.
//!
//! The crate is layered; each layer imports only the ones below it:
//!
//! ```text
//! cli                      the command line (main.rs runs it)
//! agent  controller  commands
//! source                   where mappings come from: file, Kubernetes
//! datapath                 the kernel side: load, attach, pins, maps, plan
//! k8s  telemetry           Kubernetes plumbing; logs, metrics, HTTP
//! mapping  args  vocabulary  host_certs  the shared vocabulary and flag values; host certificates
//! ssh-fwd-common           (crate) map layouts and packet math, shared with the kernel
//! ```
//!
//! See ARCHITECTURE.md for what each holds and its invariants.

pub mod agent;
pub mod args;
pub mod cli;
pub mod commands;
pub mod controller;
pub mod datapath;
pub mod host_certs;
pub mod k8s;
pub mod mapping;
pub mod source;
pub mod telemetry;
pub mod vocabulary;
