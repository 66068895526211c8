//! `AdmissionReview` (admission.k8s.io/v1) as the API server sends and
//! reads it. Written here rather than taken from kube-core because its
//! response serialises the patch as a JSON array of numbers (kube-rs issue
//! #1781), while the API documents a base64 string, which is what Go's
//! encoding of `[]byte` is; and because a request whose object is not a
//! valid Pod must still yield its uid, so it can be answered.

use std::time::Duration;

use base64::Engine as _;
use serde::Deserialize;
use serde_json::{Value, json};

pub const API_VERSION: &str = "admission.k8s.io/v1";

/// The parts of a request the webhook reads.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Request {
    pub uid: String,
    #[serde(default)]
    pub kind: Gvk,
    #[serde(default)]
    pub operation: String,
    /// Empty for a pod created with generateName: its name is made later.
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub namespace: Option<String>,
    #[serde(default)]
    pub dry_run: bool,
    #[serde(default)]
    pub object: Value,
}

#[derive(Debug, Default, Deserialize)]
pub struct Gvk {
    #[serde(default)]
    pub group: String,
    #[serde(default)]
    pub kind: String,
}

/// Why a body is not an AdmissionReview that can be answered.
#[derive(Debug, thiserror::Error)]
pub enum BadReview {
    #[error("the body is not JSON: {0}")]
    NotJson(#[source] serde_json::Error),
    #[error(
        "the body is a {kind:?} of apiVersion {api_version:?}, not an AdmissionReview of {API_VERSION}; set admissionReviewVersions: [v1] in the MutatingWebhookConfiguration"
    )]
    NotAReview { kind: String, api_version: String },
    #[error("the AdmissionReview has no readable request: {0}")]
    NoRequest(String),
}

/// The `timeout` query parameter the API server adds to a webhook's URL:
/// the webhook's `timeoutSeconds` (or less, when the request has less
/// left), written as Go writes a duration (`5s`, `4.5s`, `1m0s`).
pub fn timeout_param(query: Option<&str>) -> Option<Duration> {
    let value = query?
        .split('&')
        .find_map(|pair| pair.strip_prefix("timeout="))?;
    go_duration(value)
}

/// A Go duration: numbers, each with a unit (`h`, `m`, `s`, `ms`, `us`,
/// `µs`, `ns`); `0` alone too.
fn go_duration(text: &str) -> Option<Duration> {
    if text == "0" {
        return Some(Duration::ZERO);
    }
    if text.is_empty() {
        return None;
    }
    let is_number = |c: char| c.is_ascii_digit() || c == '.';
    let mut rest = text;
    let mut seconds = 0.0;
    while !rest.is_empty() {
        let digits = rest.find(|c| !is_number(c)).filter(|&end| end > 0)?;
        let number: f64 = rest[..digits].parse().ok()?;
        rest = &rest[digits..];
        let unit = rest.find(is_number).unwrap_or(rest.len());
        let scale = match &rest[..unit] {
            "h" => 3600.0,
            "m" => 60.0,
            "s" => 1.0,
            "ms" => 1e-3,
            "us" | "µs" | "μs" => 1e-6,
            "ns" => 1e-9,
            _ => return None,
        };
        seconds += number * scale;
        rest = &rest[unit..];
    }
    Duration::try_from_secs_f64(seconds).ok()
}

/// Reads a request: the uid is all that must be there to answer it.
pub fn parse(body: &[u8]) -> Result<Request, BadReview> {
    let value: Value = serde_json::from_slice(body).map_err(BadReview::NotJson)?;
    let (kind, api_version) = (&value["kind"], &value["apiVersion"]);
    if kind != "AdmissionReview" || api_version != API_VERSION {
        return Err(BadReview::NotAReview {
            kind: kind.as_str().unwrap_or("").to_owned(),
            api_version: api_version.as_str().unwrap_or("").to_owned(),
        });
    }
    let request = value
        .get("request")
        .filter(|r| r.is_object())
        .ok_or_else(|| BadReview::NoRequest("`request` is missing".into()))?;
    Request::deserialize(request).map_err(|e| BadReview::NoRequest(e.to_string()))
}

/// The response to `uid`: allowed, with the RFC 6902 patch when there is
/// one (patchType is set only then: the API server refuses a patchType
/// without a patch), and warnings for the client.
pub fn allow(uid: &str, patch: &json_patch::Patch, warnings: &[String]) -> Value {
    let mut response = json!({"uid": uid, "allowed": true});
    if !patch.0.is_empty() {
        let bytes = serde_json::to_vec(patch).unwrap_or_default();
        response["patchType"] = json!("JSONPatch");
        response["patch"] = json!(base64::engine::general_purpose::STANDARD.encode(bytes));
    }
    if !warnings.is_empty() {
        response["warnings"] = json!(warnings);
    }
    review(response)
}

/// A refusal of `uid` with a message the client sees.
pub fn deny(uid: &str, code: u16, message: &str) -> Value {
    review(json!({
        "uid": uid,
        "allowed": false,
        "status": {"code": code, "message": message, "reason": "BadRequest"},
    }))
}

fn review(response: Value) -> Value {
    json!({"apiVersion": API_VERSION, "kind": "AdmissionReview", "response": response})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_patch_travels_as_base64_of_its_json_with_its_type() {
        let patch: json_patch::Patch =
            serde_json::from_value(json!([{"op": "add", "path": "/a", "value": 1}])).unwrap();
        let answer = allow("u-1", &patch, &["careful".into()]);
        assert_eq!(answer["apiVersion"], API_VERSION);
        assert_eq!(answer["kind"], "AdmissionReview");
        let response = &answer["response"];
        assert_eq!(response["uid"], "u-1");
        assert_eq!(response["allowed"], true);
        assert_eq!(response["patchType"], "JSONPatch");
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(response["patch"].as_str().unwrap())
            .unwrap();
        let decoded: Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(decoded, json!([{"op": "add", "path": "/a", "value": 1}]));
        assert_eq!(response["warnings"], json!(["careful"]));
    }

    #[test]
    fn no_patch_means_no_patch_type() {
        let answer = allow("u-2", &json_patch::Patch(vec![]), &[]);
        assert!(answer["response"].get("patchType").is_none(), "{answer}");
        assert!(answer["response"].get("patch").is_none(), "{answer}");
    }

    #[test]
    fn bodies_that_are_not_v1_reviews_are_named_as_such() {
        assert!(matches!(parse(b"{nope"), Err(BadReview::NotJson(_))));
        let old = br#"{"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1beta1", "request": {"uid": "x"}}"#;
        let error = parse(old).unwrap_err().to_string();
        assert!(error.contains("admissionReviewVersions: [v1]"), "{error}");
        let empty = br#"{"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1"}"#;
        assert!(matches!(parse(empty), Err(BadReview::NoRequest(_))));
        let no_uid =
            br#"{"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1", "request": {}}"#;
        assert!(matches!(parse(no_uid), Err(BadReview::NoRequest(_))));
    }

    #[test]
    fn the_api_servers_timeout_is_read_as_go_writes_durations() {
        let secs = |s: f64| Some(Duration::from_secs_f64(s));
        assert_eq!(timeout_param(Some("timeout=5s")), secs(5.0));
        assert_eq!(timeout_param(Some("a=b&timeout=4.5s")), secs(4.5));
        assert_eq!(timeout_param(Some("timeout=1m0s")), secs(60.0));
        assert_eq!(timeout_param(Some("timeout=850ms")), secs(0.85));
        assert_eq!(timeout_param(Some("timeout=0")), secs(0.0));
        for bad in [
            "timeout=",
            "timeout=5",
            "timeout=s",
            "timeout=-5s",
            "timeout=5x",
        ] {
            assert_eq!(timeout_param(Some(bad)), None, "{bad}");
        }
        assert_eq!(timeout_param(Some("other=1s")), None);
        assert_eq!(timeout_param(None), None);
    }
}
