//! The API server's state and the semantics the clients rely on: create
//! refuses an existing name, replace checks the resourceVersion, merge patch
//! (RFC 7386) and the `/status` subresource, a uid in a write or a delete's
//! preconditions must match the object, deletion (graceful for pods on a
//! node) with the owner-reference garbage collection Kubernetes does, and a
//! change log that watches replay from a resourceVersion.

use std::{collections::BTreeMap, ops::Bound, sync::Arc};

use serde_json::{Value, json};

use super::{
    Kind,
    clock::{now_rfc3339, rfc3339_in},
    endpoints,
    ip_families::{self, ClusterFamilies},
    paging::Page,
    selector::Selector,
    service_status,
    status::{ApiError, check_preconditions},
    validation,
};

/// One change: `old` is absent for a creation, `new` for a deletion. The
/// objects are shared with the store and every watch (a change reaches each
/// watch and the log: copies of whole objects were most of a write's cost).
#[derive(Clone, Debug)]
pub struct Change {
    pub rv: u64,
    pub kind: Kind,
    pub old: Option<Arc<Value>>,
    pub new: Option<Arc<Value>>,
}

/// Called with a Service about to be created; whatever it returns is
/// created first, as if another client had won a race.
pub type CreateHook = Box<dyn FnMut(&Value) -> Option<Value> + Send>;

#[derive(Default)]
pub struct Store {
    rv: u64,
    uids: u64,
    objects: BTreeMap<(Kind, String), Arc<Value>>,
    pub log: Vec<Change>,
    pub cut: bool,
    pub before_service_create: Option<CreateHook>,
    /// Off for benchmarks of clients that never read EndpointSlices: the
    /// emulation scans a namespace's pods per write.
    pub without_endpoint_slices: bool,
    /// The cluster's service IP families, its primary first: what a
    /// Service may ask for, and what one that asks for none gets.
    pub service_families: ClusterFamilies,
    /// How long to wait before answering requests of a kind and verb (a
    /// slow API server).
    pub delays: BTreeMap<(Kind, &'static str), std::time::Duration>,
    /// Status codes to answer the next requests of a kind and verb with,
    /// last first.
    pub failures: BTreeMap<(Kind, &'static str), Vec<u16>>,
    /// Objects of kinds the server does not model, as an install created
    /// them (`install.rs`), by (apiVersion, kind, namespace/name).
    pub others: BTreeMap<(String, String, String), Value>,
}

pub fn key_of(object: &Value) -> String {
    format!(
        "{}/{}",
        object["metadata"]["namespace"].as_str().unwrap_or(""),
        object["metadata"]["name"].as_str().unwrap_or("")
    )
}

impl Store {
    pub fn new() -> Self {
        Self {
            rv: 1,
            ..Self::default()
        }
    }

    pub fn rv(&self) -> u64 {
        self.rv
    }

    pub fn get(&self, kind: Kind, key: &str) -> Option<&Value> {
        self.objects.get(&(kind, key.to_owned())).map(AsRef::as_ref)
    }

    pub fn list(&self, kind: Kind, namespace: Option<&str>, selector: &Selector) -> Vec<Value> {
        self.objects
            .iter()
            .filter(|((k, _), v)| {
                *k == kind
                    && namespace.is_none_or(|ns| v["metadata"]["namespace"] == ns)
                    && selector.matches(v)
            })
            .map(|(_, v)| Value::clone(v))
            .collect()
    }

    /// One page of a list: the objects of `kind` after `page.after` in key
    /// order that `namespace` and `selector` let through, at most
    /// `page.limit`; and the key of the last one when more remain.
    pub fn list_page(
        &self,
        kind: Kind,
        namespace: Option<&str>,
        selector: &Selector,
        page: &Page,
    ) -> (Vec<&Value>, Option<String>) {
        let start = match &page.after {
            Some(after) => Bound::Excluded((kind, after.clone())),
            None => Bound::Included((kind, String::new())),
        };
        let mut items = Vec::new();
        let mut last: Option<&str> = None;
        for ((k, key), v) in self.objects.range((start, Bound::Unbounded)) {
            if *k != kind {
                break;
            }
            if !(namespace.is_none_or(|ns| v["metadata"]["namespace"] == ns) && selector.matches(v))
            {
                continue;
            }
            if page.limit.is_some_and(|limit| items.len() == limit) {
                return (items, last.map(str::to_owned));
            }
            items.push(v.as_ref());
            last = Some(key);
        }
        (items, None)
    }

    pub fn count(&self, kind: Kind, check: impl Fn(&Value) -> bool) -> usize {
        self.objects
            .iter()
            .filter(|((k, _), v)| *k == kind && check(v))
            .count()
    }

    /// Writes `object` as is (test-side writes keep what they are given,
    /// creationTimestamp included), then runs the controllers' side effects.
    pub fn put(&mut self, kind: Kind, mut object: Value) -> Vec<Change> {
        let key = key_of(&object);
        if object["metadata"]["uid"].is_null() {
            object["metadata"]["uid"] = json!(self.next_uid());
        }
        self.write_with_effects(kind, key, Some(object))
    }

    /// A failure the test asked for, for the next request of this kind and
    /// verb.
    pub fn injected_failure(&mut self, kind: Kind, verb: &'static str) -> Result<(), ApiError> {
        match self.failures.get_mut(&(kind, verb)).and_then(Vec::pop) {
            Some(code) => Err(ApiError::injected(code)),
            None => Ok(()),
        }
    }

    pub fn create(
        &mut self,
        kind: Kind,
        object: Value,
    ) -> Result<(Arc<Value>, Vec<Change>), ApiError> {
        self.create_admitted(kind, object, &mut admit_all)
    }

    /// [`Store::create`] with validating admission (`admit` sees the
    /// object as it is to be stored) after validation, before the name is
    /// found taken, as the API server orders them.
    pub fn create_admitted(
        &mut self,
        kind: Kind,
        mut object: Value,
        admit: Admit<'_>,
    ) -> Result<(Arc<Value>, Vec<Change>), ApiError> {
        let mut changes = Vec::new();
        if kind == Kind::Service
            && let Some(hook) = self.before_service_create.as_mut()
            && let Some(rival) = hook(&object)
        {
            changes.extend(self.put(Kind::Service, rival));
        }
        name_from_generate_name(&mut object, |prefix| self.is_free(kind, &object_ns(prefix)))?;
        validation::on_create(kind, &object)?;
        if kind == Kind::Service {
            ip_families::init(&mut object, None, &self.service_families)?;
        }
        let key = key_of(&object);
        let uid = self.uids + 1;
        object["metadata"]["uid"] = json!(uid_text(uid));
        object["metadata"]["creationTimestamp"] = json!(now_rfc3339());
        admit(None, Some(&object))?;
        if self.objects.contains_key(&(kind, key.clone())) {
            return Err(ApiError {
                code: 409,
                reason: "AlreadyExists",
                message: format!("{} \"{key}\" already exists", kind.resource()),
            });
        }
        self.uids = uid;
        changes.extend(self.write_with_effects(kind, key.clone(), Some(object)));
        Ok((self.objects[&(kind, key)].clone(), changes))
    }

    #[cfg(test)]
    pub fn replace(
        &mut self,
        kind: Kind,
        key: &str,
        object: Value,
        status_only: bool,
    ) -> Result<(Arc<Value>, Vec<Change>), ApiError> {
        self.replace_admitted(kind, key, object, status_only, &mut admit_all)
    }

    /// [`Store::replace`] with validating admission of the object as it is
    /// to be stored.
    pub fn replace_admitted(
        &mut self,
        kind: Kind,
        key: &str,
        object: Value,
        status_only: bool,
        admit: Admit<'_>,
    ) -> Result<(Arc<Value>, Vec<Change>), ApiError> {
        let current = self
            .get(kind, key)
            .ok_or_else(|| ApiError::not_found(kind, key))?
            .clone();
        let meta = &object["metadata"];
        check_preconditions(kind, key, &current, &meta["uid"], &meta["resourceVersion"])?;
        let mut next = current.clone();
        if status_only {
            next["status"] = object["status"].clone();
        } else {
            next = object;
            if kind == Kind::Service {
                ip_families::init(&mut next, Some(&current), &self.service_families)?;
            }
            next["metadata"]["uid"] = current["metadata"]["uid"].clone();
            next["metadata"]["creationTimestamp"] =
                current["metadata"]["creationTimestamp"].clone();
            // As the API server's update strategies do: the main resource
            // never changes status (the /status subresource does).
            if kind.has_status() {
                match current.get("status") {
                    Some(status) => next["status"] = status.clone(),
                    None => {
                        if let Some(fields) = next.as_object_mut() {
                            fields.remove("status");
                        }
                    }
                }
            }
        }
        if status_only {
            service_status::on_status_write(kind, &next)?;
        }
        admit(Some(&current), Some(&next))?;
        Ok(self.update(kind, key, next))
    }

    pub fn merge_patch(
        &mut self,
        kind: Kind,
        key: &str,
        patch: &Value,
        status_only: bool,
    ) -> Result<(Arc<Value>, Vec<Change>), ApiError> {
        self.merge_patch_admitted(kind, key, patch, status_only, &mut admit_all)
    }

    /// [`Store::merge_patch`] with validating admission, which sees the
    /// patched object (and the current one as `oldObject`).
    pub fn merge_patch_admitted(
        &mut self,
        kind: Kind,
        key: &str,
        patch: &Value,
        status_only: bool,
        admit: Admit<'_>,
    ) -> Result<(Arc<Value>, Vec<Change>), ApiError> {
        let current = self
            .get(kind, key)
            .ok_or_else(|| ApiError::not_found(kind, key))?;
        let mut next = current.clone();
        validation::uid_unchanged(kind, &next, &patch["metadata"]["uid"])?;
        if status_only {
            merge(&mut next["status"], &patch["status"]);
        } else {
            let mut patch = patch.clone();
            if let Some(object) = patch.as_object_mut() {
                object.remove("status");
            }
            merge(&mut next, &patch);
            if kind == Kind::Service {
                ip_families::init(&mut next, Some(current), &self.service_families)?;
            }
        }
        if status_only {
            service_status::on_status_write(kind, &next)?;
        }
        admit(Some(current), Some(&next))?;
        Ok(self.update(kind, key, next))
    }

    /// Deletes an object; `preconditions` is a DeleteOptions' field (null
    /// for none).
    pub fn remove(
        &mut self,
        kind: Kind,
        key: &str,
        preconditions: &Value,
    ) -> Result<(Arc<Value>, Vec<Change>), ApiError> {
        let object = self.shared(kind, key)?;
        let (uid, rv) = (&preconditions["uid"], &preconditions["resourceVersion"]);
        check_preconditions(kind, key, &object, uid, rv)?;
        let mut changes = self.write_with_effects(kind, key.to_owned(), None);
        changes.extend(self.collect_garbage(&object));
        Ok((object, changes))
    }

    /// A DELETE as the API server does it: at once, except for a pod on
    /// a node that has not finished, which is marked (deletionTimestamp,
    /// deletionGracePeriodSeconds) and stays until its grace ends (the
    /// kubelet's final delete: [`Deleted::Terminating`] says when) or a
    /// delete asks for no grace. A pod already terminating only has its
    /// grace shortened. `options` is the DeleteOptions (null for none),
    /// `query_grace` the `gracePeriodSeconds` parameter.
    pub fn delete(
        &mut self,
        kind: Kind,
        key: &str,
        options: &Value,
        query_grace: Option<u64>,
    ) -> Result<(Arc<Value>, Vec<Change>, Deleted), ApiError> {
        self.delete_admitted(kind, key, options, query_grace, &mut admit_all)
    }

    /// [`Store::delete`] with validating admission, which sees the object
    /// as `oldObject`.
    pub fn delete_admitted(
        &mut self,
        kind: Kind,
        key: &str,
        options: &Value,
        query_grace: Option<u64>,
        admit: Admit<'_>,
    ) -> Result<(Arc<Value>, Vec<Change>, Deleted), ApiError> {
        let object = self.shared(kind, key)?;
        let preconditions = &options["preconditions"];
        let (uid, rv) = (&preconditions["uid"], &preconditions["resourceVersion"]);
        check_preconditions(kind, key, &object, uid, rv)?;
        admit(Some(&object), None)?;
        let asked = options["gracePeriodSeconds"].as_u64().or(query_grace);
        let meta = &object["metadata"];
        let terminating = meta["deletionTimestamp"].is_string();
        let marked = meta["deletionGracePeriodSeconds"].as_u64().unwrap_or(0);
        let grace = match (terminating, marked) {
            // Marked with no grace to wait out: gone now.
            (true, 0) => 0,
            // Terminating: only a shorter grace changes anything (counted
            // from now here; the API server counts it from the first mark).
            (true, current) if asked.is_none_or(|asked| asked >= current) => {
                return Ok((object, Vec::new(), Deleted::Pending));
            }
            (true, _) => asked.unwrap_or(0),
            (false, _) if kind == Kind::Pod => pod_grace(&object, asked),
            (false, _) => 0,
        };
        if grace == 0 {
            let (object, changes) = self.remove(kind, key, &Value::Null)?;
            return Ok((object, changes, Deleted::Gone));
        }
        let mut next = Value::clone(&object);
        next["metadata"]["deletionTimestamp"] = json!(rfc3339_in(grace));
        next["metadata"]["deletionGracePeriodSeconds"] = json!(grace);
        let uid = next["metadata"]["uid"].as_str().unwrap_or("").to_owned();
        let (object, changes) = self.update(kind, key, next);
        Ok((object, changes, Deleted::Terminating { uid, grace }))
    }

    /// The kubelet's last word on a pod whose grace is over: removed, if
    /// it is still the one (`uid`) and still terminating.
    pub fn finish_terminating(&mut self, kind: Kind, key: &str, uid: &str) -> Vec<Change> {
        let current = self.get(kind, key);
        let due = current.is_some_and(|o| {
            o["metadata"]["uid"] == uid && o["metadata"]["deletionTimestamp"].is_string()
        });
        if !due {
            return Vec::new();
        }
        self.remove(kind, key, &Value::Null)
            .map(|(_, changes)| changes)
            .unwrap_or_default()
    }

    /// Writes `next`; returns it as stored, shared with the store (the
    /// answer is written from it: a copy per write was most of the fake's
    /// cost of a write).
    fn update(&mut self, kind: Kind, key: &str, next: Value) -> (Arc<Value>, Vec<Change>) {
        let changes = self.write_with_effects(kind, key.to_owned(), Some(next));
        (self.objects[&(kind, key.to_owned())].clone(), changes)
    }

    /// The stored object, shared.
    fn shared(&self, kind: Kind, key: &str) -> Result<Arc<Value>, ApiError> {
        self.objects
            .get(&(kind, key.to_owned()))
            .cloned()
            .ok_or_else(|| ApiError::not_found(kind, key))
    }

    /// Kubernetes' garbage collector (background propagation, done at once
    /// here): objects owned by a deleted object go too, and theirs.
    fn collect_garbage(&mut self, owner: &Value) -> Vec<Change> {
        let uid = &owner["metadata"]["uid"];
        let owned: Vec<(Kind, String)> = self
            .objects
            .iter()
            .filter(|(_, v)| {
                v["metadata"]["ownerReferences"]
                    .as_array()
                    .is_some_and(|refs| refs.iter().any(|r| &r["uid"] == uid))
            })
            .map(|(k, _)| k.clone())
            .collect();
        let mut changes = Vec::new();
        for (kind, key) in owned {
            let Some(dependent) = self.get(kind, &key).cloned() else {
                continue; // collected already, through another owner
            };
            changes.extend(self.write_with_effects(kind, key, None));
            changes.extend(self.collect_garbage(&dependent));
        }
        changes
    }

    fn is_free(&self, kind: Kind, key: &str) -> bool {
        !self.objects.contains_key(&(kind, key.to_owned()))
    }

    /// The endpoint-slice controller's part: a Service with a selector has
    /// a slice for the Pods it selects. Only the Services a change can
    /// affect are looked at.
    fn side_effects(&mut self, change: &Change) -> Vec<Change> {
        let Some(object) = change.new.as_ref().or(change.old.as_ref()) else {
            return Vec::new();
        };
        if self.without_endpoint_slices {
            return Vec::new();
        }
        let namespace = object["metadata"]["namespace"]
            .as_str()
            .unwrap_or("")
            .to_owned();
        let services: Vec<String> = match change.kind {
            Kind::Service => vec![key_of(object)],
            Kind::Pod => self
                .in_namespace(Kind::Service, &namespace)
                .filter(|s| {
                    [&change.old, &change.new]
                        .into_iter()
                        .flatten()
                        .any(|pod| endpoints::selects(s, pod))
                })
                .map(key_of)
                .collect(),
            _ => return Vec::new(),
        };
        let mut changes = Vec::new();
        for (key, family) in services
            .iter()
            .flat_map(|key| endpoints::IpFamily::ALL.map(|family| (key, family)))
        {
            let slice_key = endpoints::slice_key(key, family);
            let wanted = self.get(Kind::Service, key).and_then(|service| {
                endpoints::slice_for(service, self.in_namespace(Kind::Pod, &namespace), family)
            });
            let current = self.get(Kind::EndpointSlice, &slice_key);
            let write = match (current, &wanted) {
                (Some(_), None) => true,
                (None, Some(_)) => true,
                (Some(c), Some(w)) => !endpoints::same_content(c, w),
                (None, None) => false,
            };
            if write {
                changes.push(self.write(Kind::EndpointSlice, slice_key, wanted));
            }
        }
        changes
    }

    fn in_namespace<'a>(&'a self, kind: Kind, namespace: &str) -> impl Iterator<Item = &'a Value> {
        let prefix = format!("{namespace}/");
        self.objects
            .range((kind, prefix.clone())..)
            .take_while(move |((k, key), _)| *k == kind && key.starts_with(&prefix))
            .map(|(_, v)| v.as_ref())
    }

    /// Writes, then lets the emulated controllers react.
    fn write_with_effects(
        &mut self,
        kind: Kind,
        key: String,
        object: Option<Value>,
    ) -> Vec<Change> {
        let change = self.write(kind, key, object);
        let effects = self.side_effects(&change);
        let mut changes = vec![change];
        changes.extend(effects);
        changes
    }

    fn write(&mut self, kind: Kind, key: String, object: Option<Value>) -> Change {
        self.rv += 1;
        let rv = self.rv;
        let mut old = self.objects.remove(&(kind, key.clone()));
        let new = object.map(|mut o| {
            o["metadata"]["resourceVersion"] = json!(rv.to_string());
            let o = Arc::new(o);
            self.objects.insert((kind, key), o.clone());
            o
        });
        if new.is_none()
            && let Some(last) = old.as_mut()
        {
            // A DELETED event carries the object at the deletion's version.
            Arc::make_mut(last)["metadata"]["resourceVersion"] = json!(rv.to_string());
        }
        let change = Change { rv, kind, old, new };
        self.log.push(change.clone());
        change
    }

    fn next_uid(&mut self) -> String {
        self.uids += 1;
        uid_text(self.uids)
    }
}

fn uid_text(serial: u64) -> String {
    format!("00000000-0000-4000-8000-{serial:012x}")
}

/// Validating admission of a write: called with the object as it is (none
/// for a create) and as it is to be (none for a delete); an error refuses
/// the write.
pub type Admit<'a> = &'a mut dyn FnMut(Option<&Value>, Option<&Value>) -> Result<(), ApiError>;

/// Admits every write (the test's own writes, and a server that does not
/// enforce).
pub fn admit_all(_: Option<&Value>, _: Option<&Value>) -> Result<(), ApiError> {
    Ok(())
}

/// What a DELETE did.
#[derive(Debug, PartialEq, Eq)]
pub enum Deleted {
    /// The object is gone.
    Gone,
    /// Marked: it goes when `grace` seconds are over, if still the one
    /// with `uid`.
    Terminating { uid: String, grace: u64 },
    /// It was terminating already and still is, unchanged.
    Pending,
}

/// The grace a pod's deletion gets, as the pod strategy's
/// CheckGracefulDelete decides it: the one asked for, else the pod's
/// terminationGracePeriodSeconds (defaulted to 30 at creation); none for a
/// pod on no node or one that has finished.
fn pod_grace(pod: &Value, asked: Option<u64>) -> u64 {
    let scheduled = pod["spec"]["nodeName"]
        .as_str()
        .is_some_and(|n| !n.is_empty());
    let phase = pod["status"]["phase"].as_str();
    if !scheduled || matches!(phase, Some("Succeeded" | "Failed")) {
        return 0;
    }
    asked
        .or_else(|| pod["spec"]["terminationGracePeriodSeconds"].as_u64())
        .unwrap_or(30)
}

/// `namespace/name` for a candidate `(namespace, name)`.
fn object_ns((namespace, name): (&str, &str)) -> String {
    format!("{namespace}/{name}")
}

/// As the API server does after admission: an object without a name gets
/// its `generateName` and five random characters (of the API server's
/// alphabet, without vowels), tried again while the name is taken; one
/// with neither is refused with 422.
fn name_from_generate_name(
    object: &mut Value,
    free: impl Fn((&str, &str)) -> bool,
) -> Result<(), ApiError> {
    use std::hash::{BuildHasher as _, Hasher as _};
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let meta = &object["metadata"];
    if meta["name"].as_str().is_some_and(|n| !n.is_empty()) {
        return Ok(());
    }
    let Some(prefix) = meta["generateName"].as_str().filter(|p| !p.is_empty()) else {
        return Err(ApiError {
            code: 422,
            reason: "Invalid",
            message: "metadata.name: Required value: name or generateName is required".into(),
        });
    };
    // Truncated so that the name stays within 63 characters.
    let prefix: String = prefix.chars().take(58).collect();
    let namespace = meta["namespace"].as_str().unwrap_or("").to_owned();
    let random = std::collections::hash_map::RandomState::new();
    for attempt in 0..8u64 {
        let mut hasher = random.build_hasher();
        hasher.write_u64(attempt);
        let mut bits = hasher.finish();
        let mut name = prefix.clone();
        for _ in 0..5 {
            name.push(char::from(ALPHABET[(bits % 27) as usize]));
            bits /= 27;
        }
        if free((&namespace, &name)) {
            object["metadata"]["name"] = json!(name);
            return Ok(());
        }
    }
    Err(ApiError {
        code: 500,
        reason: "ServerTimeout",
        message: format!("no free name with generateName {prefix} found in time"),
    })
}

/// RFC 7386 JSON merge patch.
fn merge(target: &mut Value, patch: &Value) {
    let Some(fields) = patch.as_object() else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = json!({});
    }
    for (name, value) in fields {
        if value.is_null() {
            if let Some(t) = target.as_object_mut() {
                t.remove(name);
            }
        } else {
            merge(&mut target[name], value);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merge_patch_follows_rfc_7386() {
        let mut doc = json!({"a": "b", "c": {"d": "e", "f": "g"}});
        merge(&mut doc, &json!({"a": "z", "c": {"f": null}}));
        assert_eq!(doc, json!({"a": "z", "c": {"d": "e"}}));
    }

    #[test]
    fn writes_and_deletes_naming_another_uid_are_refused() {
        let mut store = Store::new();
        store.put(
            Kind::Pod,
            json!({"metadata": {"name": "p", "namespace": "ns", "uid": "new"}}),
        );
        // A patch has no preconditions: the uid it names is validated as
        // an update of an immutable field (ValidateObjectMetaUpdate), 422.
        let stale = json!({"metadata": {"uid": "old", "labels": {"a": "b"}}});
        let refused = store
            .merge_patch(Kind::Pod, "ns/p", &stale, false)
            .map(drop)
            .unwrap_err();
        assert_eq!((refused.code, refused.reason), (422, "Invalid"));
        assert!(
            refused.message.contains("metadata.uid")
                && refused.message.contains("field is immutable"),
            "{}",
            refused.message
        );
        let refused = store.remove(Kind::Pod, "ns/p", &json!({"uid": "old"}));
        assert_eq!(refused.map(drop).unwrap_err().code, 409);
        let current = json!({"metadata": {"uid": "new", "labels": {"a": "b"}}});
        assert!(
            store
                .merge_patch(Kind::Pod, "ns/p", &current, false)
                .is_ok()
        );
        assert!(
            store
                .remove(Kind::Pod, "ns/p", &json!({"uid": "new"}))
                .is_ok()
        );
    }

    #[test]
    fn a_create_with_generate_name_gets_a_fresh_name_and_one_with_neither_is_invalid() {
        let mut store = Store::new();
        let pod = json!({"metadata": {"generateName": "job-4711-", "namespace": "jobs"}});
        let (first, _) = store.create(Kind::Pod, pod.clone()).unwrap();
        let (second, _) = store.create(Kind::Pod, pod).unwrap();
        let (a, b) = (
            first["metadata"]["name"].as_str().unwrap(),
            second["metadata"]["name"].as_str().unwrap(),
        );
        assert_ne!(a, b);
        for name in [a, b] {
            let suffix = name.strip_prefix("job-4711-").unwrap();
            assert_eq!(suffix.len(), 5, "{name}");
            assert!(
                suffix
                    .bytes()
                    .all(|c| b"bcdfghjklmnpqrstvwxz2456789".contains(&c)),
                "{name}"
            );
        }
        let nameless = json!({"metadata": {"namespace": "jobs"}});
        assert_eq!(
            store
                .create(Kind::Pod, nameless)
                .map(drop)
                .unwrap_err()
                .code,
            422
        );
    }

    #[test]
    fn an_update_of_the_main_resource_leaves_status_alone_where_there_is_a_subresource() {
        let mut store = Store::new();
        store.put(
            Kind::Service,
            json!({"metadata": {"name": "s", "namespace": "ns"}, "spec": {}, "status": {"loadBalancer": {"ingress": [{"ip": "198.18.0.10"}]}}}),
        );
        let rv = store.get(Kind::Service, "ns/s").unwrap()["metadata"]["resourceVersion"].clone();
        let update = json!({"metadata": {"name": "s", "namespace": "ns", "resourceVersion": rv}, "spec": {"x": 1}, "status": {}});
        let (stored, _) = store.replace(Kind::Service, "ns/s", update, false).unwrap();
        assert_eq!(stored["spec"]["x"], 1);
        assert_eq!(
            stored["status"]["loadBalancer"]["ingress"][0]["ip"],
            "198.18.0.10"
        );
        store.put(
            Kind::Pod,
            json!({"metadata": {"name": "p", "namespace": "ns"}}),
        );
        let rv = store.get(Kind::Pod, "ns/p").unwrap()["metadata"]["resourceVersion"].clone();
        let update = json!({"metadata": {"name": "p", "namespace": "ns", "resourceVersion": rv}, "status": {"phase": "Running"}});
        let (stored, _) = store.replace(Kind::Pod, "ns/p", update, false).unwrap();
        assert!(stored.get("status").is_none(), "{stored}");
    }

    #[test]
    fn deleting_any_owner_collects_its_dependents_and_theirs() {
        let mut store = Store::new();
        store.put(
            Kind::Secret,
            json!({"metadata": {"name": "top", "namespace": "ns", "uid": "u-top"}}),
        );
        let owned_by =
            |uid: &str| json!([{"apiVersion": "v1", "kind": "Secret", "name": "x", "uid": uid}]);
        store.put(Kind::Service, json!({"metadata": {"name": "mid", "namespace": "ns", "uid": "u-mid", "ownerReferences": owned_by("u-top")}}));
        store.put(Kind::Lease, json!({"metadata": {"name": "low", "namespace": "ns", "ownerReferences": owned_by("u-mid")}}));
        store.put(Kind::Lease, json!({"metadata": {"name": "other", "namespace": "ns", "ownerReferences": owned_by("u-else")}}));
        store.remove(Kind::Secret, "ns/top", &Value::Null).unwrap();
        assert!(store.get(Kind::Service, "ns/mid").is_none());
        assert!(store.get(Kind::Lease, "ns/low").is_none());
        assert!(store.get(Kind::Lease, "ns/other").is_some());
    }
}
