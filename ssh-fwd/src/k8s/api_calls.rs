//! Every Kubernetes API call the agent and the controller make, kept next to
//! the code that makes them. Tests check both ways: the calls the code makes
//! against a recording API server are all listed here, and the RBAC rules in
//! deploy/ grant everything listed here.

/// Calls on one resource.
#[derive(Debug)]
pub struct ApiCall {
    /// API group; "" is the core group.
    pub group: &'static str,
    /// Resource, with the subresource after a slash (`services/status`).
    pub resource: &'static str,
    pub verbs: &'static [&'static str],
    /// Only in the component's own namespace (a Role), not cluster-wide.
    pub own_namespace: bool,
}

const fn call(
    group: &'static str,
    resource: &'static str,
    verbs: &'static [&'static str],
) -> ApiCall {
    ApiCall {
        group,
        resource,
        verbs,
        own_namespace: false,
    }
}

/// The agent: watches Services and EndpointSlices (`k8s::source`).
pub const AGENT: &[ApiCall] = &[
    call("", "services", &["list", "watch"]),
    call("discovery.k8s.io", "endpointslices", &["list", "watch"]),
    // The cluster's cross-node key, kept in a Secret of its own namespace
    // that the first agent creates (`agent::cross_node_key`).
    ApiCall {
        group: "",
        resource: "secrets",
        verbs: &["get", "create"],
        own_namespace: true,
    },
    // The node's SSH activity, one ConfigMap per node in its own namespace
    // (`agent::activity::publish`), read when not known, created if absent.
    ApiCall {
        group: "",
        resource: "configmaps",
        verbs: &["get", "create", "patch"],
        own_namespace: true,
    },
    // Its own Node: its uid, to make that ConfigMap the node's; its labels
    // for --announce-nodes; its annotation ssh-fwd.io/iface, which chooses
    // the external interface (`agent::iface`).
    call("", "nodes", &["get"]),
    // --announce l2: one Lease per SSH IP in --lease-namespace, watched by
    // every agent, written by the one that takes it, renews it or hands it
    // back, read by a standby whose take failed (`agent::announce::leases`).
    ApiCall {
        group: "coordination.k8s.io",
        resource: "leases",
        verbs: &["get", "list", "watch", "create", "update"],
        own_namespace: true,
    },
    // --announce l2: each takeover told on the SSH IP's Lease; and in every
    // namespace, an Event on each Service the agents skip or serve in part
    // (`agent::source::events`).
    call("events.k8s.io", "events", &["create"]),
];

/// The controller (`controller::*`).
pub const CONTROLLER: &[ApiCall] = &[
    // Watches its own Services and those the agents honour (ports in use);
    // reads one whose name a create found taken; puts its own Services'
    // spec back when someone changed it.
    call(
        "",
        "services",
        &["get", "list", "watch", "create", "patch", "delete"],
    ),
    // The LoadBalancer ingress it implements.
    call("", "services/status", &["patch"]),
    // Watches labelled pods; labels them for the selector and publishes the
    // endpoint annotation.
    call("", "pods", &["list", "watch", "patch"]),
    // "SSH: Connected! ..." and "no free port", each sent once, by a
    // Recorder of its own (so never patched as a repeat).
    call("events.k8s.io", "events", &["create"]),
    // Leader election.
    ApiCall {
        group: "coordination.k8s.io",
        resource: "leases",
        verbs: &["get", "create", "update"],
        own_namespace: true,
    },
    // Port reservations (`controller::reservation`), one Lease per port in
    // its own namespace: watched by every replica's webhook, created at
    // admission and by the leader, bound to their pod and quarantined when
    // their job ends (update), deleted to take a quarantined port (the
    // webhook and the leader) and released by the leader.
    ApiCall {
        group: "coordination.k8s.io",
        resource: "leases",
        verbs: &["list", "watch", "create", "update", "delete"],
        own_namespace: true,
    },
    // --webhook-self-signed: the CA and serving certificate, kept in a
    // Secret of its own namespace; --host-certs: the host CA's Secret,
    // read, or created when absent (`controller::host_certs`).
    ApiCall {
        group: "",
        resource: "secrets",
        verbs: &["get", "create", "update"],
        own_namespace: true,
    },
    // --host-certs: each SSH pod's host key Secret, created in the pod's
    // namespace, never read (deploy/'s admission policy holds it to that
    // shape: ssh-fwd-controller-secrets).
    call("", "secrets", &["create"]),
    // --host-certs: the host CA's known_hosts line, published in a
    // ConfigMap of its own namespace.
    ApiCall {
        group: "",
        resource: "configmaps",
        verbs: &["get", "create", "update"],
        own_namespace: true,
    },
    // --webhook-self-signed: the CA written into caBundle.
    call(
        "admissionregistration.k8s.io",
        "mutatingwebhookconfigurations",
        &["get", "update"],
    ),
    // The agents' activity ConfigMaps, mirrored onto pods
    // (`controller::activity`).
    ApiCall {
        group: "",
        resource: "configmaps",
        verbs: &["list", "watch"],
        own_namespace: true,
    },
    // Its own pod, for the image of the install-keys containers.
    ApiCall {
        group: "",
        resource: "pods",
        verbs: &["get"],
        own_namespace: true,
    },
];

/// Whether `calls` lists this verb on this resource.
pub fn allows(calls: &[ApiCall], group: &str, resource: &str, verb: &str) -> bool {
    calls
        .iter()
        .any(|c| c.group == group && c.resource == resource && c.verbs.contains(&verb))
}
