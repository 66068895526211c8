//! The arm64 half checked before it is shipped: a static AArch64
//! executable that starts (`--version` under qemu-user, as the amd64 one
//! says it), carrying the very eBPF object the amd64 binary carries.
//!
//! The kernel programs are one object for every architecture (BPF is its
//! own target), but an object built beside the arm64 userspace is not
//! byte-equal: aya-build passes the host's architecture as
//! `bpf_target_arch`, and aya-ebpf-bindings then names the kernel's types
//! `aarch64::bindings::__sk_buff` instead of `x86_64::...` in the BTF and
//! the debug info (the programs' instructions are the same). So the
//! release builds the object once, with amd64, and the arm64 build embeds
//! that file (`SSH_FWD_EBPF_OBJECT`); this check holds both binaries to
//! it, so arm64 nodes run the programs that were tested.

use std::path::PathBuf;

use anyhow::{Context as _, bail, ensure};
use ssh_fwd_tests::image::{EM_AARCH64, EM_X86_64, elf_machine, is_static};

/// One architecture's binary as built.
pub struct Built {
    pub arch: &'static str,
    pub target: &'static str,
    pub binary: PathBuf,
}

/// What the check found.
pub struct Checked {
    pub ebpf_len: usize,
    /// What both binaries say to `--version` (the arm64 one under qemu).
    pub version: String,
}

/// Checks each binary's architecture and linkage, that the arm64 one
/// starts, and that it embeds the amd64 one's eBPF object byte for byte
/// (`object`, from [`ebpf_object`]).
pub fn binaries(amd64: &Built, arm64: &Built, object: &[u8]) -> anyhow::Result<Checked> {
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
        ensure!(
            contains(&bytes, object),
            "{} does not embed the amd64 build's eBPF object ({} bytes): both binaries must \
             carry the same programs",
            built.binary.display(),
            object.len()
        );
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
    Ok(Checked {
        ebpf_len: object.len(),
        version: versions[0].clone(),
    })
}

/// What `BINARY --version` prints (`cmd` runs the binary).
fn run_version(cmd: &mut std::process::Command) -> anyhow::Result<String> {
    let out = ssh_fwd_tests::cmd::run(cmd.arg("--version"))?;
    Ok(out.trim().to_owned())
}

/// The eBPF object ssh-fwd's build.rs left for `built` (in
/// `<target>/release/build/ssh-fwd-*/out/ssh-fwd`) that its binary
/// embeds byte for byte: its path and bytes.
pub fn ebpf_object(built: &Built) -> anyhow::Result<(PathBuf, Vec<u8>)> {
    let binary = std::fs::read(&built.binary)
        .with_context(|| format!("reading {}", built.binary.display()))?;
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
        if contains(&binary, &object) {
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
