//! The arm64 userspace, cross-built here for `aarch64-unknown-linux-musl`.
//!
//! rustup has no aarch64 standard library on this machine (and may not
//! download one), so the nightly builds std from its rust-src (`-Z
//! build-std`). Debian's cross toolchain compiles ring's C and links, with
//! musl for arm64 (`musl-dev:arm64`: the crt files, `libc.a` and the
//! `aarch64-linux-musl-gcc` wrapper). Rust's own aarch64 musl std brings
//! LLVM's libunwind as `libunwind.a`; build-std does not build it, so it is
//! compiled here from the same rust-src (`src/llvm-project/libunwind`),
//! with the flags Rust's bootstrap uses. The eBPF object is not built
//! again: ssh-fwd's build.rs embeds the amd64 build's (`check.rs` says
//! why).

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context as _, bail};

use crate::setup::Log;

pub const TARGET: &str = "aarch64-unknown-linux-musl";

/// Debian packages the cross build needs, with a file each provides.
const PACKAGES: [(&str, &str); 4] = [
    ("gcc-aarch64-linux-gnu", "/usr/bin/aarch64-linux-gnu-gcc"),
    ("g++-aarch64-linux-gnu", "/usr/bin/aarch64-linux-gnu-g++"),
    ("musl-dev:arm64", "/usr/lib/aarch64-linux-musl/libc.a"),
    // The arm64 binary started once (`--version`) before it is shipped.
    ("qemu-user-static", QEMU),
];

/// Runs one AArch64 program on this machine.
pub const QEMU: &str = "/usr/bin/qemu-aarch64-static";

/// The C compiler and linker: aarch64-linux-gnu-gcc with musl's specs.
const MUSL_GCC: &str = "aarch64-linux-musl-gcc";
const MUSL_SPECS: &str = "/usr/lib/aarch64-linux-musl/musl-gcc.specs";

/// Installs what the cross build needs and is missing (as root), or says
/// how.
pub fn preflight(log: &Log) -> anyhow::Result<()> {
    let missing: Vec<&str> = PACKAGES
        .iter()
        .filter(|(_, path)| !Path::new(path).exists())
        .map(|(pkg, _)| *pkg)
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    let install = format!(
        "dpkg --add-architecture arm64 && apt-get update && apt-get install -y {}",
        missing.join(" ")
    );
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        bail!(
            "the arm64 cross build needs Debian packages {}; install them as root with: {install}",
            missing.join(" ")
        );
    }
    let foreign = Command::new("dpkg")
        .arg("--print-foreign-architectures")
        .output()
        .context("running dpkg")?;
    if !String::from_utf8_lossy(&foreign.stdout)
        .lines()
        .any(|a| a == "arm64")
    {
        log.step(
            "adding arm64 to dpkg's architectures (musl for arm64)",
            Command::new("dpkg").args(["--add-architecture", "arm64"]),
        )?;
    }
    log.step(
        "updating the Debian package lists",
        Command::new("apt-get").args(["update", "-q"]),
    )?;
    log.step(
        &format!(
            "installing the arm64 cross toolchain: {}",
            missing.join(" ")
        ),
        Command::new("apt-get")
            .args(["install", "-y", "-q", "--no-install-recommends"])
            .args(&missing)
            .env("DEBIAN_FRONTEND", "noninteractive"),
    )
}

/// Where the cross build's own libraries go (`libunwind.a`), as an
/// absolute path without `..`: it is part of the RUSTFLAGS, and another
/// spelling of it would rebuild everything.
fn libs_dir() -> anyhow::Result<PathBuf> {
    let target = crate::target_dir();
    std::fs::create_dir_all(&target).with_context(|| format!("creating {}", target.display()))?;
    let target = target
        .canonicalize()
        .with_context(|| format!("resolving {}", target.display()))?;
    Ok(target.join("cross"))
}

/// LLVM's libunwind for aarch64 musl from the nightly's rust-src, built
/// once.
fn libunwind(log: &Log) -> anyhow::Result<PathBuf> {
    let dir = libs_dir()?;
    let archive = dir.join("libunwind.a");
    if archive.exists() {
        return Ok(dir);
    }
    let sysroot = crate::setup::nightly_sysroot()?;
    let source = Path::new(&sysroot).join("lib/rustlib/src/rust/src/llvm-project/libunwind");
    let objects = dir.join("libunwind");
    std::fs::create_dir_all(&objects).with_context(|| format!("creating {}", objects.display()))?;
    let common = [
        "-specs",
        MUSL_SPECS,
        "-O2",
        "-fPIC",
        "-fstrict-aliasing",
        "-funwind-tables",
        "-fvisibility=hidden",
        "-D_LIBUNWIND_DISABLE_VISIBILITY_ANNOTATIONS",
        "-D_LIBUNWIND_IS_NATIVE_ONLY",
        "-DNDEBUG",
    ];
    let sources = [
        ("libunwind.cpp", true),
        ("UnwindLevel1.c", false),
        ("UnwindLevel1-gcc-ext.c", false),
        ("Unwind-sjlj.c", false),
        ("UnwindRegistersRestore.S", false),
        ("UnwindRegistersSave.S", false),
    ];
    let mut built = Vec::new();
    for (file, cpp) in sources {
        let object = objects.join(format!("{file}.o"));
        let mut cc = Command::new(if cpp {
            "aarch64-linux-gnu-g++"
        } else {
            "aarch64-linux-gnu-gcc"
        });
        cc.args(common).arg("-I").arg(source.join("include"));
        if cpp {
            cc.args(["-std=c++17", "-nostdinc++", "-fno-exceptions", "-fno-rtti"]);
        } else {
            cc.arg("-std=c99");
        }
        cc.arg("-c")
            .arg(source.join("src").join(file))
            .arg("-o")
            .arg(&object);
        crate::run(&mut cc).with_context(|| format!("compiling libunwind's {file}"))?;
        built.push(object);
    }
    log.step(
        "archiving LLVM's libunwind for aarch64 musl (from the nightly's rust-src)",
        Command::new("aarch64-linux-gnu-ar")
            .arg("rcs")
            .arg(&archive)
            .args(&built),
    )?;
    Ok(dir)
}

/// Builds the static arm64 `ssh-fwd` with `--release` around the eBPF
/// object at `ebpf` (the amd64 build's) and returns its path.
pub fn build(log: &Log, ebpf: &Path) -> anyhow::Result<PathBuf> {
    let libs = libunwind(log)?;
    println!("==> building a static ssh-fwd ({TARGET}, release) with the nightly's -Z build-std");
    let upper = TARGET.to_uppercase().replace('-', "_");
    let mut cargo = crate::cargo_on("nightly");
    cargo
        .env(format!("CARGO_TARGET_{upper}_LINKER"), MUSL_GCC)
        // As .cargo/config.toml's flags for the amd64 image's binary, and
        // musl's crt files and libc from Debian instead of Rust's
        // self-contained ones, which build-std does not have. ring's C
        // finds aarch64-linux-musl-gcc by the target's name.
        .env(
            format!("CARGO_TARGET_{upper}_RUSTFLAGS"),
            format!(
                "-C link-self-contained=no -L {} -C debuginfo=0 -C strip=debuginfo",
                libs.display()
            ),
        )
        // The programs as the amd64 build made them (check.rs says why).
        .env("SSH_FWD_EBPF_OBJECT", ebpf)
        .args([
            "build",
            "--package",
            "ssh-fwd",
            "--release",
            "--target",
            TARGET,
        ])
        .args(["-Z", "build-std=std,panic_abort"]);
    crate::run(&mut cargo)?;
    Ok(crate::target_dir()
        .join(TARGET)
        .join("release")
        .join("ssh-fwd"))
}
