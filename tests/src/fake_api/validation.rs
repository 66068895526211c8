//! What kube-apiserver's validation refuses of the objects ssh-fwd writes,
//! checked on create and answered as it answers them: 422 Invalid, the
//! message `KIND "NAME" is invalid: FIELD: ...` with each cause. Only the
//! rules a client of this fake could break are here; anything else is
//! taken as it comes.

use serde_json::Value;

use super::{Kind, status::ApiError};

/// events.k8s.io/v1: the longest `note`, in bytes.
pub const NOTE_LIMIT: usize = 1024;

/// Refuses `object` as the API server would refuse its create.
pub fn on_create(kind: Kind, object: &Value) -> Result<(), ApiError> {
    let causes = match kind {
        Kind::Event => event(object),
        _ => Vec::new(),
    };
    if causes.is_empty() {
        return Ok(());
    }
    let name = object["metadata"]["name"]
        .as_str()
        .or_else(|| object["metadata"]["generateName"].as_str())
        .unwrap_or("");
    let causes = match causes.as_slice() {
        [one] => one.clone(),
        many => format!("[{}]", many.join(", ")),
    };
    Err(ApiError {
        code: 422,
        reason: "Invalid",
        message: format!("{} \"{name}\" is invalid: {causes}", shown(kind)),
    })
}

/// The kind as the API server names it in a message.
fn shown(kind: Kind) -> String {
    let name = match kind {
        Kind::Service => "Service",
        Kind::EndpointSlice => "EndpointSlice",
        Kind::Pod => "Pod",
        Kind::Lease => "Lease",
        Kind::Event => "Event",
        Kind::Secret => "Secret",
        Kind::MutatingWebhookConfiguration => "MutatingWebhookConfiguration",
    };
    match kind.group() {
        "" => name.to_owned(),
        group => format!("{name}.{group}"),
    }
}

fn event(event: &Value) -> Vec<String> {
    let note = event["note"].as_str().unwrap_or("");
    if note.len() > NOTE_LIMIT {
        return vec![format!(
            "note: Invalid value: \"\": can have at most {NOTE_LIMIT} characters"
        )];
    }
    Vec::new()
}
