//! Hairpin: clients inside the cluster (pods, nodes' own shells) that dial a
//! frontend `EXTERNAL_IP:PORT`. Translated at the socket, not the packet: a
//! cgroup `connect4` program replaces the frontend with the backend from the
//! same [`FRONTENDS`](crate::maps::FRONTENDS) map the packet path uses, and
//! remembers the pair under the socket's cookie; a `getpeername4` program
//! gives the application back the frontend it dialled. No packet of such a
//! connection is ever rewritten, and the backend sees the client's own
//! address.
//!
//! IPv6 sockets get the same from `connect6` and `getpeername6`, over
//! `FRONTENDS6`; an IPv4 frontend dialled from an IPv6 socket as an
//! IPv4-mapped address (`::ffff:198.18.0.10`, a dual-stack socket) is
//! looked up in `FRONTENDS` and sent to the backend's mapped address.
//!
//! The decisions live here, as pure functions tested on the host; the kernel
//! programs only read the context, look up and write.

use crate::maps::{Addr, Addr6, Endpoint, Endpoint6, FLAG_DRAINING, HairpinSock, NatTarget};

/// `SOCK_STREAM`, as `bpf_sock_addr.type` holds it.
pub const SOCK_STREAM: u32 = 1;
/// `IPPROTO_TCP`, as `bpf_sock_addr.protocol` holds it (a TCP socket
/// created with protocol 0 reads 6 here too).
pub const IPPROTO_TCP: u32 = 6;

/// The endpoint in `bpf_sock_addr.user_ip4` and `user_port`. Both hold
/// network byte order; the port sits in the low 16 bits of `user_port`,
/// exactly as [`Endpoint::port`] stores it.
pub const fn endpoint_of(user_ip4: u32, user_port: u32) -> Endpoint {
    Endpoint {
        addr: user_ip4,
        port: user_port as u16,
        _pad: 0,
    }
}

/// The endpoint in `bpf_sock_addr.user_ip6` and `user_port`: the address
/// as four words of wire bytes, as the maps hold it.
pub const fn endpoint_of6(user_ip6: [u32; 4], user_port: u32) -> Endpoint6 {
    Endpoint6 {
        addr: Addr6(user_ip6),
        port: user_port as u16,
        _pad: [0; 3],
    }
}

/// The value to write into `bpf_sock_addr.user_port` for `endpoint`.
pub const fn user_port_of<A: Addr>(endpoint: Endpoint<A>) -> u32 {
    endpoint.port as u32
}

/// The IPv4 address an IPv4-mapped IPv6 address (`::ffff:a.b.c.d`) stands
/// for, raw.
pub const fn ipv4_mapped(addr: Addr6) -> Option<u32> {
    let [a, b, c, d] = addr.0;
    if a == 0 && b == 0 && c == u32::from_be(0xffff) {
        Some(d)
    } else {
        None
    }
}

/// `endpoint` as an IPv4-mapped IPv6 one.
pub const fn mapped(endpoint: Endpoint) -> Endpoint6 {
    Endpoint6 {
        addr: Addr6([0, 0, u32::from_be(0xffff), endpoint.addr]),
        port: endpoint.port,
        _pad: [0; 3],
    }
}

/// An IPv4 frontend's target as an IPv6 socket reaches it: its backend at
/// its IPv4-mapped address.
pub const fn mapped_target(target: NatTarget) -> NatTarget<Addr6> {
    NatTarget {
        endpoint: mapped(target.endpoint),
        slot: target.slot,
        flags: target.flags,
    }
}

/// What `connect()` should do with a destination: `Some` when a TCP socket
/// dials a mapped frontend (connect to the backend and remember the pair),
/// `None` for everything else, which is left exactly as it is: UDP and raw
/// sockets, unmapped ports on the SSH IP, any other address, and a frontend
/// whose backend is draining (new connections must not reach an address
/// that may be another pod's by now).
pub fn on_connect<A: Addr>(
    sock_type: u32,
    protocol: u32,
    dialled: Endpoint<A>,
    mapping: Option<&NatTarget<A>>,
) -> Option<HairpinSock<A>> {
    if sock_type != SOCK_STREAM || protocol != IPPROTO_TCP {
        return None;
    }
    let target = mapping.filter(|t| t.flags & FLAG_DRAINING == 0)?;
    if target.endpoint == dialled {
        // A frontend mapped to itself: nothing to translate.
        return None;
    }
    Some(HairpinSock {
        frontend: dialled,
        backend: target.endpoint,
    })
}

/// What `getpeername()` should report: the dialled frontend when this
/// socket was translated and its peer is still the backend it was sent to;
/// `None` (the peer as it is) otherwise, so a socket that connected to a
/// pod's address directly, or reconnected elsewhere, is never touched.
pub fn on_getpeername<A: Addr>(
    peer: Endpoint<A>,
    socket: Option<&HairpinSock<A>>,
) -> Option<Endpoint<A>> {
    socket.filter(|s| s.backend == peer).map(|s| s.frontend)
}

#[cfg(test)]
mod tests {
    use core::net::Ipv4Addr;

    use super::*;

    const UDP: u32 = 17;
    const SOCK_DGRAM: u32 = 2;

    fn frontend() -> Endpoint {
        Endpoint::new(Ipv4Addr::new(198, 18, 0, 10), 8123)
    }

    fn backend() -> Endpoint {
        Endpoint::new(Ipv4Addr::new(10, 244, 1, 5), 22)
    }

    fn mapping() -> NatTarget {
        NatTarget {
            endpoint: backend(),
            slot: 3,
            flags: 0,
        }
    }

    #[test]
    fn a_tcp_connect_to_a_mapped_frontend_goes_to_the_backend() {
        let got = on_connect(SOCK_STREAM, IPPROTO_TCP, frontend(), Some(&mapping()));
        assert_eq!(
            got,
            Some(HairpinSock {
                frontend: frontend(),
                backend: backend()
            })
        );
    }

    #[test]
    fn a_connect_to_a_draining_frontend_is_not_sent_to_its_backend() {
        let draining = NatTarget {
            flags: FLAG_DRAINING,
            ..mapping()
        };
        assert_eq!(
            on_connect(SOCK_STREAM, IPPROTO_TCP, frontend(), Some(&draining)),
            None,
            "a new connection never reaches a draining backend, whose address may be another pod's"
        );
    }

    #[test]
    fn a_connect_to_an_unmapped_port_is_left_alone() {
        assert_eq!(on_connect(SOCK_STREAM, IPPROTO_TCP, frontend(), None), None);
    }

    #[test]
    fn udp_is_never_translated_even_to_a_mapped_frontend() {
        assert_eq!(
            on_connect(SOCK_DGRAM, UDP, frontend(), Some(&mapping())),
            None
        );
        assert_eq!(
            on_connect(SOCK_STREAM, UDP, frontend(), Some(&mapping())),
            None,
            "a stream socket of another protocol (SCTP, MPTCP) is not TCP"
        );
    }

    #[test]
    fn a_frontend_mapped_to_itself_is_not_translated() {
        let own = NatTarget {
            endpoint: frontend(),
            ..mapping()
        };
        assert_eq!(
            on_connect(SOCK_STREAM, IPPROTO_TCP, frontend(), Some(&own)),
            None
        );
    }

    #[test]
    fn getpeername_of_a_translated_socket_shows_the_dialled_frontend() {
        let sock = HairpinSock {
            frontend: frontend(),
            backend: backend(),
        };
        assert_eq!(on_getpeername(backend(), Some(&sock)), Some(frontend()));
    }

    #[test]
    fn getpeername_of_any_other_socket_is_left_alone() {
        assert_eq!(on_getpeername(backend(), None), None, "never translated");
        let sock = HairpinSock {
            frontend: frontend(),
            backend: backend(),
        };
        let elsewhere = Endpoint::new(Ipv4Addr::new(10, 244, 2, 5), 22);
        assert_eq!(
            on_getpeername(elsewhere, Some(&sock)),
            None,
            "the socket reconnected to another address"
        );
    }

    #[test]
    fn an_ipv6_socket_is_translated_as_an_ipv4_one() {
        let frontend = Endpoint6::new6("2001:db8::10".parse().unwrap(), 8123);
        let backend = Endpoint6::new6("fd00:244:1::5".parse().unwrap(), 22);
        let target = NatTarget {
            endpoint: backend,
            slot: 3,
            flags: 0,
        };
        let sock = on_connect(SOCK_STREAM, IPPROTO_TCP, frontend, Some(&target)).unwrap();
        assert_eq!((sock.frontend, sock.backend), (frontend, backend));
        assert_eq!(on_getpeername(backend, Some(&sock)), Some(frontend));
        let draining = NatTarget {
            flags: FLAG_DRAINING,
            ..target
        };
        assert_eq!(
            on_connect(SOCK_STREAM, IPPROTO_TCP, frontend, Some(&draining)),
            None
        );
        // What the kernel shows a connect6 program.
        let user_port = u32::from(u16::from_ne_bytes(8123u16.to_be_bytes()));
        assert_eq!(endpoint_of6(frontend.addr.0, user_port), frontend);
    }

    #[test]
    fn an_ipv4_frontend_dialled_as_a_mapped_address_reaches_its_mapped_backend() {
        let dialled = Endpoint6::new6("::ffff:198.18.0.10".parse().unwrap(), 8123);
        let v4 = ipv4_mapped(dialled.addr).expect("mapped");
        assert_eq!(v4, frontend().addr);
        let target = mapped_target(mapping());
        assert_eq!(
            target.endpoint,
            Endpoint6::new6("::ffff:10.244.1.5".parse().unwrap(), 22)
        );
        assert_eq!(target.slot, 3);
        assert_eq!(
            mapped(frontend()),
            Endpoint6 {
                port: dialled.port,
                ..dialled
            }
        );
        // Not mapped: an IPv6 address, the IPv4-compatible form, NAT64's.
        for other in ["2001:db8::10", "::198.18.0.10", "64:ff9b::c612:a"] {
            assert_eq!(
                ipv4_mapped(Addr6::new(other.parse().unwrap())),
                None,
                "{other}"
            );
        }
    }

    #[test]
    fn sock_addr_fields_read_and_write_the_wire_order_endpoint() {
        let e = frontend();
        // What the kernel shows a program for sin_port 8123: the wire bytes
        // in the low half of the field.
        let user_port = u32::from(u16::from_ne_bytes(8123u16.to_be_bytes()));
        assert_eq!(endpoint_of(e.addr, user_port), e);
        assert_eq!(user_port_of(e), user_port);
        assert_eq!(endpoint_of(e.addr, user_port_of(e)).port(), 8123);
    }
}
