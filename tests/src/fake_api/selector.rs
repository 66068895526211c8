//! Label selectors as list and watch requests send them (`a=b,c!=d,e,!f`).

use serde_json::Value;

#[derive(Debug, Default)]
pub struct Selector(Vec<Term>);

#[derive(Debug)]
enum Term {
    Equals(String, String),
    NotEquals(String, String),
    Exists(String),
    Absent(String),
}

impl Selector {
    pub fn parse(text: &str) -> Self {
        Self(
            text.split(',')
                .map(str::trim)
                .filter(|t| !t.is_empty())
                .map(|t| {
                    if let Some((k, v)) = t.split_once("!=") {
                        Term::NotEquals(k.into(), v.into())
                    } else if let Some((k, v)) = t.split_once("==").or_else(|| t.split_once('=')) {
                        Term::Equals(k.into(), v.into())
                    } else if let Some(k) = t.strip_prefix('!') {
                        Term::Absent(k.into())
                    } else {
                        Term::Exists(t.into())
                    }
                })
                .collect(),
        )
    }

    pub fn matches(&self, object: &Value) -> bool {
        let labels = &object["metadata"]["labels"];
        self.0.iter().all(|term| match term {
            Term::Equals(k, v) => labels[k].as_str() == Some(v),
            Term::NotEquals(k, v) => labels[k].as_str() != Some(v),
            Term::Exists(k) => !labels[k].is_null(),
            Term::Absent(k) => labels[k].is_null(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn selectors_match_labels() {
        let pod = json!({"metadata": {"labels": {"ssh-fwd.io/ssh": "enabled", "app": "x"}}});
        assert!(Selector::parse("ssh-fwd.io/ssh=enabled").matches(&pod));
        assert!(Selector::parse("app,!other").matches(&pod));
        assert!(!Selector::parse("app!=x").matches(&pod));
        assert!(Selector::parse("").matches(&pod));
    }
}
