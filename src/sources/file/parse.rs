//! One manifest file's bytes → its static pods, or the one error that rejects the
//! file (upstream `tryDecodeSinglePod` / `tryDecodePodList` in
//! `pkg/kubelet/config/common.go`).
//!
//! Accepted: YAML or JSON holding one `Pod` (`apiVersion: v1`), or a `PodList`/`List`
//! whose `items` are pods. A file is taken whole or not at all: one bad item rejects
//! the list, as upstream. Decoding goes through a generic document first, which gives
//! the UID hash its input and the errors their field path (`serde_path_to_error`), so
//! a bad quantity reads `spec.containers[0].resources.limits.cpu: ...`.
//!
//! Pure (bytes in, pods out); called by the `static-pods` thread.

use std::path::Path;

use serde_json::{Map, Value};

use super::defaults::{apply_api_defaults, apply_static_rules};
use super::uid::static_pod_uid;
use super::validate::validate_pod;
use super::ManifestError;
use crate::api::pod::Pod;

/// Decodes, defaults and validates the pods of the manifest at `path` (used in the
/// errors and the UID) whose content is `data`, for node `node`.
pub fn parse_manifest(path: &Path, data: &[u8], node: &str) -> Result<Vec<Pod>, ManifestError> {
    let doc = parse_document(path, data)?;
    let field = |field: &str, reason: String| ManifestError::Field {
        path: path.to_owned(),
        field: field.to_owned(),
        reason,
    };
    let Value::Object(obj) = &doc else {
        return Err(field(
            "(document)",
            format!("expected an object, found {}", type_name(&doc)),
        ));
    };
    let kind = obj.get("kind").and_then(Value::as_str).unwrap_or("");
    match kind {
        "Pod" => {
            check_api_version(obj, "").map_err(|(f, r)| field(&f, r))?;
            Ok(vec![decode_pod(path, "", &doc, node)?])
        }
        "PodList" | "List" => {
            check_api_version(obj, "").map_err(|(f, r)| field(&f, r))?;
            let Some(items) = obj.get("items").and_then(Value::as_array) else {
                return Err(field("items", "required: a list of pods".to_owned()));
            };
            let mut pods = Vec::with_capacity(items.len());
            for (i, item) in items.iter().enumerate() {
                let at = format!("items[{i}]");
                let Value::Object(o) = item else {
                    return Err(field(
                        &at,
                        format!("expected a pod object, found {}", type_name(item)),
                    ));
                };
                match o.get("kind").and_then(Value::as_str) {
                    None | Some("Pod") => {}
                    Some(other) => {
                        return Err(field(
                            &format!("{at}.kind"),
                            format!("{other:?}: only pods are allowed in a static pod list"),
                        ))
                    }
                }
                if o.contains_key("apiVersion") {
                    check_api_version(o, &at).map_err(|(f, r)| field(&f, r))?;
                }
                pods.push(decode_pod(path, &at, item, node)?);
            }
            Ok(pods)
        }
        "" => Err(field(
            "kind",
            "missing: expected Pod, PodList or List".to_owned(),
        )),
        other => Err(field(
            "kind",
            format!("{other:?} is not a Pod, PodList or List"),
        )),
    }
}

/// YAML (or JSON) text → a generic document.
fn parse_document(path: &Path, data: &[u8]) -> Result<Value, ManifestError> {
    let syntax = |reason: String| ManifestError::Syntax {
        path: path.to_owned(),
        reason,
    };
    let text = std::str::from_utf8(data).map_err(|e| syntax(format!("not utf-8: {e}")))?;
    let doc = if text.trim_start().starts_with('{') {
        // JSON is YAML too, but the JSON parser's messages are the better ones here.
        serde_json::from_str(text).map_err(|e| syntax(e.to_string()))?
    } else {
        // Built within a budget: YAML aliases could expand a small file without bound.
        super::document::from_yaml(text).map_err(|e| syntax(e.to_string()))?
    };
    if doc.is_null() {
        return Err(syntax("empty document".to_owned()));
    }
    Ok(doc)
}

fn check_api_version(obj: &Map<String, Value>, at: &str) -> Result<(), (String, String)> {
    let field = join(at, "apiVersion");
    match obj.get("apiVersion") {
        Some(Value::String(v)) if v == "v1" => Ok(()),
        None => Err((field, "missing: expected v1".to_owned())),
        Some(other) => Err((field, format!("{other}: expected v1"))),
    }
}

/// One pod document (top level or a list item at `at`) → the pod to run.
fn decode_pod(path: &Path, at: &str, item: &Value, node: &str) -> Result<Pod, ManifestError> {
    let field = |field: String, reason: String| ManifestError::Field {
        path: path.to_owned(),
        field,
        reason,
    };
    let mut pod: Pod = serde_path_to_error::deserialize(item).map_err(|e| {
        let inner = e.path().to_string();
        let inner = if inner == "." { String::new() } else { inner };
        let reason = e.into_inner().to_string();
        field(join(at, &inner), reason)
    })?;
    if pod.name().is_empty() {
        return Err(field(join(at, "metadata.name"), "required".to_owned()));
    }
    let uid = static_pod_uid(node, path, item);
    apply_static_rules(&mut pod, node, uid);
    apply_api_defaults(&mut pod);
    validate_pod(&pod).map_err(|(f, r)| field(join(at, &f), r))?;
    Ok(pod)
}

fn join(prefix: &str, field: &str) -> String {
    match (prefix.is_empty(), field.is_empty()) {
        (true, true) => "(document)".to_owned(),
        (true, false) => field.to_owned(),
        (false, true) => prefix.to_owned(),
        (false, false) => format!("{prefix}.{field}"),
    }
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}
