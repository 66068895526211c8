//! The arm64 half checked before it is shipped: a static AArch64
//! executable that starts (`--version` under qemu-user, as the amd64 one
//! says it), carrying the very eBPF object the amd64 binary carries.
//! The kernel programs are one object for every architecture (BPF is its
//! own target); a difference would mean the two builds did not run the
//! same eBPF build, and arm64 nodes would run programs nobody tested.

use std::path::PathBuf;

use anyhow::{Context as _, bail, ensure};
use ssh_fwd_tests::image::{EM_AARCH64, EM_X86_64, elf_machine, is_static};

/// One architecture's binary as built.
pub struct Built {
    pub arch: &'static str,
    pub target: &'static str,
    pub binary: PathBuf,
}

/// What the check found: the eBPF object both binaries embed.
pub struct Checked {
    pub ebpf_len: usize,
    /// What both binaries say to `--version` (the arm64 one under qemu).
    pub version: String,
}

/// Checks each binary's architecture and linkage, finds the eBPF object
/// embedded in each, and requires the two to be byte-equal.
pub fn binaries(amd64: &Built, arm64: &Built) -> anyhow::Result<Checked> {
    let mut objects = Vec::new();
    for (built, machine) in [(amd64, EM_X86_64), (arm64, EM_AARCH64)] {
        let bytes = std::fs::read(&built.binary)
            .with_context(|| format!("reading {}", built.binary.display()))?;
        let found = elf_machine(&bytes);
        ensure!(
            found == Some(machine),
            "{} is not an {} executable: ELF machine {found:?}, expected {machine}",
            built.binary.display(),
            built.arch
        );
        ensure!(
            is_static(&bytes) == Some(true),
            "{} is not statically linked: the image has no libc",
            built.binary.display()
        );
        objects.push(embedded_object(built, &bytes)?);
    }
    let versions = [
        run_version(&mut std::process::Command::new(&amd64.binary))?,
        run_version(std::process::Command::new(super::cross::QEMU).arg(&arm64.binary))?,
    ];
    ensure!(
        versions[0] == versions[1],
        "the arm64 binary says {:?} under qemu, the amd64 one {:?}",
        versions[1],
        versions[0]
    );
    let (amd64_object, arm64_object) = (&objects[0], &objects[1]);
    if amd64_object.1 != arm64_object.1 {
        let first = (amd64_object.1.iter().zip(&arm64_object.1)).position(|(a, b)| a != b);
        bail!(
            "the eBPF object in the arm64 binary ({}, {} bytes) differs from the amd64 one \
             ({}, {} bytes), first at byte {first:?}; both must come from one eBPF build",
            arm64_object.0.display(),
            arm64_object.1.len(),
            amd64_object.0.display(),
            amd64_object.1.len()
        );
    }
    Ok(Checked {
        ebpf_len: amd64_object.1.len(),
        version: versions[0].clone(),
    })
}

/// What `BINARY --version` prints (`cmd` runs the binary).
fn run_version(cmd: &mut std::process::Command) -> anyhow::Result<String> {
    let out = ssh_fwd_tests::cmd::run(cmd.arg("--version"))?;
    Ok(out.trim().to_owned())
}

/// The object ssh-fwd's build.rs left for `built` (in
/// `<target>/release/build/ssh-fwd-*/out/ssh-fwd`) that `binary`
/// embeds byte for byte.
fn embedded_object(built: &Built, binary: &[u8]) -> anyhow::Result<(PathBuf, Vec<u8>)> {
    let build = crate::target_dir()
        .join(built.target)
        .join("release")
        .join("build");
    let entries =
        std::fs::read_dir(&build).with_context(|| format!("listing {}", build.display()))?;
    let mut candidates = 0;
    for entry in entries.flatten() {
        let name = entry.file_name();
        if !name.to_string_lossy().starts_with("ssh-fwd-") {
            continue;
        }
        let path = entry.path().join("out").join("ssh-fwd");
        let Ok(object) = std::fs::read(&path) else {
            continue;
        };
        candidates += 1;
        if contains(binary, &object) {
            return Ok((path, object));
        }
    }
    bail!(
        "none of the {candidates} eBPF objects under {} is embedded in {}",
        build.display(),
        built.binary.display()
    )
}

/// Whether `needle` occurs in `haystack`.
fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    let Some((&first, _)) = needle.split_first() else {
        return true;
    };
    let mut from = 0;
    while let Some(at) = haystack[from..].iter().position(|&b| b == first) {
        let start = from + at;
        if haystack[start..].starts_with(needle) {
            return true;
        }
        from = start + 1;
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_object_is_found_only_where_all_its_bytes_are() {
        let binary = b"\x7fELF....\x7fELFobject-bytes....";
        assert!(contains(binary, b"\x7fELFobject-bytes"));
        assert!(!contains(binary, b"\x7fELFobject-bytez"));
        assert!(!contains(b"short", b"\x7fELFobject-bytes"));
    }
}
