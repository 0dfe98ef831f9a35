//! Documents whose objects name each key once.
//!
//! JSON leaves a repeated key's meaning open: serde_json and Kubernetes keep the last one, a
//! derived struct refuses it, a hand-written check may read the first. A body a plugin or a
//! client writes is read by several of those (the host's check that it names its target, the
//! store, the API server), so a repeated key could make one of them see another object than
//! the rest. kube-apiserver's strict decoding refuses such a body; so does [`check_unique_keys`].

use std::borrow::Cow;
use std::cell::RefCell;
use std::collections::HashSet;
use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};

/// Longest field path an error quotes; longer ones are cut (keys are the writer's text).
const MAX_QUOTED_PATH: usize = 256;

/// Why a document was refused.
#[derive(Debug, thiserror::Error)]
pub enum UniqueKeysError {
    /// An object names `path`'s last key twice.
    #[error("duplicate field {path:?}")]
    DuplicateField {
        /// The repeated field, as kube-apiserver writes it (`metadata.name`,
        /// `spec.containers[0].name`), cut to 256 bytes.
        path: String,
    },
    /// The text is not one JSON value (or nests deeper than serde_json's 128 levels).
    #[error("not JSON: {0}")]
    Syntax(#[source] serde_json::Error),
}

/// `Ok` when `text` is one JSON value in which no object names a key twice.
///
/// Every value is checked, strictly, as serde_json parses it; nothing is built but each
/// object's set of keys while it is read.
pub fn check_unique_keys(text: &str) -> Result<(), UniqueKeysError> {
    let walk = Walk::default();
    let mut deserializer = serde_json::Deserializer::from_str(text);
    let parsed = Value { walk: &walk }
        .deserialize(&mut deserializer)
        .and_then(|()| deserializer.end());
    match (parsed, walk.duplicate.into_inner()) {
        (_, Some(path)) => Err(UniqueKeysError::DuplicateField { path }),
        (Err(e), None) => Err(UniqueKeysError::Syntax(e)),
        (Ok(()), None) => Ok(()),
    }
}

/// One step of the path to the value being read.
enum Step<'de> {
    Key(Cow<'de, str>),
    Index(usize),
}

/// What the walk knows: where it is, and the duplicate it found, if any.
#[derive(Default)]
struct Walk<'de> {
    path: RefCell<Vec<Step<'de>>>,
    duplicate: RefCell<Option<String>>,
}

impl Walk<'_> {
    fn found_duplicate(&self, key: &str) {
        let mut path = String::new();
        for step in self.path.borrow().iter() {
            match step {
                Step::Key(k) if path.is_empty() => path.push_str(k),
                Step::Key(k) => {
                    path.push('.');
                    path.push_str(k);
                }
                Step::Index(i) => path.push_str(&format!("[{i}]")),
            }
        }
        if !path.is_empty() {
            path.push('.');
        }
        path.push_str(key);
        if path.len() > MAX_QUOTED_PATH {
            let mut end = MAX_QUOTED_PATH;
            while !path.is_char_boundary(end) {
                end -= 1;
            }
            path.truncate(end);
            path.push('…');
        }
        *self.duplicate.borrow_mut() = Some(path);
    }
}

/// Reads any value, checking the objects in it.
struct Value<'w, 'de> {
    walk: &'w Walk<'de>,
}

impl<'de> DeserializeSeed<'de> for Value<'_, 'de> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Value<'_, 'de> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }
    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }
    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }
    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }
    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }
    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let mut index = 0;
        loop {
            self.walk.path.borrow_mut().push(Step::Index(index));
            let element = seq.next_element_seed(Value { walk: self.walk })?;
            self.walk.path.borrow_mut().pop();
            if element.is_none() {
                return Ok(());
            }
            index += 1;
        }
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        // A set, not a scan of the keys so far: a hostile object may have 100,000 of them.
        let mut seen: HashSet<Cow<'de, str>> = HashSet::new();
        while let Some(Key(key)) = map.next_key()? {
            if seen.contains(&key) {
                self.walk.found_duplicate(&key);
                return Err(de::Error::custom("duplicate field"));
            }
            self.walk.path.borrow_mut().push(Step::Key(key.clone()));
            map.next_value_seed(Value { walk: self.walk })?;
            self.walk.path.borrow_mut().pop();
            seen.insert(key);
        }
        Ok(())
    }
}

/// An object's key, borrowed from the text where it has no escapes.
struct Key<'de>(Cow<'de, str>);

impl<'de> de::Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl<'de> Visitor<'de> for KeyVisitor {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string key")
            }
            fn visit_borrowed_str<E>(self, key: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Borrowed(key)))
            }
            fn visit_str<E>(self, key: &str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(key.to_owned())))
            }
        }
        deserializer.deserialize_str(KeyVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn duplicate(text: &str) -> Option<String> {
        match check_unique_keys(text) {
            Err(UniqueKeysError::DuplicateField { path }) => Some(path),
            Err(UniqueKeysError::Syntax(e)) => panic!("{text}: {e}"),
            Ok(()) => None,
        }
    }

    #[test]
    fn a_repeated_key_is_named_by_its_path() {
        assert_eq!(
            duplicate(r#"{"metadata":{"name":"a","namespace":"n","name":"b"}}"#).as_deref(),
            Some("metadata.name")
        );
        assert_eq!(
            duplicate(r#"{"kind":"Pod","kind":"Secret"}"#).as_deref(),
            Some("kind")
        );
        assert_eq!(
            duplicate(r#"{"spec":{"containers":[{"name":"a"},{"name":"b","name":"c"}]}}"#)
                .as_deref(),
            Some("spec.containers[1].name")
        );
        assert_eq!(
            duplicate(r#"[{"op":"add","op":"remove","path":"/x"}]"#).as_deref(),
            Some("[0].op")
        );
        // An escape spells the same key another way.
        assert_eq!(
            duplicate(r#"{"metadata":{"name":"a","n\u0061me":"b"}}"#).as_deref(),
            Some("metadata.name")
        );
    }

    #[test]
    fn the_same_key_in_sibling_objects_is_no_duplicate() {
        let text = r#"{"a":{"name":1},"b":{"name":2},"c":[{"name":3},{"name":4}],"name":5}"#;
        assert_eq!(duplicate(text), None);
        assert_eq!(duplicate(r#""text""#), None);
        assert_eq!(duplicate("[1, 2.5, -3, true, null, {}]"), None);
    }

    #[test]
    fn what_is_not_json_is_refused_as_such() {
        for text in ["", "{", r#"{"a":1,}"#, "{} {}", r#"{"a":1}x"#] {
            assert!(
                matches!(check_unique_keys(text), Err(UniqueKeysError::Syntax(_))),
                "{text}"
            );
        }
        let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
        assert!(matches!(
            check_unique_keys(&deep),
            Err(UniqueKeysError::Syntax(_))
        ));
    }

    #[test]
    fn a_long_path_is_cut_in_the_error() {
        let key = "k".repeat(10_000);
        let text = format!(r#"{{"{key}":1,"{key}":2}}"#);
        let error = check_unique_keys(&text).unwrap_err().to_string();
        assert!(error.len() < 300, "{}", error.len());
    }

    #[test]
    fn a_hundred_thousand_distinct_keys_pass() {
        let members: Vec<String> = (0..100_000).map(|i| format!(r#""k{i}":{i}"#)).collect();
        let text = format!("{{{}}}", members.join(","));
        assert_eq!(duplicate(&text), None);
    }
}
