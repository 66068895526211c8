//! Services and EndpointSlices as the agent keeps them: read off the wire
//! into types that hold only the fields the rules use (serde skips the rest
//! without allocating it: annotations, managed fields, conditions, topology),
//! then projected into small views. A cluster's Services can be many and
//! large; the agent's memory should grow with what it forwards, not with
//! what the objects happen to carry.

use std::{borrow::Cow, net::IpAddr, sync::Arc};

use k8s_openapi::{
    NamespaceResourceScope,
    apimachinery::pkg::{
        apis::meta::v1::{ObjectMeta, Time},
        util::intstr::IntOrString,
    },
};
use serde::Deserialize;

use crate::{k8s::grant::Grant, mapping::Family, vocabulary};
use keep::Keep;
/// Label linking an EndpointSlice to its Service.
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";

/// `namespace/name`, shared between the views and the index that refer to
/// an object.
pub type Id = Arc<str>;

/// A Service's port, as the rules read it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PortView {
    /// The port's name; empty when unnamed.
    pub name: Box<str>,
    pub port: i32,
    pub tcp: bool,
    /// The pod port when the Service names it by number (or leaves it to
    /// default to `port`); `None` for a named `targetPort`, which only the
    /// EndpointSlices resolve.
    pub numeric_target: Option<u16>,
}

/// What the agent keeps of a Service.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServiceView {
    pub id: Id,
    pub created: Option<Time>,
    /// `spec.externalIPs` that are IP addresses, of either family (the API
    /// server does not check them against `spec.ipFamilies`).
    pub external_ips: Box<[IpAddr]>,
    /// `type: LoadBalancer` with `loadBalancerClass` [`vocabulary::LB_CLASS`].
    pub ours: bool,
    /// `spec.allocateLoadBalancerNodePorts` is `false` (the API server
    /// defaults it to true for a LoadBalancer).
    pub node_ports_off: bool,
    /// `status.loadBalancer.ingress[]` entries with an IP of either
    /// family, for a Service of our class (nobody else's status counts).
    pub ingress: Box<[Ingress]>,
    /// The controller's grant in the status ([`Grant`]): the one port
    /// the Service may have on an SSH IP, and the pod it may reach.
    pub grant: Option<Grant>,
    pub ports: Box<[PortView]>,
    /// Who may connect, as the Service writes it: parsed by the rules,
    /// which refuse the Service if it is wrong.
    pub guard: GuardText,
}

/// A load-balancer ingress address and the TCP ports its entry lists
/// (`ports[]`, where the controller writes the port it granted).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ingress {
    pub ip: IpAddr,
    pub ports: Box<[u16]>,
}

/// A Service's source ranges and rate, unparsed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GuardText {
    /// `spec.loadBalancerSourceRanges`.
    pub ranges: Box<[Box<str>]>,
    /// The annotation [`vocabulary::SOURCE_RANGES`].
    pub ranges_annotation: Option<Box<str>>,
    /// The annotation [`vocabulary::SYN_RATE`].
    pub syn_rate: Option<Box<str>>,
}

impl GuardText {
    fn of<'a>(meta: &ObjectMeta, ranges: impl IntoIterator<Item = &'a String>) -> Self {
        let annotation = |key: &str| {
            (meta.annotations.as_ref())
                .and_then(|a| a.get(key))
                .map(|v| Box::from(v.as_str()))
        };
        Self {
            ranges: exact(ranges.into_iter().map(|r| Box::from(r.as_str()))),
            ranges_annotation: annotation(vocabulary::SOURCE_RANGES),
            syn_rate: annotation(vocabulary::SYN_RATE),
        }
    }
}

/// What the agent keeps of an EndpointSlice.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SliceView {
    /// `namespace/<kubernetes.io/service-name>`; `None` for a slice of no
    /// Service.
    pub service: Option<Id>,
    /// `addressType` (`IPv4` or `IPv6`); `None` for `FQDN` or anything
    /// else, whose endpoints are never backends. A dual-stack Service has
    /// a slice of each family.
    pub family: Option<Family>,
    /// Port names and numbers.
    pub ports: Box<[(Box<str>, Option<u16>)]>,
    /// Ready endpoint addresses (an absent `ready` counts as ready).
    pub ready: Box<[IpAddr]>,
    /// Addresses of endpoints that are terminating but still serving (a
    /// pod in its grace period whose server still runs): what kube-proxy
    /// falls back to when a Service has no ready endpoint.
    pub terminating: Box<[IpAddr]>,
    /// The pods behind those addresses (`targetRef` of kind Pod): what
    /// the connection log names a backend by, and what a granted port
    /// is checked against (the EndpointSlice controller writes the uid;
    /// the `edit` role cannot write EndpointSlices).
    pub pods: Box<[PodAt]>,
}

/// A pod behind an endpoint address.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodAt {
    pub ip: IpAddr,
    /// `namespace/name`, shared with the connection log's names.
    pub name: Arc<str>,
    pub uid: Option<Box<str>>,
}

/// A Service off the wire: only what [`ServiceView`] needs is read.
#[derive(Clone, Debug, Deserialize)]
pub struct WireService {
    #[serde(deserialize_with = "meta")]
    metadata: ObjectMeta,
    #[serde(default)]
    spec: WireServiceSpec,
    #[serde(default)]
    status: WireServiceStatus,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireServiceSpec {
    #[serde(rename = "type")]
    type_: Option<String>,
    load_balancer_class: Option<String>,
    allocate_load_balancer_node_ports: Option<bool>,
    #[serde(rename = "externalIPs")]
    external_ips: Option<Vec<String>>,
    load_balancer_source_ranges: Option<Vec<String>>,
    ports: Option<Vec<WireServicePort>>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireServicePort {
    name: Option<String>,
    protocol: Option<String>,
    port: i32,
    target_port: Option<IntOrString>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireServiceStatus {
    load_balancer: Option<WireLoadBalancer>,
    conditions: Option<Vec<WireCondition>>,
}

#[derive(Clone, Debug, Default, Deserialize)]
struct WireLoadBalancer {
    ingress: Option<Vec<WireIngress>>,
}

#[derive(Clone, Debug, Default, Deserialize)]
struct WireIngress {
    ip: Option<String>,
    ports: Option<Vec<WirePortStatus>>,
}

#[derive(Clone, Debug, Default, Deserialize)]
struct WirePortStatus {
    port: i32,
    protocol: Option<String>,
}

#[derive(Clone, Debug, Default, Deserialize)]
struct WireCondition {
    #[serde(rename = "type", default)]
    type_: String,
    #[serde(default)]
    status: String,
    #[serde(default)]
    message: String,
}

/// An EndpointSlice off the wire.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WireSlice {
    #[serde(deserialize_with = "meta")]
    metadata: ObjectMeta,
    #[serde(default)]
    address_type: String,
    ports: Option<Vec<WireSlicePort>>,
    endpoints: Option<Vec<WireEndpoint>>,
}

#[derive(Clone, Debug, Deserialize)]
struct WireSlicePort {
    name: Option<String>,
    port: Option<i32>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireEndpoint {
    #[serde(default)]
    addresses: Vec<String>,
    conditions: Option<WireConditions>,
    target_ref: Option<WireTargetRef>,
}

#[derive(Clone, Debug, Deserialize)]
struct WireTargetRef {
    kind: Option<String>,
    name: Option<String>,
    namespace: Option<String>,
    uid: Option<String>,
}

#[derive(Clone, Debug, Deserialize)]
struct WireConditions {
    ready: Option<bool>,
    serving: Option<bool>,
    terminating: Option<bool>,
}

impl WireEndpoint {
    /// Its addresses of `family`, the slice's (a slice lists nothing else;
    /// anything unreadable or of the other family is skipped).
    fn addresses(&self, family: Option<Family>) -> impl Iterator<Item = IpAddr> + '_ {
        (self.addresses.iter())
            .filter_map(|a| a.parse().ok())
            .filter(move |ip| Some(Family::of(*ip)) == family)
    }

    /// Ready: an absent `ready` counts as ready (the API's rule).
    fn ready(&self) -> bool {
        self.conditions.as_ref().and_then(|c| c.ready) != Some(false)
    }

    /// Not ready, but terminating and still serving (an absent `serving`
    /// counts as serving, an absent `terminating` as not: the API's rules).
    fn serving_terminating(&self) -> bool {
        !self.ready()
            && self
                .conditions
                .as_ref()
                .is_some_and(|c| c.serving != Some(false) && c.terminating == Some(true))
    }
}

/// The metadata fields read: identity, version, age, and of the labels
/// only the one that links a slice to its Service.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireMeta {
    name: Option<String>,
    namespace: Option<String>,
    resource_version: Option<String>,
    creation_timestamp: Option<Time>,
    #[serde(default)]
    labels: Keep<ServiceNameLabel>,
    #[serde(default)]
    annotations: Keep<GuardAnnotations>,
}

/// The annotations kept: the guard's.
struct GuardAnnotations;

impl keep::Keys for GuardAnnotations {
    const KEYS: &'static [&'static str] = &[vocabulary::SOURCE_RANGES, vocabulary::SYN_RATE];
    const WHAT: &'static str = "a map of annotations or null";
}

/// The label kept: the one linking a slice to its Service.
struct ServiceNameLabel;

impl keep::Keys for ServiceNameLabel {
    const KEYS: &'static [&'static str] = &[SERVICE_NAME_LABEL];
    const WHAT: &'static str = "a map of labels or null";
}

fn meta<'de, D: serde::Deserializer<'de>>(d: D) -> Result<ObjectMeta, D::Error> {
    let wire = WireMeta::deserialize(d)?;
    Ok(ObjectMeta {
        name: wire.name,
        namespace: wire.namespace,
        resource_version: wire.resource_version,
        creation_timestamp: wire.creation_timestamp,
        labels: wire.labels.into_map(),
        annotations: wire.annotations.into_map(),
        ..ObjectMeta::default()
    })
}

/// `kube::Resource` for a wire type: a namespaced core or group/v1 kind.
macro_rules! resource {
    ($type:ty, $kind:literal, $group:literal, $plural:literal) => {
        impl kube::Resource for $type {
            type DynamicType = ();
            type Scope = NamespaceResourceScope;
            fn kind(_: &()) -> Cow<'_, str> {
                $kind.into()
            }
            fn group(_: &()) -> Cow<'_, str> {
                $group.into()
            }
            fn version(_: &()) -> Cow<'_, str> {
                "v1".into()
            }
            fn plural(_: &()) -> Cow<'_, str> {
                $plural.into()
            }
            fn meta(&self) -> &ObjectMeta {
                &self.metadata
            }
            fn meta_mut(&mut self) -> &mut ObjectMeta {
                &mut self.metadata
            }
        }
    };
}

resource!(WireService, "Service", "", "services");
resource!(
    WireSlice,
    "EndpointSlice",
    "discovery.k8s.io",
    "endpointslices"
);

/// `namespace/name` of an object.
pub fn id_of(meta: &ObjectMeta) -> Id {
    format!(
        "{}/{}",
        meta.namespace.as_deref().unwrap_or(""),
        meta.name.as_deref().unwrap_or("")
    )
    .into()
}

fn ips<'a>(texts: impl IntoIterator<Item = &'a str>) -> Box<[IpAddr]> {
    exact(texts.into_iter().filter_map(|t| t.parse().ok()))
}

/// Collects with no room to spare: a view lives as long as its object, and
/// a vector grown from a filtered iterator keeps room for four (a quarter
/// of the agent's heap at 10,000 Services went to that slack).
fn exact<T>(items: impl Iterator<Item = T>) -> Box<[T]> {
    items.collect()
}

impl WireService {
    pub fn view(&self) -> ServiceView {
        let spec = &self.spec;
        let ingress = (self.status.load_balancer.iter())
            .flat_map(|lb| lb.ingress.iter().flatten())
            .filter_map(|i| {
                let ports = (i.ports.iter().flatten())
                    .map(|p| (p.port, p.protocol.as_deref().unwrap_or("TCP")));
                ingress(i.ip.as_deref()?, ports)
            });
        let conditions = (self.status.conditions.iter().flatten())
            .map(|c| (c.type_.as_str(), c.status.as_str(), c.message.as_str()));
        let grant = Grant::of(conditions);
        let ports = spec.ports.iter().flatten().map(|p| {
            port_view(
                p.name.as_deref(),
                p.port,
                p.protocol.as_deref(),
                p.target_port.as_ref(),
            )
        });
        let shape = Shape {
            type_: spec.type_.as_deref(),
            class: spec.load_balancer_class.as_deref(),
            node_ports: spec.allocate_load_balancer_node_ports,
        };
        let external_ips = spec.external_ips.iter().flatten().map(String::as_str);
        let guard = GuardText::of(
            &self.metadata,
            spec.load_balancer_source_ranges.iter().flatten(),
        );
        shape.view(&self.metadata, external_ips, (ingress, grant), ports, guard)
    }
}

impl ServiceView {
    /// The view of a Service as k8s-openapi decodes it (the controller's
    /// watches), by the same rules as [`WireService::view`].
    pub fn of(svc: &k8s_openapi::api::core::v1::Service) -> Self {
        let spec = svc.spec.as_ref();
        let status = svc.status.as_ref();
        let ingress = (status.and_then(|s| s.load_balancer.as_ref()))
            .into_iter()
            .flat_map(|lb| lb.ingress.iter().flatten())
            .filter_map(|i| {
                let ports = (i.ports.iter().flatten()).map(|p| (p.port, p.protocol.as_str()));
                ingress(i.ip.as_deref()?, ports)
            });
        let conditions = (status.and_then(|s| s.conditions.as_ref()))
            .into_iter()
            .flatten()
            .map(|c| (c.type_.as_str(), c.status.as_str(), c.message.as_str()));
        let grant = Grant::of(conditions);
        let ports = spec
            .and_then(|s| s.ports.as_ref())
            .into_iter()
            .flatten()
            .map(|p| {
                port_view(
                    p.name.as_deref(),
                    p.port,
                    p.protocol.as_deref(),
                    p.target_port.as_ref(),
                )
            });
        let shape = Shape {
            type_: spec.and_then(|s| s.type_.as_deref()),
            class: spec.and_then(|s| s.load_balancer_class.as_deref()),
            node_ports: spec.and_then(|s| s.allocate_load_balancer_node_ports),
        };
        let external_ips = (spec.and_then(|s| s.external_ips.as_ref()))
            .into_iter()
            .flatten()
            .map(String::as_str);
        let ranges = (spec.and_then(|s| s.load_balancer_source_ranges.as_ref()))
            .into_iter()
            .flatten();
        let guard = GuardText::of(&svc.metadata, ranges);
        shape.view(&svc.metadata, external_ips, (ingress, grant), ports, guard)
    }
}

/// An ingress entry as the view keeps it: its IP, if it is one, and the
/// TCP ports listed.
fn ingress<'a>(ip: &str, ports: impl Iterator<Item = (i32, &'a str)>) -> Option<Ingress> {
    let ports = ports
        .filter(|(_, protocol)| *protocol == "TCP")
        .filter_map(|(port, _)| u16::try_from(port).ok());
    Some(Ingress {
        ip: ip.parse().ok()?,
        ports: ports.collect(),
    })
}

/// The fields of a Service's spec that decide how its addresses count.
struct Shape<'a> {
    type_: Option<&'a str>,
    class: Option<&'a str>,
    node_ports: Option<bool>,
}

impl Shape<'_> {
    fn view<'b>(
        &self,
        meta: &ObjectMeta,
        external_ips: impl Iterator<Item = &'b str>,
        (ingress, grant): (impl Iterator<Item = Ingress>, Option<Grant>),
        ports: impl Iterator<Item = PortView>,
        guard: GuardText,
    ) -> ServiceView {
        let ours = self.type_ == Some("LoadBalancer") && self.class == Some(vocabulary::LB_CLASS);
        ServiceView {
            id: id_of(meta),
            created: meta.creation_timestamp.clone(),
            external_ips: ips(external_ips),
            ours,
            node_ports_off: self.node_ports == Some(false),
            // Nobody else's load-balancer status counts.
            ingress: if ours { exact(ingress) } else { Box::default() },
            grant,
            ports: exact(ports),
            guard,
        }
    }
}

fn port_view(
    name: Option<&str>,
    port: i32,
    protocol: Option<&str>,
    target: Option<&IntOrString>,
) -> PortView {
    PortView {
        name: name.unwrap_or("").into(),
        port,
        tcp: protocol.unwrap_or("TCP") == "TCP",
        numeric_target: match target {
            Some(IntOrString::Int(n)) => u16::try_from(*n).ok(),
            Some(IntOrString::String(_)) => None,
            None => u16::try_from(port).ok(),
        },
    }
}

impl WireSlice {
    pub fn view(&self) -> SliceView {
        let service = self
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(SERVICE_NAME_LABEL))
            .map(|name| {
                let ns = self.metadata.namespace.as_deref().unwrap_or("");
                Id::from(format!("{ns}/{name}"))
            });
        let family = match self.address_type.as_str() {
            "IPv4" => Some(Family::V4),
            "IPv6" => Some(Family::V6),
            _ => None,
        };
        let endpoints = || self.endpoints.iter().flatten();
        let ready = exact(
            endpoints()
                .filter(|e| e.ready())
                .flat_map(|e| e.addresses(family)),
        );
        let terminating = exact(
            endpoints()
                .filter(|e| e.serving_terminating())
                .flat_map(|e| e.addresses(family)),
        );
        let slice_ns = self.metadata.namespace.as_deref().unwrap_or("");
        let usable = endpoints().filter(|e| e.ready() || e.serving_terminating());
        let pods = exact(usable.flat_map(|e| {
            let pod = (e.target_ref.as_ref())
                .filter(|t| t.kind.as_deref() == Some("Pod"))
                .and_then(|t| {
                    let ns = t.namespace.as_deref().unwrap_or(slice_ns);
                    let name = Arc::<str>::from(format!("{ns}/{}", t.name.as_deref()?));
                    Some((name, t.uid.as_deref().map(Box::<str>::from)))
                });
            e.addresses(family).filter_map(move |ip| {
                let (name, uid) = pod.clone()?;
                Some(PodAt { ip, name, uid })
            })
        }));
        SliceView {
            service,
            family,
            ports: exact(self.ports.iter().flatten().map(|p| {
                let name = p.name.as_deref().unwrap_or("").into();
                (name, p.port.and_then(|n| u16::try_from(n).ok()))
            })),
            ready,
            terminating,
            pods,
        }
    }

    pub fn id(&self) -> Id {
        id_of(&self.metadata)
    }
}

mod keep;
#[cfg(test)]
mod tests;
