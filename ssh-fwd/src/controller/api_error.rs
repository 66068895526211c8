//! API errors as the controller reports them: what it was doing, and for a
//! 403 Forbidden, which RBAC manifest in deploy/ grants the call, since that
//! is nearly always the fix (an old or unapplied manifest, or the wrong
//! ServiceAccount).

/// Which rules grant a call.
#[derive(Clone, Copy, Debug)]
pub enum Grant {
    /// Services, their status, pods and events, cluster-wide.
    Cluster,
    /// The leader-election Lease, in --lease-namespace only.
    Lease,
}

impl Grant {
    fn hint(self) -> &'static str {
        match self {
            Grant::Cluster => {
                "forbidden: the ClusterRole ssh-fwd-controller in deploy/base/rbac-controller.yaml grants this; apply it and run the controller as the ServiceAccount ssh-fwd/ssh-fwd-controller"
            }
            Grant::Lease => {
                "forbidden: the Role ssh-fwd-controller-lease in deploy/base/rbac-controller.yaml grants this in the namespace it is installed in; apply it there, or set --lease-namespace to that namespace"
            }
        }
    }
}

/// `e` with `what` as its context, and the RBAC hint when it is a 403.
pub fn context(e: kube::Error, what: String, grant: Grant) -> anyhow::Error {
    let forbidden = matches!(&e, kube::Error::Api(s) if s.is_forbidden());
    let what = if forbidden {
        format!("{what}: {}", grant.hint())
    } else {
        what
    };
    anyhow::Error::new(e).context(what)
}

/// Whether `e` says the object is not the one meant any more: gone (404),
/// or replaced by a namesake, which a uid precondition turns into 409
/// Conflict (or 422 Invalid, when the uid is in a patch).
pub fn is_gone(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.is_not_found() || s.is_conflict() || s.is_invalid())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api(code: u16, reason: &str) -> kube::Error {
        let status: kube::core::Status = serde_json::from_value(serde_json::json!({
            "status": "Failure", "message": "m", "reason": reason, "code": code
        }))
        .unwrap();
        kube::Error::Api(Box::new(status))
    }

    #[test]
    fn a_forbidden_call_names_the_rbac_manifest_that_grants_it() {
        let e = context(
            api(403, "Forbidden"),
            "writing the Lease".into(),
            Grant::Lease,
        );
        let message = format!("{e:#}");
        assert!(
            message.starts_with("writing the Lease: forbidden"),
            "{message}"
        );
        assert!(
            message.contains("Role ssh-fwd-controller-lease in deploy/base/rbac-controller.yaml")
        );
        let e = context(
            api(403, "Forbidden"),
            "creating Service a/b".into(),
            Grant::Cluster,
        );
        assert!(
            format!("{e:#}")
                .contains("ClusterRole ssh-fwd-controller in deploy/base/rbac-controller.yaml")
        );
        let e = context(
            api(500, "InternalError"),
            "creating Service a/b".into(),
            Grant::Cluster,
        );
        assert!(!format!("{e:#}").contains("rbac"));
    }
}
