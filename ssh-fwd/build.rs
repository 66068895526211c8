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
    )
}
