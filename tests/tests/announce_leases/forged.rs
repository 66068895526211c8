//! An attacker on the segment (a host that is no node) forges claims of
//! the SSH IP: gratuitous ARP replies or unsolicited neighbour
//! advertisements from a MAC no agent published, 100 a second. The
//! holder keeps answering, with the API up or stalled for everyone, and
//! counts and logs the claims; and forged answers to a standby's probes
//! do not hold back its takeover of a holder that died.

use super::{
    l2::{FORGED_MAC, FORGED_MAC_TEXT, Forger, mac_bytes, probe_answer},
    *,
};

/// Forged frames a second.
const RATE: u32 = 100;
/// The metric of the claims heard from a MAC no agent published.
const FOREIGN_CLAIMS: &str = "ssh_fwd_announce_foreign_claims_total";
/// What an agent logs about them (at most once a minute).
const FOREIGN_LOGGED: &str = "a MAC no agent published claims the SSH IP";

impl Bed {
    /// `family`: `ipv4` or `ipv6`, as the metrics' label says.
    fn family(&self) -> &'static str {
        if self.ssh_ip == EXTERNAL_IP6 {
            "ipv6"
        } else {
            "ipv4"
        }
    }

    /// A host of the segment that is no node, plugged into the bridge now,
    /// with the agents running. The bridge keeps its MAC: were it to take
    /// the new port's (a bridge without an address of its own takes the
    /// lowest of its ports'), the nodes' neighbour entries for the API
    /// server's address would name a MAC nobody answers to any more, their
    /// renewals would stop reaching it for seconds, and the standby would
    /// take the SSH IP over at expiry, whatever the forger does.
    fn plug_in_a_host(&self) -> NetNs {
        let bridge = Segment::mac(&self.seg.switch, "br0").unwrap();
        let neighbour = self.seg.another_host().unwrap();
        let now = Segment::mac(&self.seg.switch, "br0").unwrap();
        assert_eq!(now, bridge, "plugging a host in changed the bridge's MAC");
        neighbour
    }

    /// Node `n`'s count of foreign claims of the SSH IP's family.
    fn foreign_claims(&self, n: usize) -> f64 {
        let series = format!("{FOREIGN_CLAIMS}{{family=\"{}\"}}", self.family());
        self.counter(n, &series)
    }
}

fn forged_claims_leave_the_holder_answering(mut bed: Bed, outage: bool) {
    bed.node0_holds_node1_watches();
    let mac0 = bed.mac(0);
    if outage {
        // Every renewal of node 0 fails from now on, long enough that its
        // Lease would have expired: only the segment can move the SSH IP.
        bed.api.stall();
        std::thread::sleep(Duration::from_millis(2_500));
    }
    let neighbour = bed.plug_in_a_host();
    let forger = Forger::start(&neighbour, bed.forged_claim(), RATE);
    std::thread::sleep(Duration::from_millis(300));
    let answers = bed.probe_each(12);
    let sent = forger.stop();
    assert!(
        answers.iter().all(|each| *each == [mac0.clone()]),
        "each probe during the forgery answered by node 0 ({mac0}) alone: {answers:?}"
    );
    assert!(sent >= u64::from(RATE), "{sent} forged");
    // The agent reads the data path's count once a pass; with the API
    // stalled a pass waits for its renewal.
    let enough = || bed.foreign_claims(0) >= sent as f64 * 0.9;
    let counted_in_time = cmd_wait(Duration::from_secs(3), enough);
    let counted = bed.foreign_claims(0);
    assert!(
        counted_in_time,
        "node 0 counted {counted} of {sent} forged claims as foreign"
    );
    let node0 = bed.agents[0].as_ref().unwrap();
    assert_eq!(node0.count_in_log(FOREIGN_LOGGED), 1, "logged once");
    assert!(
        node0.log().contains(FORGED_MAC_TEXT),
        "the log names the forger's MAC"
    );
    if outage {
        bed.api.resume();
        std::thread::sleep(Duration::from_secs(2));
    }
    assert_eq!(bed.holder().as_deref(), Some("node0"));
    eprintln!(
        "forged claims ({}{}): {sent} sent, {counted} counted by node 0, every probe answered by it",
        bed.family(),
        if outage { ", API stalled" } else { "" }
    );
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn forged_gratuitous_arps_leave_the_holder_answering_and_are_counted() {
    privilege::require();
    forged_claims_leave_the_holder_answering(Bed::new(), false);
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn forged_gratuitous_arps_during_an_api_outage_leave_the_holder_answering() {
    privilege::require();
    forged_claims_leave_the_holder_answering(Bed::new(), true);
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn forged_neighbour_advertisements_leave_the_holder_answering_and_are_counted() {
    privilege::require();
    forged_claims_leave_the_holder_answering(Bed::ipv6(), false);
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn forged_neighbour_advertisements_during_an_api_outage_leave_the_holder_answering() {
    privilege::require();
    forged_claims_leave_the_holder_answering(Bed::ipv6(), true);
}

/// The most a standby may take to take over a dead holder while its
/// probes get forged answers: the fast takeover's (three probe periods, a
/// renewal 0.6 s old, the write), well before the Lease expires (1.5 to
/// 2 s after the death).
const FAST_TAKEOVER: Duration = Duration::from_millis(1_400);

fn forged_probe_answers_do_not_hold_back_the_takeover(mut bed: Bed) {
    bed.node0_holds_node1_watches();
    let mac1 = bed.mac(1);
    let neighbour = bed.plug_in_a_host();
    // Answers to node 1's probes from a MAC node 0 never published: ARP
    // replies to node 1, or advertisements to all nodes.
    let forged = match bed.ssh_ip.parse::<std::net::Ipv4Addr>() {
        Ok(ip) => probe_answer(FORGED_MAC, ip, mac_bytes(&mac1)),
        Err(_) => bed.forged_claim(),
    };
    let forger = Forger::start(&neighbour, forged, RATE);
    std::thread::sleep(Duration::from_millis(300));
    let killed = Instant::now();
    bed.agents[0].as_mut().unwrap().kill().unwrap();
    bed.bpffs[0].teardown().unwrap();
    assert!(
        cmd_wait(Duration::from_secs(6), || bed.holder().as_deref()
            == Some("node1")),
        "node 1 did not take the Lease"
    );
    let taken = killed.elapsed();
    let early = if bed.family() == "ipv6" {
        "answers no neighbour solicitation"
    } else {
        EARLY_TAKEOVER
    };
    assert_eq!(
        bed.agents[1].as_ref().unwrap().count_in_log(early),
        1,
        "node 1 took the dead holder over before its Lease expired ({taken:?} after the \
         death), forged answers notwithstanding"
    );
    assert!(taken < FAST_TAKEOVER, "taken {taken:?} after the death");
    // Node 1 answers now, the forger's claims notwithstanding.
    std::thread::sleep(Duration::from_millis(300));
    let answers = bed.probe_each(6);
    let sent = forger.stop();
    assert!(
        answers.iter().all(|each| *each == [mac1.clone()]),
        "node 1 ({mac1}) alone: {answers:?}"
    );
    assert!(
        bed.foreign_claims(1) > 0.0,
        "node 1 counted the forged answers as foreign"
    );
    eprintln!(
        "forged probe answers ({}): node 1 took over {taken:?} after the death; {sent} forged",
        bed.family()
    );
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn forged_answers_to_arp_probes_do_not_hold_back_the_takeover_of_a_dead_holder() {
    privilege::require();
    forged_probe_answers_do_not_hold_back_the_takeover(Bed::new());
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn forged_answers_to_neighbour_solicitations_do_not_hold_back_the_takeover_of_a_dead_holder() {
    privilege::require();
    forged_probe_answers_do_not_hold_back_the_takeover(Bed::ipv6());
}
