//! The names ssh-fwd reads and writes on Kubernetes objects: labels,
//! annotations, the load-balancer class, event reasons and actions, and the
//! names it signs its own objects with. Each is defined here once, and the
//! agent, the controller, the webhook and the tests import them, so a
//! renamed key cannot leave a reader behind. Depends on nothing.
//!
//! A key may be read on more than one kind of object; its comment says
//! which, and what it holds on each.

/// Pod label: a pod asks for SSH with it set to [`SSH_ENABLED`]. Also the
/// `spec.loadBalancerClass` ssh-fwd implements ([`LB_CLASS`]): one name for
/// the one feature.
pub const SSH: &str = "ssh-fwd.io/ssh";
/// The value of [`SSH`] on a pod that asks for SSH.
pub const SSH_ENABLED: &str = "enabled";
/// The `spec.loadBalancerClass` ssh-fwd implements: the controller writes
/// the status of such Services, the agents honour them.
pub const LB_CLASS: &str = SSH;

/// Pod annotation (optional): the pod port, a number or a container port
/// name, that SSH goes to; 22 when absent.
pub const TARGET_PORT: &str = "ssh-fwd.io/target-port";
/// Pod annotation the controller (or the webhook, at admission) publishes:
/// `HOST:PORT`.
pub const ENDPOINT: &str = "ssh-fwd.io/endpoint";
/// Pod annotation the controller writes with the endpoint once it has told
/// the user (the event): a pod admitted with a port has [`ENDPOINT`] from
/// admission on, before the port is live.
pub const ANNOUNCED: &str = "ssh-fwd.io/announced";
/// Pod label: the name of the pod's Service, which selects on it, so it
/// selects that pod and no other. Lease annotation of a reservation: the
/// Service (`namespace/name`) that holds the port.
pub const SERVICE: &str = "ssh-fwd.io/service";
/// Service label: the uid of the pod it serves. Lease annotation of a
/// reservation the leader made for a pod: that pod's uid.
pub const POD_UID: &str = "ssh-fwd.io/pod-uid";
/// Service annotation: the name of the pod it serves.
pub const POD: &str = "ssh-fwd.io/pod";
/// Pod annotation: the token of the pod's reservation, written at
/// admission.
pub const RESERVATION: &str = "ssh-fwd.io/reservation";
/// Pod annotation the webhook writes when it admits a pod without a port:
/// why.
pub const ADMISSION: &str = "ssh-fwd.io/admission";
/// Pod annotation: the Secret whose `authorized_keys` the pod gets.
pub const KEYS_SECRET: &str = "ssh-fwd.io/authorized-keys-secret";

/// Pod annotation the controller writes: when an SSH connection of the
/// pod last carried a packet (RFC 3339, UTC, to the second), from the
/// agents' activity ConfigMaps, at most once per `--activity-interval`.
pub const LAST_ACTIVITY: &str = "ssh-fwd.io/last-activity";
/// Pod annotation the controller writes with [`LAST_ACTIVITY`]: the SSH
/// connections open then.
pub const SSH_CONNECTIONS: &str = "ssh-fwd.io/ssh-connections";
/// ConfigMap label of an agent's activity ConfigMap; the controller's
/// watch selects on it ([`ACTIVITY_FROM`]).
pub const ACTIVITY: &str = "ssh-fwd.io/activity";
/// The value of [`ACTIVITY`]: what the agents publish.
pub const ACTIVITY_FROM: &str = "agent";
/// The name of an agent's activity ConfigMap, before its node's name.
pub const ACTIVITY_PREFIX: &str = "ssh-fwd-activity-";
/// ConfigMap label of an agent's served report (what its node's data
/// path holds); the controller's watch selects on it, with the value
/// [`ACTIVITY_FROM`].
pub const SERVED: &str = "ssh-fwd.io/served";
/// The name of an agent's served report, before its node's name.
pub const SERVED_PREFIX: &str = "ssh-fwd-served-";

/// Service annotation: the client ranges that may connect through an
/// externalIPs Service's ports, comma-separated CIDRs (a LoadBalancer
/// Service uses `spec.loadBalancerSourceRanges`); absent or empty: every
/// source, or the agent's `--allow`.
pub const SOURCE_RANGES: &str = "ssh-fwd.io/source-ranges";
/// Service annotation: the rate of new connections one client address may
/// open through the Service's ports, `N/s` (burst: the agent's
/// `--syn-burst`), or `off`; absent: the agent's `--syn-rate`.
pub const SYN_RATE: &str = "ssh-fwd.io/syn-rate";

/// Service status condition type: the controller's grant of a port on the
/// SSH IP to the Service, for one pod (`k8s::grant`). Only holders of
/// `services/status` write it; the agents honour a port only where it is.
pub const GRANTED: &str = "ssh-fwd.io/Granted";

/// Lease label of a port reservation: the SSH IP the port is on; the
/// watches select on it.
pub const PORT_RESERVATION: &str = "ssh-fwd.io/port-reservation";
/// Lease annotation of a reservation: the reserved port.
pub const PORT: &str = "ssh-fwd.io/port";
/// Lease annotation of a reservation: the token the admitted pod carries
/// ([`RESERVATION`]).
pub const TOKEN: &str = "ssh-fwd.io/token";
/// Lease annotation of a reservation: the namespace of the pod it is for.
pub const NAMESPACE: &str = "ssh-fwd.io/namespace";
/// Lease annotation of a quarantined reservation: when the job that held
/// its port ended (RFC 3339); no other job gets the port for
/// `--port-reuse-after` after it unless the range is otherwise exhausted.
pub const RELEASED_AT: &str = "ssh-fwd.io/released-at";
/// Lease annotation of a reservation made at admission on a port whose
/// quarantine gave way: when the port's previous job ended (RFC 3339), for
/// the leader to tell the pod once it binds the reservation.
pub const QUARANTINE_CUT: &str = "ssh-fwd.io/quarantine-cut";

/// Lease label of an SSH IP's ownership (`--announce l2` in Kubernetes
/// mode): the SSH IP. The agents watch the Leases carrying it.
pub const ANNOUNCE: &str = "ssh-fwd.io/announce";
/// The agents' name: the reporting controller of their events.
pub const AGENT: &str = "ssh-fwd-agent";
/// Annotation of an announcement Lease: the MACs its holder answers ARP
/// and neighbour solicitations from (comma-separated, `02:00:5e:00:00:01`),
/// the only ones the other agents give way to. Written by the holder.
pub const ANNOUNCE_MACS: &str = "ssh-fwd.io/announce-macs";
/// Value of [`ANNOUNCE`] on a node's own announcement Lease
/// (`ssh-fwd-announce-node-NODE`), which publishes its MACs before it
/// holds any SSH IP.
pub const ANNOUNCE_NODE: &str = "node";

/// Node annotation: this node's external interfaces, in `--external-iface`'s forms
/// (`bond0`, `eno*`, `auto`, `auto:ADDR`), comma-separated; replaces the
/// agent's `--external-iface` there. An annotation, not a label: a label's value
/// cannot hold `*`, `+` or `:`. Written by cluster administrators (and
/// the node's kubelet), read by the agent at start.
pub const IFACE: &str = "ssh-fwd.io/iface";

/// Secret annotation of the self-signed webhook pair: when its serving
/// certificate ends (Unix seconds).
pub const NOT_AFTER: &str = "ssh-fwd.io/not-after";

/// The default Secret (in the controller's namespace) of the host CA that
/// signs jobs' host certificates (`--host-ca-secret`).
pub const HOST_CA_SECRET: &str = "ssh-fwd-host-ca";
/// Its key holding the CA's private key (OpenSSH format, Ed25519).
pub const HOST_CA_SECRET_KEY: &str = "ssh_host_ca_key";
/// The ConfigMap (in the controller's namespace) the host CA's trust line
/// is published in, readable by every authenticated user.
pub const HOST_CA_CONFIG_MAP: &str = "ssh-fwd-host-ca";
/// Pod annotation the webhook sets: the Secret (in the pod's namespace)
/// the controller issues the pod's host key and certificate into. The
/// pod's creator can change it; the controller only ever creates a Secret
/// of this name starting with [`HOST_KEY_SECRET_PREFIX`], owned by the pod.
pub const HOST_KEY_SECRET: &str = "ssh-fwd.io/host-key-secret";
/// The name every per-pod host key Secret starts with.
pub const HOST_KEY_SECRET_PREFIX: &str = "ssh-fwd-host-key-";
/// The type of a per-pod host key Secret.
pub const HOST_KEY_SECRET_TYPE: &str = "ssh-fwd.io/host-key";
/// Pod annotation the controller sets once it issued the pod's host
/// certificate: its serial and end (`SERIAL until RFC3339`).
pub const HOST_CERTIFICATE: &str = "ssh-fwd.io/host-certificate";

/// The controller's name: the `app.kubernetes.io/managed-by` value of what
/// it creates, and the reporting controller of its events.
pub const CONTROLLER: &str = "ssh-fwd-controller";
/// The standard label naming who manages an object.
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
/// Service label that makes kube-proxy and Cilium leave the Service alone;
/// the agents select on it.
pub const PROXY_NAME_LABEL: &str = "service.kubernetes.io/service-proxy-name";
/// The value of [`PROXY_NAME_LABEL`] on the Services the agents serve.
pub const PROXY_NAME: &str = "ssh-fwd";
/// The agents' and the controller's default `--selector`:
/// `PROXY_NAME_LABEL=PROXY_NAME`, which every Service of ours carries.
pub const DEFAULT_SELECTOR: &str = "service.kubernetes.io/service-proxy-name=ssh-fwd";

/// The `reason` of each event the controller writes on a pod.
pub mod reason {
    /// Normal: the pod's SSH endpoint is live; the note holds the command.
    pub const SSH_READY: &str = "SSHReady";
    /// Warning beside [`SSH_READY`] when `--publish-wait` passed before the
    /// agents reported the pod's mapping.
    pub const SSH_UNCONFIRMED: &str = "SSHUnconfirmed";
    /// Warning: every port in the range is taken.
    pub const NO_FREE_PORT: &str = "NoFreePort";
    /// Warning: the target-port annotation names no port the pod can have.
    pub const INVALID_TARGET_PORT: &str = "InvalidTargetPort";
    /// Warning: a Service of the name the pod's would take is someone
    /// else's.
    pub const SERVICE_NAME_TAKEN: &str = "ServiceNameTaken";
    /// Warning: the pod was created without its endpoint variable, or its
    /// variable names a port it no longer has.
    pub const SSH_ENV_MISSING: &str = "SSHEnvMissing";
    /// Warning: the pod got a port another job left within
    /// `--port-reuse-after`, every other port of the range being taken.
    pub const PORT_QUARANTINE_CUT: &str = "PortQuarantineCut";
    /// Warning: the pod's Service was changed by someone else (its
    /// ports, selector or shape); the controller put it back.
    pub const SERVICE_RESTORED: &str = "SSHServiceRestored";
    /// Normal, on an SSH IP's Lease: a node took the SSH IP over and
    /// answers ARP for it now (`--announce l2`).
    pub const SSH_IP_TAKEN_OVER: &str = "SSHIPTakenOver";
}

/// The `action` of each event the controller writes on a pod.
pub mod action {
    /// The endpoint was published.
    pub const PUBLISH: &str = "Publish";
    /// A port was (or could not be) given.
    pub const ALLOCATE: &str = "Allocate";
    /// The pod's Service could not be created.
    pub const CREATE_SERVICE: &str = "CreateService";
    /// The pod's Service was put back as the controller made it.
    pub const RESTORE_SERVICE: &str = "RestoreService";
    /// An agent took an SSH IP's Lease.
    pub const TAKE_OVER: &str = "TakeOver";
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_selector_is_the_proxy_name_label() {
        assert_eq!(DEFAULT_SELECTOR, format!("{PROXY_NAME_LABEL}={PROXY_NAME}"));
    }
}
