//! The hairpin programs (cgroup `connect4`, `getpeername4`, `connect6`,
//! `getpeername6`) on real sockets. The kernel has no BPF_PROG_TEST_RUN for cgroup sock_addr
//! programs (and aya offers no `TestRun` for them), so these tests attach
//! them, through the agent's own code, to a cgroup of their own and make
//! real `connect()` calls from a process in it, inside a network namespace
//! of their own: nothing else on the machine sees the programs.

use std::{
    net::{Ipv4Addr, TcpListener},
    process::Command,
};

use aya::Ebpf;
use ssh_fwd::{
    datapath::{hairpin, maps::Maps, object, pins::PinLayout, plan, stats},
    mapping::{Mapping, MappingSet},
};
use ssh_fwd_tests::{Bpffs, NetNs, TestCgroup, cmd, privilege};

const SSH_IP: &str = "198.18.0.10";
const SSH_IP6: &str = "fd00:198::10";
const ECONNREFUSED: &str = "error 111";
const ENETUNREACH: &str = "error 101";

/// A namespace with the SSH IP on `lo` and two listeners, the object
/// loaded with its maps in a private bpffs, and the hairpin programs
/// attached to a private cgroup.
struct Bed {
    netns: NetNs,
    cgroup: TestCgroup,
    layout: PinLayout,
    /// Owns the programs and maps (the links are pinned).
    _ebpf: Ebpf,
    maps: Maps,
    /// The backend of the mapping.
    backend: TcpListener,
    /// Another listener, never mapped.
    other: TcpListener,
    _bpffs: Bpffs,
}

impl Bed {
    fn new() -> Self {
        let netns = NetNs::new("hairpin").expect("netns");
        netns
            .ip(&["addr", "add", &format!("{SSH_IP}/32"), "dev", "lo"])
            .expect("SSH IP on lo");
        netns
            .ip(&[
                "-6",
                "addr",
                "add",
                &format!("{SSH_IP6}/128"),
                "dev",
                "lo",
                "nodad",
            ])
            .expect("IPv6 SSH IP on lo");
        // The listeners are made in the namespace by this thread.
        netns.enter_on_this_thread().expect("enter netns");
        let backend = TcpListener::bind("127.0.0.1:0").expect("backend");
        let other = TcpListener::bind("127.0.0.1:0").expect("other");
        let bpffs = Bpffs::new().expect("bpffs dir");
        let layout = PinLayout::new(bpffs.path());
        layout.prepare().expect("bpffs");
        let cgroup = TestCgroup::new().expect("cgroup");
        let (ebpf, maps) = load_and_attach(&layout, &cgroup);
        let mut bed = Self {
            netns,
            cgroup,
            layout,
            _ebpf: ebpf,
            maps,
            backend,
            other,
            _bpffs: bpffs,
        };
        bed.map(&[("job", "198.18.0.10:8022", &bed.backend_addr())]);
        bed
    }

    fn backend_addr(&self) -> String {
        self.backend.local_addr().expect("addr").to_string()
    }

    fn map(&mut self, mappings: &[(&str, &str, &str)]) {
        let set = MappingSet::from_unique(mappings.iter().map(|(name, f, b)| Mapping {
            guard: Default::default(),
            name: (*name).into(),
            frontend: f.parse().expect("frontend"),
            backend: b.parse().expect("backend"),
        }));
        let installed = self.maps.read_installed().expect("read");
        for step in &plan::plan_steps(&installed, &set, self.maps.capacity()).steps {
            self.maps.apply(step).expect("apply");
        }
    }

    /// `sock-probe` in the namespace, in the cgroup or not.
    fn probe(&self, in_cgroup: bool, proto: &str, ip: &str, port: u16) -> String {
        let bin = env!("CARGO_BIN_EXE_sock-probe");
        let mut c = if in_cgroup {
            self.cgroup.command(Some(&self.netns), bin)
        } else {
            self.netns.command(bin)
        };
        let out = cmd::run(c.args([proto, ip, &port.to_string()])).expect("sock-probe");
        out.lines().next().unwrap_or_default().to_owned()
    }
}

fn load_and_attach(layout: &PinLayout, cgroup: &TestCgroup) -> (Ebpf, Maps) {
    let mut ebpf = object::load(layout, &object::Settings::default()).expect("load object");
    hairpin::apply(&mut ebpf, layout, Some(cgroup.path())).expect("attach hairpin");
    let maps = Maps::from_ebpf(&mut ebpf).expect("maps");
    (ebpf, maps)
}

/// The ids of the programs attached to `cgroup`, as bpftool sees them.
fn attached_programs(cgroup: &TestCgroup) -> Vec<String> {
    let out = cmd::run(
        Command::new("bpftool")
            .arg("cgroup")
            .arg("show")
            .arg(cgroup.path()),
    )
    .expect("bpftool cgroup show");
    out.lines()
        .filter(|l| l.contains("connect") || l.contains("getpeername"))
        .map(|l| l.split_whitespace().next().unwrap_or_default().to_owned())
        .collect()
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn a_mapped_frontend_is_dialled_at_its_backend_and_shown_as_dialled() {
    privilege::require();
    let bed = Bed::new();
    assert_eq!(
        bed.probe(true, "tcp", SSH_IP, 8022),
        "peer 198.18.0.10:8022",
        "getpeername shows the frontend"
    );
    let (_, client) = bed
        .backend
        .accept()
        .expect("the backend got the connection");
    assert_eq!(
        client.ip(),
        Ipv4Addr::LOCALHOST,
        "the backend sees the client's own address"
    );
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn unmapped_ports_other_addresses_udp_and_other_cgroups_are_left_alone() {
    privilege::require();
    let bed = Bed::new();
    let other = bed.other.local_addr().expect("addr").port();
    assert_eq!(
        bed.probe(true, "tcp", SSH_IP, 8023),
        ECONNREFUSED,
        "an unmapped port on the SSH IP reaches the node's own stack"
    );
    assert_eq!(
        bed.probe(true, "tcp", "127.0.0.1", other),
        format!("peer 127.0.0.1:{other}"),
        "another address is dialled and shown as it is"
    );
    let backend = bed.backend.local_addr().expect("addr").port();
    assert_eq!(
        bed.probe(true, "tcp", "127.0.0.1", backend),
        format!("peer 127.0.0.1:{backend}"),
        "a socket that dials the backend directly is shown the backend"
    );
    assert_eq!(
        bed.probe(true, "udp", "198.18.0.99", 8022),
        ENETUNREACH,
        "control: the UDP probe reaches connect()"
    );
    let mut bed = bed;
    bed.map(&[
        ("job", "198.18.0.10:8022", &bed.backend_addr()),
        ("far", "198.18.0.99:8022", &bed.backend_addr()),
    ]);
    assert_eq!(
        bed.probe(true, "udp", "198.18.0.99", 8022),
        ENETUNREACH,
        "UDP to a mapped frontend is not translated"
    );
    assert_eq!(
        bed.probe(false, "tcp", SSH_IP, 8022),
        ECONNREFUSED,
        "a process outside the cgroup is not translated"
    );
    assert_eq!(
        bed.probe(true, "tcp", "198.18.0.99", 8022),
        "peer 198.18.0.99:8022",
        "control: a mapped frontend without a route is translated"
    );
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn a_removed_mapping_is_no_longer_translated_and_a_moved_one_goes_to_the_new_backend() {
    privilege::require();
    let mut bed = Bed::new();
    let other = bed.other.local_addr().expect("addr").to_string();
    bed.map(&[("job", "198.18.0.10:8022", &other)]);
    assert_eq!(
        bed.probe(true, "tcp", SSH_IP, 8022),
        "peer 198.18.0.10:8022"
    );
    bed.other
        .accept()
        .expect("the new backend got the connection");
    bed.map(&[]);
    assert_eq!(
        bed.probe(true, "tcp", SSH_IP, 8022),
        ECONNREFUSED,
        "removed: the SSH IP's own stack answers"
    );
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn a_second_agent_replaces_the_pinned_links_and_teardown_removes_them() {
    privilege::require();
    let bed = Bed::new();
    let first = attached_programs(&bed.cgroup);
    assert_eq!(
        first.len(),
        4,
        "connect and getpeername, 4 and 6: {first:?}"
    );
    let hooks: Vec<(String, String)> = stats::hooks(&bed.layout)
        .into_iter()
        .filter(|h| h.target == stats::Target::Cgroup)
        .map(|h| (h.iface, h.hook))
        .collect();
    let path = bed.cgroup.path().display().to_string();
    assert_eq!(
        hooks,
        [
            (path.clone(), "connect4".to_owned()),
            (path.clone(), "connect6".to_owned()),
            (path.clone(), "getpeername4".to_owned()),
            (path, "getpeername6".to_owned())
        ]
    );

    // The next agent: its own programs, the same pins, the same maps.
    let (_ebpf, _maps) = load_and_attach(&bed.layout, &bed.cgroup);
    let second = attached_programs(&bed.cgroup);
    assert_eq!(second.len(), 4, "the old links are gone: {second:?}");
    assert!(
        second.iter().all(|id| !first.contains(id)),
        "{first:?} -> {second:?}"
    );
    assert_eq!(
        bed.probe(true, "tcp", SSH_IP, 8022),
        "peer 198.18.0.10:8022"
    );

    hairpin::detach_all(&bed.layout).expect("teardown");
    assert!(attached_programs(&bed.cgroup).is_empty());
    assert_eq!(bed.probe(true, "tcp", SSH_IP, 8022), ECONNREFUSED);
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn an_ipv6_frontend_and_an_ipv4_one_dialled_as_mapped_reach_their_backends() {
    privilege::require();
    let mut bed = Bed::new();
    let backend6 = TcpListener::bind("[::1]:0").expect("IPv6 backend");
    let backend6_addr = backend6.local_addr().expect("addr").to_string();
    let v4 = bed.backend_addr();
    bed.map(&[
        ("job", "198.18.0.10:8022", &v4),
        ("job6", "[fd00:198::10]:8022", &backend6_addr),
    ]);
    assert_eq!(
        bed.probe(true, "tcp", SSH_IP6, 8022),
        "peer [fd00:198::10]:8022",
        "getpeername6 shows the IPv6 frontend"
    );
    let (_, client) = backend6.accept().expect("the IPv6 backend got it");
    assert_eq!(client.ip(), std::net::Ipv6Addr::LOCALHOST);
    // A dual-stack socket dialling the IPv4 frontend as a mapped address.
    assert_eq!(
        bed.probe(true, "tcp", "::ffff:198.18.0.10", 8022),
        "peer [::ffff:198.18.0.10]:8022",
        "shown as dialled"
    );
    bed.backend.accept().expect("the IPv4 backend got it");
    // Left alone: an unmapped IPv6 port, UDP, a process outside the cgroup.
    assert_eq!(bed.probe(true, "tcp", SSH_IP6, 8023), ECONNREFUSED);
    assert_eq!(bed.probe(false, "tcp", SSH_IP6, 8022), ECONNREFUSED);
    assert_eq!(
        bed.probe(true, "udp", SSH_IP6, 8022),
        "peer [fd00:198::10]:8022",
        "UDP is not translated"
    );
}
