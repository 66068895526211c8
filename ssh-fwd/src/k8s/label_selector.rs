//! A label selector as `kubectl -l` writes it, matched here against one
//! object's labels: `--announce-nodes` is checked against this node's own
//! Node, which the agent reads by name (a list of every Node to let the
//! API server match would need the right to list them all). The grammar
//! is the API server's: requirements separated by commas, each `k=v`,
//! `k==v`, `k!=v`, `k in (a,b)`, `k notin (a,b)`, `k` or `!k`.

use std::collections::{BTreeMap, BTreeSet};

#[derive(Clone, Debug, PartialEq, Eq)]
enum Requirement {
    Equals(String, String),
    NotEquals(String, String),
    In(String, BTreeSet<String>),
    NotIn(String, BTreeSet<String>),
    Exists(String),
    NotExists(String),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LabelSelector(Vec<Requirement>);

impl LabelSelector {
    /// Parses `text`; the error says which requirement is wrong.
    pub fn parse(text: &str) -> Result<Self, String> {
        split(text)
            .into_iter()
            .filter(|r| !r.trim().is_empty())
            .map(|r| requirement(r.trim()))
            .collect::<Result<_, _>>()
            .map(Self)
    }

    /// Whether `labels` meet every requirement (an empty selector: all do).
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.0.iter().all(|r| match r {
            Requirement::Equals(k, v) => labels.get(k) == Some(v),
            Requirement::NotEquals(k, v) => labels.get(k) != Some(v),
            Requirement::In(k, vs) => labels.get(k).is_some_and(|v| vs.contains(v)),
            Requirement::NotIn(k, vs) => labels.get(k).is_none_or(|v| !vs.contains(v)),
            Requirement::Exists(k) => labels.contains_key(k),
            Requirement::NotExists(k) => !labels.contains_key(k),
        })
    }
}

/// Splits on the commas outside parentheses.
fn split(text: &str) -> Vec<&str> {
    let (mut parts, mut depth, mut start) = (Vec::new(), 0_i32, 0);
    for (i, c) in text.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&text[start..]);
    parts
}

fn requirement(r: &str) -> Result<Requirement, String> {
    let bad = || format!("`{r}` is not a label requirement (write it as kubectl -l takes it)");
    let key = |k: &str| {
        let k = k.trim();
        let ok = !k.is_empty()
            && k.chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_./".contains(c));
        ok.then(|| k.to_owned()).ok_or_else(bad)
    };
    for (op, in_set) in [(" notin ", false), (" in ", true)] {
        if let Some((k, set)) = r.split_once(op) {
            let set = set.trim();
            let inner = set
                .strip_prefix('(')
                .and_then(|s| s.strip_suffix(')'))
                .ok_or_else(bad)?;
            let values = inner.split(',').map(|v| v.trim().to_owned()).collect();
            return Ok(if in_set {
                Requirement::In(key(k)?, values)
            } else {
                Requirement::NotIn(key(k)?, values)
            });
        }
    }
    if let Some((k, v)) = r.split_once("!=") {
        return Ok(Requirement::NotEquals(key(k)?, v.trim().to_owned()));
    }
    if let Some((k, v)) = r.split_once("==").or_else(|| r.split_once('=')) {
        return Ok(Requirement::Equals(key(k)?, v.trim().to_owned()));
    }
    match r.strip_prefix('!') {
        Some(k) => Ok(Requirement::NotExists(key(k)?)),
        None => Ok(Requirement::Exists(key(r)?)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn each_form_kubectl_takes_matches_as_the_api_server_does() {
        let node = labels(&[("ssh-fwd.io/ingress", "true"), ("zone", "a")]);
        for (text, want) in [
            ("ssh-fwd.io/ingress=true", true),
            ("ssh-fwd.io/ingress==true", true),
            ("ssh-fwd.io/ingress!=true", false),
            ("zone in (a, b)", true),
            ("zone notin (a,b)", false),
            ("zone notin (c)", true),
            ("missing notin (c)", true),
            ("zone", true),
            ("!zone", false),
            ("!missing", true),
            ("ssh-fwd.io/ingress=true,zone in (b,c)", false),
            ("", true),
        ] {
            let selector = LabelSelector::parse(text).unwrap();
            assert_eq!(selector.matches(&node), want, "{text}");
        }
    }

    #[test]
    fn a_malformed_requirement_is_named() {
        let e = LabelSelector::parse("zone in a,b").unwrap_err();
        assert!(e.contains("`zone in a`"), "{e}");
        assert!(LabelSelector::parse("bad key=1").is_err());
    }
}
