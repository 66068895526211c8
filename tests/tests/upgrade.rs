//! Upgrading a node in place: the data path an older ssh-fwd left pinned
//! and attached is taken over by today's agent, and the sessions it was
//! forwarding go on.
//!
//! Each older release is played by its own eBPF object
//! (`tests/fixtures/ssh-fwd-ebpf-v<N>.o`, see the README there), loaded,
//! filled and attached as its agent did ([`older`]):
//! - [`v3`]: layout v3, before connection tracking: today's agent moves
//!   its pins into layout v4 and tracks its connections from then on;
//! - [`v4`]: the previous release, of today's layout: today's agent keeps
//!   the maps whose definition it kept, and the connections in them, and
//!   replaces those that changed.

mod older;
mod pins;
mod v3;
mod v4;

use crate::common::FRONTEND;
use ssh_fwd_tests::{Bpffs, Topology, agent::write_mappings, privilege, topology::EXT_IFACE};

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn a_layout_this_version_cannot_take_over_is_refused_with_the_way_out() {
    privilege::require();
    let topo = Topology::single_node(0).unwrap();
    let bpffs = Bpffs::new().unwrap();
    bpffs.mount().unwrap();
    std::fs::create_dir_all(bpffs.path().join("v2").join("maps")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mappings = dir.path().join("mappings.yaml");
    write_mappings(&mappings, &[("job-a", FRONTEND, "10.244.1.5:22")]).unwrap();
    let bpffs_arg = bpffs.path().display().to_string();
    let mappings_arg = mappings.display().to_string();
    let err = ssh_fwd_tests::agent::run_failing(
        &topo.nodes[0].ns,
        &[
            "agent",
            "--hairpin",
            "off",
            "--external-iface",
            EXT_IFACE,
            "--mappings",
            &mappings_arg,
            "--bpffs",
            &bpffs_arg,
        ],
    )
    .unwrap();
    assert!(
        err.contains("v2 holds the data path of another ssh-fwd version"),
        "{err}"
    );
    assert!(err.contains("ssh-fwd teardown --bpffs"), "{err}");
    assert!(!bpffs.path().join("v4").exists(), "nothing was changed");
}
