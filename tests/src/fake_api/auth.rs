//! Authentication as kube-apiserver does it for bearer tokens: a token the
//! server knows maps to a user (name, uid, groups, extra); an unknown one,
//! or none, is answered 401 `Unauthorized` while enforcement is on
//! ([`super::FakeApi::enforce`]). The tokens are opaque strings the fake
//! issues, standing in for the signed JWTs the real server verifies: what
//! a test can rely on is the user info each maps to, made as the real
//! authenticators make it.

use std::collections::BTreeMap;

use serde_json::{Value, json};

/// The extra key of a pod-bound service account token: the node its pod
/// runs on (Kubernetes 1.30+, `ServiceAccountTokenPodNodeInfo`).
pub const NODE_NAME: &str = "authentication.kubernetes.io/node-name";
/// The extra key of a pod-bound token: that node's uid.
pub const NODE_UID: &str = "authentication.kubernetes.io/node-uid";
/// The extra key of a pod-bound token: the pod's name.
pub const POD_NAME: &str = "authentication.kubernetes.io/pod-name";
/// The extra key of a pod-bound token: the pod's uid.
pub const POD_UID: &str = "authentication.kubernetes.io/pod-uid";
/// The extra key of a service account token: `JTI=` and the token's id.
pub const CREDENTIAL_ID: &str = "authentication.kubernetes.io/credential-id";

/// The group of every authenticated user.
pub const AUTHENTICATED: &str = "system:authenticated";
/// The group the API server lets do anything (bound to `cluster-admin`).
pub const MASTERS: &str = "system:masters";

/// Who a request is from, as `request.userInfo` shows it to admission.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UserInfo {
    pub username: String,
    pub uid: String,
    pub groups: Vec<String>,
    pub extra: BTreeMap<String, Vec<String>>,
}

impl UserInfo {
    /// A service account's user, as the service account authenticator
    /// makes it: `system:serviceaccount:NS:NAME`, its groups, and for a
    /// token bound to a pod on `node` the pod's and node's names and uids.
    pub fn service_account(namespace: &str, name: &str, node: Option<&str>, serial: u64) -> Self {
        let mut extra = BTreeMap::new();
        extra.insert(
            CREDENTIAL_ID.to_owned(),
            vec![format!("JTI=00000000-0000-4000-9000-{serial:012x}")],
        );
        if let Some(node) = node {
            let pod = format!("{name}-{node}");
            extra.insert(NODE_NAME.to_owned(), vec![node.to_owned()]);
            extra.insert(NODE_UID.to_owned(), vec![format!("node-uid-{node}")]);
            extra.insert(POD_NAME.to_owned(), vec![pod.clone()]);
            extra.insert(POD_UID.to_owned(), vec![format!("pod-uid-{pod}")]);
        }
        Self {
            username: format!("system:serviceaccount:{namespace}:{name}"),
            uid: format!("sa-uid-{namespace}-{name}"),
            groups: vec![
                "system:serviceaccounts".to_owned(),
                format!("system:serviceaccounts:{namespace}"),
                AUTHENTICATED.to_owned(),
            ],
            extra,
        }
    }

    /// A person's user from the cluster's identity provider.
    pub fn person(username: &str, groups: &[&str]) -> Self {
        let mut all: Vec<String> = groups.iter().map(|g| (*g).to_owned()).collect();
        all.push(AUTHENTICATED.to_owned());
        Self {
            username: username.to_owned(),
            uid: String::new(),
            groups: all,
            extra: BTreeMap::new(),
        }
    }

    /// As the AdmissionRequest's userInfo serialises it: `uid` and `extra`
    /// left out when empty (omitempty), so CEL sees them absent.
    pub fn to_json(&self) -> Value {
        let mut info = json!({"username": self.username, "groups": self.groups});
        if !self.uid.is_empty() {
            info["uid"] = json!(self.uid);
        }
        if !self.extra.is_empty() {
            info["extra"] = json!(self.extra);
        }
        info
    }
}

/// The tokens the server accepts.
#[derive(Debug, Default)]
pub struct Tokens {
    users: BTreeMap<String, UserInfo>,
}

impl Tokens {
    /// Makes `token` stand for `user`.
    pub fn issue(&mut self, token: String, user: UserInfo) -> String {
        self.users.insert(token.clone(), user);
        token
    }

    /// How many tokens were issued: a serial for the next.
    pub fn issued(&self) -> u64 {
        self.users.len() as u64
    }

    /// The user `token` stands for; `None` for a token the server does not
    /// know (or no token: ""), which the real server answers 401.
    pub fn authenticate(&self, token: &str) -> Option<&UserInfo> {
        self.users.get(token)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_bound_service_account_token_carries_its_node_and_pod() {
        let user = UserInfo::service_account("ssh-fwd", "ssh-fwd-agent", Some("node1"), 7);
        assert_eq!(user.username, "system:serviceaccount:ssh-fwd:ssh-fwd-agent");
        assert_eq!(
            user.groups,
            [
                "system:serviceaccounts",
                "system:serviceaccounts:ssh-fwd",
                "system:authenticated"
            ]
        );
        assert_eq!(user.extra[NODE_NAME], ["node1"]);
        for key in [NODE_UID, POD_NAME, POD_UID, CREDENTIAL_ID] {
            assert_eq!(user.extra[key].len(), 1, "{key}");
        }
        let unbound = UserInfo::service_account("ssh-fwd", "ssh-fwd-agent", None, 8);
        assert!(!unbound.extra.contains_key(NODE_NAME));
        assert!(unbound.to_json()["extra"].get(NODE_NAME).is_none());
    }

    #[test]
    fn an_unknown_token_authenticates_nobody() {
        let mut tokens = Tokens::default();
        let token = tokens.issue("t".into(), UserInfo::person("alice", &[]));
        assert_eq!(tokens.authenticate(&token).unwrap().username, "alice");
        assert!(tokens.authenticate("forged").is_none());
        assert!(tokens.authenticate("").is_none());
        let json = UserInfo::person("alice", &[]).to_json();
        assert!(json.get("extra").is_none() && json.get("uid").is_none());
    }
}
