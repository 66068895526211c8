//! The VERSION a release is cut for: semver, and the workspace's own
//! (`[workspace.package] version` in Cargo.toml), so the binary's
//! `--version`, the image tag and the changelog agree.

use anyhow::{Context as _, bail, ensure};

/// The workspace's version, from the root Cargo.toml.
pub fn workspace_version() -> anyhow::Result<String> {
    let path = crate::workspace_root().join("Cargo.toml");
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let mut in_package = false;
    for line in text.lines().map(str::trim) {
        if line.starts_with('[') {
            in_package = line == "[workspace.package]";
        } else if in_package && let Some(value) = line.strip_prefix("version") {
            let value = value.trim_start().trim_start_matches('=').trim();
            return Ok(value.trim_matches('"').to_owned());
        }
    }
    bail!("{} has no [workspace.package] version", path.display())
}

/// Refuses `version` unless it is semver (MAJOR.MINOR.PATCH, an optional
/// `-PRERELEASE` and `+BUILD`) and equals `workspace`.
pub fn check(version: &str, workspace: &str) -> anyhow::Result<()> {
    ensure!(
        is_semver(version),
        "VERSION {version:?} is not a semantic version (MAJOR.MINOR.PATCH, e.g. {workspace})"
    );
    ensure!(
        version == workspace,
        "VERSION {version} is not the workspace's version {workspace}: bump \
         [workspace.package] version in Cargo.toml to {version} (and add its CHANGELOG.md \
         entry), or release {workspace}"
    );
    Ok(())
}

/// Semantic Versioning 2.0.0: numbers without leading zeros, identifiers
/// of `[0-9A-Za-z-]`, numeric pre-release identifiers without leading
/// zeros.
fn is_semver(text: &str) -> bool {
    let (rest, build) = match text.split_once('+') {
        Some((rest, build)) => (rest, Some(build)),
        None => (text, None),
    };
    let (core, pre) = match rest.split_once('-') {
        Some((core, pre)) => (core, Some(pre)),
        None => (rest, None),
    };
    let number = |n: &str| {
        !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) && (n == "0" || !n.starts_with('0'))
    };
    let identifier =
        |i: &str| !i.is_empty() && i.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-');
    let pre_release =
        |i: &str| identifier(i) && (!i.bytes().all(|b| b.is_ascii_digit()) || number(i));
    let core: Vec<&str> = core.split('.').collect();
    core.len() == 3
        && core.iter().all(|n| number(n))
        && pre.is_none_or(|p| p.split('.').all(pre_release))
        && build.is_none_or(|b| b.split('.').all(identifier))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn semantic_versions_are_told_from_other_strings() {
        for good in [
            "0.1.0",
            "1.2.3",
            "10.20.30",
            "1.0.0-rc.1",
            "1.0.0-alpha-2",
            "1.0.0+build.5",
        ] {
            assert!(is_semver(good), "{good}");
        }
        for bad in [
            "",
            "v0.1.0",
            "0.1",
            "0.1.0.0",
            "01.1.0",
            "0.01.0",
            "1.0.0-",
            "1.0.0-01",
            "1.0.0+",
            "1.0.0-a..b",
            "0.1.0 ",
            "1.0.0-a_b",
        ] {
            assert!(!is_semver(bad), "{bad}");
        }
    }

    #[test]
    fn the_version_must_be_the_workspaces_and_the_message_says_which_to_bump() {
        assert!(check("0.1.0", "0.1.0").is_ok());
        let error = check("0.2.0", "0.1.0").unwrap_err().to_string();
        assert!(error.contains("bump [workspace.package] version in Cargo.toml to 0.2.0"));
        assert!(error.contains("or release 0.1.0"), "{error}");
        let error = check("v0.1.0", "0.1.0").unwrap_err().to_string();
        assert!(error.contains("not a semantic version"), "{error}");
    }

    #[test]
    fn the_workspace_version_is_read_from_cargo_toml() {
        let version = workspace_version().unwrap();
        assert!(is_semver(&version), "{version}");
        assert_eq!(version, env!("CARGO_PKG_VERSION"));
    }
}
