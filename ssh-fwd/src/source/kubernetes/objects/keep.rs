//! Of a string map on the wire (labels, annotations), only the keys a
//! rule reads, taken as they are read: the others are skipped without
//! being allocated.

use std::{borrow::Cow, collections::BTreeMap, fmt, marker::PhantomData};

use serde::{
    Deserialize,
    de::{IgnoredAny, MapAccess, Visitor},
};

/// Which keys a [`Keep`] keeps.
pub trait Keys {
    const KEYS: &'static [&'static str];
    /// What the map is, for a decoding error.
    const WHAT: &'static str;
}

/// The entries of a string map (or null) whose key is one of `K::KEYS`.
pub struct Keep<K>(Vec<(String, String)>, PhantomData<K>);

impl<K> Default for Keep<K> {
    fn default() -> Self {
        Self(Vec::new(), PhantomData)
    }
}

impl<K> Keep<K> {
    /// The entries kept as the object's map: `None` when there are none,
    /// as the API server leaves an empty map out.
    pub fn into_map(self) -> Option<BTreeMap<String, String>> {
        (!self.0.is_empty()).then(|| self.0.into_iter().collect())
    }
}

impl<'de, K: Keys> Deserialize<'de> for Keep<K> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_option(Visit(PhantomData))
    }
}

struct Visit<K>(PhantomData<K>);

impl<'de, K: Keys> Visitor<'de> for Visit<K> {
    type Value = Keep<K>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(K::WHAT)
    }

    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(Keep::default())
    }

    fn visit_none<E>(self) -> Result<Self::Value, E> {
        Ok(Keep::default())
    }

    fn visit_some<D: serde::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_map(self)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut kept = Vec::new();
        while let Some(key) = map.next_key::<Cow<'de, str>>()? {
            if K::KEYS.contains(&key.as_ref()) {
                kept.push((key.into_owned(), map.next_value::<String>()?));
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(Keep(kept, PhantomData))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Two;

    impl Keys for Two {
        const KEYS: &'static [&'static str] = &["a", "c"];
        const WHAT: &'static str = "a map of test keys or null";
    }

    fn kept(json: &str) -> Option<BTreeMap<String, String>> {
        serde_json::from_str::<Keep<Two>>(json).unwrap().into_map()
    }

    #[test]
    fn only_the_named_keys_are_kept_and_an_empty_or_null_map_is_none() {
        let map = kept(r#"{"a": "1", "b": {"deep": [1, 2]}, "c": "3"}"#).unwrap();
        assert_eq!(
            map.into_iter().collect::<Vec<_>>(),
            [("a".into(), "1".into()), ("c".into(), "3".into())]
        );
        assert_eq!(kept(r#"{"b": "2"}"#), None);
        assert_eq!(kept("{}"), None);
        assert_eq!(kept("null"), None);
    }

    #[test]
    fn a_kept_key_that_is_not_a_string_is_an_error_naming_the_map() {
        let e = serde_json::from_str::<Keep<Two>>(r#"{"a": 1}"#)
            .err()
            .unwrap();
        assert!(e.to_string().contains("string"), "{e}");
        let e = serde_json::from_str::<Keep<Two>>("[]").err().unwrap();
        assert!(e.to_string().contains("a map of test keys or null"), "{e}");
    }
}
