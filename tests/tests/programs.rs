//! The kernel programs on crafted packets through BPF_PROG_TEST_RUN: bytes in,
//! verdict and exact bytes out, compared with the host reference rewrite in
//! `ssh_fwd_common::packet`. Needs root (CAP_BPF): ignored by a plain
//! `cargo test`, run by `cargo xtask test`.
//!
//! Each test runs in a network namespace of its own: the ingress programs
//! look up the route to the backend, and the kernel answers from the calling
//! thread's namespace. The default one has no route, so hits pass to the
//! stack; [`Routed`] adds a route and a neighbour, so hits are redirected.

use std::{collections::BTreeMap, net::Ipv4Addr};

use aya::{
    Ebpf,
    maps::{HashMap, Map, MapData, MapInfo},
    programs::{SchedClassifier, TestRun, TestRunOptions, TestRunResult, Xdp},
};
use ssh_fwd_common::{
    fixtures::{Frame, checksums_verify},
    maps::{self, Endpoint, MappingName, NatTarget, Owner},
    packet::{self, Side},
};
use ssh_fwd_tests::{Bpffs, NetNs, privilege};

use ssh_fwd::{
    datapath::{
        maps::Maps,
        object::{self, PROG_EGRESS_TC, PROG_INGRESS_TC, PROG_INGRESS_XDP, load_programs},
        pins::PinLayout,
        plan,
    },
    mapping::{Mapping, MappingSet},
};

const XDP_PASS: u32 = 2;
const TC_ACT_UNSPEC: u32 = u32::MAX;
const TC_ACT_REDIRECT: u32 = 7;

/// The object loaded with its maps pinned in a private bpffs mount; the
/// harness's [`Bpffs`] guard unmounts it when this is dropped.
struct Loaded {
    ebpf: Ebpf,
    maps: Maps,
    layout: PinLayout,
    _bpffs: Bpffs,
    /// The namespace this test's thread runs in.
    netns: NetNs,
}

fn load(mappings: &[(&str, &str, &str)]) -> Loaded {
    load_with(mappings, object::Settings::default())
}

fn load_with(mappings: &[(&str, &str, &str)], settings: object::Settings) -> Loaded {
    load_over(mappings, settings, |_| {})
}

/// [`load_with`], over pins `pinned` leaves in the layout first (what an
/// earlier agent left).
fn load_over(
    mappings: &[(&str, &str, &str)],
    settings: object::Settings,
    pinned: impl FnOnce(&PinLayout),
) -> Loaded {
    let netns = NetNs::new("progtest").expect("netns");
    netns.enter_on_this_thread().expect("enter netns");
    let bpffs = Bpffs::new().expect("bpffs dir");
    let layout = PinLayout::new(bpffs.path());
    layout.prepare().expect("bpffs");
    pinned(&layout);
    let mut ebpf = object::load(&layout, &settings).expect("load object");
    load_programs(&mut ebpf).expect("verifier accepts the programs");
    object::loaded_xdp(&mut ebpf).expect("verifier accepts the XDP program");
    let mut maps = Maps::from_ebpf(&mut ebpf).expect("maps");
    let set = MappingSet::from_unique(mappings.iter().map(|(name, f, b)| Mapping {
        guard: Default::default(),
        name: (*name).into(),
        frontend: f.parse().expect("frontend"),
        backend: b.parse().expect("backend"),
    }));
    install(&mut maps, &set);
    Loaded {
        ebpf,
        maps,
        layout,
        _bpffs: bpffs,
        netns,
    }
}

/// Plans `set` against what the maps hold and applies every step, as the
/// agent does; returns the tables the plan expects.
fn install(maps: &mut Maps, set: &MappingSet) -> plan::Installed {
    let planned = plan::plan_steps(&maps.read_installed().expect("read"), set, maps.capacity());
    for step in &planned.steps {
        maps.apply(step).expect("apply");
    }
    planned.tables
}

/// A program run's verdict and bytes out; `None` if the kernel's test harness
/// refused to build the packet at all.
type RunResult = Option<(u32, Vec<u8>)>;

/// One BPF_PROG_TEST_RUN of any packet program.
fn test_run<P>(prog: &P, frame: &[u8]) -> RunResult
where
    P: for<'a> TestRun<Opts<'a> = TestRunOptions<'a>, Result = TestRunResult>,
{
    let mut out = vec![0u8; frame.len() + 512];
    let r = prog
        .test_run(TestRunOptions {
            data_in: Some(frame),
            data_out: Some(&mut out),
            repeat: 1,
            ..TestRunOptions::new()
        })
        .ok()?;
    out.truncate(r.data_size_out as usize);
    Some((r.return_value, out))
}

/// `struct __sk_buff` up to `ifindex`, the fields a test run may set: the
/// device the packet arrived on (`ingress_ifindex`, any number) and the
/// device the skb is on (`ifindex`, an existing one, or 0 for `lo`).
fn skb_ctx(ingress_ifindex: u32, ifindex: u32) -> [u8; 44] {
    let mut ctx = [0u8; 44];
    ctx[36..40].copy_from_slice(&ingress_ifindex.to_ne_bytes());
    ctx[40..44].copy_from_slice(&ifindex.to_ne_bytes());
    ctx
}

/// `struct xdp_md` for a frame of `len` bytes arriving on device
/// `ingress_ifindex` (an existing one).
fn xdp_ctx(len: usize, ingress_ifindex: u32) -> [u8; 24] {
    let mut ctx = [0u8; 24];
    ctx[4..8].copy_from_slice(&(len as u32).to_ne_bytes());
    ctx[12..16].copy_from_slice(&ingress_ifindex.to_ne_bytes());
    ctx
}

/// One BPF_PROG_TEST_RUN with a context (see [`skb_ctx`], [`xdp_ctx`]).
fn test_run_ctx<P>(prog: &P, frame: &[u8], ctx: &[u8]) -> (u32, Vec<u8>)
where
    P: for<'a> TestRun<Opts<'a> = TestRunOptions<'a>, Result = TestRunResult>,
{
    let mut out = vec![0u8; frame.len() + 512];
    let r = prog
        .test_run(TestRunOptions {
            data_in: Some(frame),
            data_out: Some(&mut out),
            ctx_in: Some(ctx),
            repeat: 1,
            ..TestRunOptions::new()
        })
        .unwrap_or_else(|e| panic!("test run with a context refused: {e}"));
    out.truncate(r.data_size_out as usize);
    (r.return_value, out)
}

/// A tc program's run on a packet that arrived on `ingress_ifindex`, on
/// device `ifindex` (0: `lo`).
fn test_run_tc_on(
    l: &Loaded,
    name: &str,
    frame: &[u8],
    ingress_ifindex: u32,
    ifindex: u32,
) -> (u32, Vec<u8>) {
    let prog: &SchedClassifier = l
        .ebpf
        .program(name)
        .expect("tc")
        .try_into()
        .expect("tc type");
    test_run_ctx(prog, frame, &skb_ctx(ingress_ifindex, ifindex))
}

/// The XDP program's run on a frame arriving on device `ingress_ifindex`.
fn test_run_xdp_on(l: &Loaded, frame: &[u8], ingress_ifindex: u32) -> (u32, Vec<u8>) {
    let prog: &Xdp = l
        .ebpf
        .program(PROG_INGRESS_XDP)
        .expect("xdp")
        .try_into()
        .expect("xdp type");
    test_run_ctx(prog, frame, &xdp_ctx(frame.len(), ingress_ifindex))
}

fn test_run_xdp(l: &Loaded, frame: &[u8]) -> (u32, Vec<u8>) {
    let prog: &Xdp = l
        .ebpf
        .program(PROG_INGRESS_XDP)
        .expect("xdp")
        .try_into()
        .expect("xdp type");
    test_run(prog, frame).unwrap_or_else(|| panic!("XDP test run of {} bytes refused", frame.len()))
}

fn try_test_run_tc(l: &Loaded, name: &str, frame: &[u8]) -> RunResult {
    let prog: &SchedClassifier = l
        .ebpf
        .program(name)
        .expect("tc")
        .try_into()
        .expect("tc type");
    test_run(prog, frame)
}

fn test_run_tc(l: &Loaded, name: &str, frame: &[u8]) -> (u32, Vec<u8>) {
    try_test_run_tc(l, name, frame)
        .unwrap_or_else(|| panic!("tc test run of {} bytes refused", frame.len()))
}

/// The interface index test runs give a pod's packets: `lo`'s, which
/// exists in every namespace (a reply program's run must name a device
/// that exists).
const POD_IFINDEX: u32 = 1;

/// Records `addr` as a pod address of this node whose packets come in by
/// [`POD_IFINDEX`], as the agent does for the pods it finds.
/// The hash map pinned as `name` in the test's layout.
fn map<K: aya::Pod, V: aya::Pod>(l: &Loaded, name: &str) -> HashMap<MapData, K, V> {
    let data = MapData::from_pin(l.layout.map(name)).expect("pinned");
    HashMap::try_from(Map::from_map_data(data).expect("map")).expect("hash map")
}

fn own(l: &Loaded, addr: Ipv4Addr) {
    use aya::maps::{HashMap, Map, MapData};
    let data = MapData::from_pin(l.layout.map(maps::OWNERS)).expect("OWNERS pinned");
    let mut owners: HashMap<MapData, u32, Owner> =
        HashMap::try_from(Map::from_map_data(data).expect("map")).expect("OWNERS");
    let owner = Owner {
        ifindex: POD_IFINDEX,
        master: 0,
    };
    owners
        .insert(u32::from_ne_bytes(addr.octets()), owner, 0)
        .expect("owner");
}

/// A reply the pod sent: the egress program's run on a packet that came
/// in by the pod's interface.
fn from_pod(l: &Loaded, frame: &[u8]) -> (u32, Vec<u8>) {
    test_run_tc_on(l, PROG_EGRESS_TC, frame, POD_IFINDEX, 0)
}

fn counters(l: &Loaded) -> BTreeMap<&'static str, u64> {
    l.maps.global_counters().expect("counters")
}

fn delta(
    before: &BTreeMap<&'static str, u64>,
    after: &BTreeMap<&'static str, u64>,
) -> Vec<(&'static str, u64)> {
    after
        .iter()
        .filter(|(k, v)| before[*k] != **v)
        .map(|(k, v)| (*k, v - before[*k]))
        .collect()
}

/// Writes `IFACES[index] = flags`.
fn set_iface_index_flags(l: &Loaded, index: u32, flags: u32) {
    let data = MapData::from_pin(l.layout.map(maps::IFACES)).expect("IFACES pinned");
    let mut map: HashMap<MapData, u32, u32> =
        HashMap::try_from(Map::from_map_data(data).expect("IFACES")).expect("IFACES type");
    map.insert(index, flags, 0).expect("write IFACES");
}

mod arp;
mod audit;
mod capacity;
mod conntrack;
mod exposure;
mod guard;
mod icmp;
mod ipv6;
mod ndp;
mod option;
mod option6;
mod option_trust;
mod partial;
mod redirect;
mod unchecked;

const JOB: (&str, &str, &str) = ("job", "198.18.0.10:8022", "10.244.1.5:22");

/// A reply from the backend to the client (192.0.2.2:40000).
fn reply() -> Vec<u8> {
    Frame {
        src: Ipv4Addr::new(10, 244, 1, 5),
        sport: 22,
        dst: Ipv4Addr::new(192, 0, 2, 2),
        dport: 40_000,
        payload: vec![7; 300],
        ..Frame::default()
    }
    .build()
}

/// The host reference of the reverse NAT: the source back to the frontend.
fn reverse_natted(frame: &[u8]) -> Vec<u8> {
    let mut expected = frame.to_vec();
    let tcp = packet::classify(&expected).expect("classify");
    packet::rewrite(
        &mut expected,
        tcp,
        Side::Source,
        Endpoint::new(Ipv4Addr::new(198, 18, 0, 10), 8022),
    );
    expected
}

fn backend() -> Endpoint {
    Endpoint::new(Ipv4Addr::new(10, 244, 1, 5), 22)
}

/// Runs one ingress program over the standard cases; returns the cases the
/// kernel's test harness refused to build a packet for.
fn ingress_cases(
    run: impl Fn(&Loaded, &[u8]) -> RunResult,
    pass_verdict: u32,
) -> Vec<&'static str> {
    let mut refused = Vec::new();
    let l = load(&[JOB]);
    // Hit, with and without IP options: exact rewrite, valid checksums.
    for options in [vec![], vec![0x94, 0x04, 0, 0], vec![1; 40]] {
        let frame = Frame {
            ip_options: options.clone(),
            payload: b"SSH-2.0-OpenSSH_9.2\r\n".to_vec(),
            ..Frame::default()
        }
        .build();
        let before = counters(&l);
        let (verdict, out) = run(&l, &frame).expect("a well-formed frame runs");
        assert_eq!(verdict, pass_verdict);
        let mut expected = frame.clone();
        let tcp = packet::classify(&expected).expect("classify");
        packet::rewrite(&mut expected, tcp, Side::Destination, backend());
        assert_eq!(
            out, expected,
            "options {options:?}: bytes differ from the reference rewrite"
        );
        assert!(checksums_verify(&out));
        assert_eq!(delta(&before, &counters(&l)), vec![("dnat", 1)]);
    }
    // Everything else passes byte for byte, counted under its outcome.
    let passing: Vec<(&'static str, Vec<u8>, &str)> = vec![
        (
            "other port",
            Frame {
                dport: 8023,
                ..Frame::default()
            }
            .build(),
            "not_to_a_frontend",
        ),
        (
            "other ip",
            Frame {
                dst: Ipv4Addr::new(198, 18, 0, 11),
                ..Frame::default()
            }
            .build(),
            "not_to_a_frontend",
        ),
        (
            "udp to frontend port",
            Frame {
                protocol: 17,
                ..Frame::default()
            }
            .build(),
            "not_tcp",
        ),
        (
            "first fragment",
            Frame {
                frag: 0x2000,
                ..Frame::default()
            }
            .build(),
            "fragment",
        ),
        (
            "later fragment",
            Frame {
                frag: 0x0004,
                ..Frame::default()
            }
            .build(),
            "fragment",
        ),
        (
            "neither ipv4 nor ipv6",
            {
                let mut f = Frame::default().build();
                f[12..14].copy_from_slice(&0x88b5u16.to_be_bytes());
                f
            },
            "not_ip",
        ),
        (
            "ipv4 under the ipv6 type",
            {
                let mut f = Frame::default().build();
                f[12..14].copy_from_slice(&0x86ddu16.to_be_bytes());
                f
            },
            "malformed",
        ),
        (
            "ihl below 5",
            {
                let mut f = Frame::default().build();
                f[14] = 0x44;
                f
            },
            "malformed",
        ),
        (
            "truncated ip header",
            Frame::default().build()[..30].to_vec(),
            "malformed",
        ),
        (
            "truncated tcp header",
            Frame::default().build()[..50].to_vec(),
            "malformed",
        ),
        (
            "options past the end",
            Frame {
                ip_options: vec![1; 40],
                ..Frame::default()
            }
            .build()[..80]
                .to_vec(),
            "malformed",
        ),
    ];
    for (case, frame, outcome) in passing {
        let before = counters(&l);
        let Some((verdict, out)) = run(&l, &frame) else {
            refused.push(case);
            continue;
        };
        assert_eq!(verdict, pass_verdict, "{case}");
        assert_eq!(out, frame, "{case}: a passed packet must be untouched");
        assert_eq!(delta(&before, &counters(&l)), vec![(outcome, 1)], "{case}");
    }
    refused
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn xdp_program_rewrites_hits_exactly_and_passes_everything_else_untouched() {
    privilege::require();
    let refused = ingress_cases(|l, f| Some(test_run_xdp(l, f)), XDP_PASS);
    assert!(refused.is_empty(), "XDP runs every case: {refused:?}");
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn tc_ingress_program_rewrites_hits_exactly_and_passes_everything_else_untouched() {
    privilege::require();
    let refused = ingress_cases(|l, f| try_test_run_tc(l, PROG_INGRESS_TC, f), TC_ACT_UNSPEC);
    // The kernel will not build an skb whose IPv4 header is cut short, so
    // tc can never see that case; the XDP test covers it.
    assert_eq!(refused, ["truncated ip header"]);
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn tc_egress_program_restores_the_frontend_on_replies_of_tracked_connections() {
    privilege::require();
    let l = load(&[JOB]);
    conntrack::handshake(&l, conntrack::Ingress::Tc, 8022);
    let c0 = l.maps.mapping_counters(0).expect("slot 0");
    let reply = reply();
    let (verdict, out) = from_pod(&l, &reply);
    assert_eq!(verdict, TC_ACT_UNSPEC);
    assert_eq!(out, reverse_natted(&reply));
    assert!(checksums_verify(&out));
    // Not from a backend: untouched.
    let other = Frame {
        src: Ipv4Addr::new(10, 244, 1, 6),
        sport: 22,
        ..Frame::default()
    }
    .build();
    assert_eq!(test_run_tc(&l, PROG_EGRESS_TC, &other).1, other);
    let c = l.maps.mapping_counters(0).expect("slot 0");
    assert_eq!(
        (c.packets_out - c0.packets_out, c.bytes_out - c0.bytes_out),
        (1, reply.len() as u64)
    );
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn object_maps_agree_with_the_shared_constants() {
    privilege::require();
    let l = load(&[]);
    let expect: [(&str, u32, usize, usize); 45] = [
        (
            maps::FRONTENDS,
            maps::MAX_MAPPINGS,
            size_of::<Endpoint>(),
            size_of::<NatTarget>(),
        ),
        (
            maps::REVERSE,
            maps::MAX_MAPPINGS,
            size_of::<Endpoint>(),
            size_of::<NatTarget>(),
        ),
        (
            maps::CONNS,
            maps::CONN_CAPACITY,
            size_of::<maps::ConnKey>(),
            size_of::<maps::Conn>(),
        ),
        (
            maps::HALF_OPEN,
            maps::HALF_OPEN_CAPACITY,
            size_of::<maps::HalfOpenKey>(),
            size_of::<maps::HalfOpen>(),
        ),
        (
            maps::CLAIMS,
            maps::HALF_OPEN_CAPACITY,
            size_of::<maps::ClaimKey>(),
            size_of::<maps::Claim>(),
        ),
        (maps::SOURCES, maps::CONN_CAPACITY, 4, 8),
        (maps::OWNERS, maps::OWNERS_CAPACITY, 4, size_of::<Owner>()),
        (
            maps::MAPPING_STATS,
            maps::MAX_MAPPINGS,
            4,
            size_of::<maps::MappingCounters>(),
        ),
        (
            maps::MAPPING_CONNS,
            maps::MAX_MAPPINGS,
            4,
            size_of::<maps::MappingConnCounters>(),
        ),
        (
            maps::GLOBAL_STATS,
            ssh_fwd_common::outcome::Outcome::COUNT,
            4,
            8,
        ),
        (
            maps::MAPPING_NAMES,
            maps::MAX_MAPPINGS,
            4,
            size_of::<MappingName>(),
        ),
        (maps::IFACES, maps::MAX_IFACES, 4, 4),
        (maps::AGENT_STATUS, 1, 4, size_of::<maps::AgentStatus>()),
        (
            maps::LOADED_SETTINGS,
            1,
            4,
            size_of::<maps::LoadedSettings>(),
        ),
        (maps::CROSS_NODE_KEY, 1, 4, 16),
        (maps::LEGACY, maps::MAX_MAPPINGS, size_of::<Endpoint>(), 8),
        (
            maps::LEGACY_CONNS,
            maps::LEGACY_CONN_CAPACITY,
            size_of::<maps::ConnKey>(),
            size_of::<NatTarget>(),
        ),
        (
            maps::HAIRPIN_SOCKS,
            maps::HAIRPIN_SOCKS_CAPACITY,
            8,
            size_of::<maps::HairpinSock>(),
        ),
        (
            maps::ALLOWLIST,
            maps::MAX_MAPPINGS * maps::MAX_ALLOW_PER_MAPPING,
            4 + size_of::<maps::AllowData>(),
            1,
        ),
        (
            maps::GUARDS,
            maps::MAX_MAPPINGS,
            4,
            size_of::<maps::Guard>(),
        ),
        (
            maps::SYN_BUCKETS,
            maps::SYN_BUCKET_CAPACITY,
            4,
            size_of::<maps::Bucket>(),
        ),
        // A ring buffer: its size in bytes, no key, no value.
        (maps::CONN_EVENTS, maps::CONN_EVENTS_BYTES, 0, 0),
        (
            maps::CONN_STATS,
            maps::CONN_CAPACITY,
            size_of::<maps::ConnKey>(),
            size_of::<maps::ConnStats>(),
        ),
        (maps::CONN_EVENTS_DROPPED, maps::EVENT_KINDS, 4, 8),
        (
            maps::ANNOUNCE,
            maps::ANNOUNCE_CAPACITY,
            size_of::<maps::AnnounceKey>(),
            size_of::<maps::Announce>(),
        ),
        (
            maps::ARP_HEARD,
            maps::ANNOUNCE_CAPACITY,
            4,
            size_of::<maps::Heard>(),
        ),
        (
            maps::FRONTENDS6,
            maps::MAX_MAPPINGS,
            size_of::<maps::Endpoint6>(),
            size_of::<maps::NatTarget6>(),
        ),
        (
            maps::REVERSE6,
            maps::MAX_MAPPINGS,
            size_of::<maps::Endpoint6>(),
            size_of::<maps::NatTarget6>(),
        ),
        (
            maps::CONNS6,
            maps::CONN_CAPACITY,
            size_of::<maps::ConnKey6>(),
            size_of::<maps::Conn6>(),
        ),
        (
            maps::HALF_OPEN6,
            maps::HALF_OPEN_CAPACITY,
            size_of::<maps::HalfOpenKey6>(),
            size_of::<maps::HalfOpen6>(),
        ),
        (
            maps::CLAIMS6,
            maps::HALF_OPEN_CAPACITY,
            size_of::<maps::ClaimKey6>(),
            size_of::<maps::Claim6>(),
        ),
        (maps::SOURCES6, maps::CONN_CAPACITY, 8, 8),
        (
            maps::OWNERS6,
            maps::OWNERS_CAPACITY,
            size_of::<maps::Addr6>(),
            size_of::<Owner>(),
        ),
        (
            maps::ALLOWLIST6,
            maps::MAX_MAPPINGS * maps::MAX_ALLOW_PER_MAPPING,
            4 + size_of::<maps::AllowData6>(),
            1,
        ),
        (
            maps::SYN_BUCKETS6,
            maps::SYN_BUCKET_CAPACITY,
            8,
            size_of::<maps::Bucket>(),
        ),
        (
            maps::CONN_STATS6,
            maps::CONN_CAPACITY,
            size_of::<maps::ConnKey6>(),
            size_of::<maps::ConnStats>(),
        ),
        (
            maps::HAIRPIN_SOCKS6,
            maps::HAIRPIN_SOCKS_CAPACITY,
            8,
            size_of::<maps::HairpinSock6>(),
        ),
        (
            maps::ANNOUNCE6,
            maps::ANNOUNCE_CAPACITY,
            size_of::<maps::AnnounceKey6>(),
            size_of::<maps::Announce>(),
        ),
        (
            maps::NDP_HEARD,
            maps::ANNOUNCE_CAPACITY,
            size_of::<maps::Addr6>(),
            size_of::<maps::Heard>(),
        ),
        (
            maps::AGENT_MACS,
            maps::AGENT_MACS_CAPACITY,
            size_of::<maps::MacKey>(),
            4,
        ),
        (
            maps::ARP_FOREIGN,
            maps::ANNOUNCE_CAPACITY,
            4,
            size_of::<maps::Foreign>(),
        ),
        (
            maps::NDP_FOREIGN,
            maps::ANNOUNCE_CAPACITY,
            size_of::<maps::Addr6>(),
            size_of::<maps::Foreign>(),
        ),
        (maps::SSH_IPS, maps::SSH_IPS_CAPACITY, 4, 4),
        (
            maps::SSH_IPS6,
            maps::SSH_IPS_CAPACITY,
            size_of::<maps::Addr6>(),
            4,
        ),
        (
            maps::IFACE_MACS,
            maps::IFACE_MACS_CAPACITY,
            4,
            size_of::<maps::MacKey>(),
        ),
    ];
    assert_eq!(expect.map(|e| e.0), maps::ALL_MAPS);
    for (name, entries, key, value) in expect {
        let info = MapInfo::from_pin(l.layout.map(name))
            .unwrap_or_else(|e| panic!("{name} not pinned: {e}"));
        assert_eq!(info.max_entries(), entries, "{name} capacity");
        assert_eq!(info.key_size() as usize, key, "{name} key size");
        assert_eq!(info.value_size() as usize, value, "{name} value size");
    }
    // Nothing evicts an established connection: a plain hash. Handshakes
    // in progress may be churned: an LRU.
    let conns = MapInfo::from_pin(l.layout.map(maps::CONNS)).expect("CONNS");
    assert_eq!(conns.map_type().expect("type"), aya::maps::MapType::Hash);
    // SYNs and claims are needed for the pod's answer time only: LRUs,
    // with a list per CPU (no lock shared by every insert).
    for name in [maps::HALF_OPEN, maps::CLAIMS, maps::SYN_BUCKETS] {
        let info = MapInfo::from_pin(l.layout.map(name)).expect(name);
        assert_eq!(info.map_type().expect("type"), aya::maps::MapType::LruHash);
        assert_eq!(info.map_flags(), 2, "{name}: BPF_F_NO_COMMON_LRU");
    }
}
