use std::{cell::RefCell, collections::BTreeMap, net::Ipv4Addr};

use ssh_fwd_common::{
    conntrack::trust::source_key6,
    maps::{
        CONN_FIN_CLIENT, CONN_FIN_SERVER, Claim6, ClaimKey6, Conn6, ConnKey6, Endpoint6, HalfOpen6,
        HalfOpenKey6,
    },
};

use super::*;

const SECOND: u64 = 1_000_000_000;
const LIMITS: Limits = Limits {
    idle: 24 * 3_600 * SECOND,
    close: 10 * SECOND,
};

/// A table the kernel writes into at the worst moment: `racing` lands
/// just before the agent's next change to the table.
struct Fake<K, V> {
    entries: BTreeMap<K, V>,
    racing: Vec<(K, V)>,
}

impl<K: Copy + Ord, V: Copy> Fake<K, V> {
    fn new(entries: &[(K, V)]) -> Self {
        Self {
            entries: entries.iter().copied().collect(),
            racing: Vec::new(),
        }
    }

    fn kernel_writes(&mut self) {
        if !self.racing.is_empty() {
            let (key, value) = self.racing.remove(0);
            self.entries.insert(key, value);
        }
    }
}

impl<K: Copy + Ord, V: Copy> Table<K, V> for Fake<K, V> {
    fn entries(&self) -> Vec<(K, V)> {
        self.entries.iter().map(|(k, v)| (*k, *v)).collect()
    }

    fn get(&self, key: &K) -> Option<V> {
        self.entries.get(key).copied()
    }

    fn take(&mut self, key: &K) -> Option<V> {
        self.kernel_writes();
        self.entries.remove(key)
    }

    fn put_back(&mut self, key: &K, value: &V) -> bool {
        self.kernel_writes();
        if self.entries.contains_key(key) {
            return false;
        }
        self.entries.insert(*key, *value);
        true
    }
}

fn frontend(port: u16) -> Endpoint {
    Endpoint::new(Ipv4Addr::new(198, 18, 0, 10), port)
}

fn socket(port: u16) -> std::net::SocketAddr {
    (Ipv4Addr::new(198, 18, 0, 10), port).into()
}

fn key() -> ConnKey {
    ConnKey::new(
        Endpoint::new(Ipv4Addr::new(192, 0, 2, 2), 45_678),
        Endpoint::new(Ipv4Addr::new(10, 244, 1, 5), 22),
    )
}

fn conn(port: u16, flags: u32, at: u64) -> Conn {
    Conn {
        frontend: frontend(port),
        flags,
        last_seen_ns: at,
        created_ns: at,
        ..Conn::ZERO
    }
}

fn half_key() -> HalfOpenKey {
    HalfOpenKey::new(key(), 1_000)
}

fn half(port: u16, at: u64) -> HalfOpen {
    HalfOpen {
        frontend: frontend(port),
        last_seen_ns: at,
        ..HalfOpen::ZERO
    }
}

fn claim_key() -> ClaimKey {
    ClaimKey::new(key(), 5_001)
}

fn claim(port: u16, at: u64) -> Claim {
    Claim {
        frontend: frontend(port),
        slot: 0,
        _pad: 0,
        seen_ns: at,
    }
}

fn no_claims() -> Fake<ClaimKey, Claim> {
    Fake::new(&[])
}

const CLOSED: u32 = CONN_FIN_CLIENT | CONN_FIN_SERVER;

#[test]
fn the_sweep_removes_what_ended_keeps_what_lives_and_counts_it_by_client() {
    let now = 100 * 3_600 * SECOND;
    let other = ConnKey {
        client_port: 1,
        ..key()
    };
    let elsewhere = ConnKey {
        client_addr: u32::from_ne_bytes([192, 0, 2, 9]),
        ..key()
    };
    let closing = ConnKey {
        client_port: 2,
        ..key()
    };
    let mut conns = Fake::new(&[
        (key(), conn(8022, CLOSED, now - 11 * SECOND)),
        (other, conn(8022, 0, now - 8 * 3_600 * SECOND)),
        (elsewhere, conn(8022, 0, now - SECOND)),
        (closing, conn(8022, CLOSED, now - 2 * SECOND)),
    ]);
    let counts = sweep(&mut conns, now, &LIMITS);
    assert_eq!((counts.closed, counts.expired, counts.conns), (1, 0, 3));
    // A closed connection waits out its close timeout, but its client
    // no longer holds it.
    assert_eq!(
        counts.per_source,
        [(key().client_addr, 1), (elsewhere.client_addr, 1)].into()
    );
    assert!(!conns.entries.contains_key(&key()));
    assert!(conns.entries.contains_key(&closing));
    // Two open (the one quiet for 8 h too); the last packet the
    // latest of all four, the removed and the closing ones included.
    let t = counts.activity[&socket(8022)];
    assert_eq!((t.open, t.last_seen_ns), (2, now - SECOND));
}

#[test]
fn the_sweep_tallies_the_last_packet_of_an_entry_it_removes() {
    let now = 100 * 3_600 * SECOND;
    let mut conns = Fake::new(&[(key(), conn(8022, CLOSED, now - 11 * SECOND))]);
    let counts = sweep(&mut conns, now, &LIMITS);
    assert_eq!(counts.closed, 1);
    let t = counts.activity[&socket(8022)];
    assert_eq!((t.open, t.last_seen_ns), (0, now - 11 * SECOND));
}

#[test]
fn a_connection_one_side_closed_goes_after_two_quiet_minutes() {
    let now = 100 * 3_600 * SECOND;
    let other = ConnKey {
        client_port: 1,
        ..key()
    };
    // The server closed (sshd after LoginGraceTime) and the client
    // never answered; another server closed a minute ago.
    let mut conns = Fake::new(&[
        (key(), conn(8022, CONN_FIN_SERVER, now - 120 * SECOND)),
        (other, conn(8022, CONN_FIN_SERVER, now - 60 * SECOND)),
    ]);
    let counts = sweep(&mut conns, now, &LIMITS);
    assert_eq!((counts.expired, counts.conns), (1, 1));
    assert_eq!(
        conns.entries(),
        [(other, conn(8022, CONN_FIN_SERVER, now - 60 * SECOND))]
    );
}

#[test]
fn a_connection_that_replaces_a_swept_entry_in_the_meantime_stays() {
    let now = 1_000 * SECOND;
    let fresh = conn(9022, 0, now);
    // The sweep judged the closing entry; before it removes it, the
    // kernel confirms a new connection over it.
    let mut conns = Fake::new(&[(key(), conn(8022, CLOSED, now - 11 * SECOND))]);
    conns.racing.push((key(), fresh));
    let counts = sweep(&mut conns, now, &LIMITS);
    assert_eq!(conns.entries(), [(key(), fresh)], "the new connection");
    assert_eq!((counts.closed, counts.conns), (0, 1));
    assert_eq!(counts.per_source, [(key().client_addr, 1)].into());
}

#[test]
fn a_connection_through_a_live_frontend_that_replaces_a_purged_entry_stays() {
    let retired: BTreeSet<Endpoint> = [frontend(8022)].into();
    let fresh = conn(9022, 0, 50);
    let mut conns = Fake::new(&[(key(), conn(8022, CLOSED, 10))]);
    conns.racing.push((key(), fresh));
    let mut halves = Fake::new(&[(half_key(), half(8022, 10))]);
    halves.racing.push((half_key(), half(9022, 50)));
    let mut claims = Fake::new(&[(claim_key(), claim(8022, 10))]);
    claims.racing.push((claim_key(), claim(9022, 50)));
    assert_eq!(
        purge(&mut conns, &mut halves, &mut claims, &retired).conns,
        []
    );
    assert_eq!(conns.entries(), [(key(), fresh)]);
    assert_eq!(halves.entries(), [(half_key(), half(9022, 50))]);
    assert_eq!(claims.entries(), [(claim_key(), claim(9022, 50))]);
    // And if the kernel writes once more while the agent puts back what
    // it took, the kernel's entry wins.
    let newest = conn(9022, 0, 60);
    let mut conns = Fake::new(&[(key(), conn(8022, CLOSED, 10))]);
    conns.racing.extend([(key(), fresh), (key(), newest)]);
    let mut halves = Fake::<HalfOpenKey, HalfOpen>::new(&[]);
    assert_eq!(
        purge(&mut conns, &mut halves, &mut no_claims(), &retired).conns,
        []
    );
    assert_eq!(conns.entries(), [(key(), newest)]);
    // Without a race, the retired frontend's entries go.
    let mut conns = Fake::new(&[(key(), conn(8022, 0, 10))]);
    let mut halves = Fake::new(&[(half_key(), half(8022, 10))]);
    let mut claims = Fake::new(&[(claim_key(), claim(8022, 10))]);
    assert_eq!(
        purge(&mut conns, &mut halves, &mut claims, &retired).conns,
        [(key(), conn(8022, 0, 10))]
    );
    assert!(conns.entries().is_empty() && halves.entries().is_empty());
    assert!(claims.entries().is_empty());
}

fn frontend6(port: u16) -> Endpoint6 {
    Endpoint6::new6("2001:db8::10".parse().unwrap(), port)
}

/// A client of 2001:db8:1::/64 (`host` its last group) to a pod.
fn key6(host: u16, port: u16) -> ConnKey6 {
    let client = std::net::Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, host);
    ConnKey6::new(
        Endpoint6::new6(client, port),
        Endpoint6::new6("fd00:10:244::5".parse().unwrap(), 22),
    )
}

fn conn6(port: u16, flags: u32, at: u64) -> Conn6 {
    Conn6 {
        frontend: frontend6(port),
        flags,
        last_seen_ns: at,
        created_ns: at,
        ..Conn6::ZERO
    }
}

#[test]
fn the_ipv6_sweep_removes_what_ended_and_counts_the_rest_by_the_clients_64() {
    let now = 100 * 3_600 * SECOND;
    // Two hosts of one /64 (one client, as its quota sees it), one
    // connection closed long enough ago to go.
    let (a, b, gone) = (key6(1, 40_000), key6(2, 40_001), key6(3, 40_002));
    let mut conns = Fake::new(&[
        (a, conn6(8022, 0, now - SECOND)),
        (b, conn6(8023, 0, now - 2 * SECOND)),
        (gone, conn6(8022, CLOSED, now - 11 * SECOND)),
    ]);
    let counts = sweep(&mut conns, now, &LIMITS);
    assert_eq!((counts.closed, counts.expired, counts.conns), (1, 0, 2));
    assert_eq!(counts.per_source, [(source_key6(a.client_addr), 2)].into());
    assert_eq!(source_key6(a.client_addr), source_key6(b.client_addr));
    assert_eq!(counts.ended.len(), 1);
    assert_eq!(counts.ended[0].0, gone);
    let v6 =
        std::net::SocketAddr::from(("2001:db8::10".parse::<std::net::Ipv6Addr>().unwrap(), 8022));
    assert_eq!(counts.activity[&v6].open, 1);
    assert_eq!(counts.activity[&v6].last_seen_ns, now - SECOND);
    assert!(!conns.entries.contains_key(&gone));
}

#[test]
fn an_ipv6_connection_that_replaces_a_purged_entry_in_the_meantime_stays() {
    let retired: BTreeSet<Endpoint6> = [frontend6(8022)].into();
    let key = key6(1, 40_000);
    let fresh = conn6(9022, 0, 50);
    let mut conns = Fake::new(&[(key, conn6(8022, 0, 10)), (key6(2, 1), conn6(8022, 0, 10))]);
    conns.racing.push((key, fresh));
    let half = HalfOpen6 {
        frontend: frontend6(8022),
        last_seen_ns: 10,
        ..HalfOpen6::ZERO
    };
    let mut halves = Fake::new(&[(HalfOpenKey6::new(key, 1_000), half)]);
    let claim = Claim6 {
        frontend: frontend6(8022),
        slot: 0,
        _pad: 0,
        seen_ns: 10,
    };
    let mut claims = Fake::new(&[(ClaimKey6::new(key, 5_001), claim)]);
    let purged = purge(&mut conns, &mut halves, &mut claims, &retired);
    // The raced one stays; the other client's entry goes.
    assert_eq!(purged.conns, [(key6(2, 1), conn6(8022, 0, 10))]);
    assert_eq!(conns.entries(), [(key, fresh)]);
    assert!(halves.entries().is_empty() && claims.entries().is_empty());
    // Nothing retired: nothing walked, nothing removed.
    let none: BTreeSet<Endpoint6> = BTreeSet::new();
    assert_eq!(purge(&mut conns, &mut halves, &mut claims, &none).conns, []);
    assert_eq!(conns.entries().len(), 1);
}

/// A quota table the kernel counts into at the worst moment: each of
/// `racing` (a client, a change; a change of 0 is none) lands just
/// before the agent's next use of the table.
struct FakeQuota<S> {
    counts: RefCell<BTreeMap<S, u64>>,
    racing: RefCell<Vec<(S, u64)>>,
}

impl<S: Copy + Ord> FakeQuota<S> {
    fn new(counts: &[(S, u64)]) -> Self {
        Self {
            counts: RefCell::new(counts.iter().copied().collect()),
            racing: RefCell::new(Vec::new()),
        }
    }

    fn racing(&self, changes: &[(S, u64)]) {
        self.racing.borrow_mut().extend_from_slice(changes);
    }

    fn kernel_adds(&self) {
        let next = {
            let mut racing = self.racing.borrow_mut();
            (!racing.is_empty()).then(|| racing.remove(0))
        };
        if let Some((source, n)) = next {
            self.apply(source, n);
        }
    }

    /// The kernel's atomic add, as `sources_add_at` makes it.
    fn apply(&self, source: S, n: u64) {
        let mut counts = self.counts.borrow_mut();
        match counts.get_mut(&source) {
            Some(held) => *held = held.wrapping_add(n),
            None if n as i64 > 0 => {
                counts.insert(source, n);
            }
            None => {}
        }
    }
}

impl<S: Copy + Ord> Table<S, u64> for FakeQuota<S> {
    fn entries(&self) -> Vec<(S, u64)> {
        self.kernel_adds();
        self.counts.borrow().iter().map(|(k, v)| (*k, *v)).collect()
    }

    fn get(&self, key: &S) -> Option<u64> {
        self.kernel_adds();
        self.counts.borrow().get(key).copied()
    }

    fn take(&mut self, key: &S) -> Option<u64> {
        self.kernel_adds();
        self.counts.borrow_mut().remove(key)
    }

    fn put_back(&mut self, key: &S, value: &u64) -> bool {
        self.kernel_adds();
        let mut counts = self.counts.borrow_mut();
        if counts.contains_key(key) {
            return false;
        }
        counts.insert(*key, *value);
        true
    }
}

impl<S: Copy + Ord> Quota<S> for FakeQuota<S> {
    fn add(&mut self, source: &S, n: u64) {
        self.kernel_adds();
        self.apply(*source, n);
    }
}

#[test]
fn a_close_the_kernel_counts_while_the_sweep_runs_is_kept() {
    let now = 1_000 * SECOND;
    let other = ConnKey {
        client_port: 1,
        ..key()
    };
    let client = key().client_addr;
    let mut conns = Fake::new(&[
        (key(), conn(8022, 0, now - SECOND)),
        (other, conn(8022, 0, now - SECOND)),
    ]);
    let mut quota = FakeQuota::new(&[(client, 2)]);
    let counts = sweep(&mut conns, now, &LIMITS);
    // The walk is done; the client closes one of the two, and the
    // kernel counts it off before the agent writes the table.
    quota.racing(&[(client, u64::MAX)]);
    settle(&mut quota, &counts.released);
    assert_eq!(quota.entries(), [(client, 1)], "the client holds one");
}

#[test]
fn an_idle_connection_is_counted_off_beside_one_the_kernel_counts_meanwhile() {
    let now = 100 * 3_600 * SECOND;
    let other = ConnKey {
        client_port: 1,
        ..key()
    };
    let client = key().client_addr;
    let mut conns = Fake::new(&[
        (key(), conn(8022, 0, now - 25 * 3_600 * SECOND)),
        (other, conn(8022, 0, now - SECOND)),
    ]);
    let mut quota = FakeQuota::new(&[(client, 2)]);
    let counts = sweep(&mut conns, now, &LIMITS);
    assert_eq!(
        (counts.expired, counts.released.clone()),
        (1, [(client, 1)].into())
    );
    // The client opens a third while the agent counts the idle one off.
    quota.racing(&[(client, 1)]);
    settle(&mut quota, &counts.released);
    assert_eq!(quota.entries(), [(client, 2)]);
}

#[test]
fn a_client_that_holds_nothing_goes_and_what_the_kernel_counts_meanwhile_comes_back() {
    let (idle, below_zero, busy) = (1u32, 2u32, 3u32);
    let mut quota = FakeQuota::new(&[(idle, 0), (below_zero, u64::MAX), (busy, 4)]);
    // The walk reads `idle` at 0; it opens one before the agent takes it.
    quota.racing(&[(busy, 0), (idle, 1)]);
    settle(&mut quota, &BTreeMap::new());
    assert_eq!(quota.entries(), [(idle, 1), (busy, 4)]);
}

#[test]
fn an_entry_the_kernel_displaces_while_the_sweep_holds_it_is_counted_off() {
    let now = 100 * 3_600 * SECOND;
    let client = key().client_addr;
    let refreshed = conn(8022, 0, now);
    let fresh = conn(9022, 0, now);
    // The walk finds the entry idle; a packet refreshes it before the
    // agent takes it, and while it is out the kernel confirms a new
    // connection of the same 4-tuple, counted.
    let mut conns = Fake::new(&[(key(), conn(8022, 0, now - 25 * 3_600 * SECOND))]);
    conns.racing.extend([(key(), refreshed), (key(), fresh)]);
    let mut quota = FakeQuota::new(&[(client, 1)]);
    let counts = sweep(&mut conns, now, &LIMITS);
    assert_eq!(conns.entries(), [(key(), fresh)]);
    quota.racing(&[(client, 1)]);
    settle(&mut quota, &counts.released);
    assert_eq!(
        quota.entries(),
        [(client, 1)],
        "one connection, counted once"
    );
}

#[test]
fn a_purge_counts_off_what_its_clients_held() {
    let retired: BTreeSet<Endpoint> = [frontend(8022)].into();
    let closed = ConnKey {
        client_port: 1,
        ..key()
    };
    let mut conns = Fake::new(&[(key(), conn(8022, 0, 10)), (closed, conn(8022, CLOSED, 10))]);
    let purged = purge(&mut conns, &mut Fake::new(&[]), &mut no_claims(), &retired);
    assert_eq!(purged.conns.len(), 2);
    assert_eq!(purged.released, [(key().client_addr, 1)].into());
}

#[test]
fn adopted_connections_are_counted_once_up_to_what_the_walk_found() {
    let (uncounted, counted, below_zero) = (1u32, 2u32, 3u32);
    let mut quota = FakeQuota::new(&[(counted, 2), (below_zero, u64::MAX)]);
    let held = BTreeMap::from([(uncounted, 3), (counted, 2), (below_zero, 1)]);
    assert_eq!(count_held(&mut quota, &held), 5);
    assert_eq!(
        quota.entries(),
        [(uncounted, 3), (counted, 2), (below_zero, 1)]
    );
    assert_eq!(count_held(&mut quota, &held), 0, "once");
    // What a walk finds held: the entries that are not closing.
    let closed = ConnKey {
        client_port: 1,
        ..key()
    };
    let walked = [(key(), conn(8022, 0, 1)), (closed, conn(8022, CLOSED, 1))];
    assert_eq!(super::held(&walked), [(key().client_addr, 1)].into());
}
