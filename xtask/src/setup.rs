//! Installs what is missing, says what it does, and is quick otherwise.

use std::process::Command;

use anyhow::{Context as _, bail};

use crate::run as run_cmd;

/// Debian packages the tests and the demo use, with the command each provides.
const PACKAGES: [(&str, &str); 13] = [
    ("iproute2", "/usr/sbin/ip"),
    ("bpftool", "/usr/sbin/bpftool"),
    ("openssh-server", "/usr/sbin/sshd"),
    ("openssh-client", "/usr/bin/ssh"),
    ("ethtool", "/usr/sbin/ethtool"),
    ("tcpdump", "/usr/bin/tcpdump"),
    ("util-linux", "/usr/bin/nsenter"),
    ("procps", "/usr/sbin/sysctl"),
    // `cargo xtask bench datapath`: the compared paths, the load, the chart.
    ("iperf3", "/usr/bin/iperf3"),
    ("iptables", "/usr/sbin/iptables-restore"),
    ("nftables", "/usr/sbin/nft"),
    ("ipvsadm", "/usr/sbin/ipvsadm-restore"),
    (
        "fonts-dejavu-core",
        "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    ),
];

const BPF_LINKER_VERSION: &str = "0.13";

pub fn run() -> anyhow::Result<()> {
    apt_packages()?;
    rust_src()?;
    bpf_linker()?;
    Ok(())
}

fn apt_packages() -> anyhow::Result<()> {
    let missing: Vec<&str> = PACKAGES
        .iter()
        .filter(|(_, path)| !std::path::Path::new(path).exists())
        .map(|(pkg, _)| *pkg)
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        bail!(
            "missing Debian packages {}; install them with: sudo apt-get install -y {}",
            missing.join(" "),
            missing.join(" ")
        );
    }
    println!("==> installing Debian packages: {}", missing.join(" "));
    run_cmd(Command::new("apt-get").args(["update", "-qq"]))?;
    run_cmd(
        Command::new("apt-get")
            .args(["install", "-y", "-qq", "--no-install-recommends"])
            .args(&missing)
            .env("DEBIAN_FRONTEND", "noninteractive"),
    )
}

fn nightly_sysroot() -> anyhow::Result<String> {
    let out = Command::new("rustc")
        .args(["+nightly", "--print", "sysroot"])
        .output()
        .context("running `rustc +nightly`; install rustup and a nightly toolchain")?;
    if !out.status.success() {
        bail!("no nightly toolchain: install one with `rustup toolchain install nightly`");
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

fn rust_src() -> anyhow::Result<()> {
    let sysroot = nightly_sysroot()?;
    if std::path::Path::new(&sysroot)
        .join("lib/rustlib/src/rust/library/core")
        .exists()
    {
        return Ok(());
    }
    println!("==> adding rust-src to the nightly toolchain (the eBPF build compiles core)");
    run_cmd(Command::new("rustup").args(["component", "add", "rust-src", "--toolchain", "nightly"]))
}

fn bpf_linker() -> anyhow::Result<()> {
    let installed = Command::new("bpf-linker")
        .arg("--version")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).contains(BPF_LINKER_VERSION))
        .unwrap_or(false);
    if installed {
        return Ok(());
    }
    let sysroot = nightly_sysroot()?;
    let lib = std::path::Path::new(&sysroot).join("lib");
    // bpf-linker links against the nightly's own LLVM, which rustup ships as
    // libLLVM.so.<version>-rust-<release>; give it the name the linker expects.
    let llvm = std::fs::read_dir(&lib)
        .with_context(|| format!("listing {}", lib.display()))?
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .find(|n| n.starts_with("libLLVM.so.") && n.contains("-rust-"))
        .context("the nightly toolchain ships no libLLVM; install a nightly with `rustup toolchain install nightly`")?;
    let major = llvm
        .trim_start_matches("libLLVM.so.")
        .split('.')
        .next()
        .unwrap_or("")
        .to_owned();
    let link = lib.join("libLLVM.so");
    if !link.exists() {
        std::os::unix::fs::symlink(&llvm, &link)
            .with_context(|| format!("linking {}", link.display()))?;
    }
    println!(
        "==> building bpf-linker {BPF_LINKER_VERSION} against the nightly's LLVM {major} (about a minute)"
    );
    run_cmd(
        Command::new("cargo")
            .args([
                "+nightly",
                "install",
                "--locked",
                "bpf-linker",
                "--version",
                &format!("~{BPF_LINKER_VERSION}"),
            ])
            .args([
                "--no-default-features",
                "--features",
                &format!("llvm-{major}"),
            ])
            .env("LLVM_PREFIX", &sysroot),
    )
}
