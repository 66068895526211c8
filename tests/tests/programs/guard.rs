//! The guard on crafted packets: a SYN from a source outside a mapping's
//! allowlist, or over its rate, is dropped before the DNAT and before any
//! connection state is written; every other segment, and every mapping
//! without a guard, is left as it was. With `--deny-action reset` a denied
//! segment is answered with a RST instead (`reset`).

use std::net::Ipv4Addr;

use aya::maps::{HashMap, Map, MapData};
use ssh_fwd::{
    datapath::object,
    mapping::{
        Guard, Mapping, MappingSet,
        guard::{Allow, Limit},
    },
};
use ssh_fwd_common::{
    conntrack::{TCP_ACK, TCP_SYN},
    fixtures::Frame,
    maps::{Bucket, Guard as Rate, SYN_BUCKETS},
};
use ssh_fwd_tests::privilege;

use super::{
    JOB, Loaded,
    conntrack::{CLIENT, CLIENT_ISN, Ingress, SERVER_ISN, each_ingress, entries, handshake},
    counters, delta, install, load_with,
};

const STRANGER: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 9);
/// A mapping without a guard, beside the guarded job.
const OPEN: (&str, &str, &str) = ("open", "198.18.0.10:9022", "10.244.1.6:22");

fn mapping((name, frontend, backend): (&str, &str, &str), guard: Guard) -> Mapping {
    Mapping {
        name: name.into(),
        frontend: frontend.parse().expect("frontend"),
        backend: backend.parse().expect("backend"),
        guard,
    }
}

fn allow(ranges: &[&str], enforce_established: bool) -> Guard {
    Guard {
        allow: Allow::Only(ranges.iter().map(|r| r.parse().expect("range")).collect()),
        limit: Limit::Off,
        enforce_established,
        draining: false,
    }
}

fn rate(per_second: u32, burst: u32) -> Guard {
    Guard {
        allow: Allow::Open,
        limit: Limit::Exact(Rate::new(per_second, burst)),
        enforce_established: false,
        draining: false,
    }
}

/// The job guarded by `guard`, and the open mapping beside it.
fn guarded(guard: Guard) -> Loaded {
    guarded_with(guard, object::Settings::default())
}

/// [`guarded`], the programs loaded with `settings`.
fn guarded_with(guard: Guard, settings: object::Settings) -> Loaded {
    let mut l = load_with(&[], settings);
    let set = MappingSet::from_unique([mapping(JOB, guard), mapping(OPEN, Guard::default())]);
    install(&mut l.maps, &set);
    l
}

/// A SYN from `src`:`sport` to the frontend on `port`.
fn syn(src: Ipv4Addr, sport: u16, port: u16) -> Vec<u8> {
    Frame {
        src,
        sport,
        dport: port,
        tcp_flags: TCP_SYN,
        seq: CLIENT_ISN,
        ..Frame::default()
    }
    .build()
}

/// Ten bytes of the client's, after the handshake and the banner.
fn session_data() -> Vec<u8> {
    super::conntrack::request(
        8022,
        TCP_ACK,
        CLIENT_ISN + 1,
        SERVER_ISN + 1 + super::conntrack::BANNER as u32,
        10,
    )
}

/// The job's per-mapping counters: (denied, syn_limited).
fn job_counters(l: &Loaded) -> (u64, u64) {
    let installed = l.maps.read_installed().expect("read");
    let frontend: std::net::SocketAddr = "198.18.0.10:8022".parse().expect("frontend");
    let slot = installed.frontends[&frontend].slot;
    let c = l.maps.mapping_conn_counters(slot).expect("counters");
    (c.denied, c.syn_limited)
}

fn passed(ingress: Ingress, verdict: u32) -> bool {
    verdict != ingress.dropped()
}

mod reset;

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn a_syn_from_outside_the_list_is_dropped_and_writes_no_state_and_the_rest_pass() {
    privilege::require();
    each_ingress(|ingress| {
        let l = guarded(allow(&["192.0.2.0/24"], false));
        let before = counters(&l);
        let (verdict, out) = ingress.run(&l, &syn(STRANGER, 40_000, 8022));
        assert_eq!(verdict, ingress.dropped(), "{ingress:?}: denied");
        assert_eq!(
            delta(&before, &counters(&l)),
            [("denied", 1)],
            "{ingress:?}: counted, nothing else happened"
        );
        assert!(entries(&l).is_empty(), "{ingress:?}: no half-open entry");
        assert_eq!(job_counters(&l), (1, 0));
        drop(out);
        // Inside the list: translated, a half-open entry recorded.
        let (verdict, _) = ingress.run(&l, &syn(CLIENT, 40_000, 8022));
        assert!(passed(ingress, verdict), "{ingress:?}: allowed");
        assert_eq!(
            entries(&l).len(),
            1,
            "{ingress:?}: the allowed SYN is tracked"
        );
        // A mapping without a list takes any source.
        let (verdict, _) = ingress.run(&l, &syn(STRANGER, 40_001, 9022));
        assert!(passed(ingress, verdict), "{ingress:?}: no list");
        assert_eq!(job_counters(&l), (1, 0));
    });
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn an_empty_list_denies_every_source() {
    privilege::require();
    each_ingress(|ingress| {
        let l = guarded(allow(&[], false));
        let (verdict, _) = ingress.run(&l, &syn(CLIENT, 40_000, 8022));
        assert_eq!(verdict, ingress.dropped(), "{ingress:?}");
    });
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn a_source_taken_off_the_list_keeps_its_connection_unless_established_ones_are_enforced() {
    privilege::require();
    for enforce in [false, true] {
        each_ingress(|ingress| {
            let mut l = guarded(allow(&["192.0.2.0/24"], enforce));
            handshake(&l, ingress, 8022);
            let off = MappingSet::from_unique([
                mapping(JOB, allow(&["198.51.100.0/24"], enforce)),
                mapping(OPEN, Guard::default()),
            ]);
            install(&mut l.maps, &off);
            let data = session_data();
            let (verdict, _) = ingress.run(&l, &data);
            assert_eq!(
                !passed(ingress, verdict),
                enforce,
                "{ingress:?}, --enforce-established {enforce}"
            );
            // A new connection from it is refused either way.
            let (verdict, _) = ingress.run(&l, &syn(CLIENT, 40_001, 8022));
            assert_eq!(verdict, ingress.dropped(), "{ingress:?}");
        });
    }
}

/// A pod being deleted that still serves: its mapping turns draining. The
/// connection it has goes on both ways; a new SYN is refused before any
/// state is written, from any source, counted as `draining`.
#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn a_draining_backend_keeps_its_connection_and_takes_no_new_one() {
    privilege::require();
    each_ingress(|ingress| {
        let mut l = guarded(Guard::default());
        handshake(&l, ingress, 8022);
        let draining = Guard {
            draining: true,
            ..Guard::default()
        };
        install(
            &mut l.maps,
            &MappingSet::from_unique([mapping(JOB, draining), mapping(OPEN, Guard::default())]),
        );
        let before_entries = entries(&l).len();
        let (verdict, out) = ingress.run(&l, &session_data());
        assert!(passed(ingress, verdict), "{ingress:?}: the open session");
        assert_eq!(
            super::conntrack::destination_of(&out),
            super::conntrack::backend(),
            "{ingress:?}: the session's segment goes on to the pod"
        );
        let before = counters(&l);
        let (verdict, _) = ingress.run(&l, &syn(CLIENT, 40_001, 8022));
        assert_eq!(verdict, ingress.dropped(), "{ingress:?}: a new login");
        assert_eq!(
            delta(&before, &counters(&l)),
            [("draining", 1)],
            "{ingress:?}: counted, nothing else happened"
        );
        assert_eq!(
            entries(&l).len(),
            before_entries,
            "{ingress:?}: no state written"
        );
        let (verdict, _) = ingress.run(&l, &syn(CLIENT, 40_002, 9022));
        assert!(passed(ingress, verdict), "{ingress:?}: other mappings open");
    });
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn syns_over_the_rate_are_dropped_per_source_and_other_segments_never_are() {
    privilege::require();
    each_ingress(|ingress| {
        let l = guarded(rate(1, 2));
        for sport in 0..2 {
            let (verdict, _) = ingress.run(&l, &syn(CLIENT, 40_000 + sport, 8022));
            assert!(passed(ingress, verdict), "{ingress:?}: within the burst");
        }
        let before = counters(&l);
        let tracked = entries(&l).len();
        let (verdict, _) = ingress.run(&l, &syn(CLIENT, 40_002, 8022));
        assert_eq!(verdict, ingress.dropped(), "{ingress:?}: over the rate");
        assert_eq!(delta(&before, &counters(&l)), [("syn_limited", 1)]);
        assert_eq!(entries(&l).len(), tracked, "{ingress:?}: no state written");
        assert_eq!(job_counters(&l), (0, 1));
        // Another source has a bucket of its own.
        let (verdict, _) = ingress.run(&l, &syn(STRANGER, 40_000, 8022));
        assert!(passed(ingress, verdict), "{ingress:?}: another source");
        // A mapping without a rate is not limited.
        let (verdict, _) = ingress.run(&l, &syn(CLIENT, 40_003, 9022));
        assert!(passed(ingress, verdict), "{ingress:?}: no rate");
        // Segments other than a SYN are never limited.
        let ack = super::conntrack::request(8022, TCP_ACK, CLIENT_ISN + 1, SERVER_ISN + 1, 0);
        let (verdict, _) = ingress.run(&l, &ack);
        assert!(passed(ingress, verdict), "{ingress:?}: an ACK");
    });
}

/// The clock the programs read (`bpf_ktime_get_ns`), in nanoseconds.
fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the struct we pass.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn a_spent_bucket_refills_as_its_clock_moves_on() {
    privilege::require();
    each_ingress(|ingress| {
        let l = guarded(rate(1, 1));
        let data = MapData::from_pin(l.layout.map(SYN_BUCKETS)).expect("SYN_BUCKETS pinned");
        let mut buckets: HashMap<MapData, u32, Bucket> =
            HashMap::try_from(Map::from_map_data(data).expect("map")).expect("SYN_BUCKETS");
        let key = u32::from_ne_bytes(CLIENT.octets());
        let run = |sport| passed(ingress, ingress.run(&l, &syn(CLIENT, sport, 8022)).0);
        assert!(run(40_000), "{ingress:?}: the first");
        assert!(!run(40_001), "{ingress:?}: spent");
        // Half a second on: still spent.
        let half = Bucket {
            due_ns: monotonic_ns() + 500_000_000,
        };
        buckets.insert(key, half, 0).expect("bucket");
        assert!(!run(40_002), "{ingress:?}: half refilled");
        // A second on: one token back, and one only.
        let due = Bucket {
            due_ns: monotonic_ns() - 1_000_000,
        };
        buckets.insert(key, due, 0).expect("bucket");
        assert!(run(40_003), "{ingress:?}: refilled");
        assert!(!run(40_004), "{ingress:?}: one token only");
    });
}
