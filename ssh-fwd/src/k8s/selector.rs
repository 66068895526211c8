//! Equality- and existence-based label selectors, as `kubectl -l` takes them:
//! `k=v`, `k==v`, `k!=v`, `k`, `!k`, joined by commas.

use std::collections::BTreeMap;

#[derive(Clone, Debug, PartialEq, Eq)]
enum Requirement {
    Equals(String, String),
    NotEquals(String, String),
    Exists(String),
    NotExists(String),
}

/// A parsed `--selector`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LabelSelector {
    requirements: Vec<Requirement>,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error(
    "--selector `{text}`: {problem}; use comma-separated `key=value`, `key!=value`, `key` or `!key`"
)]
pub struct SelectorError {
    text: String,
    problem: String,
}

impl LabelSelector {
    pub fn parse(text: &str) -> Result<Self, SelectorError> {
        let error = |problem: String| SelectorError {
            text: text.into(),
            problem,
        };
        let mut requirements = Vec::new();
        for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let requirement = if let Some((k, v)) = part.split_once("!=") {
                Requirement::NotEquals(key(k).map_err(error)?, value(v).map_err(error)?)
            } else if let Some((k, v)) = part.split_once("==").or_else(|| part.split_once('=')) {
                Requirement::Equals(key(k).map_err(error)?, value(v).map_err(error)?)
            } else if let Some(k) = part.strip_prefix('!') {
                Requirement::NotExists(key(k).map_err(error)?)
            } else {
                Requirement::Exists(key(part).map_err(error)?)
            };
            requirements.push(requirement);
        }
        Ok(Self { requirements })
    }

    /// Whether `labels` satisfy every requirement.
    pub fn matches(&self, labels: Option<&BTreeMap<String, String>>) -> bool {
        let get = |k: &str| labels.and_then(|l| l.get(k));
        self.requirements.iter().all(|r| match r {
            Requirement::Equals(k, v) => get(k) == Some(v),
            Requirement::NotEquals(k, v) => get(k) != Some(v),
            Requirement::Exists(k) => get(k).is_some(),
            Requirement::NotExists(k) => get(k).is_none(),
        })
    }
}

fn key(k: &str) -> Result<String, String> {
    let k = k.trim();
    let valid = !k.is_empty()
        && k.len() <= 317
        && k.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./".contains(c));
    if valid {
        Ok(k.into())
    } else {
        Err(format!("`{k}` is not a label key"))
    }
}

fn value(v: &str) -> Result<String, String> {
    let v = v.trim();
    let valid = v.len() <= 63
        && v.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c));
    if valid {
        Ok(v.into())
    } else {
        Err(format!("`{v}` is not a label value"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).into(), (*v).into()))
            .collect()
    }

    #[test]
    fn default_selector_matches_only_services_proxied_by_ssh_fwd() {
        let s = LabelSelector::parse("service.kubernetes.io/service-proxy-name=ssh-fwd").unwrap();
        assert!(s.matches(Some(&labels(&[(
            "service.kubernetes.io/service-proxy-name",
            "ssh-fwd"
        )]))));
        assert!(!s.matches(Some(&labels(&[(
            "service.kubernetes.io/service-proxy-name",
            "cilium"
        )]))));
        assert!(!s.matches(None));
    }

    #[test]
    fn all_operators_combine() {
        let s = LabelSelector::parse("ucloud.dk/rank=0, tier!=gpu, ssh, !skip").unwrap();
        assert!(s.matches(Some(&labels(&[("ucloud.dk/rank", "0"), ("ssh", "")]))));
        assert!(!s.matches(Some(&labels(&[
            ("ucloud.dk/rank", "0"),
            ("ssh", ""),
            ("skip", "1")
        ]))));
        assert!(!s.matches(Some(&labels(&[
            ("ucloud.dk/rank", "0"),
            ("ssh", ""),
            ("tier", "gpu")
        ]))));
        assert!(!s.matches(Some(&labels(&[("ucloud.dk/rank", "1"), ("ssh", "")]))));
        assert!(
            LabelSelector::parse("").unwrap().matches(None),
            "empty selects everything"
        );
    }

    #[test]
    fn bad_selector_says_what_is_accepted() {
        let e = LabelSelector::parse("a=b c").unwrap_err().to_string();
        assert!(e.contains("`b c` is not a label value"), "{e}");
        assert!(e.contains("use comma-separated"), "{e}");
    }
}
