//! The leader's watch of the agents' served reports
//! ([`crate::k8s::served`]) in its namespace, read into [`Served`] one
//! changed ConfigMap at a time: a pass costs what changed, not the size of
//! every node's report.

use std::{
    collections::BTreeSet,
    sync::{Arc, Mutex, PoisonError},
};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::{
    Api,
    runtime::{
        reflector::{ObjectRef, Store},
        watcher,
    },
};
use prometheus_client::metrics::counter::Counter;

use super::Served;
use crate::{
    controller::activity::keep_config_map,
    k8s::{self, reflector::Changes},
    vocabulary,
};

/// What the watch changed since the last pass.
#[derive(Default)]
struct Changed {
    /// A relist: read them all.
    all: bool,
    names: BTreeSet<String>,
}

pub struct Reports {
    store: Store<ConfigMap>,
    changed: Arc<Mutex<Changed>>,
    namespace: String,
    served: Served,
}

impl Reports {
    /// Starts the watch (in `watches`, so it ends with the term); its
    /// changes wake a pass through `changes`.
    pub fn watch(
        client: kube::Client,
        namespace: &str,
        changes: &Arc<Changes>,
        errors: &Counter,
        watches: &mut tokio::task::JoinSet<()>,
    ) -> Self {
        let changed = Arc::new(Mutex::new(Changed {
            all: true,
            names: BTreeSet::new(),
        }));
        let noted = changed.clone();
        let (store, task) = k8s::reflector::reflector_task(
            Api::<ConfigMap>::namespaced(client, namespace),
            watcher::Config::default().labels(&format!(
                "{}={}",
                vocabulary::SERVED,
                vocabulary::ACTIVITY_FROM
            )),
            keep_config_map,
            "ConfigMap",
            changes,
            errors,
            move |event| {
                let mut c = noted.lock().unwrap_or_else(PoisonError::into_inner);
                match event {
                    watcher::Event::Apply(cm) | watcher::Event::Delete(cm) => {
                        c.names.insert(cm.metadata.name.clone().unwrap_or_default());
                    }
                    watcher::Event::Init
                    | watcher::Event::InitApply(_)
                    | watcher::Event::InitDone => {
                        c.all = true;
                    }
                }
            },
        );
        watches.spawn(task);
        Self {
            store,
            changed,
            namespace: namespace.to_owned(),
            served: Served::default(),
        }
    }

    /// The reports as the watch has them now.
    pub fn refresh(&mut self) -> &Served {
        let changed =
            std::mem::take(&mut *self.changed.lock().unwrap_or_else(PoisonError::into_inner));
        if changed.all {
            self.served = Served::default();
            for cm in self.store.state() {
                let name = cm.metadata.name.clone().unwrap_or_default();
                self.served.set(&name, Some(&cm));
            }
        } else {
            for name in changed.names {
                let at = ObjectRef::new(&name).within(&self.namespace);
                self.served.set(&name, self.store.get(&at).as_deref());
            }
        }
        &self.served
    }
}
