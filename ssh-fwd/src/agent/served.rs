//! What this node's data path serves, told to the controller in
//! Kubernetes mode: the ConfigMap `ssh-fwd-served-NODE`
//! ([`crate::k8s::served`]), so that a user is told "Connected!" only once
//! the node that receives the SSH IP forwards the port to the pod.
//!
//! The reconciler puts each frontend it installed or removed on the
//! [`Board`] once the maps hold it; the publisher writes the keys that
//! changed, at most twice a second, and renews the report every
//! [`RENEW`] so the controller can tell a live agent's from a dead one's.

use std::{
    collections::{BTreeMap, BTreeSet},
    net::{IpAddr, SocketAddr},
    sync::{Arc, Mutex, PoisonError},
    time::{Duration, Instant, SystemTime},
};

use kube::Api;
use tokio::sync::Notify;

use super::{AgentArgs, args::AnnounceMode, node_config_map::NodeConfigMap};
use crate::{
    datapath::{announce::Announcements, pins::PinLayout},
    k8s::served::{RECEIVES, RENEWED, config_map_name, frontend_key, receives_value, rfc3339},
    vocabulary,
};

/// How often a report is written when nothing changed. The controller
/// takes a report not renewed for three times this as a dead agent's
/// ([`crate::k8s::served::LIVE_FOR`]).
pub const RENEW: Duration = Duration::from_secs(20);
/// The least time between two writes: a burst of changes is one write.
const BATCH: Duration = Duration::from_millis(500);
/// The longest wait after failed writes (doubling from a second): a
/// report the API server keeps refusing, such as one past a ConfigMap's
/// 1 MiB, is not sent again twice a second.
const MAX_BACKOFF: Duration = Duration::from_secs(60);

/// The wait after a failed write, from the one before (zero: none yet).
fn backoff(previous: Duration) -> Duration {
    (previous * 2).clamp(Duration::from_secs(1), MAX_BACKOFF)
}

/// The frontends the maps hold, each with its backend, shared by the
/// reconciler and the publisher.
#[derive(Clone, Default)]
pub struct Board {
    inner: Arc<Mutex<Frontends>>,
    changed: Arc<Notify>,
}

#[derive(Default)]
struct Frontends {
    now: BTreeMap<SocketAddr, SocketAddr>,
    /// Changed since the publisher last took them.
    dirty: BTreeSet<SocketAddr>,
}

impl Board {
    /// The maps hold exactly `frontends` (a whole re-read).
    pub fn replace(&self, frontends: impl IntoIterator<Item = (SocketAddr, SocketAddr)>) {
        let new: BTreeMap<_, _> = frontends.into_iter().collect();
        let mut f = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        if f.now == new {
            return;
        }
        let gone = (f.now.keys()).filter(|k| !new.contains_key(k)).copied();
        let changed = (new.iter()).filter(|(k, v)| f.now.get(k) != Some(v));
        let dirty: Vec<SocketAddr> = gone.chain(changed.map(|(k, _)| *k)).collect();
        f.dirty.extend(dirty);
        f.now = new;
        drop(f);
        self.changed.notify_one();
    }

    /// The maps now hold `upserts` and no longer `deletes` (a plan's
    /// steps, applied).
    pub fn apply(
        &self,
        upserts: impl IntoIterator<Item = (SocketAddr, SocketAddr)>,
        deletes: impl IntoIterator<Item = SocketAddr>,
    ) {
        let mut f = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        let mut any = false;
        for frontend in deletes {
            if f.now.remove(&frontend).is_some() {
                f.dirty.insert(frontend);
                any = true;
            }
        }
        for (frontend, backend) in upserts {
            if f.now.insert(frontend, backend) != Some(backend) {
                f.dirty.insert(frontend);
                any = true;
            }
        }
        drop(f);
        if any {
            self.changed.notify_one();
        }
    }

    /// The frontends changed since the last call, with what each holds now
    /// (`None`: removed).
    fn take_changes(&self) -> BTreeMap<SocketAddr, Option<SocketAddr>> {
        let mut f = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        let dirty = std::mem::take(&mut f.dirty);
        dirty
            .into_iter()
            .map(|k| (k, f.now.get(&k).copied()))
            .collect()
    }

    /// Everything, as a report's data, and forgets what changed.
    fn take_all(&self) -> BTreeMap<String, String> {
        let mut f = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        f.dirty.clear();
        (f.now.iter())
            .map(|(k, v)| (frontend_key(*k), v.to_string()))
            .collect()
    }
}

/// Where the SSH IPs come from for [`RECEIVES`].
enum Receives {
    /// Every `--ssh-ip` (`--announce off` or `route`: the network brings
    /// them to every node).
    All(BTreeSet<IpAddr>),
    /// Those the data path answers ARP or neighbour solicitations for now
    /// (`--announce l2`).
    Answered(PinLayout),
}

impl Receives {
    fn now(&self) -> BTreeSet<IpAddr> {
        match self {
            Self::All(ips) => ips.clone(),
            Self::Answered(layout) => {
                match Announcements::open_pinned(layout).and_then(|m| m.installed()) {
                    Ok(installed) => installed.keys().map(|at| at.ip).collect(),
                    Err(e) => {
                        tracing::debug!(error = format!("{e:#}"), "cannot read the announcements");
                        BTreeSet::new()
                    }
                }
            }
        }
    }
}

/// Starts the publisher in Kubernetes mode; `None` otherwise.
pub fn spawn(
    args: &AgentArgs,
    client: Option<kube::Client>,
    layout: &PinLayout,
    board: &Board,
) -> Option<tokio::task::JoinHandle<()>> {
    let client = client?;
    let node = super::announce::identity(args.node_name.as_deref());
    let receives = match args.announce.announce {
        AnnounceMode::L2 => Receives::Answered(layout.clone()),
        AnnounceMode::Off | AnnounceMode::Route => {
            Receives::All(args.ssh_ips.iter().copied().collect())
        }
    };
    let target = NodeConfigMap::new(
        client.clone(),
        Api::namespaced(client, &args.announce.lease_namespace),
        config_map_name(&node),
        node,
        vocabulary::SERVED,
    );
    Some(tokio::spawn(run(target, receives, board.clone())))
}

/// Publishes `board` for ever; a failed write is told once, and the next
/// one writes the report whole.
async fn run(target: NodeConfigMap, receives: Receives, board: Board) {
    let mut whole = true;
    let mut failing = false;
    let mut told: Option<BTreeSet<IpAddr>> = None;
    let mut renewed = Instant::now();
    let mut wait = Duration::ZERO;
    loop {
        let due = renewed + RENEW;
        tokio::select! {
            () = board.changed.notified() => {}
            () = tokio::time::sleep_until(due.into()) => {}
            // Announcements change without the board: read them again.
            () = tokio::time::sleep(Duration::from_secs(1)) => {}
        }
        let ips = receives.now();
        let changes = if whole {
            None
        } else {
            Some(board.take_changes())
        };
        let quiet = changes.as_ref().is_some_and(BTreeMap::is_empty)
            && told.as_ref() == Some(&ips)
            && Instant::now() < due;
        if quiet {
            continue;
        }
        let stamp = [
            (RECEIVES.to_owned(), receives_value(&ips)),
            (RENEWED.to_owned(), rfc3339(SystemTime::now())),
        ];
        let result = match changes {
            None => {
                let mut data = board.take_all();
                data.extend(stamp);
                target.replace(None, &data).await
            }
            Some(changes) => {
                let mut keyed: BTreeMap<String, Option<String>> = (changes.into_iter())
                    .map(|(k, v)| (frontend_key(k), v.map(|b| b.to_string())))
                    .collect();
                keyed.extend(stamp.into_iter().map(|(k, v)| (k, Some(v))));
                let patch = super::node_config_map::changes_patch(&keyed);
                target
                    .patch(&patch, || {
                        let mut data = board.take_all();
                        data.extend(keyed.into_iter().filter_map(|(k, v)| Some((k, v?))));
                        data
                    })
                    .await
            }
        };
        match result {
            Ok(()) => {
                whole = false;
                told = Some(ips);
                renewed = Instant::now();
                if failing {
                    tracing::info!(
                        config_map = target.name(),
                        "reporting what this node serves again"
                    );
                }
                failing = false;
                wait = Duration::ZERO;
            }
            Err(e) => {
                if !failing {
                    tracing::warn!(
                        error = format!("{e:#}"),
                        config_map = target.name(),
                        "cannot report what this node's data path serves; the controller holds \
                         back new pods' ssh commands until it works or --publish-wait passes \
                         (retrying)"
                    );
                }
                failing = true;
                whole = true;
                told = None;
                wait = backoff(wait);
            }
        }
        tokio::time::sleep(BATCH.max(wait)).await;
    }
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use super::*;

    fn at(port: u16) -> SocketAddr {
        SocketAddr::from((Ipv4Addr::new(203, 0, 113, 10), port))
    }

    fn pod(n: u8) -> SocketAddr {
        SocketAddr::from((Ipv4Addr::new(10, 0, 1, n), 22))
    }

    #[test]
    fn failed_writes_back_off_to_a_minute() {
        let mut wait = Duration::ZERO;
        let mut waits = Vec::new();
        for _ in 0..8 {
            wait = backoff(wait);
            waits.push(wait.as_secs());
        }
        assert_eq!(waits, [1, 2, 4, 8, 16, 32, 60, 60]);
    }

    #[test]
    fn the_board_hands_over_each_change_once_with_what_it_holds_now() {
        let board = Board::default();
        board.apply([(at(1), pod(1)), (at(2), pod(2))], []);
        assert_eq!(
            board.take_changes(),
            [(at(1), Some(pod(1))), (at(2), Some(pod(2)))].into()
        );
        assert!(board.take_changes().is_empty());
        // Moved, removed, and the same again (no change).
        board.apply([(at(1), pod(3)), (at(2), pod(2))], [at(2)]);
        board.apply([(at(2), pod(2))], []);
        board.apply([], [at(2)]);
        assert_eq!(
            board.take_changes(),
            [(at(1), Some(pod(3))), (at(2), None)].into()
        );
        // A whole re-read: only what differs.
        board.replace([(at(1), pod(3)), (at(4), pod(4))]);
        assert_eq!(board.take_changes(), [(at(4), Some(pod(4)))].into());
        board.replace([(at(4), pod(4))]);
        assert_eq!(board.take_changes(), [(at(1), None)].into());
        assert_eq!(
            board.take_all(),
            [("203.0.113.10_4".to_owned(), "10.0.1.4:22".to_owned())].into()
        );
    }
}
