//! `cargo xtask release VERSION`: everything a site installs, built on
//! this machine from one command (docs/release.md): the image for amd64
//! and arm64 as one OCI archive (`oci.rs`), the arm64 half checked
//! (`check.rs`, after its cross build in `cross.rs`), one install manifest
//! per combination of deploy/'s components pinned to the image's digest
//! (`ssh_fwd_tests::manifest`, which the tests share), CHANGELOG.md, the
//! licences and SHA256SUMS. Written to a staging directory first, so a
//! failed run leaves no release directory that looks complete.

mod check;
mod cross;
mod oci;
mod version;

use std::{
    fmt::Write as _,
    path::{Path, PathBuf},
    time::Instant,
};

use anyhow::{Context as _, bail, ensure};
use sha2::{Digest as _, Sha256};
use ssh_fwd_tests::manifest::{Variant, pinned_reference};

use crate::setup::Log;
use check::Built;

#[derive(clap::Args, Debug)]
pub struct Options {
    /// The version to release: semver, and the workspace's
    /// (`[workspace.package] version` in Cargo.toml).
    pub version: String,
    /// The directory to write the release to [default:
    /// target/release/VERSION].
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Replace the release directory if it exists.
    #[arg(long)]
    pub force: bool,
}

/// The files copied from the workspace root into the release.
const DOCUMENTS: [&str; 3] = ["CHANGELOG.md", "LICENSE-APACHE", "LICENSE-MIT"];

pub fn run(options: &Options) -> anyhow::Result<()> {
    let started = Instant::now();
    let version = options.version.as_str();
    version::check(version, &version::workspace_version()?)?;
    changelog_has(version)?;
    let out = options
        .out
        .clone()
        .unwrap_or_else(|| crate::target_dir().join("release").join(version));
    // Absolute and without `..`, for the messages and the archive's path.
    let out = std::path::absolute(&out)
        .with_context(|| format!("resolving {}", out.display()))?
        .components()
        .fold(PathBuf::new(), |mut path, part| {
            match part {
                std::path::Component::ParentDir => {
                    path.pop();
                }
                part => path.push(part),
            }
            path
        });
    if out.exists() && !options.force {
        bail!(
            "{} exists; pass --force to replace it, or --out DIR",
            out.display()
        );
    }
    let mut staging = out.clone().into_os_string();
    staging.push(".partial");
    let staging = PathBuf::from(staging);
    replace_dir(&staging)?;
    let log = Log::new()?;
    preflight(&log)?;

    let amd64 = Built {
        arch: "amd64",
        target: ssh_fwd_tests::image::STATIC_TARGET,
        binary: crate::build_static("release")?,
    };
    let (ebpf, object) = check::ebpf_object(&amd64)?;
    let arm64 = Built {
        arch: "arm64",
        target: cross::TARGET,
        binary: cross::build(&log, &ebpf)?,
    };
    println!(
        "==> checking the arm64 binary: AArch64, static, starts under qemu, the amd64 binary's \
         eBPF object"
    );
    let checked = check::binaries(&amd64, &arm64, &object)?;
    println!(
        "    both static, both say {:?}; the eBPF object ({} bytes) is byte-equal in both",
        checked.version, checked.ebpf_len
    );

    let archive = staging.join(format!("ssh-fwd-{version}.oci.tar"));
    let digest = oci::build_and_save(version, &[&amd64, &arm64], &archive)?;
    let reference = pinned_reference(version, &digest);
    println!("==> rendering the install manifests, pinned to {reference}");
    let scratch = crate::target_dir().join("release-render").join(version);
    for variant in Variant::all() {
        let name = variant.file_name();
        let text = variant.render(version, &digest, &scratch.join(&name))?;
        write(&staging.join(&name), text.as_bytes())?;
    }
    let _ = std::fs::remove_dir_all(&scratch);
    for document in DOCUMENTS {
        let from = crate::workspace_root().join(document);
        std::fs::copy(&from, staging.join(document))
            .with_context(|| format!("copying {}", from.display()))?;
    }
    write(&staging.join("SHA256SUMS"), sums(&staging)?.as_bytes())?;

    if options.force && out.exists() {
        std::fs::remove_dir_all(&out).with_context(|| format!("removing {}", out.display()))?;
    }
    std::fs::rename(&staging, &out)
        .with_context(|| format!("moving {} to {}", staging.display(), out.display()))?;
    println!("==> release {version} in {}:", out.display());
    for (name, len) in listing(&out)? {
        println!("    {len:>12}  {name}");
    }
    println!(
        "    image {reference}\n    done in {:.0} s",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// What the release needs besides `cargo xtask setup`'s: the cross
/// toolchain (installed as root), and kubectl or kustomize.
fn preflight(log: &Log) -> anyhow::Result<()> {
    cross::preflight(log)?;
    let privilege = ssh_fwd_tests::privilege::which;
    ensure!(
        privilege("kubectl").is_some() || privilege("kustomize").is_some(),
        "rendering the install manifests needs kubectl (1.27 or newer) or kustomize 5 on the \
         PATH"
    );
    Ok(())
}

/// CHANGELOG.md must have the version's entry, `## [VERSION]`.
fn changelog_has(version: &str) -> anyhow::Result<()> {
    let path = crate::workspace_root().join("CHANGELOG.md");
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    ensure!(
        text.lines()
            .any(|l| l.starts_with(&format!("## [{version}]"))),
        "{} has no entry `## [{version}]`: add one (with its Upgrading notes) before releasing",
        path.display()
    );
    Ok(())
}

fn replace_dir(dir: &Path) -> anyhow::Result<()> {
    if dir.exists() {
        std::fs::remove_dir_all(dir).with_context(|| format!("removing {}", dir.display()))?;
    }
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))
}

fn write(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    std::fs::write(path, bytes).with_context(|| format!("writing {}", path.display()))
}

/// The files of `dir`, by name, with their sizes.
fn listing(dir: &Path) -> anyhow::Result<Vec<(String, u64)>> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).with_context(|| format!("listing {}", dir.display()))? {
        let entry = entry?;
        let len = entry.metadata()?.len();
        files.push((entry.file_name().to_string_lossy().into_owned(), len));
    }
    files.sort();
    Ok(files)
}

/// `sha256sum`'s format over every file of `dir`, by name, so that
/// `sha256sum -c SHA256SUMS` checks them.
fn sums(dir: &Path) -> anyhow::Result<String> {
    let mut text = String::new();
    for (name, _) in listing(dir)? {
        let bytes = std::fs::read(dir.join(&name)).with_context(|| format!("reading {name}"))?;
        let _ = writeln!(text, "{:x}  {name}", Sha256::digest(&bytes));
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sums_are_in_sha256sums_format_over_every_file() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("b.yaml"), "b").unwrap();
        std::fs::write(dir.path().join("a.tar"), "").unwrap();
        assert_eq!(
            sums(dir.path()).unwrap(),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855  a.tar\n\
             3e23e8160039594a33894f6564e1b1348bbd7a0088d42c4acb73eeaed59c009d  b.yaml\n"
        );
    }

    #[test]
    fn the_changelog_has_the_workspaces_version() {
        changelog_has(&version::workspace_version().unwrap()).unwrap();
        assert!(changelog_has("0.0.0-not-released").is_err());
    }
}
