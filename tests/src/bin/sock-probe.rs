//! `sock-probe tcp|udp IP PORT`: connects once (an IPv6 socket for an IPv6
//! address, IPv4-mapped ones included) and prints what the socket calls
//! report, for the hairpin tests: `peer IP:PORT` (getpeername) and
//! `local IP:PORT` (getsockname), or `error ERRNO` when connect fails. A
//! TCP connection is closed at once. Exits 0 either way; 2 on bad usage.

use std::{
    net::{SocketAddr, TcpStream, UdpSocket},
    time::Duration,
};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (Some(proto), Some(Ok(addr))) = (
        args.first(),
        args.get(1..3).map(|a| {
            let ip: std::net::IpAddr = a[0].parse().map_err(|_| ())?;
            let port: u16 = a[1].parse().map_err(|_| ())?;
            Ok::<_, ()>(SocketAddr::new(ip, port))
        }),
    ) else {
        eprintln!("usage: sock-probe tcp|udp IP PORT");
        std::process::exit(2);
    };
    let result = match proto.as_str() {
        "tcp" => TcpStream::connect_timeout(&addr, Duration::from_secs(5))
            .and_then(|s| Ok((s.peer_addr()?, s.local_addr()?))),
        "udp" => UdpSocket::bind(if addr.is_ipv6() {
            "[::]:0"
        } else {
            "0.0.0.0:0"
        })
        .and_then(|s| {
            s.connect(addr)?;
            Ok((s.peer_addr()?, s.local_addr()?))
        }),
        _ => {
            eprintln!("usage: sock-probe tcp|udp IP PORT");
            std::process::exit(2);
        }
    };
    match result {
        Ok((peer, local)) => println!("peer {peer}\nlocal {local}"),
        Err(e) => println!("error {}", e.raw_os_error().unwrap_or(-1)),
    }
}
