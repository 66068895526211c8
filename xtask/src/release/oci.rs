//! The release's image: deploy/Dockerfile around each architecture's
//! binary, joined in one OCI image index and written as one OCI archive.
//!
//! One archive rather than one per architecture: the manifests then name
//! one digest, the index's, and each node's runtime picks its own
//! architecture from it, so a mixed amd64 and arm64 cluster uses the same
//! file. `skopeo copy --all --preserve-digests` (or `crane push --index`)
//! puts the index into a registry under that same digest.

use std::{path::Path, process::Command, time::Duration};

use anyhow::{Context as _, bail, ensure};
use serde_json::Value;
use sha2::{Digest as _, Sha256};
use ssh_fwd_tests::{
    cmd,
    image::{self, build_for},
    manifest::{Digest, IMAGE_NAME},
};

use super::check::Built;

const PODMAN_LIMIT: Duration = Duration::from_secs(300);

/// Builds each architecture's image and writes the index of both to
/// `archive`; the index's digest.
pub fn build_and_save(version: &str, built: &[&Built], archive: &Path) -> anyhow::Result<Digest> {
    if let Some(why) = image::missing_tools() {
        bail!("cargo xtask release {why}");
    }
    let list = format!("{IMAGE_NAME}:{version}");
    // A list or image left by an earlier run would be added to, not
    // replaced.
    let _ = Command::new("podman")
        .args(["manifest", "rm", &list])
        .output();
    cmd::run(Command::new("podman").args(["manifest", "create", &list]))
        .with_context(|| format!("creating the image index {list}"))?;
    for b in built {
        let reference = format!("{list}-{}", b.arch);
        let platform = format!("linux/{}", b.arch);
        println!("==> podman build --platform {platform} -t {reference}");
        build_for(&b.binary, &reference, Some(&platform))?;
        cmd::run(Command::new("podman").args([
            "manifest",
            "add",
            &list,
            &format!("containers-storage:{reference}"),
        ]))
        .with_context(|| format!("adding {reference} to {list}"))?;
    }
    println!(
        "==> podman manifest push --all {list} oci-archive:{}",
        archive.display()
    );
    cmd::run(
        cmd::bounded(PODMAN_LIMIT, "podman")
            .args(["manifest", "push", "--quiet", "--all", &list])
            .arg(format!("oci-archive:{}:{list}", archive.display())),
    )
    .with_context(|| format!("writing {}", archive.display()))?;
    index_digest(archive, built)
}

/// The digest of the image index in `archive`, checked: its blob hashes
/// to it and lists one image for each of `built`'s architectures.
fn index_digest(archive: &Path, built: &[&Built]) -> anyhow::Result<Digest> {
    let layout: Value = serde_json::from_slice(&member(archive, "index.json")?)
        .context("parsing the archive's index.json")?;
    let entries = layout["manifests"].as_array().cloned().unwrap_or_default();
    ensure!(
        entries.len() == 1 && entries[0]["mediaType"] == "application/vnd.oci.image.index.v1+json",
        "{} should hold one image index, holds {entries:?}",
        archive.display()
    );
    let digest = Digest::parse(entries[0]["digest"].as_str().unwrap_or(""))?;
    let hex = &digest.as_str()["sha256:".len()..];
    let blob = member(archive, &format!("blobs/sha256/{hex}"))?;
    ensure!(
        format!("{:x}", Sha256::digest(&blob)) == hex,
        "the image index in {} does not hash to its digest {}",
        archive.display(),
        digest.as_str()
    );
    let index: Value = serde_json::from_slice(&blob).context("parsing the image index")?;
    let mut arches: Vec<&str> = (index["manifests"].as_array().into_iter().flatten())
        .filter_map(|m| m["platform"]["architecture"].as_str())
        .collect();
    arches.sort_unstable();
    let mut wanted: Vec<&str> = built.iter().map(|b| b.arch).collect();
    wanted.sort_unstable();
    ensure!(
        arches == wanted,
        "the image index lists {arches:?}, expected {wanted:?}"
    );
    Ok(digest)
}

/// One file of a tar archive.
fn member(archive: &Path, name: &str) -> anyhow::Result<Vec<u8>> {
    let out = Command::new("tar")
        .arg("-xOf")
        .arg(archive)
        .arg(name)
        .output()
        .context("running tar")?;
    ensure!(
        out.status.success(),
        "{} has no {name}: {}",
        archive.display(),
        String::from_utf8_lossy(&out.stderr).trim()
    );
    Ok(out.stdout)
}
