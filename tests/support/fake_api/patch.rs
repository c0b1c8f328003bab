//! The three PATCH flavours the fake API server accepts, on `serde_json::Value`s:
//! JSON merge patch (RFC 7386), strategic merge patch (lists merged by key for the
//! fields litelet patches, `$patch: delete|replace` and `$setElementOrder` honoured,
//! other directives dropped), and JSON patch (RFC 6902: add, remove, replace, test).

use serde_json::{Map, Value};

/// List fields merged by a key in a strategic merge patch, by dotted path (no indices).
const MERGE_KEYS: &[(&str, &str)] = &[
    ("metadata.ownerReferences", "uid"),
    ("spec.containers", "name"),
    ("spec.initContainers", "name"),
    ("spec.ephemeralContainers", "name"),
    ("spec.containers.env", "name"),
    ("spec.containers.ports", "containerPort"),
    ("spec.containers.volumeMounts", "mountPath"),
    ("spec.volumes", "name"),
    // Container status lists are atomic on the real server (`+listType=atomic`, no
    // patch merge key): a patch replaces them whole.
    ("status.conditions", "type"),
    ("status.resourceClaimStatuses", "name"),
    ("status.podIPs", "ip"),
    ("status.hostIPs", "ip"),
    ("status.addresses", "type"),
];

fn merge_key(path: &str) -> Option<&'static str> {
    MERGE_KEYS.iter().find(|(p, _)| *p == path).map(|(_, k)| *k)
}

fn child(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    }
}

/// RFC 7386: objects merge recursively, `null` deletes, anything else replaces.
pub fn merge_patch(target: &mut Value, patch: &Value) {
    let Value::Object(patch) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let Value::Object(t) = target else { return };
    for (k, v) in patch {
        if v.is_null() {
            t.remove(k);
        } else {
            merge_patch(t.entry(k.clone()).or_insert(Value::Null), v);
        }
    }
}

/// Removes `$`-directives from a value that is inserted as is.
fn strip_directives(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(k, _)| !k.starts_with('$'))
                .map(|(k, v)| (k.clone(), strip_directives(v)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(strip_directives).collect()),
        other => other.clone(),
    }
}

/// Kubernetes strategic merge patch of `target` at dotted `path` ("" for the root).
pub fn strategic_merge(target: &mut Value, patch: &Value, path: &str) {
    let Value::Object(p) = patch else {
        *target = patch.clone();
        return;
    };
    if p.get("$patch").and_then(Value::as_str) == Some("replace") {
        *target = strip_directives(patch);
        return;
    }
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let Value::Object(t) = target else { return };
    let mut orders = Vec::new();
    for (k, v) in p {
        if let Some(field) = k.strip_prefix("$setElementOrder/") {
            orders.push((field.to_owned(), v.clone()));
            continue;
        }
        if k.starts_with('$') {
            continue;
        }
        let cpath = child(path, k);
        if v.is_null() {
            t.remove(k);
            continue;
        }
        match (v, merge_key(&cpath)) {
            (Value::Array(items), Some(key)) => {
                let slot = t.entry(k.clone()).or_insert(Value::Array(Vec::new()));
                if !slot.is_array() {
                    *slot = Value::Array(Vec::new());
                }
                if let Value::Array(list) = slot {
                    merge_list(list, items, key, &cpath);
                }
            }
            (Value::Object(_), _) => {
                strategic_merge(t.entry(k.clone()).or_insert(Value::Null), v, &cpath);
            }
            _ => {
                t.insert(k.clone(), strip_directives(v));
            }
        }
    }
    for (field, order) in orders {
        let (Some(Value::Array(list)), Some(key), Value::Array(order)) =
            (t.get_mut(&field), merge_key(&child(path, &field)), order)
        else {
            continue;
        };
        reorder(list, &order, key);
    }
}

fn merge_list(list: &mut Vec<Value>, items: &[Value], key: &str, path: &str) {
    if items
        .iter()
        .any(|i| i.get("$patch").and_then(Value::as_str) == Some("replace"))
    {
        *list = items
            .iter()
            .filter(|i| i.get("$patch").is_none())
            .map(strip_directives)
            .collect();
        return;
    }
    for item in items {
        let Some(kv) = item.get(key) else {
            list.push(strip_directives(item));
            continue;
        };
        let pos = list.iter().position(|e| e.get(key) == Some(kv));
        if item.get("$patch").and_then(Value::as_str) == Some("delete") {
            list.retain(|e| e.get(key) != Some(kv));
            continue;
        }
        match pos {
            Some(i) => strategic_merge(&mut list[i], item, path),
            None => list.push(strip_directives(item)),
        }
    }
}

/// Puts the elements named in `order` (by key) first, in that order; the rest follow
/// in their current order.
fn reorder(list: &mut Vec<Value>, order: &[Value], key: &str) {
    let mut rest = std::mem::take(list);
    for o in order {
        if let Some(kv) = o.get(key) {
            if let Some(i) = rest.iter().position(|e| e.get(key) == Some(kv)) {
                list.push(rest.remove(i));
            }
        }
    }
    list.extend(rest);
}

fn unescape(token: &str) -> String {
    token.replace("~1", "/").replace("~0", "~")
}

/// Splits a JSON pointer into its parent pointer and last token.
fn split_pointer(ptr: &str) -> Result<(&str, String), String> {
    let i = ptr
        .rfind('/')
        .ok_or_else(|| format!("bad JSON pointer {ptr:?}"))?;
    Ok((&ptr[..i], unescape(&ptr[i + 1..])))
}

fn add_at(doc: &mut Value, ptr: &str, value: Value) -> Result<(), String> {
    if ptr.is_empty() {
        *doc = value;
        return Ok(());
    }
    let (parent, last) = split_pointer(ptr)?;
    match doc.pointer_mut(parent) {
        Some(Value::Object(m)) => {
            m.insert(last, value);
            Ok(())
        }
        Some(Value::Array(a)) => {
            if last == "-" {
                a.push(value);
                return Ok(());
            }
            let i: usize = last.parse().map_err(|_| format!("bad index {last:?}"))?;
            if i > a.len() {
                return Err(format!("index {i} out of range at {parent:?}"));
            }
            a.insert(i, value);
            Ok(())
        }
        _ => Err(format!("no container at {parent:?}")),
    }
}

fn remove_at(doc: &mut Value, ptr: &str) -> Result<Value, String> {
    let (parent, last) = split_pointer(ptr)?;
    match doc.pointer_mut(parent) {
        Some(Value::Object(m)) => m.remove(&last).ok_or_else(|| format!("nothing at {ptr:?}")),
        Some(Value::Array(a)) => {
            let i: usize = last.parse().map_err(|_| format!("bad index {last:?}"))?;
            if i >= a.len() {
                return Err(format!("index {i} out of range at {parent:?}"));
            }
            Ok(a.remove(i))
        }
        _ => Err(format!("nothing at {ptr:?}")),
    }
}

/// RFC 6902 with the operations add, remove, replace and test.
pub fn json_patch(doc: &mut Value, ops: &Value) -> Result<(), String> {
    let ops = ops.as_array().ok_or("a JSON patch must be a list")?;
    for op in ops {
        let name = op.get("op").and_then(Value::as_str).unwrap_or("");
        let path = op
            .get("path")
            .and_then(Value::as_str)
            .ok_or("operation without path")?;
        let value = || {
            op.get("value")
                .cloned()
                .ok_or(format!("{name} without value"))
        };
        match name {
            "add" => add_at(doc, path, value()?)?,
            "remove" => {
                remove_at(doc, path)?;
            }
            "replace" => {
                remove_at(doc, path)?;
                add_at(doc, path, value()?)?;
            }
            "test" => {
                if doc.pointer(path) != Some(&value()?) {
                    return Err(format!("test failed at {path:?}"));
                }
            }
            other => return Err(format!("unsupported operation {other:?}")),
        }
    }
    Ok(())
}
