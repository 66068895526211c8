//! What the bench writes into a build's maps once its agent has stopped,
//! with bpftool: frontends mapped to themselves, the guarded frontend's
//! rate, the cluster interface and key, an owner for the unrouted backend.
//!
//! A test run with `repeat` keeps each iteration's rewrite, so a DNATed
//! packet would miss from the second iteration on. The bench therefore
//! maps frontends to themselves: the agent refuses such a mapping (it would
//! loop on a real network), so the bed maps the external IP to the pod,
//! and the bench copies those entries under the backend's own address into
//! `FRONTENDS` (`FRONTENDS6`) and points `REVERSE` (`REVERSE6`) at the
//! backend itself. Every iteration then does the full lookup, rewrite,
//! route and redirect, byte for byte a real hit's work. Each iteration also
//! decrements the TTL (hop limit): frames start at 255.

use std::{
    net::{IpAddr, SocketAddr},
    path::Path,
};

use anyhow::{Context as _, ensure};
use ssh_fwd_common::maps::{FLAG_ALLOWLIST, FLAG_SYN_LIMIT, Guard, IFACE_CLUSTER, NatTarget};
use ssh_fwd_tests::topology::{EXTERNAL_IP, EXTERNAL_IP6};

use super::{
    bpftool::{endpoint_bytes, map_lookup, map_update},
    cases::{self, GUARDED_FRONTEND_PORT, GUARDED_PORT, POD, POD6, UNROUTED, UNROUTED_PORT},
    packets::Features,
};
use crate::bench::bed::{Bed, CLUSTER_IFACE, ECHO_FRONTEND_PORT, ECHO_PORT, POD_IFACE};

/// Everything above, for a build with `features`, its maps pinned in `maps`.
pub fn write(bed: &Bed, maps: &Path, features: Features) -> anyhow::Result<()> {
    let external: IpAddr = EXTERNAL_IP.parse()?;
    let at = SocketAddr::new;
    let mut pairs = vec![
        (at(external, ECHO_FRONTEND_PORT), at(POD.into(), ECHO_PORT)),
        (
            at(external, UNROUTED_PORT),
            at(UNROUTED.into(), UNROUTED_PORT),
        ),
    ];
    if features.guard {
        pairs.push((
            at(external, GUARDED_FRONTEND_PORT),
            at(POD.into(), GUARDED_PORT),
        ));
    }
    for (frontend, backend) in pairs {
        map_to_itself(maps, "", frontend, backend)?;
    }
    if features.ipv6 {
        let external6: IpAddr = EXTERNAL_IP6.parse()?;
        let echo = (
            at(external6, ECHO_FRONTEND_PORT),
            at(POD6.into(), ECHO_PORT),
        );
        map_to_itself(maps, "6", echo.0, echo.1)?;
    }
    if features.guard {
        limit_syns(maps, at(POD.into(), GUARDED_PORT))?;
    }
    // The cluster interface (the agent finds none in the bed), and the
    // cluster's key, for the cases of SYNs from other nodes.
    let ifaces = maps.join("IFACES");
    if maps.join("CLAIMS").exists() {
        let index = bed.node_ifindex(CLUSTER_IFACE)?;
        map_update(&ifaces, &index.to_ne_bytes(), &IFACE_CLUSTER.to_ne_bytes())?;
        let key: Vec<u8> = cases::CROSS_NODE_KEY
            .iter()
            .flat_map(|w| w.to_ne_bytes())
            .collect();
        map_update(&maps.join("CROSS_NODE_KEY"), &0u32.to_ne_bytes(), &key)?;
    }
    // The data path believes a backend's segments only from the pod
    // interface that owns its address: the unrouted backend's replies
    // come in on the pod's, as the pod's own do.
    let owners = maps.join("OWNERS");
    if owners.exists() {
        let pod_index = bed.node_ifindex(POD_IFACE)?;
        let mut owner = pod_index.to_ne_bytes().to_vec();
        owner.extend_from_slice(&0u32.to_ne_bytes());
        map_update(&owners, &UNROUTED.octets(), &owner)?;
    }
    Ok(())
}

/// `FRONTENDS[backend] = FRONTENDS[frontend]`, and `REVERSE[backend]`
/// pointed at the backend itself, so that replies too are rewritten to
/// what they were; `family` is "" or "6", the IPv6 maps' suffix. Every
/// layout keys these maps by the endpoint and starts their values with
/// the endpoint to rewrite to.
fn map_to_itself(
    maps: &Path,
    family: &str,
    frontend: SocketAddr,
    backend: SocketAddr,
) -> anyhow::Result<()> {
    let frontends = maps.join(format!("FRONTENDS{family}"));
    let reverse = maps.join(format!("REVERSE{family}"));
    let backend_key = endpoint_bytes(backend);
    let frontend_key = endpoint_bytes(frontend);
    let n = backend_key.len();
    let forward = map_lookup(&frontends, &frontend_key)?;
    ensure!(
        forward.get(..n) == Some(&backend_key[..]),
        "FRONTENDS{family}[{frontend}] = {forward:02x?} does not start with backend {backend}"
    );
    map_update(&frontends, &backend_key, &forward)?;
    let mut back = map_lookup(&reverse, &backend_key)?;
    ensure!(
        back.get(..n) == Some(&frontend_key[..]),
        "REVERSE{family}[{backend}] = {back:02x?} does not start with frontend {frontend}"
    );
    back[..n].copy_from_slice(&backend_key);
    map_update(&reverse, &backend_key, &back)
}

/// Adds the SYN limit to the self-mapped frontend `backend` (whose
/// allowlist the agent wrote): its flag, and a rate no bench run reaches
/// (a million a second, a second's burst), so every SYN is admitted and
/// pays for the lookup and the write of its source's bucket. The agent's
/// `--syn-rate` would limit every mapping, the plain SYN case's too.
fn limit_syns(maps: &Path, backend: SocketAddr) -> anyhow::Result<()> {
    let frontends = maps.join("FRONTENDS");
    let key = endpoint_bytes(backend);
    let mut target = map_lookup(&frontends, &key)?;
    let at = |offset: usize| offset..offset + 4;
    let word = |bytes: &[u8], offset: usize| -> anyhow::Result<u32> {
        let b = bytes.get(at(offset)).context("FRONTENDS value too short")?;
        Ok(u32::from_ne_bytes(b.try_into()?))
    };
    let slot = word(&target, std::mem::offset_of!(NatTarget, slot))?;
    let flags_at = std::mem::offset_of!(NatTarget, flags);
    let flags = word(&target, flags_at)?;
    ensure!(
        flags & FLAG_ALLOWLIST != 0,
        "FRONTENDS[{backend}] has flags {flags:#x}: the agent wrote no allowlist"
    );
    let rate = Guard::new(1_000_000, 1_000_000);
    let mut guard = rate.interval_ns.to_ne_bytes().to_vec();
    guard.extend_from_slice(&rate.burst_ns.to_ne_bytes());
    map_update(&maps.join("GUARDS"), &slot.to_ne_bytes(), &guard)?;
    target[at(flags_at)].copy_from_slice(&(flags | FLAG_SYN_LIMIT).to_ne_bytes());
    map_update(&frontends, &key, &target)
}
