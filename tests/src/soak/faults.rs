//! Carrying out the schedule: each fault in a thread of its own, started
//! at its planned time; faults on the same target (a node's agent, a
//! node's link, the API, the controllers, the node link) take that
//! target's lock, so one waits for the other and the window recorded is
//! the one that really happened.

use std::{sync::Mutex, time::Duration};

use anyhow::Context as _;

use super::{
    bed::{ANNOUNCE_LEASE, CONTROLLER_LEASE, PEER, lock},
    run::Run,
    schedule::{Fault, Planned},
    tally::Window,
};
use crate::{flood::Rng, topology::EXT_IFACE};

/// One lock per thing a fault may break.
#[derive(Default)]
pub struct Locks {
    agent: [Mutex<()>; 2],
    ext_link: [Mutex<()>; 2],
    api: Mutex<()>,
    controllers: Mutex<()>,
    node_link: Mutex<()>,
}

/// Runs every fault of `plan` at its time, each in its own thread of
/// `scope`.
pub fn run_all<'s, 'a: 's>(
    scope: &'s std::thread::Scope<'s, '_>,
    run: &'s Run<'a>,
    locks: &'s Locks,
    plan: &'s [Planned],
) {
    for (i, planned) in plan.iter().enumerate() {
        scope.spawn(move || {
            if !run.pause(planned.at.saturating_sub(run.now())) {
                return;
            }
            let mut rng = Rng::new(run.seed ^ ((i as u64 + 7) * 0x51_7cc1));
            if let Err(e) = one(run, locks, planned, &mut rng) {
                run.records()
                    .fault_errors
                    .push((run.now(), format!("{}: {e:#}", planned.fault.name())));
            }
        });
    }
}

/// Carries out one fault: break, hold for its time, repair, and record
/// the window.
fn one(run: &Run<'_>, locks: &Locks, planned: &Planned, rng: &mut Rng) -> anyhow::Result<()> {
    let bed = run.bed;
    let lasts = planned.lasts;
    let holder = || bed.holder_of(ANNOUNCE_LEASE).unwrap_or(0);
    let mut excuses = planned.fault.excuses_failed_logins();
    let (from, detail) = match planned.fault {
        Fault::AgentKill(n) | Fault::AgentRestart(n) => {
            let _held = lock(&locks.agent[n]);
            let from = run.now();
            excuses |= bed.holder_of(ANNOUNCE_LEASE) == Some(n);
            stop_agent(run, n, planned.fault == Fault::AgentKill(n))?;
            hold(lasts);
            start_agent(run, n)?;
            (from, format!("node{n}"))
        }
        Fault::HolderKill => {
            let n = holder();
            let _held = lock(&locks.agent[n]);
            let from = run.now();
            stop_agent(run, n, true)?;
            hold(lasts);
            start_agent(run, n)?;
            (from, format!("node{n} held the SSH IP"))
        }
        Fault::HolderLinkDown => {
            let n = holder();
            let _held = lock(&locks.ext_link[n]);
            let node = &bed.seg.nodes[n];
            let from = run.now();
            node.ip(&["link", "set", EXT_IFACE, "down"])?;
            hold(lasts);
            node.ip(&["link", "set", EXT_IFACE, "up"])?;
            (from, format!("node{n}'s {EXT_IFACE}"))
        }
        Fault::HolderApiStall => {
            let n = holder();
            let _held = lock(&locks.api);
            let from = run.now();
            bed.api
                .stall_user_at(&format!("node{n}"), crate::fake_api::Kind::Lease, "update");
            hold(lasts);
            bed.api.resume();
            (from, format!("node{n}'s Lease renewals"))
        }
        Fault::LeaderKill => {
            let _held = lock(&locks.controllers);
            let n = bed
                .holder_of(CONTROLLER_LEASE)
                .context("no controller leads")?;
            let from = run.now();
            if let Some(c) = lock(&bed.controllers[n]).as_mut() {
                c.kill()?;
            }
            hold(lasts);
            bed.start_controller(n)?;
            (from, format!("ctl{n} led"))
        }
        Fault::ApiStall => {
            let _held = lock(&locks.api);
            let from = run.now();
            bed.api.stall();
            hold(lasts);
            bed.api.resume();
            (from, String::new())
        }
        Fault::ApiRestart => {
            let _held = lock(&locks.api);
            let from = run.now();
            bed.api.cut();
            hold(lasts);
            bed.api.restore();
            (from, String::new())
        }
        Fault::SshdRestart => {
            let n = (rng.draw() % run.slots.len() as u64) as usize;
            let from = run.now();
            let mut slot = run.slot(n);
            let Some(job) = slot.job.as_mut() else {
                return Ok(());
            };
            job.pod.restart_sshd(&bed.seg.keys)?;
            let name = job.name.clone();
            drop(slot);
            hold(lasts.min(Duration::from_secs(1)));
            (from, name)
        }
        Fault::NodeLinkFlap => {
            let _held = lock(&locks.node_link);
            let from = run.now();
            bed.seg.nodes[0].ip(&["link", "set", PEER, "down"])?;
            hold(lasts);
            bed.seg.nodes[0].ip(&["link", "set", PEER, "up"])?;
            // Taking a link down removes the routes through it.
            let routed =
                crate::cmd::wait_until(Duration::from_secs(5), || bed.route_pods().is_ok());
            anyhow::ensure!(routed, "the pod routes over {PEER} could not be put back");
            (from, String::new())
        }
    };
    let to = run.now();
    let mut r = run.records();
    r.windows.push(Window {
        fault: planned.fault,
        from,
        to,
        excuses,
    });
    let moved = if excuses {
        " (new logins may fail)"
    } else {
        ""
    };
    r.notes.push((
        from,
        format!(
            "{} {detail} for {:.1} s{moved}",
            planned.fault.name(),
            (to - from).as_secs_f64()
        ),
    ));
    Ok(())
}

/// Waits out a fault (a window in which the fault must hold): its whole
/// length even if the soak stops meanwhile, so the repair always runs.
fn hold(lasts: Duration) {
    std::thread::sleep(lasts);
}

fn stop_agent(run: &Run<'_>, n: usize, kill: bool) -> anyhow::Result<()> {
    let mut agent = lock(&run.bed.agents[n]);
    match agent.as_mut() {
        Some(a) if kill => a.kill(),
        Some(a) => a.stop(),
        None => Ok(()),
    }
}

fn start_agent(run: &Run<'_>, n: usize) -> anyhow::Result<()> {
    run.bed.start_agent(n).map(drop)
}
