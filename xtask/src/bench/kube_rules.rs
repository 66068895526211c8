//! Rules laid out the way kube-proxy writes them for N Services with
//! `externalIPs` (`externalTrafficPolicy: Cluster`, the default): one
//! cluster-IP and one external-IP entry per Service port, masquerading, and
//! the measured Service last. Pure text generation, fed to
//! `iptables-restore`, `nft -f` and `ipvsadm-restore` inside the node
//! namespace.

use std::fmt::Write as _;

use super::bed::{ECHO_FRONTEND_PORT, ECHO_PORT, IPERF_FRONTEND_PORT, IPERF_PORT, POD_IP};
use ssh_fwd_tests::topology::EXTERNAL_IP;

/// One Service port and its single endpoint.
struct SvcPort {
    /// `jobs/job-7:ssh`, as in kube-proxy's comments and chain names.
    name: String,
    /// Hash-like suffix, as kube-proxy derives from the name.
    id: String,
    cluster_ip: String,
    external_ip: String,
    port: u16,
    endpoint_ip: String,
    endpoint_port: u16,
}

/// `services - 1` filler Services (never contacted), then the measured one
/// with two ports (iperf3 and echo).
fn service_ports(services: usize) -> Vec<SvcPort> {
    let mut all = Vec::with_capacity(services + 1);
    for i in 0..services.saturating_sub(1) {
        let (hi, lo) = (i >> 8, i & 0xff);
        all.push(SvcPort {
            name: format!("jobs/job-{i}:ssh"),
            id: format!("{:016X}", (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)),
            cluster_ip: format!("10.96.{hi}.{lo}"),
            external_ip: format!("198.19.{hi}.{lo}"),
            port: 8022,
            endpoint_ip: format!("10.245.{hi}.{lo}"),
            endpoint_port: 22,
        });
    }
    for (port, target, suffix) in [
        (IPERF_FRONTEND_PORT, IPERF_PORT, "iperf"),
        (ECHO_FRONTEND_PORT, ECHO_PORT, "echo"),
    ] {
        all.push(SvcPort {
            name: format!("jobs/measured:{suffix}"),
            id: format!("MEASURED{:08X}", u32::from(port)),
            cluster_ip: "10.96.255.254".into(),
            external_ip: EXTERNAL_IP.into(),
            port,
            endpoint_ip: POD_IP.into(),
            endpoint_port: target,
        });
    }
    all
}

/// kube-proxy's iptables mode (nat table): KUBE-SERVICES -> KUBE-EXT-* ->
/// KUBE-SVC-* -> KUBE-SEP-* (DNAT), KUBE-POSTROUTING masquerades.
pub fn iptables(services: usize) -> String {
    let ports = service_ports(services);
    let mut t = String::from("*nat\n");
    for chain in ["PREROUTING", "INPUT", "OUTPUT", "POSTROUTING"] {
        let _ = writeln!(t, ":{chain} ACCEPT [0:0]");
    }
    for chain in [
        "KUBE-SERVICES",
        "KUBE-NODEPORTS",
        "KUBE-POSTROUTING",
        "KUBE-MARK-MASQ",
    ] {
        let _ = writeln!(t, ":{chain} - [0:0]");
    }
    for p in &ports {
        for kind in ["SVC", "EXT", "SEP"] {
            let _ = writeln!(t, ":KUBE-{kind}-{} - [0:0]", p.id);
        }
    }
    t.push_str(concat!(
        "-A PREROUTING -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES\n",
        "-A OUTPUT -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES\n",
        "-A POSTROUTING -m comment --comment \"kubernetes postrouting rules\" -j KUBE-POSTROUTING\n",
        "-A KUBE-MARK-MASQ -j MARK --set-xmark 0x4000/0x4000\n",
        "-A KUBE-POSTROUTING -m mark ! --mark 0x4000/0x4000 -j RETURN\n",
        "-A KUBE-POSTROUTING -j MARK --set-xmark 0x4000/0x0\n",
        "-A KUBE-POSTROUTING -m comment --comment \"kubernetes service traffic requiring SNAT\" -j MASQUERADE --random-fully\n",
    ));
    for p in &ports {
        let (n, id) = (&p.name, &p.id);
        let (ep, epp) = (&p.endpoint_ip, p.endpoint_port);
        let _ = writeln!(
            t,
            "-A KUBE-SERVICES -d {}/32 -p tcp -m comment --comment \"{n} cluster IP\" -m tcp --dport {} -j KUBE-SVC-{id}",
            p.cluster_ip, p.endpoint_port
        );
        let _ = writeln!(
            t,
            "-A KUBE-SERVICES -d {}/32 -p tcp -m comment --comment \"{n} external IP\" -m tcp --dport {} -j KUBE-EXT-{id}",
            p.external_ip, p.port
        );
        let _ = writeln!(
            t,
            "-A KUBE-EXT-{id} -m comment --comment \"masquerade traffic for {n} external destinations\" -j KUBE-MARK-MASQ\n-A KUBE-EXT-{id} -j KUBE-SVC-{id}"
        );
        let _ = writeln!(
            t,
            "-A KUBE-SVC-{id} ! -s 10.244.0.0/16 -d {}/32 -p tcp -m comment --comment \"{n} cluster IP\" -m tcp --dport {} -j KUBE-MARK-MASQ",
            p.cluster_ip, p.endpoint_port
        );
        let _ = writeln!(
            t,
            "-A KUBE-SVC-{id} -m comment --comment \"{n} -> {ep}:{epp}\" -j KUBE-SEP-{id}"
        );
        let _ = writeln!(
            t,
            "-A KUBE-SEP-{id} -s {ep}/32 -m comment --comment \"{n}\" -j KUBE-MARK-MASQ\n-A KUBE-SEP-{id} -p tcp -m comment --comment \"{n}\" -m tcp -j DNAT --to-destination {ep}:{epp}"
        );
    }
    t.push_str("-A KUBE-SERVICES -m comment --comment \"kubernetes service nodeports\" -m addrtype --dst-type LOCAL -j KUBE-NODEPORTS\nCOMMIT\n");
    t
}

/// Services per `nft -f` transaction: the kernel validates a transaction's
/// jumps against the whole table, so one 10,000-Service transaction takes
/// over a minute while batches of 1,000 take seconds (kube-proxy also writes
/// incrementally after its first sync).
const NFT_BATCH: usize = 1000;

/// kube-proxy's nftables mode (nat part): one verdict map from
/// `daddr . proto . dport` to per-Service chains. Returns the `nft -f`
/// transactions in order: the base table, then the Services in batches.
pub fn nftables(services: usize) -> Vec<String> {
    let mut batches = vec![String::from(concat!(
        "table ip kube-proxy {\n",
        " chain mark-for-masquerade { meta mark set meta mark or 0x4000; }\n",
        " chain masquerading { meta mark & 0x4000 == 0 return; meta mark set meta mark xor 0x4000; masquerade fully-random; }\n",
        " map service-ips { type ipv4_addr . inet_proto . inet_service : verdict; }\n",
        " chain services { ip daddr . meta l4proto . th dport vmap @service-ips; }\n",
        " chain nat-prerouting { type nat hook prerouting priority dstnat; policy accept; jump services; }\n",
        " chain nat-output { type nat hook output priority -100; policy accept; jump services; }\n",
        " chain nat-postrouting { type nat hook postrouting priority srcnat; policy accept; jump masquerading; }\n",
        "}\n",
    ))];
    for chunk in service_ports(services).chunks(NFT_BATCH) {
        let mut t = String::new();
        for p in chunk {
            nft_service(&mut t, p);
        }
        batches.push(t);
    }
    batches
}

fn nft_service(t: &mut String, p: &SvcPort) {
    const T: &str = "ip kube-proxy";
    let base = p.name.replace(':', "/tcp/");
    let svc = format!("service-{}-{base}", &p.id[..8]);
    let ext = format!("external-{}-{base}", &p.id[..8]);
    let ep = format!(
        "endpoint-{}-{base}__{}/{}",
        &p.id[8..],
        p.endpoint_ip,
        p.endpoint_port
    );
    let (ip, port) = (&p.endpoint_ip, p.endpoint_port);
    let _ = writeln!(t, "add chain {T} {ep}");
    let _ = writeln!(
        t,
        "add rule {T} {ep} ip saddr {ip} jump mark-for-masquerade"
    );
    let _ = writeln!(t, "add rule {T} {ep} meta l4proto tcp dnat to {ip}:{port}");
    let _ = writeln!(t, "add chain {T} {svc}");
    let _ = writeln!(
        t,
        "add rule {T} {svc} ip daddr {} tcp dport {port} ip saddr != 10.244.0.0/16 jump mark-for-masquerade",
        p.cluster_ip
    );
    let _ = writeln!(
        t,
        "add rule {T} {svc} numgen random mod 1 vmap {{ 0 : goto {ep} }}"
    );
    let _ = writeln!(t, "add chain {T} {ext}");
    let _ = writeln!(t, "add rule {T} {ext} jump mark-for-masquerade");
    let _ = writeln!(t, "add rule {T} {ext} goto {svc}");
    let _ = writeln!(
        t,
        "add element {T} service-ips {{ {} . tcp . {port} : goto {svc}, {} . tcp . {} : goto {ext} }}",
        p.cluster_ip, p.external_ip, p.port
    );
}

/// kube-proxy's IPVS mode: one virtual server per Service port and address,
/// masquerading (NAT) forwarding to the endpoint.
pub fn ipvs(services: usize) -> String {
    let mut t = String::new();
    for p in service_ports(services) {
        for (vip, vport) in [(&p.cluster_ip, p.endpoint_port), (&p.external_ip, p.port)] {
            let _ = writeln!(t, "-A -t {vip}:{vport} -s rr");
            let _ = writeln!(
                t,
                "-a -t {vip}:{vport} -r {}:{} -m -w 1",
                p.endpoint_ip, p.endpoint_port
            );
        }
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_measured_service_is_the_last_kube_services_entry() {
        let rules = iptables(1000);
        let entries: Vec<&str> = rules
            .lines()
            .filter(|l| l.starts_with("-A KUBE-SERVICES"))
            .collect();
        // Two entries per port: 999 fillers + 2 measured ports, then nodeports.
        assert_eq!(entries.len(), 2 * 1001 + 1);
        assert!(entries[entries.len() - 2].contains(&format!("--dport {ECHO_FRONTEND_PORT}")));
        assert!(entries[entries.len() - 2].contains(EXTERNAL_IP));
        assert!(entries.last().unwrap().contains("KUBE-NODEPORTS"));
    }

    #[test]
    fn every_chain_used_is_declared_once() {
        let rules = iptables(50);
        for line in rules.lines().filter(|l| l.starts_with("-A ")) {
            let chain = line.split_whitespace().nth(1).unwrap();
            assert_eq!(
                rules.matches(&format!(":{chain} ")).count(),
                1,
                "{chain} declared once"
            );
        }
    }

    #[test]
    fn one_service_has_only_the_measured_ports() {
        let rules = nftables(1).join("");
        assert_eq!(rules.matches("add chain ip kube-proxy service-").count(), 2);
        assert!(rules.contains(&format!(
            "{EXTERNAL_IP} . tcp . {IPERF_FRONTEND_PORT} : goto external-"
        )));
        assert_eq!(ipvs(1).lines().count(), 8);
    }
}
