//! Installs what is missing, one line per step. What the installers print
//! goes to a log file, shown only if a step fails.

use std::{
    io::Write as _,
    path::{Path, PathBuf},
    process::{Command, Stdio},
};

use anyhow::{Context as _, bail};

/// Debian packages the tests and the demo use, with the file each provides.
const PACKAGES: [(&str, &str); 19] = [
    ("iproute2", "/usr/sbin/ip"),
    ("bpftool", "/usr/sbin/bpftool"),
    ("openssh-server", "/usr/sbin/sshd"),
    ("openssh-client", "/usr/bin/ssh"),
    ("ethtool", "/usr/sbin/ethtool"),
    ("tcpdump", "/usr/bin/tcpdump"),
    ("util-linux", "/usr/bin/nsenter"),
    ("procps", "/usr/sbin/sysctl"),
    // `--announce`: the client's ARP requests, and BGP speakers.
    ("arping", "/usr/sbin/arping"),
    ("bird2", "/usr/sbin/bird"),
    // The container image: a static (musl) binary, which needs musl's C
    // compiler for ring's C code; podman and runc build and run the image.
    ("musl-tools", "/usr/bin/x86_64-linux-musl-gcc"),
    ("podman", "/usr/bin/podman"),
    ("runc", "/usr/sbin/runc"),
    // `cargo xtask bench datapath`: the compared paths, the load, the chart.
    ("iperf3", "/usr/bin/iperf3"),
    ("iptables", "/usr/sbin/iptables-restore"),
    ("nftables", "/usr/sbin/nft"),
    ("ipvsadm", "/usr/sbin/ipvsadm-restore"),
    // The monitoring tests: a real Prometheus scraping the binaries, and
    // promtool for the alert rules' unit tests.
    ("prometheus", "/usr/bin/promtool"),
    (
        "fonts-dejavu-core",
        "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    ),
];

const BPF_LINKER_VERSION: &str = "0.13";

pub fn run() -> anyhow::Result<()> {
    let log = Log::new()?;
    apt_packages(&log)?;
    rust_src(&log)?;
    bpf_linker(&log)?;
    static_target(&log)?;
    Ok(())
}

/// Where the installers' output goes.
pub struct Log {
    path: PathBuf,
}

impl Log {
    pub fn new() -> anyhow::Result<Self> {
        let dir = crate::workspace_root().join("target");
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        Ok(Self {
            path: dir.join("xtask-setup.log"),
        })
    }

    /// Runs one step: prints `==> what ... `, then `done` or the failure
    /// with the step's output.
    pub fn step(&self, what: &str, cmd: &mut Command) -> anyhow::Result<()> {
        print!("==> {what} ... ");
        let _ = std::io::stdout().flush();
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.path)
            .with_context(|| format!("opening {}", self.path.display()))?;
        let status = cmd
            .stdin(Stdio::null())
            .stdout(file.try_clone()?)
            .stderr(file)
            .status()
            .with_context(|| format!("cannot run {cmd:?}"))?;
        if status.success() {
            println!("done");
            return Ok(());
        }
        println!("failed");
        let output = std::fs::read_to_string(&self.path).unwrap_or_default();
        let tail: Vec<&str> = output.lines().rev().take(60).collect();
        for line in tail.into_iter().rev() {
            eprintln!("    {line}");
        }
        bail!(
            "{what} failed ({status}); the whole output is in {}",
            self.path.display()
        )
    }
}

fn apt_packages(log: &Log) -> anyhow::Result<()> {
    let missing: Vec<&str> = PACKAGES
        .iter()
        .filter(|(_, path)| !Path::new(path).exists())
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
    log.step(
        "updating the Debian package lists",
        Command::new("apt-get").args(["update", "-q"]),
    )?;
    log.step(
        &format!("installing Debian packages: {}", missing.join(" ")),
        Command::new("apt-get")
            .args(["install", "-y", "-q", "--no-install-recommends"])
            .args(&missing)
            .env("DEBIAN_FRONTEND", "noninteractive"),
    )?;
    // The package enables and starts a Prometheus service on systemd
    // hosts; the tests run their own, in their namespaces, and the
    // machine should not gain a server listening on :9090.
    if missing.contains(&"prometheus") && Path::new("/run/systemd/system").exists() {
        log.step(
            "stopping and disabling the Debian prometheus service (the tests run their own)",
            Command::new("systemctl").args(["disable", "--now", "prometheus.service"]),
        )?;
    }
    Ok(())
}

pub fn nightly_sysroot() -> anyhow::Result<String> {
    let out = Command::new("rustc")
        .args(["+nightly", "--print", "sysroot"])
        .output()
        .context("running `rustc +nightly`; install rustup and a nightly toolchain")?;
    if !out.status.success() {
        bail!("no nightly toolchain: install one with `rustup toolchain install nightly`");
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

fn rust_src(log: &Log) -> anyhow::Result<()> {
    let sysroot = nightly_sysroot()?;
    if Path::new(&sysroot)
        .join("lib/rustlib/src/rust/library/core")
        .exists()
    {
        return Ok(());
    }
    log.step(
        "adding rust-src to the nightly toolchain (the eBPF build compiles core)",
        Command::new("rustup").args(["component", "add", "rust-src", "--toolchain", "nightly"]),
    )
}

/// The Rust standard library for the static binary in the container image.
fn static_target(log: &Log) -> anyhow::Result<()> {
    let target = ssh_fwd_tests::image::STATIC_TARGET;
    // The toolchain cargo builds the workspace with (cargo xtask sets
    // RUSTUP_TOOLCHAIN to it).
    let out = Command::new("rustc")
        .args(["--print", "sysroot"])
        .output()
        .context("running `rustc --print sysroot`")?;
    let sysroot = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    if Path::new(&sysroot)
        .join("lib/rustlib")
        .join(target)
        .exists()
    {
        return Ok(());
    }
    log.step(
        &format!("adding the {target} target (the container image's static binary)"),
        Command::new("rustup").args(["target", "add", target]),
    )
}

fn bpf_linker(log: &Log) -> anyhow::Result<()> {
    let installed = Command::new("bpf-linker")
        .arg("--version")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).contains(BPF_LINKER_VERSION))
        .unwrap_or(false);
    if installed {
        return Ok(());
    }
    let sysroot = nightly_sysroot()?;
    let lib = Path::new(&sysroot).join("lib");
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
    log.step(
        &format!(
            "building bpf-linker {BPF_LINKER_VERSION} against the nightly's LLVM {major} (about a minute)"
        ),
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
