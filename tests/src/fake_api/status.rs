//! Failures as the API server answers them: `Status` objects, and the
//! precondition check every write and delete goes through.

use serde_json::{Value, json};

use super::Kind;

/// A failure answered as a `Status` object, as the real server does.
#[derive(Debug)]
pub struct ApiError {
    pub code: u16,
    pub reason: &'static str,
    pub message: String,
}

impl ApiError {
    pub fn status(&self) -> Value {
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
               "message": self.message, "reason": self.reason, "code": self.code})
    }

    /// The answer to an injected failure: the code with the reason the
    /// API server gives it.
    pub fn injected(code: u16) -> Self {
        let reason = match code {
            400 => "BadRequest",
            401 => "Unauthorized",
            403 => "Forbidden",
            404 => "NotFound",
            409 => "Conflict",
            410 => "Expired",
            415 => "UnsupportedMediaType",
            422 => "Invalid",
            429 => "TooManyRequests",
            503 => "ServiceUnavailable",
            504 => "Timeout",
            _ => "InternalError",
        };
        Self {
            code,
            reason,
            message: "injected failure".into(),
        }
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self {
            code: 400,
            reason: "BadRequest",
            message: message.into(),
        }
    }

    pub fn not_found(kind: Kind, key: &str) -> Self {
        Self {
            code: 404,
            reason: "NotFound",
            message: format!("{} \"{key}\" not found", kind.resource()),
        }
    }

    pub fn conflict(kind: Kind, key: &str, why: &str) -> Self {
        Self {
            code: 409,
            reason: "Conflict",
            message: format!(
                "Operation cannot be fulfilled on {} \"{key}\": {why}",
                kind.resource()
            ),
        }
    }
}

/// The API server's precondition check: a uid or resourceVersion the
/// client names must be the object's.
pub fn check_preconditions(
    kind: Kind,
    key: &str,
    current: &Value,
    uid: &Value,
    rv: &Value,
) -> Result<(), ApiError> {
    let meta = &current["metadata"];
    if let Some(uid) = uid.as_str()
        && Some(uid) != meta["uid"].as_str()
    {
        let why = format!(
            "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
            meta["uid"].as_str().unwrap_or("")
        );
        return Err(ApiError::conflict(kind, key, &why));
    }
    if let Some(rv) = rv.as_str()
        && Some(rv) != meta["resourceVersion"].as_str()
    {
        return Err(ApiError::conflict(
            kind,
            key,
            "the object has been modified; please apply your changes to the latest version and try again",
        ));
    }
    Ok(())
}
