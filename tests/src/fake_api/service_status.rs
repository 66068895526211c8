//! What kube-apiserver refuses in a write of a Service's `/status`,
//! answered 422 `Service "NAME" is invalid: ...` with each cause:
//! - `status.loadBalancer.ingress` on a Service whose type is not
//!   LoadBalancer (`ValidateLoadBalancerStatus`; the gate that allowed it,
//!   AllowServiceLBStatusOnNonLB, is off and locked since 1.32), an
//!   ingress `ip` that is no IP address, a `hostname` that is an IP;
//! - an ingress port (`ports[]`, a `PortStatus`) without its required
//!   `port` (1-65535) and `protocol` (TCP, UDP or SCTP);
//! - `status.conditions` that are not valid `metav1.Condition`s
//!   (`ValidateConditions`): the type a qualified name and not repeated,
//!   status True, False or Unknown, a reason matching
//!   `[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?`, a lastTransitionTime.
//!
//! The ports' and conditions' rules are the API's required fields and
//! metav1's condition validation; whether 1.36's Service status validation
//! calls each of them could not be confirmed from its source here, so the
//! fake may be stricter than the real server, never looser (see
//! docs/testing.md). The ipMode the real server defaults (VIP, for an
//! ingress with an ip) is not added.

use serde_json::Value;

use super::{Kind, status::ApiError};

/// Refuses the status `object` is to have, after a `/status` write.
pub fn on_status_write(kind: Kind, object: &Value) -> Result<(), ApiError> {
    if kind != Kind::Service {
        return Ok(());
    }
    let mut causes = load_balancer(object);
    causes.extend(conditions(&object["status"]["conditions"]));
    if causes.is_empty() {
        return Ok(());
    }
    let name = object["metadata"]["name"].as_str().unwrap_or("");
    let causes = match causes.as_slice() {
        [one] => one.clone(),
        many => format!("[{}]", many.join(", ")),
    };
    Err(ApiError {
        code: 422,
        reason: "Invalid",
        message: format!("Service \"{name}\" is invalid: {causes}"),
    })
}

fn load_balancer(service: &Value) -> Vec<String> {
    let at = "status.loadBalancer.ingress";
    let ingress = service["status"]["loadBalancer"]["ingress"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    if ingress.is_empty() {
        return Vec::new();
    }
    if service["spec"]["type"] != "LoadBalancer" {
        return vec![format!(
            "{at}: Forbidden: may only be used when `spec.type` is 'LoadBalancer'"
        )];
    }
    let mut causes = Vec::new();
    for (i, point) in ingress.iter().enumerate() {
        let at = format!("{at}[{i}]");
        if let Some(ip) = point["ip"].as_str().filter(|ip| !ip.is_empty())
            && ip.parse::<std::net::IpAddr>().is_err()
        {
            causes.push(format!(
                "{at}.ip: Invalid value: {ip:?}: must be a valid IP address"
            ));
        }
        if let Some(host) = point["hostname"].as_str()
            && host.parse::<std::net::IpAddr>().is_ok()
        {
            causes.push(format!(
                "{at}.hostname: Invalid value: {host:?}: must be a DNS name, not an IP address"
            ));
        }
        for (j, port) in point["ports"].as_array().into_iter().flatten().enumerate() {
            causes.extend(port_status(port, &format!("{at}.ports[{j}]")));
        }
    }
    causes
}

fn port_status(port: &Value, at: &str) -> Vec<String> {
    let mut causes = Vec::new();
    match port["port"].as_i64() {
        None | Some(0) => causes.push(format!("{at}.port: Required value")),
        Some(p) if !(1..=65535).contains(&p) => causes.push(format!(
            "{at}.port: Invalid value: {p}: must be between 1 and 65535, inclusive"
        )),
        Some(_) => {}
    }
    match port["protocol"].as_str() {
        None | Some("") => causes.push(format!("{at}.protocol: Required value")),
        Some("TCP" | "UDP" | "SCTP") => {}
        Some(other) => causes.push(format!(
            "{at}.protocol: Unsupported value: {other:?}: supported values: \"SCTP\", \"TCP\", \"UDP\""
        )),
    }
    causes
}

const REASON_FORMAT: &str = "[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?";

fn reason_ok(reason: &str) -> bool {
    let b = reason.as_bytes();
    let inner = |c: &u8| c.is_ascii_alphanumeric() || b"_,:".contains(c);
    b.first().is_some_and(u8::is_ascii_alphabetic)
        && b.iter().all(inner)
        && b.last()
            .is_some_and(|c| c.is_ascii_alphanumeric() || *c == b'_')
}

/// A qualified name's failures, as `ValidateLabelName` words them.
fn qualified_name(value: &str) -> Vec<String> {
    let (prefix, name) = match value.split_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, value),
    };
    let mut causes = Vec::new();
    let name_ok = !name.is_empty()
        && name.len() <= 63
        && name
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || b"-_.".contains(&c))
        && name.as_bytes()[0].is_ascii_alphanumeric()
        && name.as_bytes()[name.len() - 1].is_ascii_alphanumeric();
    if !name_ok {
        causes.push("name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')".to_owned());
    }
    if let Some(prefix) = prefix {
        let label_ok = |l: &str| {
            !l.is_empty()
                && l.bytes()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-')
                && !l.starts_with('-')
                && !l.ends_with('-')
        };
        if prefix.len() > 253 || !prefix.split('.').all(label_ok) {
            causes.push("prefix part a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')".to_owned());
        }
    }
    causes
}

fn conditions(list: &Value) -> Vec<String> {
    let mut causes = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    for (i, c) in list.as_array().into_iter().flatten().enumerate() {
        let at = format!("status.conditions[{i}]");
        let kind = c["type"].as_str().unwrap_or("");
        if !seen.insert(kind.to_owned()) {
            causes.push(format!("{at}.type: Duplicate value: {kind:?}"));
        }
        for why in qualified_name(kind) {
            causes.push(format!("{at}.type: Invalid value: {kind:?}: {why}"));
        }
        let status = c["status"].as_str().unwrap_or("");
        if !["True", "False", "Unknown"].contains(&status) {
            causes.push(format!(
                "{at}.status: Unsupported value: {status:?}: supported values: \"False\", \"True\", \"Unknown\""
            ));
        }
        if c["lastTransitionTime"].as_str().is_none_or(str::is_empty) {
            causes.push(format!(
                "{at}.lastTransitionTime: Required value: must be set"
            ));
        }
        match c["reason"].as_str().unwrap_or("") {
            "" => causes.push(format!("{at}.reason: Required value: must be set")),
            reason if !reason_ok(reason) => causes.push(format!(
                "{at}.reason: Invalid value: {reason:?}: a condition reason must start with alphabetic character, optionally followed by a string of alphanumeric characters or '_,:', and must end with an alphanumeric character or '_' (e.g. 'my_name',  or 'MY_NAME',  or 'MyName',  or 'ReasonA,ReasonB',  or 'ReasonA:ReasonB', regex used for validation is '{REASON_FORMAT}')"
            )),
            _ => {}
        }
    }
    causes
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn service(kind: &str, status: Value) -> Value {
        json!({"metadata": {"name": "ssh-job"}, "spec": {"type": kind}, "status": status})
    }

    fn refused(object: &Value) -> String {
        let e = on_status_write(Kind::Service, object).expect_err("refused");
        assert_eq!((e.code, e.reason), (422, "Invalid"));
        e.message
    }

    #[test]
    fn ingress_on_a_service_that_is_not_a_load_balancer_is_forbidden() {
        let status = json!({"loadBalancer": {"ingress": [{"ip": "198.18.0.10"}]}});
        assert!(on_status_write(Kind::Service, &service("LoadBalancer", status.clone())).is_ok());
        assert_eq!(
            refused(&service("ClusterIP", status)),
            "Service \"ssh-job\" is invalid: status.loadBalancer.ingress: Forbidden: may only be used when `spec.type` is 'LoadBalancer'"
        );
        let empty = json!({"loadBalancer": {}});
        assert!(on_status_write(Kind::Service, &service("ClusterIP", empty)).is_ok());
    }

    #[test]
    fn an_ingress_port_needs_its_port_and_protocol() {
        let status = |ports: Value| json!({"loadBalancer": {"ingress": [{"ip": "198.18.0.10", "ports": ports}]}});
        let good = status(json!([{"port": 9000, "protocol": "TCP"}]));
        assert!(on_status_write(Kind::Service, &service("LoadBalancer", good)).is_ok());
        let message = refused(&service("LoadBalancer", status(json!([{"port": 9000}]))));
        assert!(
            message.ends_with("status.loadBalancer.ingress[0].ports[0].protocol: Required value"),
            "{message}"
        );
        let message = refused(&service(
            "LoadBalancer",
            status(json!([{"protocol": "TCP"}])),
        ));
        assert!(
            message.ends_with("ports[0].port: Required value"),
            "{message}"
        );
    }

    #[test]
    fn conditions_must_be_valid_metav1_conditions() {
        let good = json!({"conditions": [{"type": "ssh-fwd.io/Granted", "status": "True",
            "reason": "PortGranted", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}]});
        assert!(on_status_write(Kind::Service, &service("LoadBalancer", good)).is_ok());
        let bad = json!({"conditions": [
            {"type": "Bad Type", "status": "Yes", "reason": "port granted"},
            {"type": "Bad Type", "status": "True", "reason": "Ok", "lastTransitionTime": "2026-01-01T00:00:00Z"}]});
        let message = refused(&service("LoadBalancer", bad));
        for cause in [
            "status.conditions[0].type: Invalid value: \"Bad Type\": name part must consist",
            "status.conditions[0].status: Unsupported value: \"Yes\"",
            "status.conditions[0].lastTransitionTime: Required value: must be set",
            "status.conditions[0].reason: Invalid value: \"port granted\"",
            "status.conditions[1].type: Duplicate value: \"Bad Type\"",
        ] {
            assert!(message.contains(cause), "{cause} in {message}");
        }
    }
}
