//! What `bench progs` does with bpftool on a build's pinned state: finding
//! its programs, reading and writing its maps.

use std::{
    collections::BTreeMap,
    net::{IpAddr, SocketAddr},
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context as _, bail};
use serde_json::Value;
use ssh_fwd_tests::{cmd, topology::EXT_IFACE};

use super::packets::Program;

/// `<bpffs>/v<N>`: the one layout directory the agent made.
pub fn version_dir(bpffs: &Path) -> anyhow::Result<PathBuf> {
    let dirs: Vec<PathBuf> = std::fs::read_dir(bpffs)
        .with_context(|| format!("reading {}", bpffs.display()))?
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with('v'))
        })
        .collect();
    match dirs.as_slice() {
        [one] => Ok(one.clone()),
        _ => bail!(
            "expected one layout directory in {}: {dirs:?}",
            bpffs.display()
        ),
    }
}

/// The pin of `program` the agent made in `version_dir`: on the bed's
/// external interface (the ingress link in the hook it was attached in:
/// `ingress-tc` or `ingress-xdp-generic`), or on the pod's. Without tcx
/// (before Linux 6.6) the tc programs are in clsact filters, and the agent
/// pins the program itself (`ingress-tc-clsact`, and `pod-links/INDEX`
/// holds a program).
pub fn link(version_dir: &Path, program: Program) -> anyhow::Result<PathBuf> {
    let links = version_dir.join("links").join(EXT_IFACE);
    let tcx_or_clsact = |name: &str| {
        let tcx = links.join(name);
        let clsact = links.join(format!("{name}-clsact"));
        if !tcx.exists() && clsact.exists() {
            clsact
        } else {
            tcx
        }
    };
    Ok(match program {
        Program::Ingress => tcx_or_clsact("ingress-tc"),
        Program::IngressXdp => links.join("ingress-xdp-generic"),
        Program::Egress => tcx_or_clsact("egress-tc"),
        Program::Reply => {
            let pod_links: Vec<PathBuf> = std::fs::read_dir(version_dir.join("pod-links"))?
                .flatten()
                .map(|e| e.path())
                .collect();
            let [pod_link] = pod_links.as_slice() else {
                bail!(
                    "expected one pod link (the bed's pod) in {}",
                    version_dir.display()
                );
            };
            pod_link.clone()
        }
    })
}

/// Pins the program behind `pin` (a pinned link of this bed, or the
/// program of a clsact filter pinned as such) in `bpffs` for the test
/// runs, where it stays when the agent's pin is gone.
pub fn pin_program(pin: &Path, bpffs: &Path, program: Program) -> anyhow::Result<PathBuf> {
    let show = |kind: &str, field: &str| -> anyhow::Result<u64> {
        let text = cmd::run(
            Command::new("bpftool")
                .args(["-j", kind, "show", "pinned"])
                .arg(pin),
        )?;
        let info: Value =
            serde_json::from_str(&text).with_context(|| format!("bpftool said {text:?}"))?;
        info[field]
            .as_u64()
            .with_context(|| format!("no {field} in {text}"))
    };
    // bpftool tells a link from a program by the object's type; aya's
    // `ProgramInfo::from_pin` would read a link's info as a program's.
    let id = show("link", "prog_id").or_else(|_| show("prog", "id"))?;
    let path = bpffs.join(format!("bench-{}", program.name()));
    cmd::run(
        Command::new("bpftool")
            .args(["prog", "pin", "id", &id.to_string()])
            .arg(&path),
    )?;
    Ok(path)
}

/// Each map pinned in `maps` by its file name, and its id: a map pinned
/// again (another map under the name) has another.
pub fn pinned_map_ids(maps: &Path) -> anyhow::Result<BTreeMap<String, u32>> {
    let mut ids = BTreeMap::new();
    for entry in std::fs::read_dir(maps).with_context(|| format!("reading {}", maps.display()))? {
        let path = entry?.path();
        let info = aya::maps::MapInfo::from_pin(&path)
            .with_context(|| format!("the map pinned at {}", path.display()))?;
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        ids.insert(name.to_owned(), info.id());
    }
    Ok(ids)
}

/// An endpoint as every layout stores it: address and port in network
/// order, then padding to a multiple of 8 bytes (`Endpoint`, 8 bytes for
/// IPv4; `Endpoint6`, 24 for IPv6).
pub fn endpoint_bytes(endpoint: SocketAddr) -> Vec<u8> {
    let mut bytes = match endpoint.ip() {
        IpAddr::V4(ip) => ip.octets().to_vec(),
        IpAddr::V6(ip) => ip.octets().to_vec(),
    };
    bytes.extend_from_slice(&endpoint.port().to_be_bytes());
    bytes.resize(bytes.len().next_multiple_of(8), 0);
    bytes
}

fn hex_args(bytes: &[u8]) -> Vec<String> {
    std::iter::once("hex".to_owned())
        .chain(bytes.iter().map(|b| format!("{b:02x}")))
        .collect()
}

pub fn map_update(map: &Path, key: &[u8], value: &[u8]) -> anyhow::Result<()> {
    let mut update = Command::new("bpftool");
    update.args(["map", "update", "pinned"]).arg(map);
    update.arg("key").args(hex_args(key));
    update.arg("value").args(hex_args(value));
    cmd::run(&mut update)
        .map(|_| ())
        .with_context(|| format!("writing {}", map.display()))
}

/// The value bytes of `key` in the pinned map `map`.
pub fn map_lookup(map: &Path, key: &[u8]) -> anyhow::Result<Vec<u8>> {
    let mut lookup = Command::new("bpftool");
    lookup.args(["-j", "map", "lookup", "pinned"]).arg(map);
    lookup.arg("key").args(hex_args(key));
    let text = cmd::run(&mut lookup)?;
    let v: Value = serde_json::from_str(&text).with_context(|| format!("bpftool said {text:?}"))?;
    v["value"]
        .as_array()
        .with_context(|| format!("no value bytes in {text}"))?
        .iter()
        .map(|b| {
            let s = b.as_str().unwrap_or_default();
            u8::from_str_radix(s.trim_start_matches("0x"), 16)
                .with_context(|| format!("value byte {b} in {text}"))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};

    use ssh_fwd_common::maps::{Endpoint, Endpoint6};

    use super::endpoint_bytes;

    #[test]
    fn an_endpoint_has_the_bytes_of_the_maps_key() {
        let ip = Ipv4Addr::new(10, 244, 1, 5);
        let bytes = endpoint_bytes(SocketAddr::new(ip.into(), 7007));
        let e = Endpoint::new(ip, 7007);
        assert_eq!(bytes.len(), size_of::<Endpoint>());
        assert_eq!(bytes[..4], e.addr.to_ne_bytes());
        assert_eq!(bytes[4..6], e.port.to_ne_bytes());
        let ip6 = Ipv6Addr::new(0xfd00, 0x244, 1, 0, 0, 0, 0, 5);
        let bytes = endpoint_bytes(SocketAddr::new(ip6.into(), 7007));
        let e = Endpoint6::new6(ip6, 7007);
        assert_eq!(bytes.len(), size_of::<Endpoint6>());
        assert_eq!(bytes[..16], e.addr.octets());
        assert_eq!(bytes[16..18], e.port.to_ne_bytes());
        assert!(bytes[18..].iter().all(|b| *b == 0));
    }
}
