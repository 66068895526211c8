//! A pod with one of our Services: the port it is for (its pod's
//! reservation), the Service's spec put back where someone changed it,
//! the grant written to its status, then, once the cache shows the grant,
//! the pod labelled into its Service's endpoints, and the endpoint
//! published to the pod once `--publish-when` says (by default, once the
//! pod is Ready and the nodes receiving the SSH IP forward the port to
//! it: [`crate::controller::served`]).

use k8s_openapi::{api::core::v1::Service, apimachinery::pkg::util::intstr::IntOrString};

use super::{Action, DeleteReason, full_name, split};
use crate::{
    controller::{
        pod::{PodRef, PodView},
        reservation::{self, Holder, binding},
        served::{Gate, Verdict},
        service::{self, Settings, drift, grant},
        ssh_ips,
        world::World,
    },
    k8s::grant::Grant,
    source::kubernetes::objects::ServiceView,
    vocabulary,
};

/// What publishing reads beyond the Service and its pod.
pub struct Publishing<'a> {
    pub world: &'a World,
    pub settings: &'a Settings,
    /// The host name the endpoint names.
    pub host: &'a str,
    /// The endpoint this leader published in a pass the pod cache has not
    /// caught up with.
    pub published: Option<&'a str>,
    /// When the endpoint may be told.
    pub gate: Gate<'a>,
}

/// What one of our Services and its pod still need, in order: the spec
/// put back, the grant (a later pass sees it written), then the label,
/// annotation and event, so "Connected!" is never sent for a port the
/// agents do not honour yet.
pub fn publish(svc: &Service, pod: &PodView, pod_ref: PodRef, at: &Publishing<'_>) -> Vec<Action> {
    let mut actions = Vec::new();
    let Some(port) = port_for(at.world, svc, pod) else {
        return unreserved(at.world, svc, &pod_ref);
    };
    let expected = service::build(pod, port, target(svc, pod), at.settings);
    let name = svc.metadata.name.clone().unwrap_or_default();
    if let Some(drift) = drift::drift(svc, &expected) {
        actions.push(Action::Restore {
            pod: pod_ref.clone(),
            name: name.clone(),
            fields: drift.fields,
            patch: Box::new(drift.patch),
        });
    }
    let grant = Grant {
        port,
        pod_uid: pod_ref.uid.as_str().into(),
    };
    if !grant::holds(svc, &at.settings.ssh_ips, &grant) {
        actions.push(Action::SetGrant {
            pod: pod_ref,
            name,
            port,
        });
        return actions;
    }
    // The host certificate once the port is the pod's: its pod cannot
    // start before (its volume waits for the Secret), so neither waits
    // for the other.
    let meta = &pod.metadata;
    if let Some(secret) = meta.annotation(vocabulary::HOST_KEY_SECRET)
        && meta.annotation(vocabulary::HOST_CERTIFICATE).is_none()
    {
        actions.push(Action::IssueHostKey {
            pod: pod_ref.clone(),
            secret: secret.to_owned(),
            port,
            deadline: pod.deadline(),
        });
    }
    let endpoint = ssh_ips::endpoint(at.host, port);
    if at.published == Some(endpoint.as_str()) {
        return actions;
    }
    let told = service::told_endpoint(pod) == Some(endpoint.as_str());
    let annotated = meta.annotation(vocabulary::ENDPOINT) == Some(endpoint.as_str());
    let labelled = meta.label(vocabulary::SERVICE) == Some(name.as_str());
    if annotated && labelled && told {
        return actions;
    }
    let mut unconfirmed = None;
    if !told {
        match at.gate.verdict(pod, at.world.ip(), port) {
            Verdict::Open => {}
            Verdict::Late(why) => unconfirmed = Some(why.text(at.world.ip(), port)),
            // The label first: it puts the pod in its Service's
            // endpoints, which is what the agents map.
            Verdict::Wait(why) if !labelled => {
                actions.push(Action::Label {
                    pod: pod_ref,
                    service: name,
                    why,
                });
                return actions;
            }
            Verdict::Wait(why) => {
                actions.push(Action::Await { pod: pod_ref, why });
                return actions;
            }
        }
    }
    actions.push(Action::Publish {
        pod: pod_ref,
        service: name,
        port,
        announce: !told,
        unconfirmed,
    });
    actions
}

/// The port our Service is for: the one its grant names while the pod's
/// reservation holds it, else the port of the pod's reservation (the one
/// the Service lists, if the pod has several). Never a port only the spec
/// names: the spec is the namespace's to write.
fn port_for(world: &World, svc: &Service, pod: &PodView) -> Option<u16> {
    let uid = pod.metadata.uid.as_deref();
    // Those the one rule says are this pod's (a copied token's are not).
    let reserved: Vec<u16> = (world.book().all_of_pod(pod))
        .filter(|r| binding::pod_of(world, r).and_then(|p| p.metadata.uid.as_deref()) == uid)
        .map(|r| r.port)
        .collect();
    let granted = ServiceView::of(svc)
        .grant
        .filter(|g| Some(&*g.pod_uid) == uid)
        .map(|g| g.port);
    if let Some(port) = granted.filter(|p| reserved.contains(p)) {
        return Some(port);
    }
    let listed = spec_ports(svc);
    (reserved.iter().find(|p| listed.contains(p)))
        .or_else(|| reserved.iter().min())
        .copied()
}

/// Our Service whose pod holds no reservation (one made before
/// reservations, or whose Lease was removed by hand): its port is reserved
/// for the pod if nobody holds it, else the Service goes and the pod gets
/// another port.
fn unreserved(world: &World, svc: &Service, pod: &PodRef) -> Vec<Action> {
    let Some(port) = spec_ports(svc).first().copied() else {
        return Vec::new();
    };
    match world.book().on_port(port) {
        None => {
            let holder = Holder::Pod {
                namespace: pod.namespace.clone(),
                name: pod.name.clone(),
                uid: pod.uid.clone(),
                token: None,
            };
            vec![Action::Reserve {
                lease: Box::new(reservation::build(world.ip(), port, &holder)),
            }]
        }
        Some(other) => {
            let (namespace, name) = split(&full_name(svc));
            vec![Action::Delete {
                namespace,
                name,
                uid: svc.metadata.uid.clone(),
                why: DeleteReason::LostPort {
                    port,
                    holder: other.name.clone(),
                },
                unpublish: None,
            }]
        }
    }
}

fn spec_ports(svc: &Service) -> Vec<u16> {
    (svc.spec.iter())
        .flat_map(|s| s.ports.iter().flatten())
        .filter_map(|p| u16::try_from(p.port).ok())
        .collect()
}

/// The target port the pod asks for; where its annotation is one the API
/// server would refuse (the pod was warned when its Service was made), the
/// one the Service has.
fn target(svc: &Service, pod: &PodView) -> IntOrString {
    service::target_port(pod).unwrap_or_else(|_| {
        (svc.spec.iter())
            .flat_map(|s| s.ports.iter().flatten())
            .find_map(|p| p.target_port.clone())
            .unwrap_or(IntOrString::Int(22))
    })
}
