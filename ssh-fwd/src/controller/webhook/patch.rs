//! The JSON Patch a mutation is written as, and the pod's containers it
//! walks: what the endpoint variable and the keys both build on.

use json_patch::{AddOperation, Patch, PatchOperation, RemoveOperation, jsonptr::PointerBuf};
use serde_json::Value;

/// JSON Patch operations in the order they apply.
#[derive(Default)]
pub struct Ops(Vec<PatchOperation>);

impl Ops {
    pub fn into_patch(self) -> Patch {
        Patch(self.0)
    }

    pub fn add(&mut self, path: &[&str], value: Value) {
        self.0.push(PatchOperation::Add(AddOperation {
            path: PointerBuf::from_tokens(path.iter().copied()),
            value,
        }));
    }

    pub fn remove(&mut self, path: &[&str]) {
        self.0.push(PatchOperation::Remove(RemoveOperation {
            path: PointerBuf::from_tokens(path.iter().copied()),
        }));
    }

    /// Appends `item` to the array at `path` (the field `path` ends with,
    /// in `parent`), making the array if absent.
    pub fn push(&mut self, parent: &Value, path: &[&str], item: Value) {
        self.push_all(parent, path, vec![item]);
    }

    pub fn push_all(&mut self, parent: &Value, path: &[&str], items: Vec<Value>) {
        let field = path.last().copied().unwrap_or_default();
        if parent[field].is_array() {
            let mut at = path.to_vec();
            at.push("-");
            for item in items {
                self.add(&at, item);
            }
        } else {
            self.add(path, Value::Array(items));
        }
    }
}

/// The user's containers, as (list field, index, container).
pub fn containers(pod: &Value) -> impl Iterator<Item = (&'static str, usize, &Value)> {
    ["initContainers", "containers"]
        .into_iter()
        .flat_map(move |list| {
            pod["spec"][list]
                .as_array()
                .into_iter()
                .flatten()
                .enumerate()
                .map(move |(i, c)| (list, i, c))
        })
}
