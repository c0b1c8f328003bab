//! `/configz`: the running configuration as upstream's kubelet serves it,
//! `{"kubeletconfig": {...}}` with KubeletConfiguration field names, rendered once from
//! the effective [`Flags`] through the catalogue: every implemented setting's value,
//! and for settings litelet has a fixed behaviour for, that behaviour (`readOnlyPort:
//! 0`, `serializeImagePulls: false`). Settings that change nothing are left out. The
//! document is a config file litelet accepts as it is (a test holds that).
//!
//! The server does not import `config` (config is the top layer): it gets this
//! pre-rendered value through `ServerConfig::configz`.

use serde_json::{Map, Value};

use super::file::{API_VERSION, KIND};
use super::table;
use super::Flags;

pub use super::value::go_duration_string as go_duration;

impl Flags {
    /// The `/configz` document for these (effective) flags.
    pub fn configz(&self) -> Value {
        let mut config = Map::new();
        config.insert("kind".into(), Value::String(KIND.into()));
        config.insert("apiVersion".into(), Value::String(API_VERSION.into()));
        let mut config = Value::Object(config);
        for setting in table::all() {
            if setting.field.is_empty() {
                continue;
            }
            if let Some(value) = setting.show(self) {
                insert(&mut config, setting.field, value);
            }
        }
        let mut z = Map::new();
        z.insert("kubeletconfig".into(), config);
        Value::Object(z)
    }
}

/// Puts `value` at the dotted `path`, making the objects on the way.
fn insert(config: &mut Value, path: &str, value: Value) {
    let mut at = config;
    let mut keys = path.split('.').peekable();
    while let Some(key) = keys.next() {
        let Value::Object(map) = at else { return };
        if keys.peek().is_none() {
            map.insert(key.to_owned(), value);
            return;
        }
        at = map
            .entry(key.to_owned())
            .or_insert_with(|| Value::Object(Map::new()));
    }
}

#[cfg(test)]
mod tests;
