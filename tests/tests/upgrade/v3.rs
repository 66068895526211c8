//! From layout v3 (commit `bdf4b66`, without connection tracking): its
//! maps pinned under `v3/maps`, its tcx links under `v3/links`. Today's
//! agent moves them into layout v4, and tracks the sessions v3 forwarded
//! once their client speaks and the server confirms.

use ssh_fwd_tests::{Bpffs, Topology, privilege};

use super::older::{Sessions, start_agent, start_data_path};
use crate::common::EXTERNAL_IP;

const V3_OBJECT: &[u8] = aya::include_bytes_aligned!("../../fixtures/ssh-fwd-ebpf-v3.o");

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn an_agent_upgrading_a_v3_node_keeps_its_sessions_and_tracks_them_from_then_on() {
    privilege::require();
    let topo = Topology::single_node(1).unwrap();
    let bpffs = Bpffs::new().unwrap();
    bpffs.mount().unwrap();
    let v3 = bpffs.path().join("v3");
    start_data_path(&topo.nodes[0].ns, V3_OBJECT, &v3, |_| Ok(())).unwrap();
    let mut sessions = Sessions::open(&topo).unwrap();

    let (agent, _mappings) = start_agent(&topo, &bpffs).unwrap();
    let log = agent.log();
    assert!(
        log.contains("upgrading the data path of an older ssh-fwd"),
        "{log}"
    );
    assert!(log.contains("upgrade done"), "{log}");
    assert!(!log.contains("mapping removed"), "{log}");
    assert!(!v3.exists(), "v3 pins removed");

    // The server speaks first: its segment is restored, and confirms the
    // claim of the client's ACK. The client speaks first: its segment
    // claims the connection, the server's echo confirms it.
    if let Err(e) = sessions.carry_on() {
        panic!(
            "{e:#}\nssh-fwd list: {}\nagent log:\n{}",
            bpffs.list().unwrap(),
            agent.log()
        );
    }
    let list = bpffs.list().unwrap();
    assert_eq!(
        list["counters"]["conn_adopted"], 3,
        "the sessions are tracked now: {list}"
    );
    assert_eq!(list["tracked_connections"], 3, "{list}");
    // A new login goes through today's data path, handshake tracked.
    assert_eq!(
        topo.ssh()
            .run(&topo.client, EXTERNAL_IP, 8022, "hostname")
            .unwrap(),
        "pod-1"
    );
    sessions.echo.echo("end").unwrap();
}
