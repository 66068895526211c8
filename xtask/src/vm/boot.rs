//! A Debian kernel booted by virtme-ng under emulation, with this machine's
//! root file system (read-only, with overlays): what `cargo xtask test
//! --kernel` and `cargo xtask bench progs --kernel` run their guests in.
//!
//! KVM guests hang early here, so QEMU emulates (`--disable-kvm`); the
//! guest's stdout does not come back through virtme's script channel, so a
//! guest script writes what it has to say into a directory shared
//! read-write ([`Guest::out`]), which the host reads once the VM is gone.

use std::{
    path::{Path, PathBuf},
    process::{Command, ExitStatus},
};

use anyhow::{Context as _, bail};

use crate::{run as run_cmd, target_dir};

/// The kernels `--kernel` knows, by the version a user writes, and the
/// Debian 12 package names of each (the newest is taken).
fn package_pattern(kernel: &str) -> anyhow::Result<&'static str> {
    match kernel {
        "6.1" => Ok(r"^linux-image-6\.1\.0-[0-9]+-amd64-unsigned$"),
        "6.12" => Ok(r"^linux-image-6\.12\.[0-9]+\+deb12-amd64-unsigned$"),
        other => bail!(
            "--kernel {other}: only 6.1 (Debian 12's own kernel) and 6.12 (its newer one, from \
             bookworm-security) are known"
        ),
    }
}

/// A kernel unpacked and a directory for its guest's outputs.
pub struct Guest {
    /// `target/kernels/KERNEL`: the package, its unpacked root, the logs.
    pub dir: PathBuf,
    pub vmlinuz: PathBuf,
    /// Shared read-write with the guest; emptied by [`Guest::new`].
    pub out: PathBuf,
}

impl Guest {
    /// Installs what booting needs, fetches `kernel` once, and empties its
    /// output directory `out_name` under `target/kernels/KERNEL`.
    pub fn new(kernel: &str, out_name: &str) -> anyhow::Result<Self> {
        preflight()?;
        let dir = target_dir().join("kernels").join(kernel);
        let vmlinuz = fetch_kernel(kernel, &dir)?;
        let out = dir.join(out_name);
        if out.exists() {
            std::fs::remove_dir_all(&out).with_context(|| format!("clearing {}", out.display()))?;
        }
        std::fs::create_dir_all(&out)?;
        Ok(Self { dir, vmlinuz, out })
    }

    /// Writes `body` after [`prelude`] as the guest's script and boots the
    /// kernel with 2 CPUs and 3 GiB to run it; virtme's own output goes to
    /// `vng.log` and `vng.err` beside `out`. The script's exit status does
    /// not come back: read what it wrote into `out`.
    pub fn boot(&self, body: &str) -> anyhow::Result<ExitStatus> {
        let script = self.out.join("run.sh");
        std::fs::write(&script, format!("{}{body}", prelude(&self.out)))?;
        make_executable(&script)?;
        Command::new("vng")
            .arg("--disable-kvm")
            .arg("--run")
            .arg(&self.vmlinuz)
            .arg(format!("--rwdir={}", self.out.display()))
            .args(["--memory", "3G", "--cpus", "2", "--exec"])
            .arg(&script)
            .stdout(std::fs::File::create(self.dir.join("vng.log"))?)
            .stderr(std::fs::File::create(self.dir.join("vng.err"))?)
            .status()
            .context("running vng")
    }

    /// The guest's `uname -r`, which [`prelude`] wrote: an error naming the
    /// logs if the guest never got that far.
    pub fn uname(&self) -> anyhow::Result<String> {
        let uname = std::fs::read_to_string(self.out.join("uname")).unwrap_or_default();
        if uname.trim().is_empty() {
            bail!(
                "the guest wrote nothing to {}: it did not boot or could not reach the directory \
                 (see vng.log and vng.err in {})",
                self.out.display(),
                self.dir.display()
            );
        }
        Ok(uname.trim().to_owned())
    }
}

/// The start of every guest script: its output into `out/guest.log`, its
/// kernel into `out/uname`, and two fixes to the host's files as the guest
/// sees them. virtme-ng gives the guest a shadow file of its own with root
/// locked (`!`), which an sshd without PAM refuses even a key for
/// ("account is locked"); a copy unlocked as this machine's is (`*`: no
/// password, keys only) is mounted over it, in the guest only. A root
/// shell that runs `pyenv init` (as this machine's does) waits a minute
/// for a lock in a shims directory it cannot write in the guest, longer
/// than the tests wait for an ssh command: a writable copy is mounted over
/// it, without the lock file a host shell killed during a rehash leaves
/// behind (copied, it would make every login in the guest wait that
/// minute).
fn prelude(out: &Path) -> String {
    format!(
        "#!/bin/sh\nexec > {out}/guest.log 2>&1\nuname -r > {out}/uname\n\
         sed 's/^root:!/root:*/' /etc/shadow > /tmp/shadow && mount --bind /tmp/shadow /etc/shadow\n\
         if [ -d /root/.pyenv/shims ]; then cp -a /root/.pyenv/shims /tmp/pyenv-shims && \
         rm -f /tmp/pyenv-shims/.pyenv-shim && \
         mount --bind /tmp/pyenv-shims /root/.pyenv/shims; fi\n",
        out = out.display(),
    )
}

/// virtme-ng, QEMU, busybox (its initramfs) and depmod: installed when
/// missing (Debian packages and PyPI), as `cargo xtask setup` installs
/// the rest.
fn preflight() -> anyhow::Result<()> {
    let have = |program: &str| {
        Command::new("sh")
            .args(["-c", &format!("command -v {program}")])
            .output()
            .is_ok_and(|o| o.status.success())
    };
    let packages: Vec<&str> = [
        ("qemu-system-x86_64", "qemu-system-x86"),
        ("busybox", "busybox-static"),
        ("depmod", "kmod"),
    ]
    .iter()
    .filter(|(program, _)| !have(program))
    .map(|(_, package)| *package)
    .collect();
    if !packages.is_empty() {
        println!("==> installing {}", packages.join(" "));
        run_cmd(
            Command::new("apt-get")
                .args(["install", "-y", "-q"])
                .args(&packages),
        )?;
    }
    if !have("vng") {
        println!("==> installing virtme-ng (pip)");
        run_cmd(Command::new("pip").args(["install", "-q", "virtme-ng"]))?;
    }
    Ok(())
}

/// The newest Debian package of `kernel`, downloaded and unpacked into
/// `dir` once, with depmod run on its modules (virtme-ng loads them from
/// beside the vmlinuz it boots): its vmlinuz.
fn fetch_kernel(kernel: &str, dir: &Path) -> anyhow::Result<PathBuf> {
    let root = dir.join("root");
    if let Some((vmlinuz, _)) = unpacked(&root) {
        return Ok(vmlinuz);
    }
    let listed = Command::new("apt-cache")
        .args(["search", "--names-only", package_pattern(kernel)?])
        .output()
        .context("apt-cache search")?;
    let package = newest(&String::from_utf8_lossy(&listed.stdout))
        .with_context(|| format!("no Debian package of kernel {kernel}: run apt-get update"))?;
    println!("==> downloading {package} into {}", dir.display());
    std::fs::create_dir_all(dir)?;
    run_cmd(
        Command::new("apt-get")
            .args(["download", &package])
            .current_dir(dir),
    )?;
    let deb = std::fs::read_dir(dir)?
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|e| e == "deb"))
        .context("apt-get download left no .deb")?;
    run_cmd(Command::new("dpkg").arg("-x").arg(&deb).arg(&root))?;
    let (vmlinuz, modules) = unpacked(&root).context("the package holds no vmlinuz")?;
    let release = modules.file_name().unwrap_or_default().to_string_lossy();
    run_cmd(Command::new("depmod").arg("-b").arg(&root).arg(&*release))?;
    Ok(vmlinuz)
}

/// The newest package of `apt-cache search`'s lines, by the numbers in its
/// name: the ABI of `linux-image-6.1.0-57-amd64-unsigned`, the stable
/// release of `linux-image-6.12.118+deb12-amd64-unsigned`.
fn newest(listed: &str) -> Option<String> {
    let numbers = |name: &str| -> Vec<u32> {
        name.split(|c: char| !c.is_ascii_digit())
            .filter_map(|n| n.parse().ok())
            .collect()
    };
    listed
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .max_by_key(|name| numbers(name))
        .map(str::to_owned)
}

fn unpacked(root: &Path) -> Option<(PathBuf, PathBuf)> {
    let vmlinuz = std::fs::read_dir(root.join("boot"))
        .ok()?
        .flatten()
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("vmlinuz-"))
        })?;
    let modules = std::fs::read_dir(root.join("lib/modules"))
        .ok()?
        .flatten()
        .map(|e| e.path())
        .next()?;
    Some((vmlinuz, modules))
}

pub fn make_executable(path: &Path) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))
        .with_context(|| format!("chmod {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::newest;

    #[test]
    fn the_newest_package_is_found_by_the_numbers_in_its_name() {
        let six_one = "linux-image-6.1.0-9-amd64-unsigned - Linux 6.1\n\
                       linux-image-6.1.0-57-amd64-unsigned - Linux 6.1\n\
                       linux-image-6.1.0-53-amd64-unsigned - Linux 6.1\n";
        assert_eq!(
            newest(six_one).as_deref(),
            Some("linux-image-6.1.0-57-amd64-unsigned")
        );
        let six_twelve = "linux-image-6.12.118+deb12-amd64-unsigned - Linux 6.12\n\
                          linux-image-6.12.99+deb12-amd64-unsigned - Linux 6.12\n";
        assert_eq!(
            newest(six_twelve).as_deref(),
            Some("linux-image-6.12.118+deb12-amd64-unsigned")
        );
        assert_eq!(newest(""), None);
    }
}
