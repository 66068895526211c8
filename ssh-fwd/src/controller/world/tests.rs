//! The world kept one change at a time, and passes planned around changes:
//! a simulated API applies each pass's writes as the real one would, the
//! watches' reports of them (and of outside changes) drive the next pass,
//! and once passes around changes have nothing left to do, neither has a
//! full pass; the world kept change by change equals the one built whole.

use std::{
    collections::{BTreeMap, BTreeSet},
    sync::Arc,
    time::{Duration, Instant},
};

use k8s_openapi::api::{coordination::v1::Lease, core::v1::Service};
use proptest::prelude::*;
use rand::{SeedableRng as _, rngs::StdRng};
use serde_json::{Value, json};

use super::*;
use crate::args::ServiceStyle;
use crate::controller::{
    expect::Expectations,
    plan::upkeep::Upkeep,
    plan::{
        self, Action, Pass, Problem,
        scope::{Scope, Waiting},
    },
    reservation::{self, Holder, LeaseView},
    service::Settings,
};
use crate::vocabulary;

const IP: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(198, 18, 0, 10));
const HOST: &str = "ssh.example.org";
const RANGE: std::ops::RangeInclusive<u16> = 9000..=9011;
const NAMESPACES: [&str; 2] = ["jobs", "lab"];

fn settings() -> Settings {
    Settings {
        ssh_ips: crate::controller::ssh_ips::SshIps::single(IP),
        style: ServiceStyle::Loadbalancer,
    }
}

fn stamp(second: i64) -> Value {
    let at = k8s_openapi::jiff::Timestamp::from_second(1_780_000_000 + second).unwrap();
    json!(at.to_string())
}

/// The API server and the watches, as the controller sees them: objects
/// by key, the world kept from their changes, and what changed since the
/// last pass.
struct Sim {
    pods: BTreeMap<(String, String), Arc<PodView>>,
    services: BTreeMap<String, Arc<Service>>,
    leases: BTreeMap<String, Arc<LeaseView>>,
    world: World,
    touched: Touched,
    clock: i64,
    next_uid: u64,
    warned: BTreeSet<(String, Problem)>,
    upkeep: Upkeep,
    waiting: Waiting,
    rng: StdRng,
    now: Instant,
}

impl Sim {
    fn new() -> Self {
        Self {
            pods: BTreeMap::new(),
            services: BTreeMap::new(),
            leases: BTreeMap::new(),
            world: World::new(policy_for(IP), IP),
            touched: Touched::default(),
            clock: 0,
            next_uid: 0,
            warned: BTreeSet::new(),
            upkeep: Upkeep::new(Duration::ZERO, None),
            waiting: Waiting::default(),
            rng: StdRng::seed_from_u64(11),
            now: Instant::now(),
        }
    }

    fn uid(&mut self, what: &str) -> String {
        self.next_uid += 1;
        format!("{what}-{}", self.next_uid)
    }

    fn put_pod(&mut self, key: (String, String), pod: Option<PodView>) {
        let pod = pod.map(Arc::new);
        match &pod {
            Some(p) => drop(self.pods.insert(key.clone(), p.clone())),
            None => drop(self.pods.remove(&key)),
        }
        self.world.set_pod(&key, pod, &mut self.touched);
    }

    fn put_service(&mut self, key: String, svc: Option<Service>) {
        let svc = svc.map(Arc::new);
        match &svc {
            Some(s) => drop(self.services.insert(key.clone(), s.clone())),
            None => drop(self.services.remove(&key)),
        }
        self.world.set_service(&key, svc, &mut self.touched);
    }

    fn put_lease(&mut self, name: String, lease: Option<Lease>) {
        let lease = lease.map(|l| Arc::new(LeaseView::from(l)));
        match &lease {
            Some(l) => drop(self.leases.insert(name.clone(), l.clone())),
            None => drop(self.leases.remove(&name)),
        }
        self.world
            .set_lease(&name, lease.as_deref(), &mut self.touched);
    }

    /// A labelled pod, admitted with `admitted` = (token, port) (its
    /// reservation made as the webhook makes it), or not.
    fn add_pod(&mut self, namespace: &str, admitted: Option<(String, u16)>) {
        let uid = self.uid("pod");
        let name = format!("job-{uid}");
        let mut annotations = json!({});
        if let Some((token, port)) = &admitted {
            annotations = json!({vocabulary::RESERVATION: token, vocabulary::ENDPOINT: format!("{HOST}:{port}")});
            let holder = Holder::Admitted {
                namespace: namespace.into(),
                name: name.clone(),
                token: token.clone(),
            };
            if !self.leases.contains_key(&reservation::name(IP, *port)) {
                let mut lease = reservation::build(IP, *port, &holder);
                lease.metadata.uid = Some(self.uid("lease"));
                self.put_lease(reservation::name(IP, *port), Some(lease));
            }
        }
        let pod = json!({"metadata": {"name": name, "namespace": namespace, "uid": uid,
                                      "labels": {vocabulary::SSH: vocabulary::SSH_ENABLED},
                                      "annotations": annotations},
                         "status": {"phase": "Running"}});
        let key = (namespace.to_owned(), name);
        self.put_pod(key, Some(serde_json::from_value(pod).unwrap()));
    }

    /// A Service of someone else's the agents honour, on `port`, made
    /// `age` seconds before (negative) or after now.
    fn add_foreign(&mut self, port: u16, age: i64) {
        let uid = self.uid("foreign");
        let svc = json!({"metadata": {"name": uid, "namespace": "other", "uid": uid,
                                      "creationTimestamp": stamp(self.clock + age)},
                         "spec": {"externalIPs": [IP.to_string()], "ports": [{"port": port}]}});
        self.put_service(
            format!("other/{uid}"),
            Some(serde_json::from_value(svc).unwrap()),
        );
    }

    fn patch_pod(&mut self, key: &(String, String), edit: impl FnOnce(&mut Value)) {
        let Some(pod) = self.pods.get(key) else {
            return;
        };
        let mut value = serde_json::to_value(pod.as_ref()).unwrap();
        edit(&mut value);
        self.put_pod(key.clone(), Some(serde_json::from_value(value).unwrap()));
    }

    /// One pass, around what changed since the last (or over everything),
    /// its writes applied as the API would; the writes it made.
    fn pass(&mut self, full: bool) -> Vec<Action> {
        let touched = std::mem::take(&mut self.touched);
        let scope = if full {
            Scope::All
        } else {
            Scope::around(&self.world, touched, self.waiting.uids())
        };
        let expected = Expectations::default();
        self.upkeep.note(&self.world, &scope, &expected, self.now);
        let pass = Pass {
            quarantine: crate::controller::ports::Quarantine::off(),
            world: &self.world,
            scope: &scope,
            expected: &expected,
            variable: None,
            gate: crate::controller::served::Gate::granted(),
        };
        let mut actions = plan::compute(&pass, &settings(), &RANGE, HOST, &mut self.rng);
        actions.extend((self.upkeep).actions(
            &self.world,
            &scope,
            &expected,
            &RANGE,
            (self.now, k8s_openapi::jiff::Timestamp::now()),
        ));
        actions.retain(|a| match a {
            Action::Warn { pod, problem } => self.warned.insert((pod.uid.clone(), problem.clone())),
            _ => true,
        });
        for action in &actions {
            self.write(action);
        }
        self.waiting.note(&self.world, &scope, &expected);
        actions
    }

    /// What the API server makes of one write.
    fn write(&mut self, action: &Action) {
        match action {
            Action::Create {
                pod,
                service,
                reserve,
                ..
            } => {
                if let Some(lease) = reserve {
                    let name = lease.metadata.name.clone().unwrap();
                    if self.leases.contains_key(&name) {
                        return;
                    }
                    let mut lease = lease.as_ref().clone();
                    lease.metadata.uid = Some(self.uid("lease"));
                    self.put_lease(name, Some(lease));
                }
                let key = format!(
                    "{}/{}",
                    pod.namespace,
                    service.metadata.name.clone().unwrap()
                );
                if self.services.contains_key(&key) {
                    return;
                }
                self.clock += 1;
                let mut svc = service.as_ref().clone();
                svc.metadata.uid = Some(self.uid("svc"));
                svc.metadata.creation_timestamp =
                    Some(serde_json::from_value(stamp(self.clock)).unwrap());
                self.warned.retain(|(uid, _)| uid != &pod.uid);
                self.put_service(key, Some(svc));
            }
            Action::Delete {
                namespace,
                name,
                uid,
                unpublish,
                ..
            } => {
                if let Some(pod) = unpublish {
                    let key = (pod.namespace.clone(), pod.name.clone());
                    if self.pods.get(&key).and_then(|p| p.metadata.uid.as_deref())
                        == Some(pod.uid.as_str())
                    {
                        self.patch_pod(&key, |v| {
                            v["metadata"]["labels"][vocabulary::SERVICE] = Value::Null;
                            v["metadata"]["annotations"][vocabulary::ENDPOINT] = Value::Null;
                            v["metadata"]["annotations"][vocabulary::ANNOUNCED] = Value::Null;
                            strip_nulls(v);
                        });
                    }
                }
                let key = format!("{namespace}/{name}");
                if self.services.get(&key).and_then(|s| s.metadata.uid.clone()) == *uid {
                    self.put_service(key, None);
                }
            }
            Action::SetGrant { pod, name, port } => {
                let key = format!("{}/{name}", pod.namespace);
                if let Some(svc) = self.services.get(&key) {
                    let grant = crate::k8s::grant::Grant {
                        port: *port,
                        pod_uid: pod.uid.as_str().into(),
                    };
                    let ips = crate::controller::ssh_ips::SshIps::single(IP);
                    let now = "2026-01-01T00:00:00Z".parse().unwrap();
                    let status = service::grant::status(true, &ips, &grant, "x", now);
                    let mut value = serde_json::to_value(svc.as_ref()).unwrap();
                    value["status"] = status["status"].clone();
                    self.put_service(key, Some(serde_json::from_value(value).unwrap()));
                }
            }
            Action::Restore {
                pod, name, patch, ..
            } => {
                let key = format!("{}/{name}", pod.namespace);
                if let Some(svc) = self.services.get(&key) {
                    let mut value = serde_json::to_value(svc.as_ref()).unwrap();
                    json_patch::merge(&mut value, patch);
                    self.put_service(key, Some(serde_json::from_value(value).unwrap()));
                }
            }
            Action::Publish {
                pod, service, port, ..
            } => {
                let key = (pod.namespace.clone(), pod.name.clone());
                let endpoint = format!("{HOST}:{port}");
                self.patch_pod(&key, |v| {
                    v["metadata"]["labels"][vocabulary::SERVICE] = json!(service);
                    v["metadata"]["annotations"][vocabulary::ENDPOINT] = json!(endpoint);
                    v["metadata"]["annotations"][vocabulary::ANNOUNCED] = json!(endpoint);
                });
            }
            Action::Label { pod, service, .. } => {
                let key = (pod.namespace.clone(), pod.name.clone());
                self.patch_pod(&key, |v| {
                    v["metadata"]["labels"][vocabulary::SERVICE] = json!(service);
                });
            }
            Action::Await { .. } => {}
            // The simulated pods carry no host key annotation.
            Action::IssueHostKey { .. } => unreachable!("no host keys here"),
            Action::Reserve { lease } => {
                let name = lease.metadata.name.clone().unwrap();
                if !self.leases.contains_key(&name) {
                    let mut lease = lease.as_ref().clone();
                    lease.metadata.uid = Some(self.uid("lease"));
                    self.put_lease(name, Some(lease));
                }
            }
            Action::Bind { lease, .. } | Action::Quarantine { lease } => {
                let name = lease.metadata.name.clone().unwrap();
                if self.leases.get(&name).and_then(|l| l.uid.clone()) == lease.metadata.uid {
                    self.put_lease(name, Some(lease.as_ref().clone()));
                }
            }
            Action::Release { name, uid, .. } => {
                if self.leases.get(name).and_then(|l| l.uid.clone()) == *uid {
                    self.put_lease(name.clone(), None);
                }
            }
            Action::Warn { .. } => {}
        }
    }

    /// Passes until one has nothing to write.
    fn settle(&mut self, full: bool) -> Result<(), TestCaseError> {
        for _ in 0..30 {
            if self.pass(full).is_empty() {
                return Ok(());
            }
        }
        Err(TestCaseError::fail("no fixed point within 30 passes"))
    }

    /// The world built whole from the objects, as the kept one must be.
    fn rebuilt(&self) -> World {
        let pods: Vec<_> = self.pods.values().cloned().collect();
        let services: Vec<_> = self.services.values().cloned().collect();
        let leases: Vec<_> = self.leases.values().cloned().collect();
        World::of(policy_for(IP), IP, &pods, &services, &leases)
    }
}

fn strip_nulls(value: &mut Value) {
    if let Value::Object(map) = value {
        map.retain(|_, v| !v.is_null());
        map.values_mut().for_each(strip_nulls);
    }
}

/// What a world holds, in an order that does not depend on the order of
/// its changes.
fn digest(world: &World) -> String {
    let mut claims: Vec<String> = world
        .claims
        .values()
        .flatten()
        .map(|c| format!("{c:?}"))
        .collect();
    claims.sort();
    format!(
        "{:?}\n{:?}\n{:?}\n{:?}\n{:?}\n{claims:?}\n{:?}",
        world.pods.keys().collect::<Vec<_>>(),
        world.pod_uids,
        world.tokens,
        world.services.keys().collect::<Vec<_>>(),
        world.ours,
        world.book().all().collect::<Vec<_>>(),
    )
}

/// A change from outside the controller.
#[derive(Clone, Debug)]
enum Change {
    AddPod {
        namespace: usize,
        admitted: Option<u16>,
    },
    DeletePod(usize),
    UnlabelPod(usize),
    FinishPod(usize),
    DropEndpoint(usize),
    AddForeign {
        port: u16,
        age: i64,
    },
    DeleteService(usize),
    DropIngress(usize),
    /// A tenant adds a port (maybe another's) to a Service's spec.
    AddSpecPort(usize, u16),
    AddLease(u16),
    DeleteLease(usize),
}

fn change() -> impl Strategy<Value = Change> {
    let port = 8998u16..=9013;
    prop_oneof![
        3 => (0..2usize, prop::option::of(port.clone()))
            .prop_map(|(namespace, admitted)| Change::AddPod { namespace, admitted }),
        1 => any::<usize>().prop_map(Change::DeletePod),
        1 => any::<usize>().prop_map(Change::UnlabelPod),
        1 => any::<usize>().prop_map(Change::FinishPod),
        1 => any::<usize>().prop_map(Change::DropEndpoint),
        2 => (port.clone(), -5i64..5).prop_map(|(port, age)| Change::AddForeign { port, age }),
        1 => any::<usize>().prop_map(Change::DeleteService),
        1 => any::<usize>().prop_map(Change::DropIngress),
        1 => (any::<usize>(), port.clone()).prop_map(|(n, port)| Change::AddSpecPort(n, port)),
        1 => port.prop_map(Change::AddLease),
        1 => any::<usize>().prop_map(Change::DeleteLease),
    ]
}

fn nth<K: Clone, V>(map: &BTreeMap<K, V>, n: usize) -> Option<K> {
    (!map.is_empty()).then(|| map.keys().nth(n % map.len()).cloned().unwrap())
}

impl Sim {
    fn apply(&mut self, change: &Change) {
        match change {
            Change::AddPod {
                namespace,
                admitted,
            } => {
                let token = admitted.map(|port| (self.uid("token"), port));
                self.add_pod(NAMESPACES[*namespace], token);
            }
            Change::DeletePod(n) | Change::UnlabelPod(n) => {
                if let Some(key) = nth(&self.pods, *n) {
                    self.put_pod(key, None);
                }
            }
            Change::FinishPod(n) => {
                if let Some(key) = nth(&self.pods, *n) {
                    self.patch_pod(&key, |v| v["status"]["phase"] = json!("Succeeded"));
                }
            }
            Change::DropEndpoint(n) => {
                if let Some(key) = nth(&self.pods, *n) {
                    self.patch_pod(&key, |v| {
                        v["metadata"]["labels"][vocabulary::SERVICE] = Value::Null;
                        v["metadata"]["annotations"][vocabulary::ANNOUNCED] = Value::Null;
                        strip_nulls(v);
                    });
                }
            }
            Change::AddForeign { port, age } => self.add_foreign(*port, *age),
            Change::DeleteService(n) => {
                if let Some(key) = nth(&self.services, *n) {
                    self.put_service(key, None);
                }
            }
            Change::DropIngress(n) => {
                if let Some(key) = nth(&self.services, *n) {
                    let mut value = serde_json::to_value(self.services[&key].as_ref()).unwrap();
                    value["status"] = json!({});
                    self.put_service(key, Some(serde_json::from_value(value).unwrap()));
                }
            }
            Change::AddSpecPort(n, port) => {
                if let Some(key) = nth(&self.services, *n) {
                    let mut value = serde_json::to_value(self.services[&key].as_ref()).unwrap();
                    let added =
                        json!({"name": "x", "protocol": "TCP", "port": port, "targetPort": 22});
                    if let Some(ports) = value["spec"]["ports"].as_array_mut() {
                        ports.push(added);
                    }
                    self.put_service(key, Some(serde_json::from_value(value).unwrap()));
                }
            }
            Change::AddLease(port) => {
                let holder = Holder::Admitted {
                    namespace: "jobs".into(),
                    name: "job-".into(),
                    token: self.uid("token"),
                };
                let name = reservation::name(IP, *port);
                if !self.leases.contains_key(&name) {
                    let mut lease = reservation::build(IP, *port, &holder);
                    lease.metadata.uid = Some(self.uid("lease"));
                    self.put_lease(name, Some(lease));
                }
            }
            Change::DeleteLease(n) => {
                if let Some(name) = nth(&self.leases, *n) {
                    self.put_lease(name, None);
                }
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn passes_around_changes_leave_nothing_for_a_full_pass_to_do(
        start in prop::collection::vec(change(), 0..12),
        batches in prop::collection::vec(prop::collection::vec(change(), 1..=3), 1..=12),
    ) {
        let mut sim = Sim::new();
        for c in &start {
            sim.apply(c);
        }
        sim.settle(true)?;
        for batch in &batches {
            for c in batch {
                sim.apply(c);
            }
            sim.settle(false)?;
            let left = sim.pass(true);
            prop_assert!(left.is_empty(), "after {:?}, a full pass still does {:?}", batch, left);
            prop_assert_eq!(digest(&sim.world), digest(&sim.rebuilt()), "after {:?}", batch);
        }
    }
}

#[test]
fn a_pod_waiting_for_a_free_port_gets_the_first_one_freed_by_a_pass_around_the_change() {
    let mut sim = Sim::new();
    for port in RANGE {
        sim.add_foreign(port, -10);
    }
    sim.add_pod("jobs", None);
    sim.settle(true).unwrap();
    assert!(sim.world.ours.is_empty(), "the range is full");
    assert_eq!(sim.waiting.uids().len(), 1);
    let freed = nth(&sim.services, 3).unwrap();
    let port = sim
        .world
        .service(&freed)
        .unwrap()
        .spec
        .as_ref()
        .unwrap()
        .ports
        .as_ref()
        .unwrap()[0]
        .port;
    sim.put_service(freed, None);
    // Its mirror reservation goes first, then the pod takes the port.
    let released = sim.pass(false);
    assert!(
        matches!(released.as_slice(), [Action::Release { port: p, .. }] if i32::from(*p) == port),
        "{released:?}"
    );
    let created = sim.pass(false);
    assert!(
        matches!(created.as_slice(), [Action::Create { port: p, .. }] if i32::from(*p) == port),
        "{created:?}"
    );
}

#[test]
fn a_change_to_one_pod_plans_for_it_and_not_for_the_others() {
    let mut sim = Sim::new();
    for _ in 0..8 {
        sim.add_pod("jobs", None);
    }
    sim.settle(true).unwrap();
    let key = nth(&sim.pods, 7).unwrap();
    sim.patch_pod(&key, |v| {
        v["metadata"]["labels"][vocabulary::SERVICE] = Value::Null;
        strip_nulls(v);
    });
    let touched = std::mem::take(&mut sim.touched);
    let Scope::Around(around) = Scope::around(&sim.world, touched, sim.waiting.uids()) else {
        panic!("a scope around the change")
    };
    let uid = sim.pods[&key].metadata.uid.clone().unwrap();
    assert_eq!(around.pods, BTreeSet::from([uid]));
    assert_eq!(around.ports.len(), 1, "the reservation of its port");
}

#[test]
fn a_port_both_claimed_and_reserved_is_used_once_and_ports_outside_the_range_not_at_all() {
    let mut sim = Sim::new();
    sim.add_pod("jobs", Some(("token-1".into(), 8001)));
    sim.add_foreign(8001, -5);
    sim.add_foreign(8002, -5);
    sim.add_foreign(9000, -5);
    assert_eq!(sim.world.ports_used(&(8000..=8010)), 2);
    assert_eq!(sim.world.ports_used(&(8002..=8002)), 1);
    assert_eq!(sim.world.ports_used(&(8003..=8999)), 0);
}
