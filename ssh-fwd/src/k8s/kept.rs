//! The few labels or annotations a cache keeps of an object: the keys its
//! readers name, in a sorted slice. A `BTreeMap` costs a whole B-tree node
//! (544 bytes for `String` pairs) however few its entries, and a real
//! cluster's objects carry many keys nobody here reads
//! (`kubectl.kubernetes.io/last-applied-configuration` is a copy of the
//! object): at thousands of objects these maps were most of the
//! controller's memory.

use std::collections::BTreeMap;

/// Entries of a label or annotation map, only those with a kept key.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Kept(Box<[(Box<str>, Box<str>)]>);

impl Kept {
    /// Of `all`, the entries whose key is one of `keys`.
    pub fn pick(all: Option<BTreeMap<String, String>>, keys: &[&str]) -> Self {
        let entries: Vec<_> = all
            .into_iter()
            .flatten()
            .filter(|(key, _)| keys.contains(&key.as_str()))
            .map(|(key, value)| (key.into_boxed_str(), value.into_boxed_str()))
            .collect();
        // From a BTreeMap: already sorted by key, as `get` needs.
        Self(entries.into_boxed_slice())
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        self.0
            .binary_search_by(|(k, _)| k.as_ref().cmp(key))
            .ok()
            .map(|at| self.0[at].1.as_ref())
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// As the API's map (`None` when empty): for writing the object back
    /// out, as tests do.
    pub fn to_map(&self) -> Option<BTreeMap<String, String>> {
        (!self.is_empty()).then(|| {
            self.0
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        })
    }
}

/// `Lookup` (what a reflector's store keys by) for `$view`, a projection
/// of the resource `$of` whose `name`, `namespace`, `resource_version` and
/// `uid` are at `self$(.$meta)*`: the type's names come from `$of`, so a
/// projection cannot be filed under another kind.
macro_rules! lookup_as {
    ($view:ty, $of:ty $(, .$meta:ident)*) => {
        impl kube::runtime::reflector::Lookup for $view {
            type DynamicType = ();

            fn kind(_: &()) -> std::borrow::Cow<'_, str> {
                <$of as kube::Resource>::kind(&())
            }
            fn group(_: &()) -> std::borrow::Cow<'_, str> {
                <$of as kube::Resource>::group(&())
            }
            fn version(_: &()) -> std::borrow::Cow<'_, str> {
                <$of as kube::Resource>::version(&())
            }
            fn plural(_: &()) -> std::borrow::Cow<'_, str> {
                <$of as kube::Resource>::plural(&())
            }
            fn name(&self) -> Option<std::borrow::Cow<'_, str>> {
                self$(.$meta)*.name.as_deref().map(std::borrow::Cow::Borrowed)
            }
            fn namespace(&self) -> Option<std::borrow::Cow<'_, str>> {
                self$(.$meta)*.namespace.as_deref().map(std::borrow::Cow::Borrowed)
            }
            fn resource_version(&self) -> Option<std::borrow::Cow<'_, str>> {
                self$(.$meta)*.resource_version.as_deref().map(std::borrow::Cow::Borrowed)
            }
            fn uid(&self) -> Option<std::borrow::Cow<'_, str>> {
                self$(.$meta)*.uid.as_deref().map(std::borrow::Cow::Borrowed)
            }
        }
    };
}
pub(crate) use lookup_as;

#[cfg(test)]
mod tests {
    use super::*;

    fn map(entries: &[(&str, &str)]) -> Option<BTreeMap<String, String>> {
        Some(
            entries
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        )
    }

    #[test]
    fn keeps_only_the_named_keys_and_finds_each() {
        let all = map(&[("z", "1"), ("a", "2"), ("m", "3"), ("unread", "4")]);
        let kept = Kept::pick(all, &["m", "z", "a", "absent"]);
        assert_eq!(kept.get("a"), Some("2"));
        assert_eq!(kept.get("m"), Some("3"));
        assert_eq!(kept.get("z"), Some("1"));
        assert_eq!(kept.get("unread"), None);
        assert_eq!(kept.get("absent"), None);
        assert_eq!(kept.to_map(), map(&[("a", "2"), ("m", "3"), ("z", "1")]));
    }

    #[test]
    fn no_map_or_no_kept_key_is_empty_and_writes_back_as_none() {
        assert!(Kept::pick(None, &["a"]).is_empty());
        let none_kept = Kept::pick(map(&[("b", "1")]), &["a"]);
        assert!(none_kept.is_empty());
        assert_eq!(none_kept.to_map(), None);
    }
}
