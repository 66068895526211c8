//! A ConfigMap as the kubelet mounts it as a volume: the files in a
//! timestamped directory, `..data` a symbolic link to it, and each key a
//! link through `..data`, so that an update swaps one link. deploy/ mounts
//! the shared settings so, and the agent and the controller read the
//! directory with `--config`.

use std::{collections::BTreeMap, path::Path};

/// Writes `data` into `dir` (which exists) as the kubelet would.
pub fn write(dir: &Path, data: &BTreeMap<String, String>) -> std::io::Result<()> {
    let stamp = "..2026_12_07_10_00_00.000000001";
    std::fs::create_dir(dir.join(stamp))?;
    for (key, value) in data {
        std::fs::write(dir.join(stamp).join(key), value)?;
        std::os::unix::fs::symlink(Path::new("..data").join(key), dir.join(key))?;
    }
    std::os::unix::fs::symlink(stamp, dir.join("..data"))
}

/// `KEY=VALUE` lines and `#` comments, as kustomize's configMapGenerator
/// reads an `envs` file.
pub fn env_file(text: &str) -> BTreeMap<String, String> {
    (text.lines())
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .filter_map(|l| l.split_once('='))
        .map(|(key, value)| (key.to_owned(), value.to_owned()))
        .collect()
}
