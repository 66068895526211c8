//! Which part of the world a pass plans for. A full pass plans for all of
//! it (at start, on a relist, on the periodic resync, after a failed
//! write); a pass woken by watch changes plans only around what they
//! touched: the pods changed, the pods whose Services changed, the ports
//! whose claimants or reservation changed with their reservations and the
//! pods of our Services on them, the reservations the changed pods
//! carried, and the pods still waiting for a Service (their wait may have
//! ended with any change).
//! The rules are the same either way: the plan is one function of the
//! world, drawn over a smaller or larger part of it, and a property test
//! holds that every action a change calls for is found around it.

use std::collections::BTreeSet;

use crate::controller::{
    expect::Expectations,
    world::{Touched, World},
};

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    All,
    Around(Around),
}

#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Around {
    /// Pods (by uid) to plan for, and whose Services to sort out.
    pub pods: BTreeSet<String>,
    /// Ports whose claimants (port races, reservations of held ports)
    /// to look at.
    pub ports: BTreeSet<u16>,
    /// Reservations (by name) whose use to look at.
    pub reservations: BTreeSet<String>,
}

impl Scope {
    /// The part of `world` a change that `touched` these can affect, with
    /// the pods still `waiting` for a Service.
    pub fn around(world: &World, touched: Touched, waiting: &BTreeSet<String>) -> Self {
        let Touched {
            mut pods,
            ports,
            mut reservations,
        } = touched;
        pods.extend(waiting.iter().cloned());
        // Whether a port's reservation is in use follows its claimants; and
        // the pod of our Service granted a port needs its reservation.
        for port in &ports {
            if let Some(r) = world.book().on_port(*port) {
                reservations.insert(r.name.clone());
            }
            let ours = (world.claims_on(*port).iter())
                .filter_map(|c| crate::controller::world::served_pod(world.service(&c.service)?));
            pods.extend(ours.map(str::to_owned));
        }
        Self::Around(Around {
            pods,
            ports,
            reservations,
        })
    }

    /// The pods to plan for, by uid (those the world has).
    pub fn pods<'a>(
        &'a self,
        world: &'a World,
    ) -> Box<dyn Iterator<Item = (&'a str, &'a crate::controller::pod::PodView)> + 'a> {
        match self {
            Self::All => Box::new(world.pods()),
            Self::Around(a) => Box::new(
                a.pods
                    .iter()
                    .filter_map(|uid| Some((uid.as_str(), world.pod(uid)?))),
            ),
        }
    }

    /// The pod uids whose Services to sort out (kept, extra, or orphaned).
    pub fn groups<'a>(&'a self, world: &'a World) -> Box<dyn Iterator<Item = &'a str> + 'a> {
        match self {
            Self::All => Box::new(world.served_uids()),
            Self::Around(a) => Box::new(a.pods.iter().map(String::as_str)),
        }
    }

    /// The ports whose claimants to look at.
    pub fn ports<'a>(&'a self, world: &'a World) -> Box<dyn Iterator<Item = u16> + 'a> {
        match self {
            Self::All => Box::new(world.claimed_ports()),
            Self::Around(a) => Box::new(a.ports.iter().copied()),
        }
    }

    /// The reservations whose use to look at; `None`: all.
    pub fn reservations(&self) -> Option<&BTreeSet<String>> {
        match self {
            Self::All => None,
            Self::Around(a) => Some(&a.reservations),
        }
    }
}

/// The ports a new Service may not take: held by a Service, reserved, or
/// being created.
pub struct PortSet<'a> {
    pub world: &'a World,
    pub expected: &'a Expectations,
}

impl PortSet<'_> {
    pub fn contains(&self, port: u16) -> bool {
        self.world.is_claimed(port)
            || self.world.book().has(port)
            || self.expected.is_creating_on(port)
    }
}

/// The pods that ask for SSH and have no Service, with none being made
/// for them: waiting for a free port, for a name to free up, for a fixed
/// annotation, or for their old Service to go. Every pass that plans
/// around a change plans for them too, since any change may end the wait.
#[derive(Debug, Default)]
pub struct Waiting(BTreeSet<String>);

impl Waiting {
    pub fn uids(&self) -> &BTreeSet<String> {
        &self.0
    }

    /// Notes which of the pods a pass planned for (`scope`) are waiting
    /// after its writes (`expected` holds the creates that worked; one
    /// that failed or found its name taken leaves its pod waiting).
    pub fn note(&mut self, world: &World, scope: &Scope, expected: &Expectations) {
        let waits = |uid: &str| {
            world.pod(uid).is_some_and(super::asks_for_ssh)
                && world.ours_of(uid).next().is_none()
                && !expected.creating(uid)
        };
        match scope {
            Scope::All => {
                self.0 = world
                    .pods()
                    .map(|(uid, _)| uid)
                    .filter(|uid| waits(uid))
                    .map(str::to_owned)
                    .collect();
            }
            Scope::Around(around) => {
                for uid in &around.pods {
                    if waits(uid) {
                        self.0.insert(uid.clone());
                    } else {
                        self.0.remove(uid);
                    }
                }
            }
        }
    }
}
