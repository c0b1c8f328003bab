//! YAML text → a generic JSON document, within a size budget.
//!
//! A YAML alias repeats its anchor's whole subtree wherever it appears, and the
//! decoder expands every alias: an anchor of a few thousand scalars referenced a few
//! thousand times is a file of some KiB and a document of millions of values (nested
//! anchors, "billion laughs", grow faster still; the decoder's own repetition limit
//! still allows a cost quadratic in the file). Without aliases a document cannot hold
//! more values and text than its file has bytes, so the builder charges one unit per
//! value plus the length of every string and key, and gives up once the charge passes
//! twice the file's size plus a small allowance, before the memory is spent.
//!
//! JSON has no aliases (and `serde_json` has its own nesting limit), so JSON manifests
//! do not come here. Pure; called by the `static-pods` thread while parsing.

use std::cell::Cell;
use std::fmt;

use serde::de::{DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};

/// Charge allowed beyond twice the file's size (small files with a few aliases).
const ALLOWANCE: usize = 64 * 1024;

/// Decodes one YAML document from `text`; an error names the place, or the budget.
pub fn from_yaml(text: &str) -> Result<Value, serde_yaml_ng::Error> {
    let budget = Budget {
        left: Cell::new(text.len().saturating_mul(2).saturating_add(ALLOWANCE)),
    };
    Node(&budget).deserialize(serde_yaml_ng::Deserializer::from_str(text))
}

struct Budget {
    left: Cell<usize>,
}

impl Budget {
    fn charge<E: serde::de::Error>(&self, units: usize) -> Result<(), E> {
        match self.left.get().checked_sub(units) {
            Some(left) => {
                self.left.set(left);
                Ok(())
            }
            None => Err(E::custom(
                "the document expands far beyond the file's size (YAML aliases?)",
            )),
        }
    }
}

/// One value of the document, built while charging the budget.
struct Node<'b>(&'b Budget);

impl<'de> DeserializeSeed<'de> for Node<'_> {
    type Value = Value;

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Node<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any YAML value")
    }

    fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<Value, E> {
        self.0.charge(1)?;
        Ok(Value::Bool(v))
    }

    fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Value, E> {
        self.0.charge(1)?;
        Ok(Value::Number(v.into()))
    }

    fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Value, E> {
        self.0.charge(1)?;
        Ok(Value::Number(v.into()))
    }

    fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Value, E> {
        self.0.charge(1)?;
        // As serde_json's own Value: NaN and infinities have no JSON number.
        Ok(Number::from_f64(v).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Value, E> {
        self.0.charge(1 + v.len())?;
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E: serde::de::Error>(self, v: String) -> Result<Value, E> {
        self.0.charge(1 + v.len())?;
        Ok(Value::String(v))
    }

    fn visit_unit<E: serde::de::Error>(self) -> Result<Value, E> {
        self.0.charge(1)?;
        Ok(Value::Null)
    }

    fn visit_none<E: serde::de::Error>(self) -> Result<Value, E> {
        self.visit_unit()
    }

    fn visit_some<D: serde::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        self.0.charge(1)?;
        let mut items = Vec::new();
        while let Some(item) = seq.next_element_seed(Node(self.0))? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        self.0.charge(1)?;
        let mut out = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            self.0.charge::<A::Error>(key.len())?;
            let value = map.next_value_seed(Node(self.0))?;
            out.insert(key, value);
        }
        Ok(Value::Object(out))
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    #[test]
    fn plain_documents_decode_as_before() {
        let text = "a: 1\nb: [x, 2.5, true, null]\nc: {d: e}\n";
        let want: Value = serde_yaml_ng::from_str(text).unwrap();
        assert_eq!(from_yaml(text).unwrap(), want);
        // A few aliases, as a hand-written manifest may use, are fine.
        let text = "base: &b {image: nginx, ports: [80, 443]}\none: *b\ntwo: *b\n";
        let want: Value = serde_yaml_ng::from_str(text).unwrap();
        assert_eq!(from_yaml(text).unwrap(), want);
    }

    /// An anchor of 1,000 scalars referenced 1,000 times: 6 KiB of YAML, a million
    /// values once expanded. Refused by the budget (the plain decoder builds it all;
    /// ten times more of each would need gigabytes).
    #[test]
    fn an_alias_expansion_is_refused_before_it_is_built() {
        let text = quadratic(1000, 1000);
        assert!(text.len() < 8 * 1024, "{}", text.len());
        let err = from_yaml(&text).unwrap_err().to_string();
        assert!(err.contains("expands far beyond"), "{err}");
    }

    /// `a: &a [x, x, …]` (`anchor` scalars) and `b: [*a, *a, …]` (`uses` aliases).
    pub(crate) fn quadratic(anchor: usize, uses: usize) -> String {
        format!(
            "a: &a [{}]\nb: [{}]\n",
            vec!["x"; anchor].join(","),
            vec!["*a"; uses].join(",")
        )
    }
}
