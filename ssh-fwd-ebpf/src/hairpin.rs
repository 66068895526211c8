//! Hairpin at the socket, for clients inside the cluster: cgroup v2
//! `connect4` sends a TCP connect to a mapped frontend to its backend, and
//! `getpeername4` shows the application the frontend it dialled;
//! `connect6` and `getpeername6` do the same for IPv6 sockets (and for an
//! IPv4 frontend such a socket dials as an IPv4-mapped address). The
//! decisions are `ssh_fwd_common::hairpin`'s; here we only read the
//! context, look up and write. All always allow the call (return 1): they
//! translate, they never refuse.

use aya_ebpf::{
    helpers::generated::bpf_get_socket_cookie,
    macros::{cgroup_sock_addr, map},
    maps::LruHashMap,
    programs::SockAddrContext,
};
use ssh_fwd_common::{
    hairpin::{
        endpoint_of, endpoint_of6, ipv4_mapped, mapped_target, on_connect, on_getpeername,
        user_port_of,
    },
    maps::{Endpoint, HAIRPIN_SOCKS_CAPACITY, HairpinSock, HairpinSock6},
};

use crate::maps::{FRONTENDS, FRONTENDS6};

/// Socket cookie -> what the socket dialled and where it went.
#[map(name = "HAIRPIN_SOCKS")]
static HAIRPIN_SOCKS: LruHashMap<u64, HairpinSock> = LruHashMap::pinned(HAIRPIN_SOCKS_CAPACITY, 0);

/// The same for IPv6 sockets.
#[map(name = "HAIRPIN_SOCKS6")]
static HAIRPIN_SOCKS6: LruHashMap<u64, HairpinSock6> =
    LruHashMap::pinned(HAIRPIN_SOCKS_CAPACITY, 0);

const ALLOW: i32 = 1;

#[cgroup_sock_addr(connect4)]
pub fn ssh_fwd_connect4(ctx: SockAddrContext) -> i32 {
    let sa = ctx.sock_addr;
    // SAFETY: the kernel passes a valid bpf_sock_addr; these are plain
    // context reads at constant offsets, which the verifier rewrites.
    let (ip, port, sock_type, protocol) =
        unsafe { ((*sa).user_ip4, (*sa).user_port, (*sa).type_, (*sa).protocol) };
    let dialled = endpoint_of(ip, port);
    // SAFETY: a hash lookup; the value is copied out at once.
    let mapping = unsafe { FRONTENDS.get(dialled) }.copied();
    let Some(sock) = on_connect(sock_type, protocol, dialled, mapping.as_ref()) else {
        return ALLOW;
    };
    // SAFETY: the helper reads the socket of the context we were given.
    let cookie = unsafe { bpf_get_socket_cookie(ctx.sock_addr.cast()) };
    // Remembered first: if the map refuses, getpeername shows the backend,
    // and the connection still works.
    let _ = HAIRPIN_SOCKS.insert(cookie, sock, 0);
    // SAFETY: connect4 may write user_ip4 and user_port (4-byte stores).
    unsafe {
        (*sa).user_ip4 = sock.backend.addr;
        (*sa).user_port = user_port_of(sock.backend);
    }
    ALLOW
}

#[cgroup_sock_addr(getpeername4)]
pub fn ssh_fwd_getpeername4(ctx: SockAddrContext) -> i32 {
    let sa = ctx.sock_addr;
    // SAFETY: the helper reads the socket of the context we were given.
    let cookie = unsafe { bpf_get_socket_cookie(ctx.sock_addr.cast()) };
    // SAFETY: a hash lookup; the value is copied out at once.
    let Some(sock) = (unsafe { HAIRPIN_SOCKS.get(cookie) }).copied() else {
        return ALLOW;
    };
    // SAFETY: plain context reads, as in connect4.
    let peer = unsafe { endpoint_of((*sa).user_ip4, (*sa).user_port) };
    if let Some(shown) = on_getpeername(peer, Some(&sock)) {
        // SAFETY: getpeername4 may write user_ip4 and user_port.
        unsafe {
            (*sa).user_ip4 = shown.addr;
            (*sa).user_port = user_port_of(shown);
        }
    }
    ALLOW
}

#[cgroup_sock_addr(connect6)]
pub fn ssh_fwd_connect6(ctx: SockAddrContext) -> i32 {
    let sa = ctx.sock_addr;
    // SAFETY: plain context reads at constant offsets, as in connect4.
    let (ip, port, sock_type, protocol) = unsafe {
        let ip = (*sa).user_ip6;
        (
            [ip[0], ip[1], ip[2], ip[3]],
            (*sa).user_port,
            (*sa).type_,
            (*sa).protocol,
        )
    };
    let dialled = endpoint_of6(ip, port);
    let mapping = match ipv4_mapped(dialled.addr) {
        // SAFETY: a hash lookup; the value is copied out at once.
        Some(v4) => unsafe {
            FRONTENDS.get(Endpoint {
                addr: v4,
                port: dialled.port,
                _pad: 0,
            })
        }
        .copied()
        .map(mapped_target),
        // SAFETY: as above.
        None => unsafe { FRONTENDS6.get(dialled) }.copied(),
    };
    let Some(sock) = on_connect(sock_type, protocol, dialled, mapping.as_ref()) else {
        return ALLOW;
    };
    // SAFETY: the helper reads the socket of the context we were given.
    let cookie = unsafe { bpf_get_socket_cookie(ctx.sock_addr.cast()) };
    let _ = HAIRPIN_SOCKS6.insert(cookie, sock, 0);
    let [a, b, c, d] = sock.backend.addr.0;
    // SAFETY: connect6 may write user_ip6 and user_port (4-byte stores).
    unsafe {
        (*sa).user_ip6[0] = a;
        (*sa).user_ip6[1] = b;
        (*sa).user_ip6[2] = c;
        (*sa).user_ip6[3] = d;
        (*sa).user_port = user_port_of(sock.backend);
    }
    ALLOW
}

#[cgroup_sock_addr(getpeername6)]
pub fn ssh_fwd_getpeername6(ctx: SockAddrContext) -> i32 {
    let sa = ctx.sock_addr;
    // SAFETY: the helper reads the socket of the context we were given.
    let cookie = unsafe { bpf_get_socket_cookie(ctx.sock_addr.cast()) };
    // SAFETY: a hash lookup; the value is copied out at once.
    let Some(sock) = (unsafe { HAIRPIN_SOCKS6.get(cookie) }).copied() else {
        return ALLOW;
    };
    // SAFETY: plain context reads, as in connect6.
    let peer = unsafe {
        let ip = (*sa).user_ip6;
        endpoint_of6([ip[0], ip[1], ip[2], ip[3]], (*sa).user_port)
    };
    if let Some(shown) = on_getpeername(peer, Some(&sock)) {
        let [a, b, c, d] = shown.addr.0;
        // SAFETY: getpeername6 may write user_ip6 and user_port.
        unsafe {
            (*sa).user_ip6[0] = a;
            (*sa).user_ip6[1] = b;
            (*sa).user_ip6[2] = c;
            (*sa).user_ip6[3] = d;
            (*sa).user_port = user_port_of(shown);
        }
    }
    ALLOW
}
