//! What `bench progs` does with bpftool on a build's pinned state: finding
//! its programs, reading and writing its maps.

use std::{
    net::Ipv4Addr,
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

/// Pins the programs behind the agent's links (those of this bed, whatever
/// else runs on the machine) in `bpffs` for the test runs.
pub fn pin_programs(version_dir: &Path, bpffs: &Path) -> anyhow::Result<[PathBuf; 3]> {
    let links = version_dir.join("links").join(EXT_IFACE);
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
    let pin = |program: Program| -> anyhow::Result<PathBuf> {
        let link = match program {
            Program::Ingress => links.join("ingress-tc"),
            Program::Reply => pod_link.clone(),
            Program::Egress => links.join("egress-tc"),
        };
        let text = cmd::run(
            Command::new("bpftool")
                .args(["-j", "link", "show", "pinned"])
                .arg(&link),
        )?;
        let info: Value =
            serde_json::from_str(&text).with_context(|| format!("bpftool said {text:?}"))?;
        let id = info["prog_id"]
            .as_u64()
            .with_context(|| format!("no prog_id in {text}"))?;
        let path = bpffs.join(format!("bench-{}", program.name()));
        cmd::run(
            Command::new("bpftool")
                .args(["prog", "pin", "id", &id.to_string()])
                .arg(&path),
        )?;
        Ok(path)
    };
    Ok([
        pin(Program::Ingress)?,
        pin(Program::Reply)?,
        pin(Program::Egress)?,
    ])
}

/// An endpoint as both layouts store it: address and port in network
/// order, two bytes of padding.
pub fn endpoint_bytes((ip, port): (Ipv4Addr, u16)) -> [u8; 8] {
    let [a, b, c, d] = ip.octets();
    let [p, q] = port.to_be_bytes();
    [a, b, c, d, p, q, 0, 0]
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
