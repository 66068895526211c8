//! `cargo xtask bench ...`: benchmarks, each in namespaces it creates and
//! removes again.

mod bed;
mod chart;
mod cleanup;
pub mod controller;
pub mod convergence;
pub mod datapath;
pub mod helpers;
mod kube_rules;
mod paths;
pub mod progs;
mod proxy;
mod report;
mod stats;
pub mod webhook;
mod workloads;
