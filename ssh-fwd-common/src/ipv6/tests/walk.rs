use super::*;

#[test]
fn step_reads_lengths_in_eight_octet_units_and_decides_by_type_alone_otherwise() {
    let ext = |len| Step::Extension {
        next_header: NEXTHDR_TCP,
        len,
    };
    for kind in [NEXTHDR_HOP, NEXTHDR_ROUTING, NEXTHDR_DEST] {
        assert!(is_extension(kind));
        assert_eq!(step(kind, [NEXTHDR_TCP, 0, 0, 0]), ext(8));
        assert_eq!(step(kind, [NEXTHDR_TCP, 255, 4, 0]), ext(2048));
    }
    assert_eq!(
        step(NEXTHDR_ROUTING, [NEXTHDR_TCP, 2, 4, 1]),
        Step::Pass(PassReason::NotFinalDestination)
    );
    assert_eq!(
        step(NEXTHDR_DEST, [NEXTHDR_TCP, 2, 4, 1]),
        ext(24),
        "only a Routing header has segments left"
    );
    for (kind, reason) in [
        (NEXTHDR_FRAGMENT, PassReason::Fragment),
        (NEXTHDR_AUTH, PassReason::Authenticated),
        (NEXTHDR_ESP, PassReason::Encrypted),
        (NEXTHDR_NONE, PassReason::NoNextHeader),
        (17, PassReason::NotTcp),
    ] {
        assert!(!is_extension(kind));
        assert_eq!(step(kind, [0; 4]), Step::Pass(reason));
        assert_eq!(step(kind, [6, 9, 9, 9]), Step::Pass(reason));
    }
    assert_eq!(step(NEXTHDR_TCP, [1; 4]), Step::Upper(Upper::Tcp));
    assert_eq!(step(NEXTHDR_ICMPV6, [1; 4]), Step::Upper(Upper::Icmpv6));
}

#[test]
fn the_walk_reads_only_extension_headers_within_its_bound() {
    // A chain that loops on itself: every read says one more header.
    let mut reads = Vec::new();
    let result = walk(NEXTHDR_DEST, |at| {
        reads.push(at);
        Some([NEXTHDR_DEST, 0, 0, 0])
    })
    .transport();
    assert_eq!(result, Err(PassReason::TooManyExtensions));
    assert_eq!(reads, [40, 48, 56, 64]);
    let mut reads = 0;
    let result = walk(NEXTHDR_TCP, |_| {
        reads += 1;
        None
    })
    .transport();
    assert_eq!(result.map(|t| t.ip_headers_len), Ok(IPV6_HLEN));
    assert_eq!(reads, 0, "the fixed header names TCP: nothing to read");
}
