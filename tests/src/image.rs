//! The container image of `deploy/Dockerfile`, built from local files only:
//! a static `ssh-fwd` and nothing else, so no registry is ever asked.
//! `cargo xtask image` and the container tests both build it here.

use std::{
    path::{Path, PathBuf},
    sync::atomic::{AtomicU32, Ordering},
    time::Duration,
};

use anyhow::{Context as _, bail};

use crate::cmd;

/// The target of the static binary the image carries.
pub const STATIC_TARGET: &str = "x86_64-unknown-linux-musl";

/// The cargo profile `cargo xtask test` builds the image's binary with: the
/// dev profile, whose build scripts and proc-macros the test build has
/// already compiled (`.cargo/config.toml` drops the debug info for musl).
pub const TEST_PROFILE: &str = "dev";

/// The image `cargo xtask image` builds unless told otherwise, and the one
/// `deploy/overlays/kind` runs (`ssh-fwd/tests/deploy` checks they agree).
pub const DEV_TAG: &str = "ssh-fwd:dev";

/// How long a `podman build` or `podman save` may take.
const PODMAN_LIMIT: Duration = Duration::from_secs(120);

static NEXT: AtomicU32 = AtomicU32::new(0);

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// `deploy/Dockerfile`.
pub fn dockerfile() -> PathBuf {
    workspace().join("deploy").join("Dockerfile")
}

/// Where cargo leaves the static binary built with `profile`.
pub fn static_binary_path(profile: &str) -> PathBuf {
    let target =
        std::env::var_os("CARGO_TARGET_DIR").map_or(workspace().join("target"), PathBuf::from);
    let dir = if profile == "dev" { "debug" } else { profile };
    target.join(STATIC_TARGET).join(dir).join("ssh-fwd")
}

/// The static binary for the image under test: `SSH_FWD_STATIC_BIN` (set
/// by `cargo xtask test`), or one already built with the test profile or
/// `--release`.
pub fn static_binary() -> anyhow::Result<PathBuf> {
    if let Some(bin) = std::env::var_os("SSH_FWD_STATIC_BIN") {
        return Ok(bin.into());
    }
    [TEST_PROFILE, "release"]
        .map(static_binary_path)
        .into_iter()
        .find(|bin| bin.is_file())
        .with_context(|| {
            format!(
                "no static ssh-fwd binary for the image; build it with `cargo build -p ssh-fwd \
                 --target {STATIC_TARGET} --profile {TEST_PROFILE}`, or run `cargo xtask test`"
            )
        })
}

/// Why the container tools are missing here, if they are.
pub fn missing_tools() -> Option<String> {
    ["podman", "runc"]
        .into_iter()
        .find(|tool| crate::privilege::which(tool).is_none())
        .map(|tool| format!("needs `{tool}` (cargo xtask setup installs it)"))
}

/// An image reference as Docker and containerd name it:
/// `ssh-fwd:dev` is `docker.io/library/ssh-fwd:dev`. Podman would call it
/// `localhost/ssh-fwd:dev` instead, and a kind or minikube node that loads
/// the saved archive would then not find the image the manifests name.
pub fn qualified(reference: &str) -> String {
    let (first, rest) = reference.split_once('/').unwrap_or(("", reference));
    let is_registry = first.contains('.') || first.contains(':') || first == "localhost";
    match (first, is_registry) {
        ("", _) => format!("docker.io/library/{rest}"),
        (_, true) => reference.to_owned(),
        (_, false) => format!("docker.io/{reference}"),
    }
}

/// The licence files deploy/Dockerfile copies from the build context
/// into the image, from the workspace root.
pub const LICENSES: [&str; 2] = ["LICENSE-APACHE", "LICENSE-MIT"];

/// Builds `deploy/Dockerfile` around `binary`, tagged `reference`, with
/// podman and nothing from a registry. The build context is a directory
/// holding only the binary and the licences.
pub fn build(binary: &Path, reference: &str) -> anyhow::Result<()> {
    build_for(binary, reference, None)
}

/// [`build`] for `platform` (`linux/arm64`; `None`: this machine's). The
/// Dockerfile runs nothing, so another architecture's image needs no
/// emulator.
pub fn build_for(binary: &Path, reference: &str, platform: Option<&str>) -> anyhow::Result<()> {
    check_static(binary)?;
    let context = tempfile::Builder::new()
        .prefix("ssh-fwd-image")
        .tempdir()
        .context("creating the image build context")?;
    std::fs::copy(binary, context.path().join("ssh-fwd"))
        .with_context(|| format!("copying {} into the build context", binary.display()))?;
    for license in LICENSES {
        let from = workspace().join(license);
        std::fs::copy(&from, context.path().join(license))
            .with_context(|| format!("copying {} into the build context", from.display()))?;
    }
    let mut podman = cmd::bounded(PODMAN_LIMIT, "podman");
    podman.args(["build", "--quiet", "--pull=never"]);
    if let Some(platform) = platform {
        // Podman 4.3's layer cache ignores the platform of a `FROM
        // scratch` build: without --no-cache the second architecture
        // would get the first one's image.
        podman.args(["--platform", platform, "--no-cache"]);
    }
    podman
        .arg("--file")
        .arg(dockerfile())
        .args(["--tag", reference])
        .arg(context.path());
    cmd::run(&mut podman).with_context(|| format!("building image {reference} with podman"))?;
    Ok(())
}

/// Writes `reference` to `archive` as a docker-archive, the format
/// `kind load image-archive` and `minikube image load` read.
pub fn save(reference: &str, archive: &Path) -> anyhow::Result<()> {
    if archive.exists() {
        std::fs::remove_file(archive)
            .with_context(|| format!("replacing {}", archive.display()))?;
    }
    cmd::run(
        cmd::bounded(PODMAN_LIMIT, "podman")
            .args(["save", "--quiet", "--format", "docker-archive", "--output"])
            .arg(archive)
            .arg(reference),
    )
    .with_context(|| format!("saving image {reference} to {}", archive.display()))?;
    Ok(())
}

/// A dynamically linked binary would start nowhere in an image without a
/// libc: refuse it with the fix instead of building an image that cannot
/// run.
fn check_static(binary: &Path) -> anyhow::Result<()> {
    let bytes = std::fs::read(binary).with_context(|| format!("reading {}", binary.display()))?;
    match has_interpreter(&bytes) {
        None => bail!(
            "{} is not a 64-bit little-endian ELF executable",
            binary.display()
        ),
        Some(true) => bail!(
            "{} is dynamically linked, and the image has no libc: build it with `--target \
             {STATIC_TARGET}`",
            binary.display()
        ),
        Some(false) => Ok(()),
    }
}

/// The ELF machine of x86-64 (amd64).
pub const EM_X86_64: u16 = 62;
/// The ELF machine of AArch64 (arm64).
pub const EM_AARCH64: u16 = 183;

/// The machine (`e_machine`) of a 64-bit little-endian ELF file; `None`
/// if the bytes are not one.
pub fn elf_machine(elf: &[u8]) -> Option<u16> {
    if elf.get(..6)? != b"\x7fELF\x02\x01" {
        return None;
    }
    Some(u16::from_le_bytes(elf.get(18..20)?.try_into().ok()?))
}

/// Whether a 64-bit little-endian ELF executable is static (names no
/// dynamic loader); `None` if the bytes are not one.
pub fn is_static(elf: &[u8]) -> Option<bool> {
    has_interpreter(elf).map(|dynamic| !dynamic)
}

/// Whether an ELF64 executable names a dynamic loader (a `PT_INTERP`
/// program header); a static or static-pie binary has none. `None` if the
/// bytes are not such an executable.
fn has_interpreter(elf: &[u8]) -> Option<bool> {
    const PT_INTERP: u32 = 3;
    let header = elf.get(..64)?;
    // Magic, 64-bit class, little-endian.
    if header[..6] != *b"\x7fELF\x02\x01" {
        return None;
    }
    let u16_at = |at: usize| Some(u16::from_le_bytes(elf.get(at..at + 2)?.try_into().ok()?));
    let phoff = usize::try_from(u64::from_le_bytes(header[32..40].try_into().ok()?)).ok()?;
    let (entry_size, count) = (usize::from(u16_at(54)?), usize::from(u16_at(56)?));
    (0..count).try_fold(false, |found, i| {
        let at = phoff.checked_add(i.checked_mul(entry_size)?)?;
        let kind = u32::from_le_bytes(elf.get(at..at + 4)?.try_into().ok()?);
        Some(found || kind == PT_INTERP)
    })
}

/// An image built for one test, under a tag of its own, removed on drop.
pub struct Image {
    reference: String,
}

impl Image {
    /// Builds the image around `binary` as `localhost/ssh-fwd-test:<pid>-<n>`.
    pub fn build_for_test(binary: &Path) -> anyhow::Result<Self> {
        let reference = format!(
            "localhost/ssh-fwd-test:{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        // The guard first, so that a build that fails half-way is removed too.
        let image = Self { reference };
        build(binary, &image.reference)?;
        Ok(image)
    }

    pub fn reference(&self) -> &str {
        &self.reference
    }
}

impl Drop for Image {
    fn drop(&mut self) {
        let _ = cmd::bounded(Duration::from_secs(30), "podman")
            .args(["rmi", "--force", &self.reference])
            .output();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_references_are_named_as_docker_and_containerd_name_them() {
        assert_eq!(qualified("ssh-fwd:dev"), "docker.io/library/ssh-fwd:dev");
        assert_eq!(qualified("me/ssh-fwd:1"), "docker.io/me/ssh-fwd:1");
        assert_eq!(qualified("localhost/ssh-fwd:1"), "localhost/ssh-fwd:1");
        assert_eq!(
            qualified("registry.example.org:5000/ssh-fwd:1"),
            "registry.example.org:5000/ssh-fwd:1"
        );
        assert_eq!(
            qualified("ghcr.io/ssh-fwd/ssh-fwd:0.1.0"),
            "ghcr.io/ssh-fwd/ssh-fwd:0.1.0"
        );
    }

    #[test]
    fn a_dynamically_linked_binary_is_refused_with_the_fix() {
        // Any dynamically linked executable of the host does: the test runner.
        let this = std::env::current_exe().unwrap();
        let error = check_static(&this).unwrap_err().to_string();
        assert!(error.contains("dynamically linked"), "{error}");
        assert!(error.contains(STATIC_TARGET), "{error}");
    }

    #[test]
    fn program_headers_tell_static_from_dynamic_and_garbage_is_refused() {
        let mut elf = vec![0u8; 64];
        elf[..6].copy_from_slice(b"\x7fELF\x02\x01");
        // No program headers at all: nothing names a loader.
        assert_eq!(has_interpreter(&elf), Some(false));
        assert_eq!(is_static(&elf), Some(true));
        elf[18..20].copy_from_slice(&EM_AARCH64.to_le_bytes());
        assert_eq!(elf_machine(&elf), Some(EM_AARCH64));
        assert_eq!(elf_machine(b"#!/bin/sh\n"), None);
        // A PT_INTERP entry at offset 64.
        elf[32..40].copy_from_slice(&64u64.to_le_bytes());
        elf[54..56].copy_from_slice(&56u16.to_le_bytes());
        elf[56..58].copy_from_slice(&1u16.to_le_bytes());
        elf.extend_from_slice(&[3, 0, 0, 0]);
        elf.resize(64 + 56, 0);
        assert_eq!(has_interpreter(&elf), Some(true));
        // Headers pointing past the end, or not an ELF.
        elf[56..58].copy_from_slice(&9u16.to_le_bytes());
        assert_eq!(has_interpreter(&elf), None);
        assert_eq!(has_interpreter(b"#!/bin/sh\n"), None);
    }
}
