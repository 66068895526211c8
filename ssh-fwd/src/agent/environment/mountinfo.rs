//! `/proc/self/mountinfo` (proc(5)), pure: which mount holds a path, and
//! whether that mount is joined to mounts in other namespaces.

use std::path::{Path, PathBuf};

use crate::datapath::cgroup::unescape_mount_path;

/// How a mount propagates, from its optional fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Propagation {
    /// `shared:N`: mounts and unmounts below it reach its peers and come
    /// from them (Kubernetes' `Bidirectional`, `rshared`).
    Shared,
    /// `master:N` alone: it receives its master's mounts, sends none back
    /// (`HostToContainer`, `rslave`).
    Receiving,
    /// No peer at all (`None`, `rprivate`): nothing reaches it or leaves it.
    Private,
}

/// One line of mountinfo, the fields the checks read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mount {
    pub mount_point: PathBuf,
    pub fstype: String,
    pub propagation: Propagation,
}

/// One line: `ID PARENT MAJ:MIN ROOT POINT OPTIONS [OPTIONAL...] - FSTYPE
/// SOURCE SUPER`. `None` for a line of another shape.
pub fn parse_line(line: &str) -> Option<Mount> {
    let (before, after) = line.split_once(" - ")?;
    let mut fields = before.split(' ');
    let mount_point = fields.nth(4)?;
    let optional: Vec<&str> = fields.skip(1).collect();
    let propagation = if optional.iter().any(|f| f.starts_with("shared:")) {
        Propagation::Shared
    } else if optional.iter().any(|f| f.starts_with("master:")) {
        Propagation::Receiving
    } else {
        Propagation::Private
    };
    let fstype = after.split(' ').next().filter(|f| !f.is_empty())?;
    Some(Mount {
        mount_point: PathBuf::from(unescape_mount_path(mount_point)),
        fstype: fstype.to_owned(),
        propagation,
    })
}

/// The mount `path` lies on: the deepest mount point above it, the last
/// listed where several are mounted on one point (the one on top).
pub fn holding(mountinfo: &str, path: &Path) -> Option<Mount> {
    let mut best: Option<Mount> = None;
    for mount in mountinfo.lines().filter_map(parse_line) {
        if !path.starts_with(&mount.mount_point) {
            continue;
        }
        let deeper = best.as_ref().is_none_or(|b| {
            mount.mount_point.components().count() >= b.mount_point.components().count()
        });
        if deeper {
            best = Some(mount);
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pod's view: its root, the kubelet's bind of the node's bpffs with
    /// each propagation, and a bpffs mounted inside the container.
    const POD: &str = "\
1200 1100 0:310 / / rw,relatime master:400 - overlay overlay rw,lowerdir=/l
1201 1200 0:312 / /sys ro,nosuid,nodev,noexec,relatime - sysfs sysfs ro
1202 1201 0:25 / /sys/fs/bpf rw,nosuid,nodev,noexec,relatime master:9 - bpf bpf rw,mode=700
1203 1201 0:26 / /host/sys/fs/cgroup ro,relatime shared:14 master:5 - cgroup2 cgroup2 rw
1204 1201 0:27 / /private/bpf rw,relatime - bpf none rw
1205 1201 0:28 / /with\\040space rw,relatime shared:3 - bpf bpf rw
";

    #[test]
    fn each_propagation_is_read_from_the_optional_fields() {
        let of = |p: &str| holding(POD, Path::new(p)).unwrap().propagation;
        assert_eq!(of("/sys/fs/bpf/ssh-fwd"), Propagation::Receiving);
        assert_eq!(
            of("/host/sys/fs/cgroup"),
            Propagation::Shared,
            "shared and master"
        );
        assert_eq!(of("/private/bpf/ssh-fwd/v4"), Propagation::Private);
        assert_eq!(of("/sys/kernel"), Propagation::Private);
    }

    #[test]
    fn a_path_is_on_the_deepest_mount_above_it_not_on_a_sibling_prefix() {
        let m = holding(POD, Path::new("/sys/fs/bpf/ssh-fwd")).unwrap();
        assert_eq!(m.mount_point, Path::new("/sys/fs/bpf"));
        assert_eq!(m.fstype, "bpf");
        let sibling = holding(POD, Path::new("/sys/fs/bpfx")).unwrap();
        assert_eq!(
            sibling.mount_point,
            Path::new("/sys"),
            "components, not bytes"
        );
        let root = holding(POD, Path::new("/etc")).unwrap();
        assert_eq!(root.fstype, "overlay");
    }

    #[test]
    fn the_mount_on_top_of_a_point_wins_and_escapes_are_decoded() {
        let stacked = format!("{POD}1300 1202 0:40 / /sys/fs/bpf rw - bpf bpf rw\n");
        let m = holding(&stacked, Path::new("/sys/fs/bpf/x")).unwrap();
        assert_eq!(m.propagation, Propagation::Private, "the later mount");
        let spaced = holding(POD, Path::new("/with space/pins")).unwrap();
        assert_eq!(spaced.mount_point, Path::new("/with space"));
    }

    #[test]
    fn lines_of_another_shape_are_skipped() {
        assert_eq!(parse_line("garbage"), None);
        assert_eq!(parse_line("1 2 0:3 / /x rw -"), None);
        assert!(holding("", Path::new("/")).is_none());
    }
}
