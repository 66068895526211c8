use core::net::Ipv4Addr;

use super::*;
use crate::fixtures::arp_request;

const ASKER: [u8; 6] = [0x02, 0, 0, 0, 0, 0x02];
const NODE: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];
const CLIENT: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 2);
const SSH_IP: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 10);

fn raw(ip: Ipv4Addr) -> u32 {
    u32::from_ne_bytes(ip.octets())
}

fn head(frame: &[u8]) -> [u8; ARP_FRAME_LEN] {
    frame[..ARP_FRAME_LEN].try_into().unwrap()
}

#[test]
fn a_request_is_read_field_by_field_and_asks_for_its_target() {
    let arp = parse(&head(&arp_request(ASKER, CLIENT, SSH_IP))).unwrap();
    assert_eq!(
        arp,
        Arp {
            op: ARP_REQUEST,
            sha: ASKER,
            spa: raw(CLIENT),
            tpa: raw(SSH_IP)
        }
    );
    assert!(arp.asks());
    assert!(arp.claims_sender());
}

#[test]
fn the_answer_goes_back_to_the_asker_from_the_owner_with_the_fields_swapped() {
    let request = arp_request(ASKER, CLIENT, SSH_IP);
    let mut frame = head(&request);
    let arp = parse(&frame).unwrap();
    answer(&mut frame, &arp, NODE);
    assert_eq!(frame[..6], ASKER, "Ethernet destination: the asker");
    assert_eq!(frame[6..12], NODE, "Ethernet source: the owner");
    assert_eq!(frame[12..14], [0x08, 0x06]);
    assert_eq!(frame[14..20], request[14..20], "same hardware and protocol");
    assert_eq!(frame[20..22], [0, 2], "a reply");
    assert_eq!(frame[22..28], NODE, "sender: the owner's MAC");
    assert_eq!(
        frame[28..32],
        SSH_IP.octets(),
        "sender: the address asked for"
    );
    assert_eq!(frame[32..38], ASKER, "target: the asker's MAC");
    assert_eq!(
        frame[38..42],
        CLIENT.octets(),
        "target: the asker's address"
    );
    let reply = parse(&frame).unwrap();
    assert!(!reply.asks());
    assert_eq!((reply.sha, reply.spa), (NODE, raw(SSH_IP)));
}

#[test]
fn announcements_and_probes_are_not_questions() {
    let announcement = parse(&head(&arp_request(ASKER, SSH_IP, SSH_IP))).unwrap();
    assert!(!announcement.asks(), "a gratuitous request is news");
    assert!(announcement.claims_sender());
    let probe = parse(&head(&arp_request(ASKER, Ipv4Addr::UNSPECIFIED, SSH_IP))).unwrap();
    assert!(
        probe.asks(),
        "RFC 5227's probe is answered, which defends the address"
    );
    assert!(!probe.claims_sender());
}

#[test]
fn a_gratuitous_reply_names_the_owner_as_sender_and_target_to_everyone() {
    let frame = gratuitous(NODE, raw(SSH_IP));
    assert_eq!(frame[..6], BROADCAST);
    assert_eq!(frame[6..12], NODE);
    let arp = parse(&frame).unwrap();
    assert_eq!(arp.op, ARP_REPLY);
    assert_eq!(
        (arp.sha, arp.spa, arp.tpa),
        (NODE, raw(SSH_IP), raw(SSH_IP))
    );
    assert_eq!(frame[32..38], NODE, "target MAC = sender MAC: Linux's test");
    assert!(arp.claims_sender() && !arp.asks());
}

#[test]
fn frames_that_are_not_ethernet_ipv4_arp_are_not_read() {
    let good = head(&arp_request(ASKER, CLIENT, SSH_IP));
    for (at, value) in [
        (12, 0x86),
        (13, 0x00),
        (15, 6),
        (17, 0xdd),
        (18, 8),
        (19, 16),
    ] {
        let mut bad = good;
        bad[at] = value;
        assert_eq!(parse(&bad), None, "byte {at} = {value:#x}");
    }
}

#[test]
fn a_probe_asks_for_the_ssh_ip_without_naming_an_address_of_its_own() {
    let frame = probe(NODE, raw(SSH_IP));
    assert_eq!(frame[..6], BROADCAST);
    assert_eq!(frame[6..12], NODE);
    let arp = parse(&frame).unwrap();
    assert_eq!(
        arp,
        Arp {
            op: ARP_REQUEST,
            sha: NODE,
            spa: 0,
            tpa: raw(SSH_IP)
        }
    );
    assert!(arp.asks(), "the holder answers it");
    assert!(!arp.claims_sender(), "nobody learns anything from it");
    assert_eq!(frame[32..38], [0; 6]);
    // The holder's answer, written over the probe as the data path does.
    let mut answer_frame = frame;
    answer(&mut answer_frame, &arp, ASKER);
    let reply = parse(&answer_frame).unwrap();
    assert!(answered_by_other(&reply, raw(SSH_IP), &[NODE]));
    assert!(
        !answered_by_other(&reply, raw(SSH_IP), &[NODE, ASKER]),
        "our own MAC"
    );
    assert!(
        !answered_by_other(&reply, raw(CLIENT), &[NODE]),
        "another address"
    );
    assert!(!answered_by_other(&arp, raw(SSH_IP), &[]), "a request");
}
