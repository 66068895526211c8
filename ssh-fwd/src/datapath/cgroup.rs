//! Finding the cgroup v2 hierarchy the hairpin programs attach to.

use std::path::{Path, PathBuf};

/// Mount points of cgroup v2 hierarchies in a `/proc/mounts` text, in the
/// order listed. Octal escapes (`\040` for a space) are decoded.
pub fn cgroup2_mounts(proc_mounts: &str) -> Vec<PathBuf> {
    proc_mounts
        .lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let (_source, target, fstype) = (fields.next()?, fields.next()?, fields.next()?);
            (fstype == "cgroup2").then(|| PathBuf::from(unescape_mount_path(target)))
        })
        .collect()
}

/// The default `--cgroup-root`: the first cgroup v2 mount of this process's
/// mount namespace (`/sys/fs/cgroup` on a unified host,
/// `/sys/fs/cgroup/unified` on a hybrid one), if there is any.
pub fn default_root() -> Option<PathBuf> {
    let mounts = std::fs::read_to_string("/proc/mounts").ok()?;
    cgroup2_mounts(&mounts).into_iter().next()
}

/// Whether `path` is a directory of a cgroup v2 hierarchy.
pub fn is_cgroup2(path: &Path) -> anyhow::Result<bool> {
    super::pins::is_fs(path, libc::CGROUP2_SUPER_MAGIC.into())
}

/// `/proc/mounts` and `/proc/self/mountinfo` write space, tab, newline and
/// backslash as `\ooo`.
pub fn unescape_mount_path(raw: &str) -> String {
    let bytes = raw.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes.get(i + 1..i + 4).and_then(|d| {
            let s = std::str::from_utf8(d).ok()?;
            u8::from_str_radix(s, 8).ok()
        });
        match (bytes[i], octal) {
            (b'\\', Some(b)) => {
                out.push(b);
                i += 4;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    const HYBRID: &str = "\
sysfs /sys sysfs rw,nosuid,nodev,noexec,relatime 0 0
tmpfs /sys/fs/cgroup tmpfs ro,nosuid,nodev,noexec,mode=755 0 0
cgroup2 /sys/fs/cgroup/unified cgroup2 rw,nosuid,nodev,noexec,relatime,nsdelegate 0 0
cgroup /sys/fs/cgroup/systemd cgroup rw,nosuid,nodev,noexec,relatime,xattr,name=systemd 0 0
cgroup /sys/fs/cgroup/cpu,cpuacct cgroup rw,nosuid,nodev,noexec,relatime,cpu,cpuacct 0 0
";

    #[test]
    fn a_hybrid_host_has_its_cgroup2_under_unified() {
        assert_eq!(
            cgroup2_mounts(HYBRID),
            [PathBuf::from("/sys/fs/cgroup/unified")]
        );
    }

    #[test]
    fn a_unified_host_has_it_at_sys_fs_cgroup_and_later_mounts_follow() {
        let mounts = "cgroup2 /sys/fs/cgroup cgroup2 rw,nsdelegate 0 0\n\
                      none /run/my\\040cgroup cgroup2 rw 0 0\n";
        assert_eq!(
            cgroup2_mounts(mounts),
            [
                PathBuf::from("/sys/fs/cgroup"),
                PathBuf::from("/run/my cgroup")
            ]
        );
    }

    #[test]
    fn a_cgroup_v1_only_host_has_none() {
        let v1_only: String = HYBRID
            .lines()
            .filter(|l| !l.contains("cgroup2"))
            .map(|l| format!("{l}\n"))
            .collect();
        assert!(cgroup2_mounts(&v1_only).is_empty());
        assert!(cgroup2_mounts("garbage\n\n").is_empty());
    }
}
