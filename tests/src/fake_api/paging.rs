//! Lists in pages, as the API server serves `limit` and `continue`: a page
//! holds at most `limit` objects in key order, and `metadata.continue`
//! names where the next one starts. Every page of one list reports the
//! resourceVersion of its first page, so a client watching from there
//! replays whatever changed while it paged. (The real server reads every
//! page from one snapshot; here a later page shows the objects as they are
//! now, which that replay brings to the same end.)

use std::collections::BTreeMap;

use super::status::ApiError;

const TOKEN_PREFIX: &str = "fake-continue:";

#[derive(Debug)]
pub struct Page {
    /// At most this many objects; `None` for all.
    pub limit: Option<usize>,
    /// The key of the last object of the previous page.
    pub after: Option<String>,
    /// The resourceVersion the list reports.
    pub rv: u64,
}

impl Page {
    /// The page a list request asks for, given the store's resourceVersion.
    /// Refused as the API server refuses them: `resourceVersionMatch`
    /// without `resourceVersion` or with `continue` (422, the ListOptions'
    /// validation), `continue` with a `resourceVersion` other than "" or
    /// "0", and a token it did not make (400, the storage's checks).
    pub fn of(query: &BTreeMap<String, String>, current_rv: u64) -> Result<Self, ApiError> {
        let bad = |message: String| ApiError {
            code: 400,
            reason: "BadRequest",
            message,
        };
        let limit = match query.get("limit").map(String::as_str) {
            None | Some("") => None,
            Some(text) => match text.parse::<i64>() {
                Ok(n) if n > 0 => Some(usize::try_from(n).unwrap_or(usize::MAX)),
                Ok(_) => None,
                Err(_) => return Err(bad(format!("invalid limit {text:?}: not an integer"))),
            },
        };
        let param = |name: &str| query.get(name).map_or("", String::as_str);
        let token = param("continue");
        check_version_match(
            param("resourceVersionMatch"),
            param("resourceVersion"),
            token,
        )?;
        if token.is_empty() {
            return Ok(Self {
                limit,
                after: None,
                rv: current_rv,
            });
        }
        if !matches!(param("resourceVersion"), "" | "0") {
            return Err(bad(
                "specifying resource version is not allowed when using continue".into(),
            ));
        }
        let (rv, after) = token
            .strip_prefix(TOKEN_PREFIX)
            .and_then(|rest| rest.split_once('|'))
            .and_then(|(rv, after)| Some((rv.parse().ok()?, after.to_owned())))
            .ok_or_else(|| bad(format!("invalid continue token: {token:?}")))?;
        Ok(Self {
            limit,
            after: Some(after),
            rv,
        })
    }

    /// The `continue` token for the page after the object with key `last`.
    pub fn token_after(&self, last: &str) -> String {
        format!("{TOKEN_PREFIX}{}|{last}", self.rv)
    }
}

/// `ValidateListOptions`' rules for `resourceVersionMatch` (a 422, as
/// every ListOptions validation failure is).
fn check_version_match(matching: &str, rv: &str, token: &str) -> Result<(), ApiError> {
    if matching.is_empty() {
        return Ok(());
    }
    let forbidden = if rv.is_empty() {
        "resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided".to_owned()
    } else if !token.is_empty() {
        "resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden when continue is provided".to_owned()
    } else if !matches!(matching, "Exact" | "NotOlderThan") {
        format!(
            "resourceVersionMatch: Unsupported value: {matching:?}: supported values: \"Exact\", \"NotOlderThan\", \"\""
        )
    } else {
        return Ok(());
    };
    Err(ApiError {
        code: 422,
        reason: "Invalid",
        message: format!("ListOptions.meta.k8s.io \"\" is invalid: {forbidden}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn query(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn a_continue_token_carries_the_first_pages_version_and_position() {
        let first = Page::of(&query(&[("limit", "500")]), 42).unwrap();
        assert_eq!(
            (first.limit, first.after.as_deref(), first.rv),
            (Some(500), None, 42)
        );
        let token = first.token_after("jobs/job-9");
        let next = Page::of(&query(&[("limit", "500"), ("continue", &token)]), 99).unwrap();
        assert_eq!((next.after.as_deref(), next.rv), (Some("jobs/job-9"), 42));
    }

    #[test]
    fn bad_limits_and_tokens_are_400() {
        assert_eq!(
            Page::of(&query(&[("limit", "x")]), 1).unwrap_err().code,
            400
        );
        assert_eq!(
            Page::of(&query(&[("continue", "junk")]), 1)
                .unwrap_err()
                .code,
            400
        );
        assert_eq!(Page::of(&query(&[("limit", "0")]), 1).unwrap().limit, None);
        assert_eq!(Page::of(&query(&[("limit", "-1")]), 1).unwrap().limit, None);
    }

    #[test]
    fn a_continued_list_takes_no_resource_version_but_empty_or_zero() {
        let token = Page::of(&query(&[("limit", "1")]), 7)
            .unwrap()
            .token_after("a/b");
        for rv in ["", "0"] {
            let page = Page::of(&query(&[("continue", &token), ("resourceVersion", rv)]), 9);
            assert_eq!(page.unwrap().rv, 7, "resourceVersion {rv:?}");
        }
        let refused = Page::of(&query(&[("continue", &token), ("resourceVersion", "7")]), 9);
        let refused = refused.unwrap_err();
        assert_eq!(refused.code, 400);
        assert!(refused.message.contains("not allowed when using continue"));
    }

    #[test]
    fn resource_version_match_needs_a_version_and_no_continue() {
        let token = Page::of(&query(&[]), 7).unwrap().token_after("a/b");
        let refused = [
            vec![("resourceVersionMatch", "NotOlderThan")],
            vec![
                ("resourceVersionMatch", "NotOlderThan"),
                ("resourceVersion", "0"),
                ("continue", &token),
            ],
            vec![("resourceVersionMatch", "Newest"), ("resourceVersion", "5")],
        ];
        for q in refused {
            assert_eq!(Page::of(&query(&q), 9).unwrap_err().code, 422, "{q:?}");
        }
        let any = [
            ("resourceVersionMatch", "NotOlderThan"),
            ("resourceVersion", "0"),
            ("limit", "500"),
        ];
        assert_eq!(Page::of(&query(&any), 9).unwrap().limit, Some(500));
    }
}
