//! From the previous release (commit `6763fbe`), of today's layout v4: its
//! maps pinned under `v4/maps`, its tcx links under `v4/links/ext0` and,
//! on each pod's interface, under `v4/pod-links/<index>`. Today's agent
//! takes them over in place: the maps whose definition this version kept
//! stay, with what they hold (the connections that release tracked, the
//! mappings and their counters); the two whose definition changed, which
//! hold only what is safe to lose, are replaced by empty ones; the maps
//! this version added are made; its programs are swapped into the same
//! links.

use std::{collections::BTreeMap, path::Path, time::Duration};

use aya::{
    maps::{Array, HashMap},
    programs::{LinkOrder, TcAttachType},
};
use ssh_fwd::datapath::{maps::show, netdev};
use ssh_fwd_common::{
    conntrack::closing,
    maps::{
        AGENT_STATUS, ALL_MAPS, CONNS, Conn, ConnKey, FRONTENDS, GLOBAL_STATS, HAIRPIN_SOCKS,
        HALF_OPEN, IFACE_EXTERNAL, IFACE_POD_PEER, IFACES, LEGACY, LEGACY_CONNS, LOADED_SETTINGS,
        LoadedSettings, MAPPING_NAMES, MAPPING_STATS, REVERSE,
    },
    outcome::Outcome,
};
use ssh_fwd_tests::{Bpffs, Topology, cmd, privilege, topology::EXT_IFACE};

use super::{
    older::{Sessions, attach_tc, start_agent, start_data_path},
    pins::{Pins, conns, held_by, packets_in},
};
use crate::common::{EXTERNAL_IP, FRONTEND};

const V4_OBJECT: &[u8] = aya::include_bytes_aligned!("../../fixtures/ssh-fwd-ebpf-v4.o");

/// Reverse NAT on the host end of a pod's interface, as that release
/// names it.
const PROG_REPLY_TC: &str = "ssh_fwd_reply_tc";

/// Every map that release pinned (its `ALL_MAPS`).
const PREVIOUS_MAPS: [&str; 13] = [
    FRONTENDS,
    REVERSE,
    CONNS,
    HALF_OPEN,
    MAPPING_STATS,
    GLOBAL_STATS,
    MAPPING_NAMES,
    IFACES,
    AGENT_STATUS,
    LOADED_SETTINGS,
    LEGACY,
    LEGACY_CONNS,
    HAIRPIN_SOCKS,
];

/// Those whose definition changed since: the half-open table is an LRU
/// with a list per CPU now, there are more outcome counters, and the
/// per-mapping counters are one copy shared by the CPUs (carried over:
/// [`check_listed`] finds the packets counted before the upgrade).
const REPLACED: [&str; 3] = [HALF_OPEN, GLOBAL_STATS, MAPPING_STATS];

/// `BPF_F_NO_COMMON_LRU`.
const NO_COMMON_LRU: u32 = 2;

/// Loads the previous release's object in the node as its agent left it
/// with default settings: the data path on `ext0` (see
/// [`start_data_path`]), and what its first pod scan did: the reply
/// program on the pod's end of its veth, pinned by interface index, and
/// the interfaces' flags; then the settings it loaded the programs with
/// (`--redirect auto`). Returns the index of the pod's end.
fn start_previous_release(topo: &Topology, dir: &Path) -> anyhow::Result<u32> {
    let pod = topo.pods[0].node_iface.as_str();
    let pod_links = dir.join("pod-links");
    std::fs::create_dir_all(&pod_links)?;
    let mut pod_index = 0;
    start_data_path(&topo.nodes[0].ns, V4_OBJECT, dir, |ebpf| {
        let index = netdev::index(pod)?;
        pod_index = index;
        attach_tc(
            ebpf,
            PROG_REPLY_TC,
            pod,
            TcAttachType::Ingress,
            LinkOrder::last(),
            &pod_links.join(index.to_string()),
        )?;
        let mut flags: HashMap<_, u32, u32> = HashMap::try_from(ebpf.map_mut(IFACES).unwrap())?;
        flags.insert(netdev::index(EXT_IFACE)?, IFACE_EXTERNAL, 0)?;
        flags.insert(index, IFACE_POD_PEER, 0)?;
        let mut loaded: Array<_, LoadedSettings> =
            Array::try_from(ebpf.map_mut(LOADED_SETTINGS).unwrap())?;
        loaded.set(0, LoadedSettings { flags: 0 }, 0)?;
        Ok(())
    })?;
    Ok(pod_index)
}

fn sorted(names: &[&'static str]) -> Vec<&'static str> {
    let mut names = names.to_vec();
    names.sort_unstable();
    names
}

/// The agent said nothing louder than INFO, and replaced exactly the
/// [`REPLACED`] maps of `dir`.
fn check_log(log: &str, dir: &Path) {
    assert!(
        !log.contains("upgrading the data path of an older ssh-fwd"),
        "the same layout: nothing to move: {log}"
    );
    assert!(!log.contains("mapping removed"), "{log}");
    let events: Vec<serde_json::Value> = log
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    let loud: Vec<_> = events
        .iter()
        .filter(|e| e["level"] == "WARN" || e["level"] == "ERROR")
        .collect();
    assert!(loud.is_empty(), "no warning or error: {loud:#?}");
    let mut replaced: Vec<String> = events
        .iter()
        .filter(|e| {
            e["fields"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("replaced by a new, empty one"))
        })
        .map(|e| e["fields"]["pin"].as_str().unwrap().to_owned())
        .collect();
    replaced.sort();
    let expected: Vec<String> = sorted(&REPLACED)
        .iter()
        .map(|name| dir.join("maps").join(name).display().to_string())
        .collect();
    assert_eq!(replaced, expected, "{log}");
}

/// Every map of this version is pinned; those of the previous release are
/// the same maps, but for the replaced ones, now of today's definition.
/// The links are the same, running today's programs.
fn check_taken_over(before: &Pins, after: &Pins, pod_index: u32) {
    assert_eq!(after.map_names(), sorted(&ALL_MAPS));
    for name in PREVIOUS_MAPS {
        let (old, new) = (before.maps[name], after.maps[name]);
        if REPLACED.contains(&name) {
            assert_ne!(old.id, new.id, "{name} replaced");
            assert_ne!(old, new, "{name}");
        } else {
            assert_eq!(old, new, "{name} kept");
        }
    }
    assert_eq!(after.maps[HALF_OPEN].flags, NO_COMMON_LRU);
    assert_eq!(after.maps[GLOBAL_STATS].max_entries, Outcome::COUNT);
    let pod_link = format!("pod-links/{pod_index}");
    assert_eq!(
        before.links.keys().map(String::as_str).collect::<Vec<_>>(),
        ["links/ext0/egress-tc", "links/ext0/ingress-tc", &pod_link]
    );
    for (pin, (link, program)) in &before.links {
        let (link_now, program_now) = after.links[pin];
        assert_eq!(link_now, *link, "{pin}: the same link");
        assert_ne!(program_now, *program, "{pin}: today's program in it");
    }
}

/// The connections the previous release tracked are there as it made
/// them, and the client's quota counts the open ones (the agent's sweep
/// recounts it from the entries; closed ones count for nobody).
fn check_kept(dir: &Path, open: &BTreeMap<ConnKey, Conn>) {
    let tracked = conns(dir).unwrap();
    for (key, conn) in open {
        let kept = tracked.get(key).expect("kept");
        assert_eq!(
            (kept.frontend, kept.slot, kept.created_ns),
            (conn.frontend, conn.slot, conn.created_ns)
        );
    }
    let client = open.keys().next().unwrap().client_addr;
    let counted = cmd::wait_until(Duration::from_secs(5), || {
        let entries = conns(dir).unwrap();
        let of_client = entries
            .iter()
            .filter(|(k, c)| k.client_addr == client && !closing(c))
            .count();
        held_by(dir, client).unwrap() == of_client as u64
    });
    assert!(counted, "SOURCES counts {}", held_by(dir, client).unwrap());
}

/// Today's programs track the kept connections on: the echo session's
/// entry moved with the server's segments; the late session's closed
/// both ways.
fn check_tracked_on(dir: &Path, open: &BTreeMap<ConnKey, Conn>) {
    let moved = cmd::wait_until(Duration::from_secs(5), || {
        let now = conns(dir).unwrap();
        let states: Vec<(bool, bool)> = open
            .iter()
            .map(|(key, conn)| {
                let c = now.get(key);
                (
                    c.is_some_and(closing),
                    c.is_some_and(|c| c.server_next != conn.server_next),
                )
            })
            .collect();
        states.contains(&(false, true)) && states.iter().any(|(closed, _)| *closed)
    });
    assert!(moved, "{open:#?} then {:#?}", conns(dir).unwrap());
}

/// `ssh-fwd list`: the kept connections through their frontend; counted
/// since the upgrade, the new login the only connection made (the
/// previous release's were kept, not made again); the mapping's packets
/// counted on from the previous release's.
fn check_listed(bpffs: &Bpffs, open: &BTreeMap<ConnKey, Conn>, packets_before: u64) {
    let list = bpffs.list().unwrap();
    let rows = list["conns"].as_array().unwrap();
    for key in open.keys() {
        let client = show(&key.client());
        let row = rows.iter().find(|r| r["client"] == client.as_str());
        let row = row.unwrap_or_else(|| panic!("{client} listed: {list}"));
        assert_eq!(row["frontend"], FRONTEND, "{list}");
    }
    let count = |name: &str| list["counters"][name].as_u64().unwrap_or(0);
    assert_eq!(count("conn_established"), 1, "{list}");
    assert_eq!(count("conn_adopted"), 0, "{list}");
    let job = &list["mappings"][0];
    assert_eq!(job["conns_opened"], 1, "{list}");
    assert!(
        job["packets_in"].as_u64().unwrap() > packets_before,
        "{list}"
    );
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn an_agent_upgrading_a_node_of_the_previous_release_keeps_its_maps_and_sessions() {
    privilege::require();
    let topo = Topology::single_node(1).unwrap();
    let bpffs = Bpffs::new().unwrap();
    bpffs.mount().unwrap();
    let v4 = bpffs.path().join("v4");
    let pod_index = start_previous_release(&topo, &v4).unwrap();
    let mut sessions = Sessions::open(&topo).unwrap();
    let before = Pins::read(&v4).unwrap();
    assert_eq!(before.map_names(), sorted(&PREVIOUS_MAPS));
    // That release's programs tracked the sessions: a first login (closed
    // by now) and the three open ones.
    let tracked = conns(&v4).unwrap();
    let open: BTreeMap<ConnKey, Conn> = tracked
        .iter()
        .filter(|(_, c)| !closing(c))
        .map(|(k, c)| (*k, *c))
        .collect();
    assert_eq!(open.len(), 3, "{tracked:#?}");
    let packets_before = packets_in(&v4).unwrap();

    let (agent, _mappings) = start_agent(&topo, &bpffs).unwrap();
    check_log(&agent.log(), &v4);
    // The per-CPU counters were summed into the new shared table: nothing
    // counted before the upgrade is lost.
    let list = bpffs.list().unwrap();
    let carried = list["mappings"][0]["packets_in"].as_u64().unwrap();
    assert!(
        carried >= packets_before,
        "{carried} < {packets_before}: {list}"
    );
    check_taken_over(&before, &Pins::read(&v4).unwrap(), pod_index);
    check_kept(&v4, &open);

    sessions.carry_on().unwrap();
    check_tracked_on(&v4, &open);
    assert_eq!(
        topo.ssh()
            .run(&topo.client, EXTERNAL_IP, 8022, "hostname")
            .unwrap(),
        "pod-1",
        "a new login"
    );
    sessions.echo.echo("end").unwrap();
    check_listed(&bpffs, &open, packets_before);
}
