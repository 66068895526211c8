//! The connection log on crafted packets: which segment writes which
//! record to `CONN_EVENTS`, with what in it, and the traffic counted for a
//! closed connection's record, at each `--conn-log` level; refused records
//! held to their share of the ring, and what is not written counted by
//! kind.

use std::net::Ipv4Addr;

use aya::maps::{Map, MapData, PerCpuArray, RingBuf};
use ssh_fwd::{
    datapath::{events::ConnLog, object},
    mapping::{
        Guard, Mapping, MappingSet,
        guard::{Allow, Limit},
    },
};
use ssh_fwd_common::{
    audit::REFUSED_SHARE,
    conntrack::{TCP_ACK, TCP_RST, TCP_SYN},
    fixtures::Frame,
    maps::{
        CONN_EVENTS, CONN_EVENTS_BYTES, CONN_EVENTS_DROPPED, CONN_STATS, ConnEvent, ConnKey,
        ConnStats, Ended, EventKind,
    },
};
use ssh_fwd_tests::privilege;

use super::{
    JOB, Loaded,
    conntrack::{
        AFTER_BANNER, BANNER, CLIENT, CLIENT_ISN, backend, client, each_ingress, frontend,
        handshake, reply, request,
    },
    counters, delta, from_pod, install, load_with,
};

const STRANGER: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 9);

fn loaded(level: ConnLog) -> Loaded {
    loaded_with(object::Settings {
        conn_log: level,
        ..object::Settings::default()
    })
}

fn loaded_with(settings: object::Settings) -> Loaded {
    let mut l = load_with(&[], settings);
    let (name, front, back) = JOB;
    let job = Mapping {
        name: name.into(),
        frontend: front.parse().expect("frontend"),
        backend: back.parse().expect("backend"),
        guard: Guard {
            allow: Allow::Only([format!("{CLIENT}/32").parse().expect("range")].into()),
            limit: Limit::Off,
            enforce_established: false,
            draining: false,
        },
    };
    install(&mut l.maps, &MappingSet::from_unique([job]));
    l
}

/// Every record written since the last call.
fn drain(l: &Loaded) -> Vec<ConnEvent> {
    let data = MapData::from_pin(l.layout.map(CONN_EVENTS)).expect("CONN_EVENTS pinned");
    let mut ring = RingBuf::try_from(Map::from_map_data(data).expect("map")).expect("ring");
    let mut out = Vec::new();
    while let Some(item) = ring.next() {
        assert_eq!(item.len(), size_of::<ConnEvent>());
        // SAFETY: plain integers, any bit pattern valid; read unaligned.
        out.push(unsafe { std::ptr::read_unaligned(item.as_ptr().cast::<ConnEvent>()) });
    }
    out
}

fn stats_entries(l: &Loaded) -> usize {
    use aya::maps::HashMap;
    let data = MapData::from_pin(l.layout.map(CONN_STATS)).expect("CONN_STATS pinned");
    let map: HashMap<MapData, ConnKey, ConnStats> =
        HashMap::try_from(Map::from_map_data(data).expect("map")).expect("hash");
    map.iter().count()
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn the_servers_confirmation_writes_one_accepted_record_and_a_reset_a_closed_one_with_traffic() {
    privilege::require();
    each_ingress(|ingress| {
        let l = loaded(ConnLog::All);
        handshake(&l, ingress, 8022);
        let records = drain(&l);
        assert_eq!(records.len(), 1, "{ingress:?}: {records:?}");
        let accepted = records[0];
        assert_eq!(accepted.kind(), Some(EventKind::Accepted));
        assert_eq!(
            (accepted.client, accepted.frontend, accepted.backend),
            (client(), frontend(8022), backend())
        );
        assert_ne!(accepted.time_ns, 0);
        // Data from the client, the server's ACK of it, then the client's
        // exact RST.
        let data = request(8022, TCP_ACK, CLIENT_ISN + 1, AFTER_BANNER, 100);
        ingress.run(&l, &data);
        from_pod(&l, &reply(TCP_ACK, AFTER_BANNER, CLIENT_ISN + 101, 0));
        ingress.run(
            &l,
            &request(8022, TCP_RST | TCP_ACK, CLIENT_ISN + 101, AFTER_BANNER, 0),
        );
        let records = drain(&l);
        assert_eq!(records.len(), 1, "{ingress:?}: {records:?}");
        let closed = records[0];
        assert_eq!(closed.kind(), Some(EventKind::Closed));
        assert_eq!(closed.ended(), Some(Ended::Reset));
        assert_eq!(closed.slot, accepted.slot);
        assert_eq!(closed.created_ns, accepted.created_ns);
        // The banner (the confirming segment) and the ACK out, the data in
        // (the RST ended it); frames with their Ethernet header.
        assert_eq!(
            closed.stats,
            ConnStats {
                packets_in: 1,
                bytes_in: data.len() as u64,
                packets_out: 2,
                bytes_out: (2 * (14 + 20 + 20) + BANNER) as u64,
            },
            "{ingress:?}"
        );
        assert_eq!(stats_entries(&l), 0, "{ingress:?}: forgotten with it");
    });
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn a_denied_syn_writes_a_record_only_when_everything_is_logged() {
    privilege::require();
    each_ingress(|ingress| {
        let denied = syn_from(STRANGER);
        let l = loaded(ConnLog::All);
        ingress.run(&l, &denied);
        let records = drain(&l);
        assert_eq!(records.len(), 1, "{ingress:?}: {records:?}");
        assert_eq!(records[0].kind(), Some(EventKind::Denied));
        assert_eq!(records[0].client.ip(), STRANGER);
        assert_eq!(records[0].frontend, frontend(8022));
        assert_eq!(records[0].backend, backend());
        let l = loaded(ConnLog::Accepted);
        ingress.run(&l, &denied);
        assert!(drain(&l).is_empty(), "{ingress:?}: accepted only");
    });
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn below_all_no_traffic_is_counted_and_off_writes_nothing() {
    privilege::require();
    each_ingress(|ingress| {
        let l = loaded(ConnLog::Accepted);
        handshake(&l, ingress, 8022);
        assert_eq!(drain(&l).len(), 1, "{ingress:?}: the accepted record");
        assert_eq!(stats_entries(&l), 0, "{ingress:?}: no traffic counted");
        ingress.run(
            &l,
            &request(8022, TCP_RST | TCP_ACK, CLIENT_ISN + 1, AFTER_BANNER, 0),
        );
        assert!(drain(&l).is_empty(), "{ingress:?}: no closed record");
        let l = loaded(ConnLog::Off);
        handshake(&l, ingress, 8022);
        assert!(drain(&l).is_empty(), "{ingress:?}: off");
    });
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn a_cpu_writes_at_most_its_budget_of_refused_records_a_second_and_counts_the_rest() {
    privilege::require();
    // One CPU, so that every run spends the same budget.
    // SAFETY: a zeroed cpu_set_t is empty; CPU_SET and sched_setaffinity
    // (this thread) get valid pointers to it.
    let pinned = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(0, &mut set);
        libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &set)
    };
    assert_eq!(pinned, 0, "pinning the test's thread to CPU 0");
    each_ingress(|ingress| {
        let l = loaded_with(object::Settings {
            conn_log: ConnLog::All,
            refused_records: 2,
            ..object::Settings::default()
        });
        let before = counters(&l);
        for _ in 0..5 {
            ingress.run(&l, &syn_from(STRANGER));
        }
        let records = drain(&l);
        // Two, unless the second turned over meanwhile (then up to four).
        assert!((2..=4).contains(&records.len()), "{ingress:?}: {records:?}");
        let d = delta(&before, &counters(&l));
        let throttled = d
            .iter()
            .find(|(k, _)| *k == "events_throttled")
            .map_or(0, |(_, n)| *n);
        assert_eq!(records.len() as u64 + throttled, 5, "{ingress:?}: {d:?}");
        assert!(
            d.contains(&("denied", 5)),
            "{ingress:?}: every SYN counted: {d:?}"
        );
    });
}

/// The records of `kind` the programs did not write, summed over CPUs.
fn dropped(l: &Loaded, kind: EventKind) -> u64 {
    let data = MapData::from_pin(l.layout.map(CONN_EVENTS_DROPPED)).expect("pinned");
    let map: PerCpuArray<MapData, u64> =
        PerCpuArray::try_from(Map::from_map_data(data).expect("map")).expect("per-CPU array");
    map.get(&(kind as u32), 0).expect("read").iter().sum()
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn refused_records_fill_at_most_half_the_ring_and_a_login_still_finds_room() {
    privilege::require();
    // A ring record is the record and an 8-byte header, 8-byte aligned.
    let slot = (size_of::<ConnEvent>() + 8) as u64;
    let ring = u64::from(CONN_EVENTS_BYTES) / slot;
    let syns = 4_000;
    assert!(syns > ring, "enough SYNs to fill the whole ring");
    each_ingress(|ingress| {
        // A budget no flood of this test reaches: only the share holds.
        let l = loaded_with(object::Settings {
            conn_log: ConnLog::All,
            refused_records: 1_000_000,
            ..object::Settings::default()
        });
        let before = counters(&l);
        for _ in 0..syns {
            ingress.run(&l, &syn_from(STRANGER));
        }
        handshake(&l, ingress, 8022);
        let records = drain(&l);
        let denied = records
            .iter()
            .filter(|r| r.kind() == Some(EventKind::Denied))
            .count() as u64;
        assert_eq!(
            denied,
            REFUSED_SHARE.div_ceil(slot),
            "{ingress:?}: half the ring"
        );
        assert_eq!(
            records.last().and_then(ConnEvent::kind),
            Some(EventKind::Accepted),
            "{ingress:?}: the login's record"
        );
        assert_eq!(dropped(&l, EventKind::Denied), syns - denied, "{ingress:?}");
        assert_eq!(dropped(&l, EventKind::Accepted), 0, "{ingress:?}");
        let d = delta(&before, &counters(&l));
        assert!(
            d.contains(&("events_throttled", syns - denied)),
            "{ingress:?}: {d:?}"
        );
        assert!(
            !d.iter().any(|(k, _)| *k == "events_lost"),
            "{ingress:?}: {d:?}"
        );
    });
}

/// A SYN from `src` to the job's frontend.
fn syn_from(src: Ipv4Addr) -> Vec<u8> {
    Frame {
        src,
        sport: 40_000,
        dport: 8022,
        tcp_flags: TCP_SYN,
        seq: CLIENT_ISN,
        ..Frame::default()
    }
    .build()
}
