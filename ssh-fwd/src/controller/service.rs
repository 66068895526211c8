//! The Service the controller creates for one pod, the names and labels that
//! tie them together, and which ports on the SSH IP are taken.

use std::collections::BTreeMap;

use k8s_openapi::{
    api::core::v1::{Service, ServicePort, ServiceSpec},
    apimachinery::pkg::{
        apis::meta::v1::{ObjectMeta, OwnerReference, Time},
        util::intstr::IntOrString,
    },
};

use super::{pod::PodView, ssh_ips::SshIps};
use crate::args::ServiceStyle;
use crate::source::kubernetes::{
    desired::{self, Policy},
    objects::ServiceView,
};
use crate::vocabulary;

const DEFAULT_TARGET_PORT: i32 = 22;

/// What every Service shares.
#[derive(Clone, Debug)]
pub struct Settings {
    pub ssh_ips: SshIps,
    pub style: ServiceStyle,
}

/// The Service name for a pod: `ssh-` and the pod name, made a DNS label
/// (dots become dashes; names over 63 characters are cut and end in a hash of
/// the full name, so they stay unique and stable).
pub fn service_name(pod_name: &str) -> String {
    let full = format!("ssh-{}", pod_name.replace('.', "-"));
    if full.len() <= 63 {
        return full;
    }
    let hash = full.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    let head = full[..54].trim_end_matches('-');
    format!("{head}-{:08x}", hash as u32)
}

/// A target-port annotation the API server would refuse in a Service.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "the annotation {key} is `{0}`, which is neither a port number (1-65535) nor a container port name (up to 15 lowercase letters, digits and '-', with a letter, no '-' at either end or twice in a row); set it to the port sshd listens on, e.g. \"2222\" or \"ssh\", or remove it for port 22",
    key = vocabulary::TARGET_PORT
)]
pub struct InvalidTargetPort(pub String);

/// The target port a pod asked for, checked the way the API server checks
/// a Service's targetPort, so a bad annotation is reported to the pod
/// instead of failing every create.
pub fn target_port(pod: &PodView) -> Result<IntOrString, InvalidTargetPort> {
    let asked = pod
        .metadata
        .annotation(vocabulary::TARGET_PORT)
        .map(str::trim);
    let v = match asked {
        None | Some("") => return Ok(IntOrString::Int(DEFAULT_TARGET_PORT)),
        Some(v) => v,
    };
    let invalid = || InvalidTargetPort(v.to_owned());
    if v.bytes().all(|b| b.is_ascii_digit()) {
        let port: i32 = v.parse().map_err(|_| invalid())?;
        return (1..=65535)
            .contains(&port)
            .then_some(IntOrString::Int(port))
            .ok_or_else(invalid);
    }
    is_port_name(v)
        .then(|| IntOrString::String(v.to_owned()))
        .ok_or_else(invalid)
}

/// Kubernetes' IANA_SVC_NAME: what a container port name may be.
fn is_port_name(v: &str) -> bool {
    (1..=15).contains(&v.len())
        && v.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && v.bytes().any(|b| b.is_ascii_lowercase())
        && !v.starts_with('-')
        && !v.ends_with('-')
        && !v.contains("--")
}

/// The Service exposing `port` on the SSH IP for `pod`, forwarding to
/// `target` (from [`target_port`]).
pub fn build(pod: &PodView, port: u16, target: IntOrString, settings: &Settings) -> Service {
    let pod_name = pod.metadata.name.clone().unwrap_or_default();
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let name = service_name(&pod_name);
    let labels = BTreeMap::from([
        (
            vocabulary::PROXY_NAME_LABEL.to_owned(),
            vocabulary::PROXY_NAME.to_owned(),
        ),
        (
            vocabulary::MANAGED_BY_LABEL.to_owned(),
            vocabulary::CONTROLLER.to_owned(),
        ),
        (vocabulary::POD_UID.to_owned(), uid.clone()),
    ]);
    let mut spec = ServiceSpec {
        selector: Some(BTreeMap::from([(
            vocabulary::SERVICE.to_owned(),
            name.clone(),
        )])),
        ports: Some(vec![ServicePort {
            name: Some("ssh".into()),
            protocol: Some("TCP".into()),
            port: i32::from(port),
            target_port: Some(target),
            ..ServicePort::default()
        }]),
        // The SSH IPs' families, the published one's first: left to the
        // default, a cluster whose primary family is the other would give
        // the Service endpoints of that family only, and no backend.
        ip_families: Some(settings.ssh_ips.ip_families()),
        ip_family_policy: Some(settings.ssh_ips.ip_family_policy().into()),
        ..ServiceSpec::default()
    };
    match settings.style {
        ServiceStyle::Loadbalancer => {
            spec.type_ = Some("LoadBalancer".into());
            spec.load_balancer_class = Some(vocabulary::LB_CLASS.into());
            spec.allocate_load_balancer_node_ports = Some(false);
        }
        ServiceStyle::Externalips => {
            spec.type_ = Some("ClusterIP".into());
            spec.external_ips = Some(settings.ssh_ips.all().map(|ip| ip.to_string()).collect());
        }
    }
    Service {
        metadata: ObjectMeta {
            name: Some(name),
            namespace: pod.metadata.namespace.clone(),
            labels: Some(labels),
            annotations: Some(BTreeMap::from([(
                vocabulary::POD.to_owned(),
                pod_name.clone(),
            )])),
            owner_references: Some(vec![OwnerReference {
                api_version: "v1".into(),
                kind: "Pod".into(),
                name: pod_name,
                uid,
                controller: Some(true),
                block_owner_deletion: None,
            }]),
            ..ObjectMeta::default()
        },
        spec: Some(spec),
        status: None,
    }
}

/// The endpoint the user was told about with the SSHReady event: for a pod
/// admitted with a port, the announced annotation; for others the endpoint
/// annotation, which the controller writes only after the event.
pub fn told_endpoint(pod: &PodView) -> Option<&str> {
    let meta = &pod.metadata;
    let admitted = meta.annotation(vocabulary::RESERVATION).is_some();
    let key = if admitted {
        vocabulary::ANNOUNCED
    } else {
        vocabulary::ENDPOINT
    };
    meta.annotation(key)
}

/// Whether `service` is of type LoadBalancer (its status holds the address).
pub fn is_load_balancer(service: &Service) -> bool {
    service.spec.as_ref().and_then(|s| s.type_.as_deref()) == Some("LoadBalancer")
}

/// Whether `service` carries the controller's `managed-by` label: what
/// the controller writes on its Services, and anyone who may write a
/// Service can copy, so never enough to make one ours ([`served_pod`]).
pub fn is_managed(service: &Service) -> bool {
    label(service, vocabulary::MANAGED_BY_LABEL) == Some(vocabulary::CONTROLLER)
}

/// The uid of the pod one of our Services serves; `None` for a Service
/// that is not ours. Ours is named for its pod and owned by it (its
/// controller owner reference), and carries our grant for that pod or,
/// until the grant is written, our label. The label alone, which a tenant
/// may set, makes nothing ours. An owner reference names a pod of the
/// Service's own namespace (the garbage collector reads it so): the plan
/// checks the pod's namespace before it acts.
pub fn served_pod(service: &Service) -> Option<&str> {
    let owner = (service.metadata.owner_references.iter().flatten())
        .find(|o| o.kind == "Pod" && o.api_version == "v1" && o.controller == Some(true))?;
    let named = service.metadata.name.as_deref() == Some(service_name(&owner.name).as_str());
    if !named || owner.uid.is_empty() {
        return None;
    }
    let granted = (ServiceView::of(service).grant).is_some_and(|g| *g.pod_uid == owner.uid);
    (granted || is_managed(service)).then_some(owner.uid.as_str())
}

pub fn label<'a>(service: &'a Service, key: &str) -> Option<&'a str> {
    service
        .metadata
        .labels
        .as_ref()?
        .get(key)
        .map(String::as_str)
}

/// A Service holding a port on the SSH IP.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Claim {
    pub port: u16,
    pub created: Option<Time>,
    /// `namespace/name`
    pub service: String,
    pub uid: Option<String>,
    /// The controller granted it the port (only ours are granted).
    pub granted: bool,
}

impl crate::k8s::ownership::Claimant for Claim {
    fn granted(&self) -> bool {
        self.granted
    }
    fn created(&self) -> Option<&Time> {
        self.created.as_ref()
    }
    fn service(&self) -> &str {
        &self.service
    }
}

/// The ports a Service holds on the SSH IP: what the agents honour under
/// `policy` ([`desired::frontends`], the one rule for both): the port its
/// grant names, or, for a Service without one, its `externalIPs` ports
/// where those are honoured. What a Service's spec lists beyond its grant
/// holds nothing: a tenant may write the spec, never the grant.
pub fn claims(service: &Service, policy: &Policy) -> Vec<Claim> {
    let view = ServiceView::of(service);
    let mut notes = Vec::new();
    let key = view.id.to_string();
    let mut claims: Vec<Claim> = Vec::new();
    for frontends in desired::frontends(&view, policy, &mut notes) {
        if claims.iter().any(|c| c.port == frontends.number) {
            continue;
        }
        claims.push(Claim {
            port: frontends.number,
            created: service.metadata.creation_timestamp.clone(),
            service: key.clone(),
            uid: service.metadata.uid.clone(),
            granted: frontends.granted,
        });
    }
    claims
}

pub mod drift;
pub mod grant;
#[cfg(test)]
mod tests;
