//! A holder cut off from the API server while its node and data path live
//! on: every request of its agent waits, its watch's events too (the
//! fake API stalls its whole connection, by its token). The other node
//! takes the Lease when it expires; the holder cannot see that, and hears
//! only the new holder's gratuitous ARPs (or advertisements). It must
//! give way once and for all: from then on one MAC answers, however long
//! the partition lasts, and when the API comes back the holder stays a
//! standby.

use super::*;

/// Within this of the partition, one MAC answers: the Lease's expiry (2 s
/// after the holder's last renewal, which is at most 0.5 s old) plus the
/// takeover and a margin.
const ONE_MAC_WITHIN: Duration = Duration::from_secs(4);
/// What the holder logs when it gives way.
const GAVE_WAY: &str = "another node announces the SSH IP";

/// The question each probe asks (logs and metrics), by family.
fn probes_sent(bed: &Bed) -> &'static str {
    if bed.ssh_ip == EXTERNAL_IP6 {
        "ssh_fwd_announce_solicitations_sent_total"
    } else {
        PROBES_SENT
    }
}

/// What a node tells the segment when it starts answering, by family.
fn claims_sent(bed: &Bed) -> &'static str {
    if bed.ssh_ip == EXTERNAL_IP6 {
        "ssh_fwd_neighbour_adverts_sent_total"
    } else {
        "ssh_fwd_garps_sent_total"
    }
}

impl Bed {
    /// Node `n`'s value of the counter `name`.
    pub fn counter(&self, n: usize, name: &str) -> f64 {
        let text = ssh_fwd_tests::prometheus::get_in(self.node(n), "127.0.0.1:9102", "/metrics")
            .map(|(_, body)| body)
            .unwrap_or_default();
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
            .unwrap_or(0.0)
    }

    /// Node 0 holds the SSH IP, node 1 has watched it for five probe
    /// periods (so it heard node 0's data path answer).
    pub fn node0_holds_node1_watches(&mut self) {
        self.start(0)
            .wait_for_log("took the SSH IP over", Duration::from_secs(10))
            .unwrap();
        self.start(1);
        assert_eq!(self.holder().as_deref(), Some("node0"));
        let sent = |bed: &Bed| bed.counter(1, probes_sent(bed));
        let start = sent(self);
        assert!(
            cmd_wait(Duration::from_secs(10), || sent(self) >= start + 5.0),
            "node 1 probes node 0's data path"
        );
    }
}

fn a_partitioned_holder_gives_way_for_good(mut bed: Bed) {
    bed.node0_holds_node1_watches();
    let mac1 = bed.mac(1);
    // From node 0's next renewal on, its whole connection waits.
    bed.api.stall_user_at("node0", Kind::Lease, "update");
    let stalled = Instant::now();
    let mut last = Vec::new();
    while stalled.elapsed() < ONE_MAC_WITHIN {
        last = bed.probe_each(1);
        if last == [vec![mac1.clone()]] {
            break;
        }
    }
    let one_mac = stalled.elapsed();
    assert!(
        one_mac < ONE_MAC_WITHIN,
        "{ONE_MAC_WITHIN:?} into the partition, not node 1 ({mac1}) alone: {last:?}"
    );
    let told = bed.counter(0, claims_sent(&bed));
    let after = bed.probe_each(12);
    assert!(
        after.iter().all(|each| *each == [mac1.clone()]),
        "each of 12 probes answered by node 1 ({mac1}) alone: {after:?}"
    );
    assert_eq!(
        bed.counter(0, claims_sent(&bed)),
        told,
        "node 0 told the segment nothing more: it did not take the SSH IP back"
    );
    assert_eq!(bed.holder().as_deref(), Some("node1"));
    let early = if bed.ssh_ip == EXTERNAL_IP6 {
        "answers no neighbour solicitation"
    } else {
        EARLY_TAKEOVER
    };
    assert_eq!(
        bed.agents[1].as_ref().unwrap().count_in_log(early),
        0,
        "node 0's data path answered node 1's probes: its Lease ran out first"
    );
    let node0 = bed.agents[0].as_ref().unwrap();
    assert_eq!(node0.count_in_log(GAVE_WAY), 1, "node 0 gave way once");
    assert_eq!(
        node0.count_in_log("renewed its Lease again"),
        0,
        "and never took it back"
    );
    eprintln!(
        "partition ({}): node 1 alone answers {one_mac:?} after node 0's API stalled",
        bed.ssh_ip
    );

    // The API back: node 0's renewal, from the Lease it last saw, is
    // refused, its watch shows node 1, and nothing moves.
    bed.api.resume();
    // Must not happen within: nothing moves once the API is back.
    std::thread::sleep(Duration::from_secs(2));
    let back = bed.probe_each(3);
    assert!(
        back.iter().all(|each| *each == [mac1.clone()]),
        "after the partition, node 1 alone: {back:?}"
    );
    assert_eq!(bed.holder().as_deref(), Some("node1"));
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn a_partitioned_holder_gives_way_once_and_only_the_new_holder_answers_arp() {
    privilege::require();
    a_partitioned_holder_gives_way_for_good(Bed::new());
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn a_partitioned_holder_of_an_ipv6_ssh_ip_gives_way_once_and_only_the_new_holder_answers() {
    privilege::require();
    a_partitioned_holder_gives_way_for_good(Bed::ipv6());
}
