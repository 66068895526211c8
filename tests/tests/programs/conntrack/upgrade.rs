//! After an upgrade from layout v3, which tracked nothing: the replies of
//! its connections are restored as it restored them, and a connection is
//! tracked only once its client speaks through the frontend and the
//! server's segment confirms it, as any other.

use ssh_fwd::datapath::conntrack::{ConnTables, Timeouts, clock_ns};
use ssh_fwd_common::{
    conntrack::{TCP_ACK, TCP_RST, TCP_SYN},
    maps::{ConnKey, IFACE_EXTERNAL, NatTarget},
};
use ssh_fwd_tests::privilege;

use super::{
    super::{JOB, counters, delta, from_pod, load, own, set_iface_index_flags},
    BACKEND, Ingress, SECOND, backend, client, established, frontend, reply, request, source_of,
};

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn an_older_connection_is_restored_on_its_frontend_and_tracked_only_once_its_client_claims_it() {
    privilege::require();
    let l = load(&[JOB, SECOND]);
    own(&l, BACKEND);
    set_iface_index_flags(&l, 1, IFACE_EXTERNAL);
    let mut tables = ConnTables::open_pinned(&l.layout).expect("tables");
    // The older data path recorded this connection through the second
    // frontend (its backend is behind two).
    let key = ConnKey::new(client(), backend());
    let recorded = NatTarget {
        endpoint: frontend(9022),
        slot: 1,
        flags: 0,
    };
    tables
        .legacy()
        .seed(
            &[backend()],
            &[(key, recorded)],
            clock_ns() + 3_600_000_000_000,
        )
        .expect("seed");
    // The server's ACKs and RSTs are restored, and track nothing: no ACK of
    // the pod alone makes a connection.
    for frame in [
        reply(TCP_RST, 9_000, 0, 0),
        reply(TCP_ACK, 9_000, 3_000, 50),
    ] {
        let before = counters(&l);
        let (_, out) = from_pod(&l, &frame);
        assert_eq!(source_of(&out), frontend(9022));
        assert_eq!(
            delta(&before, &counters(&l)),
            vec![("legacy_reply", 1), ("reverse_nat", 1)]
        );
    }
    assert!(established(&l).is_empty());
    // The client's segment through the frontend acknowledges the server's
    // data; the server's next segment starts there: tracked.
    Ingress::Tc.run(&l, &request(9022, TCP_ACK, 3_000, 9_050, 10));
    let before = counters(&l);
    let (_, out) = from_pod(&l, &reply(TCP_ACK, 9_050, 3_010, 20));
    assert_eq!(source_of(&out), frontend(9022));
    assert_eq!(
        delta(&before, &counters(&l)),
        vec![("conn_adopted", 1), ("reverse_nat", 1)]
    );
    let conns = established(&l);
    assert_eq!(
        (
            conns[0].frontend,
            conns[0].client_next,
            conns[0].server_next
        ),
        (frontend(9022), 3_010, 9_070)
    );
    // From here it is a tracked connection: a spoofed RST is ignored, and
    // one in sequence ends it.
    Ingress::Tc.run(&l, &request(9022, TCP_RST, 1_234, 0, 0));
    assert_eq!(established(&l).len(), 1, "a spoofed RST leaves it");
    Ingress::Tc.run(&l, &request(9022, TCP_RST, 3_010, 0, 0));
    assert!(established(&l).is_empty(), "a RST in sequence ends it");
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn older_connections_are_restored_only_while_their_backend_is_marked_and_only_leaving_the_node() {
    privilege::require();
    let l = load(&[JOB]);
    own(&l, BACKEND);
    let mut tables = ConnTables::open_pinned(&l.layout).expect("tables");
    let now = clock_ns();
    tables
        .legacy()
        .seed(&[backend()], &[], now + 3_600_000_000_000)
        .expect("seed");
    let frame = reply(TCP_ACK, 9_000, 3_000, 50);
    // On lo (not external): untouched, no state.
    assert_eq!(from_pod(&l, &frame).1, frame);
    set_iface_index_flags(&l, 1, IFACE_EXTERNAL);
    // A SYN-ACK is a handshake of this data path's: not restored blindly.
    let syn_ack = reply(TCP_SYN | TCP_ACK, 9_000, 3_000, 0);
    assert_eq!(from_pod(&l, &syn_ack).1, syn_ack);
    // Once the grace period ended (and the sweep ran), nothing is restored.
    tables
        .legacy()
        .seed(&[backend()], &[], now.saturating_sub(1))
        .expect("seed");
    assert_eq!(from_pod(&l, &frame).1, frame);
    let swept = tables.sweep(
        clock_ns(),
        &Timeouts::with_idle(std::time::Duration::from_secs(60)),
    );
    assert_eq!(swept.legacy_backends, 0);
    assert!(established(&l).is_empty());
}
