//! The tests that need root, network namespaces or BPF, and the ones that
//! run ssh-fwd's binaries against the fake API server: one test binary,
//! a module per subject, so a test is named `module::test`
//! (`datapath::ssh_login_through_frontend_lands_in_the_pod`) and one link
//! builds them all. The privileged ones are `#[ignore]`d, so a plain
//! `cargo test` reports them as ignored; `cargo xtask test` runs them.
//!
//! Tests of different modules run side by side on libtest's threads:
//! everything a test makes (namespaces, bpffs mounts, cgroups, containers,
//! images) is named after this process and a counter by the harness's
//! guards, and a test that must have the machine to itself starts with
//! [`ssh_fwd_tests::privilege::require_alone`].

#![allow(
    clippy::unwrap_used,
    reason = "an integration test fails by panicking, with the error shown"
)]

mod common;

mod activity;
mod agent_lifecycle;
mod agent_reloads;
mod announce;
mod announce_bgp;
mod announce_leases;
mod attacks;
mod audit;
mod big_tcp;
mod checksums;
mod conntrack;
mod container;
mod controller;
mod controller_ipv6;
mod datapath;
mod exposure;
mod external_iface;
mod fast_path;
mod guard;
mod hairpin;
mod hairpin_programs;
mod host_certs;
mod host_certs_controller;
mod install_keys;
mod ipv6;
mod ipv6_cross_node;
mod kernels;
mod kind;
mod kubernetes;
mod kubernetes_ipv6;
mod least_privilege;
mod monitoring;
mod pin_repair;
mod port_range;
mod processes;
mod programs;
mod redirect_mode;
mod release_manifests;
mod service_events;
mod soak;
mod tenancy;
mod topologies;
mod upgrade;
