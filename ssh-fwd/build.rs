use anyhow::Context as _;
use aya_build::{Package, Toolchain};

/// Builds the eBPF programs with nightly + bpf-linker and leaves the object in
/// OUT_DIR, where `include_bytes_aligned!` embeds it into the binary.
/// `cargo xtask setup` installs what this needs.
fn main() -> anyhow::Result<()> {
    // An object built already, embedded as it is: `cargo xtask release`
    // builds the arm64 binary around the amd64 build's object, so that both
    // carry the same bytes (built here, the type names in its BTF would
    // name the host's architecture; docs/release.md).
    println!("cargo:rerun-if-env-changed=SSH_FWD_EBPF_OBJECT");
    if let Some(object) = std::env::var_os("SSH_FWD_EBPF_OBJECT") {
        let object = std::path::PathBuf::from(object);
        println!("cargo:rerun-if-changed={}", object.display());
        let out = std::path::PathBuf::from(std::env::var_os("OUT_DIR").context("OUT_DIR unset")?);
        std::fs::copy(&object, out.join("ssh-fwd")).with_context(|| {
            format!(
                "copying the eBPF object {} (SSH_FWD_EBPF_OBJECT)",
                object.display()
            )
        })?;
        return Ok(());
    }
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../ssh-fwd-ebpf");
    // A pinned nightly (e.g. in the image build) instead of plain `nightly`.
    println!("cargo:rerun-if-env-changed=SSH_FWD_EBPF_TOOLCHAIN");
    let pinned = std::env::var("SSH_FWD_EBPF_TOOLCHAIN").ok();
    let toolchain = pinned
        .as_deref()
        .map_or(Toolchain::default(), Toolchain::Custom);
    // The programs at opt-level 3 whatever this build's profile says (the
    // host code of a release is optimised for size): aya-build builds them
    // with `--release`, which would take this workspace's release profile
    // and its dependencies (aya-ebpf, core) at "s", whose code the verifier
    // refuses, and the object must not change with the host's choice.
    // SAFETY: a build script is one thread; nothing reads the environment
    // while it is changed.
    unsafe { std::env::set_var("CARGO_PROFILE_RELEASE_OPT_LEVEL", "3") };
    aya_build::build_ebpf(
        [Package {
            name: "ssh-fwd-ebpf",
            root_dir: root,
            ..Default::default()
        }],
        toolchain,
    )
    .context(
        "building the eBPF programs failed; run `cargo xtask setup` to install the nightly \
         rust-src and bpf-linker they need",
    )?;
    let out = std::path::PathBuf::from(std::env::var_os("OUT_DIR").context("OUT_DIR unset")?);
    strip_dwarf(&out.join("ssh-fwd"))
}

/// Removes the DWARF sections (`.debug_*`, and the relocations of them)
/// from the object, in place. bpf-linker needs DWARF to write the BTF,
/// and the BTF is what the kernel and aya read (`.BTF`, and `.BTF.ext`
/// with its function and line records, which the verifier's messages
/// quote); the DWARF itself is read by nobody at load. It was three
/// quarters of the object's 3.9 MB, all of it mapped and resident in every
/// agent, since the binary embeds the object and aya reads it whole.
fn strip_dwarf(path: &std::path::Path) -> anyhow::Result<()> {
    let data = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let mut builder = object::build::elf::Builder::read(&*data)
        .with_context(|| format!("parsing the eBPF object {}", path.display()))?;
    let is_dwarf = |name: &[u8]| {
        [&b".debug_"[..], b".rel.debug_", b".rela.debug_"]
            .iter()
            .any(|prefix| name.starts_with(prefix))
    };
    let dwarf: Vec<_> = (builder.sections.iter())
        .filter(|s| is_dwarf(s.name.as_slice()))
        .map(|s| s.id())
        .collect();
    for section in builder.sections.iter_mut() {
        let of_dwarf = section
            .sh_info_section
            .is_some_and(|id| dwarf.contains(&id));
        if dwarf.contains(&section.id()) || of_dwarf {
            section.delete = true;
        }
    }
    builder.delete_orphans();
    // LLVM names the sections from `.strtab`, the symbols' string table;
    // the writer wants a section-name table of its own.
    let has_shstrtab = (builder.sections.iter())
        .any(|s| matches!(s.data, object::build::elf::SectionData::SectionString));
    if !has_shstrtab {
        let names = builder.sections.add();
        names.name = b".shstrtab"[..].into();
        names.sh_type = object::elf::SHT_STRTAB;
        names.sh_addralign = 1;
        names.data = object::build::elf::SectionData::SectionString;
    }
    let mut stripped = Vec::new();
    builder
        .write(&mut stripped)
        .with_context(|| format!("writing the eBPF object {} without DWARF", path.display()))?;
    std::fs::write(path, stripped).with_context(|| format!("writing {}", path.display()))
}
