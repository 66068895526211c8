use super::*;

const MAC: [u8; 6] = [2, 0, 0, 0, 0, 1];
const HOLDER: [u8; 6] = [2, 0, 0, 0, 0, 2];
const SRC: Ipv6Addr = Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0xff, 0xfe00, 1);
const SSH_IP: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x198, 0, 0, 0, 0, 0, 0x10);

/// The same solicitations built by dpkt 1.9.8 (its IPv6 layer fills the
/// ICMPv6 checksum over the pseudo-header), written to a pcap and read
/// back by tcpdump 4.99 with `-vv`: "fe80::ff:fe00:1 > ff02::1:ff00:10:
/// [icmp6 sum ok] ICMP6, neighbor solicitation, length 32, who has
/// fd00:198::10, source link-address option (1), length 8 (1):
/// 02:00:00:00:00:01", and the same to fd00:198::10.
const DPKT_MULTICAST: &str = "3333ff00001002000000000186dd6000000000203afffe80000000000000000000fffe000001ff0200000000000000000001ff00001087007b6300000000fd0001980000000000000000000000100101020000000001";
const DPKT_UNICAST: &str = "02000000000202000000000186dd6000000000203afffe80000000000000000000fffe000001fd00019800000000000000000000001087007acf00000000fd0001980000000000000000000000100101020000000001";

fn hex(frame: &[u8]) -> String {
    frame.iter().map(|b| format!("{b:02x}")).collect()
}

#[test]
fn a_solicitation_to_the_segment_is_byte_for_byte_the_reference() {
    let frame = solicitation(MAC, SRC, SSH_IP, None);
    assert_eq!(hex(&frame), DPKT_MULTICAST);
}

#[test]
fn a_solicitation_to_the_mac_that_answered_is_byte_for_byte_the_reference() {
    let frame = solicitation(MAC, SRC, SSH_IP, Some(HOLDER));
    assert_eq!(hex(&frame), DPKT_UNICAST);
}

/// RFC 1071 the plain way: big-endian words, carries folded at the end.
fn sum_be(bytes: &[u8]) -> u32 {
    bytes
        .chunks(2)
        .map(|w| u32::from(u16::from_be_bytes([w[0], *w.get(1).unwrap_or(&0)])))
        .sum()
}

#[test]
fn a_solicitations_checksum_covers_the_ipv6_pseudo_header() {
    for to in [None, Some(HOLDER)] {
        let frame = solicitation(MAC, SRC, SSH_IP, to);
        let message = &frame[ICMP_OFF..];
        let mut sum = sum_be(&frame[SADDR_OFF..DADDR_OFF + 16])
            + sum_be(&(message.len() as u32).to_be_bytes())
            + u32::from(NEXTHDR_ICMPV6)
            + sum_be(message);
        while sum > 0xffff {
            sum = (sum & 0xffff) + (sum >> 16);
        }
        assert_eq!(sum, 0xffff, "{to:?}: the whole sums to all ones");
        assert_eq!(
            (message[0], message[1]),
            (135, 0),
            "a neighbour solicitation"
        );
        assert_eq!(&message[24..], &[1, 1, 2, 0, 0, 0, 0, 1], "its source LLA");
    }
}

#[test]
fn a_solicitation_goes_to_the_solicited_node_group_or_to_the_target() {
    let frame = solicitation(MAC, SRC, "fd00::ab:cdef".parse().unwrap(), None);
    assert_eq!(frame[..6], [0x33, 0x33, 0xff, 0xab, 0xcd, 0xef]);
    let dst: [u8; 16] = frame[DADDR_OFF..DADDR_OFF + 16].try_into().unwrap();
    assert_eq!(
        Ipv6Addr::from(dst),
        "ff02::1:ffab:cdef".parse::<Ipv6Addr>().unwrap()
    );
    let frame = solicitation(MAC, SRC, SSH_IP, Some(HOLDER));
    let dst: [u8; 16] = frame[DADDR_OFF..DADDR_OFF + 16].try_into().unwrap();
    assert_eq!(
        (frame[..6].to_vec(), Ipv6Addr::from(dst)),
        (HOLDER.to_vec(), SSH_IP)
    );
}

/// The advertisement as a raw ICMPv6 socket hands it over: the message,
/// and its addresses and hop limit apart.
fn as_received(frame: &[u8; NDP_FRAME_LLA_LEN]) -> (Ipv6Addr, Ipv6Addr, u8, &[u8]) {
    let addr = |at: usize| Ipv6Addr::from(<[u8; 16]>::try_from(&frame[at..at + 16]).unwrap());
    (
        addr(SADDR_OFF),
        addr(DADDR_OFF),
        frame[ETH_HLEN + IPV6_HOP_LIMIT_OFF],
        &frame[ICMP_OFF..],
    )
}

#[test]
fn the_holders_data_path_answers_a_solicitation_and_the_answer_is_heard_as_the_holders() {
    for to in [None, Some(HOLDER)] {
        let mut frame = solicitation(MAC, SRC, SSH_IP, to);
        let asked = ndp::parse(&frame, NDP_FRAME_LLA_LEN).expect("the data path reads it");
        assert!(asked.asks(), "not duplicate address detection");
        assert_eq!((asked.target.ip(), asked.mac), (SSH_IP, MAC));
        // What the holder's data path writes over it.
        ndp::answer(&mut frame, &asked, HOLDER);
        assert_eq!(frame[..6], MAC, "back to the standby's MAC");
        let (src, dst, hop_limit, message) = as_received(&frame);
        assert_eq!((src, dst), (SSH_IP, SRC), "to the standby's address");
        let heard = as_frame(src, dst, hop_limit, message)
            .and_then(|f| ndp::parse(&f, NDP_FRAME_LLA_LEN))
            .expect("an advertisement");
        assert_eq!(heard.kind, NDP_ADVERT);
        assert_eq!((heard.target.ip(), heard.mac), (SSH_IP, HOLDER));
        assert!(answered_by_other(&heard, &[MAC]));
        assert!(!answered_by_other(&heard, &[HOLDER]), "our own MAC");
        assert!(!answered_by_other(&asked, &[MAC]), "a solicitation");
    }
}

#[test]
fn an_advertisement_without_its_link_layer_address_or_from_beyond_a_router_is_not_heard() {
    let mut frame = solicitation(MAC, SRC, SSH_IP, None);
    let asked = ndp::parse(&frame, NDP_FRAME_LLA_LEN).unwrap();
    ndp::answer(&mut frame, &asked, HOLDER);
    let (src, dst, _, message) = as_received(&frame);
    assert!(
        as_frame(src, dst, 255, &message[..NDP_BODY_LEN]).is_none(),
        "no MAC to learn"
    );
    let routed = as_frame(src, dst, 254, message).unwrap();
    assert!(
        ndp::parse(&routed, NDP_FRAME_LLA_LEN).is_none(),
        "hop limit 254"
    );
}
