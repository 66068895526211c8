//! The Lease failover with an IPv6 SSH IP: the standby watches the
//! holder's data path with neighbour solicitations and hears its
//! advertisements, as it does with ARP for an IPv4 one, so a dead holder
//! is taken over before its Lease expires, and a live one is not.

use ssh_fwd_tests::prometheus::get_in;

use super::*;

/// What a standby logs when it takes over a holder that answers none of
/// its solicitations.
const EARLY_TAKEOVER6: &str = "answers no neighbour solicitation";
const SOLICITATIONS: &str = "ssh_fwd_announce_solicitations_sent_total";

impl Bed {
    /// The MAC the client's neighbour entry for the SSH IP names, if any.
    fn neighbour(&self) -> Option<String> {
        self.seg.neighbour(self.ssh_ip).unwrap()
    }

    /// Node `n`'s count of neighbour solicitations sent to watch a holder.
    fn solicitations(&self, n: usize) -> f64 {
        let text = get_in(self.node(n), "127.0.0.1:9102", "/metrics")
            .map(|(_, body)| body)
            .unwrap_or_default();
        text.lines()
            .find_map(|l| l.strip_prefix(SOLICITATIONS)?.trim().parse().ok())
            .unwrap_or(0.0)
    }

    /// Node 0 holds the SSH IP, the client's neighbour entry names it, and
    /// node 1 watches it: a login through the SSH IP lands, and node 1
    /// sent solicitations for a while (five probe periods).
    fn node0_holds_and_node1_watches(&mut self) {
        self.start(0)
            .wait_for_log("took the SSH IP over", Duration::from_secs(10))
            .unwrap();
        self.start(1);
        assert_eq!(self.holder().as_deref(), Some("node0"));
        let host = (self.seg.ssh())
            .run(&self.seg.client, self.ssh_ip, ON_NODE1, "hostname")
            .unwrap();
        assert_eq!(host, "pod-2");
        assert_eq!(self.neighbour(), Some(self.mac(0)), "node 0 answered");
        let start = self.solicitations(1);
        assert!(
            cmd_wait(Duration::from_secs(10), || self.solicitations(1)
                >= start + 5.0),
            "node 1 solicits node 0's data path: {} sent",
            self.solicitations(1)
        );
        assert_eq!(self.solicitations(0), 0.0, "the holder watches nobody");
    }
}

#[test]
#[ignore = "needs root, network namespaces and BPF: `cargo xtask test` runs it"]
fn a_killed_owner_of_an_ipv6_ssh_ip_is_taken_over_before_its_lease_expires() {
    privilege::require();
    let mut bed = Bed::ipv6();
    bed.node0_holds_and_node1_watches();
    let client = &bed.seg.client;

    let killed = Instant::now();
    bed.agents[0].as_mut().unwrap().kill().unwrap();
    bed.bpffs[0].teardown().unwrap();
    let failover = time_to_banner_at(
        client,
        EXTERNAL_IP6,
        ON_NODE1,
        killed,
        Duration::from_secs(10),
    )
    .expect("no banner through the IPv6 SSH IP within 10 s of the owner's death");
    let login = (bed.seg.ssh())
        .run(client, EXTERNAL_IP6, ON_NODE1, "hostname")
        .unwrap();
    let landed = killed.elapsed();
    assert_eq!(login, "pod-2");
    eprintln!(
        "IPv6 failover: first banner {failover:?} after SIGKILL, first login done {landed:?}"
    );
    assert_eq!(bed.holder().as_deref(), Some("node1"));
    assert_eq!(
        bed.agents[1]
            .as_ref()
            .unwrap()
            .count_in_log(EARLY_TAKEOVER6),
        1,
        "node 1 solicited the silent owner and took over before its Lease expired"
    );
    assert_eq!(
        bed.neighbour(),
        Some(bed.mac(1)),
        "node 1's advertisement moved the client"
    );
    assert!(
        failover < Duration::from_secs(2) && landed < Duration::from_secs(2),
        "failover took {failover:?}, the first login {landed:?}"
    );
    let taken = bed.api.count(Kind::Event, |e| {
        e["reason"] == vocabulary::reason::SSH_IP_TAKEN_OVER && e["reportingInstance"] == "node1"
    });
    assert_eq!(taken, 1, "one takeover event by node 1");
}
