use std::net::{Ipv4Addr, SocketAddrV4};

use ssh_fwd_common::maps::{ConnEvent6, Endpoint6};

use super::*;

fn endpoint(ip: [u8; 4], port: u16) -> Endpoint {
    Endpoint::new(Ipv4Addr::from(ip), port)
}

#[test]
fn a_kernel_record_reads_back_with_its_addresses_in_host_order() {
    let e = ConnEvent {
        time_ns: 5,
        client: endpoint([203, 0, 113, 7], 51_234),
        frontend: endpoint([192, 0, 2, 10], 8123),
        backend: endpoint([10, 244, 1, 5], 22),
        slot: 3,
        kind: EventKind::Denied as u8,
        ended: 0,
        _pad: 0,
        created_ns: 0,
        stats: ConnStats::default(),
    };
    let r = Record::from_event(&e).unwrap();
    assert_eq!(r.what, What::denied);
    assert_eq!(r.client.to_string(), "203.0.113.7:51234");
    assert_eq!(r.frontend.to_string(), "192.0.2.10:8123");
    assert_eq!(r.backend.to_string(), "10.244.1.5:22");
    assert_eq!((r.stats, r.duration()), (None, None));
    let unknown = ConnEvent { kind: 99, ..e };
    assert_eq!(Record::from_event(&unknown), None);
}

#[test]
fn an_ipv6_kernel_record_reads_back_with_its_addresses_printed_as_ipv6() {
    let ep = |s: &str, port| Endpoint6::new6(s.parse().unwrap(), port);
    let e = ConnEvent6 {
        time_ns: 5,
        client: ep("2001:db8:1::7", 51_234),
        frontend: ep("2001:db8::10", 8123),
        backend: ep("fd00:10:244::5", 22),
        slot: 3,
        kind: EventKind::Accepted as u8,
        ended: 0,
        _pad: 0,
        created_ns: 0,
        stats: ConnStats::default(),
    };
    let r = Record::from_record(&Event::V6(e)).unwrap();
    assert_eq!(r.what, What::accepted);
    assert_eq!(r.client.to_string(), "[2001:db8:1::7]:51234");
    assert_eq!(r.frontend.to_string(), "[2001:db8::10]:8123");
    assert_eq!(r.backend.to_string(), "[fd00:10:244::5]:22");
}

fn label(name: &str) -> Label {
    Label {
        mapping: name.into(),
        ..Label::default()
    }
}

#[test]
fn a_removed_frontend_keeps_its_name_for_the_records_its_removal_ends() {
    let front = |port| SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::new(192, 0, 2, 10), port));
    let mut log = Log {
        level: ConnLog::All,
        budgets: Budgets::new(1, Instant::now()),
        current: Arc::new([(front(1), label("a")), (front(2), label("b"))].into()),
        retired: Directory::new(),
        metrics: AuditMetrics::default(),
    };
    log.relabel(Arc::new([(front(2), label("b"))].into()));
    assert_eq!(&*log.label(&front(1)).mapping, "a", "retired");
    assert_eq!(&*log.label(&front(2)).mapping, "b");
    // The port comes back under another name: the new one.
    log.relabel(Arc::new([(front(1), label("c"))].into()));
    assert_eq!(&*log.label(&front(1)).mapping, "c");
    assert_eq!(&*log.label(&front(2)).mapping, "b", "retired now");
    assert_eq!(&*log.label(&front(3)).mapping, "", "never known");
}

#[test]
fn refused_records_over_their_budget_never_cost_a_connection_its_line() {
    let sa = |s: &str| s.parse::<SocketAddr>().unwrap();
    let mut log = Log {
        level: ConnLog::All,
        budgets: Budgets::new(5, Instant::now()),
        current: Arc::default(),
        retired: Directory::new(),
        metrics: AuditMetrics::default(),
    };
    let record = |what| Record {
        what,
        at_ns: clock_ns(),
        client: sa("203.0.113.7:4000"),
        frontend: sa("192.0.2.10:8123"),
        backend: sa("10.0.0.2:22"),
        ended: None,
        opened_ns: 0,
        stats: None,
    };
    for _ in 0..100 {
        log.write(&record(What::denied));
    }
    log.write(&record(What::accepted));
    log.write(&record(What::closed));
    let [accepted, denied, syn_limited, closed] =
        Summary::default().since_last(&log.metrics.dropped);
    assert_eq!((accepted, denied, syn_limited, closed), (0, 95, 0, 0));
    assert_eq!(log.metrics.unlogged.get(), 95);
}

#[test]
fn a_swept_connection_says_how_it_ended_and_how_long_it_lived() {
    let sa = |s: &str| s.parse::<SocketAddr>().unwrap();
    let stats = ConnStats {
        packets_in: 3,
        bytes_in: 300,
        packets_out: 4,
        bytes_out: 4000,
    };
    let g = Gone {
        client: sa("203.0.113.7:4000"),
        frontend: sa("192.0.2.10:8123"),
        backend: sa("10.0.0.2:22"),
        created_ns: 1_000_000_000,
        why: Ended::Idle,
        stats: Some(stats),
    };
    let r = Record::from_gone(&g, 61_000_000_000);
    assert_eq!((r.what, r.ended), (What::closed, Some(Ended::Idle)));
    assert_eq!(r.duration(), Some(Duration::from_secs(60)));
    assert_eq!(r.stats, Some(stats));
    let fin = Record::from_gone(
        &Gone {
            why: Ended::Fin,
            ..g
        },
        61_000_000_000,
    );
    assert_eq!(fin.ended, Some(Ended::Fin));
}
