use anyhow::Context as _;
use aya_build::{Package, Toolchain};

/// Builds the eBPF programs with nightly + bpf-linker and leaves the object in
/// OUT_DIR, where `include_bytes_aligned!` embeds it into the binary.
/// `cargo xtask setup` installs what this needs.
fn main() -> anyhow::Result<()> {
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
