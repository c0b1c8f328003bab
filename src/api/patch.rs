//! Two-way strategic merge patches of a pod's status: the smallest
//! `application/strategic-merge-patch+json` body that turns the API server's copy of a
//! status into the kubelet's (upstream `util/pod.PatchPodStatus`).
//!
//! Pure; called by the status manager thread before each `PATCH pods/<name>/status`.
//! The patch always carries `metadata.uid`, which the server treats as a
//! precondition: a pod deleted and recreated under the same name is never patched
//! with its predecessor's status.
//!
//! Rules (the server's, for `core/v1` PodStatus):
//! - maps merge recursively; a key the kubelet no longer has is sent as `null`;
//! - `conditions` (key `type`), `podIPs` / `hostIPs` (key `ip`) and
//!   `resourceClaimStatuses` (key `name`) are merge lists: only new or changed
//!   elements are sent (changed ones as a diff plus their key), removed ones as
//!   `$patch: delete`, and `$setElementOrder/<list>` gives the order. Elements the
//!   kubelet did not write (another writer's condition) are never touched, even when
//!   they were added after the kubelet read the pod;
//! - every other list (container statuses among them) is atomic: sent whole.

use serde_json::{Map, Value};

use crate::api::error::ApiError;
use crate::api::pod::PodStatus;

/// Merge lists of PodStatus and their keys.
const MERGE_LISTS: [(&str, &str); 4] = [
    ("conditions", "type"),
    ("podIPs", "ip"),
    ("hostIPs", "ip"),
    ("resourceClaimStatuses", "name"),
];

fn merge_key(field: &str) -> Option<&'static str> {
    MERGE_LISTS
        .iter()
        .find(|(f, _)| *f == field)
        .map(|(_, k)| *k)
}

fn to_map(status: &PodStatus, what: &str) -> Result<Map<String, Value>, ApiError> {
    match serde_json::to_value(status) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(_) => Ok(Map::new()),
        Err(e) => Err(ApiError::Encode {
            path: format!("pod status patch ({what})"),
            source: std::sync::Arc::new(e),
        }),
    }
}

/// The patch turning `api` (the server's copy) into `new`, or `None` when they are
/// the same and nothing needs sending.
pub fn pod_status_patch(
    uid: &str,
    api: &PodStatus,
    new: &PodStatus,
) -> Result<Option<Value>, ApiError> {
    let old = to_map(api, "api copy")?;
    let new = to_map(new, "new status")?;
    let diff = diff_status(&old, &new);
    if diff.is_empty() {
        return Ok(None);
    }
    Ok(Some(serde_json::json!({
        "metadata": {"uid": uid},
        "status": Value::Object(diff),
    })))
}

/// Makes a patch from [`pod_status_patch`] apply only to the pod's version
/// `resource_version`: the apiserver answers 409 Conflict when the pod has moved on,
/// so a patch built on a cached copy never undoes a newer write.
pub fn require_resource_version(patch: &mut Value, resource_version: &str) {
    if let Some(metadata) = patch.get_mut("metadata").and_then(Value::as_object_mut) {
        metadata.insert("resourceVersion".into(), resource_version.into());
    }
}

/// Top level of the status: like [`diff_maps`], but its merge lists are keyed.
fn diff_status(old: &Map<String, Value>, new: &Map<String, Value>) -> Map<String, Value> {
    let mut out = Map::new();
    for (k, nv) in new {
        let Some(ov) = old.get(k) else {
            out.insert(k.clone(), nv.clone());
            continue;
        };
        if ov == nv {
            continue;
        }
        match (ov, nv, merge_key(k)) {
            (Value::Array(o), Value::Array(n), Some(key)) => {
                let items = diff_keyed_list(o, n, key);
                if !items.is_empty() {
                    out.insert(k.clone(), Value::Array(items));
                }
                let order: Vec<Value> = n
                    .iter()
                    .filter_map(|e| e.get(key))
                    .map(|v| serde_json::json!({ key: v }))
                    .collect();
                out.insert(format!("$setElementOrder/{k}"), Value::Array(order));
            }
            _ => {
                out.insert(k.clone(), diff_value(ov, nv));
            }
        }
    }
    for (k, ov) in old {
        if new.contains_key(k) {
            continue;
        }
        // An emptied merge list: delete the kubelet's elements one by one rather than
        // the whole list, so elements another writer just added survive.
        match (ov, merge_key(k)) {
            (Value::Array(o), Some(key)) => {
                out.insert(k.clone(), Value::Array(diff_keyed_list(o, &[], key)));
            }
            _ => {
                out.insert(k.clone(), Value::Null);
            }
        }
    }
    out
}

/// The patch of one changed value: maps recurse, anything else is replaced.
fn diff_value(old: &Value, new: &Value) -> Value {
    match (old, new) {
        (Value::Object(o), Value::Object(n)) => Value::Object(diff_maps(o, n)),
        _ => new.clone(),
    }
}

fn diff_maps(old: &Map<String, Value>, new: &Map<String, Value>) -> Map<String, Value> {
    let mut out = Map::new();
    for (k, nv) in new {
        match old.get(k) {
            Some(ov) if ov == nv => {}
            Some(ov) => {
                out.insert(k.clone(), diff_value(ov, nv));
            }
            None => {
                out.insert(k.clone(), nv.clone());
            }
        }
    }
    for k in old.keys() {
        if !new.contains_key(k) {
            out.insert(k.clone(), Value::Null);
        }
    }
    out
}

/// New or changed elements of a merge list (changed ones as a diff with their key),
/// then deletions of elements `new` no longer has.
fn diff_keyed_list(old: &[Value], new: &[Value], key: &str) -> Vec<Value> {
    let find = |list: &[Value], kv: &Value| list.iter().find(|e| e.get(key) == Some(kv)).cloned();
    let mut out = Vec::new();
    for n in new {
        let Some(kv) = n.get(key) else {
            out.push(n.clone());
            continue;
        };
        match (find(old, kv), n) {
            (Some(o), _) if &o == n => {}
            (Some(Value::Object(o)), Value::Object(nm)) => {
                let mut d = diff_maps(&o, nm);
                d.insert(key.to_owned(), kv.clone());
                out.push(Value::Object(d));
            }
            _ => out.push(n.clone()),
        }
    }
    for o in old {
        let Some(kv) = o.get(key) else { continue };
        if find(new, kv).is_none() {
            out.push(serde_json::json!({ key: kv, "$patch": "delete" }));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn status(v: Value) -> PodStatus {
        serde_json::from_value(v).unwrap()
    }

    fn check(api: Value, new: Value) -> Option<Value> {
        pod_status_patch("u1", &status(api), &status(new))
            .unwrap()
            .map(|p| {
                assert_eq!(p["metadata"], json!({"uid": "u1"}));
                p["status"].clone()
            })
    }

    #[test]
    fn a_required_resource_version_joins_the_uid_precondition() {
        let mut patch = pod_status_patch(
            "u1",
            &status(json!({"phase": "Pending"})),
            &status(json!({"phase": "Running"})),
        )
        .unwrap()
        .expect("a change");
        require_resource_version(&mut patch, "42");
        assert_eq!(
            patch["metadata"],
            json!({"uid": "u1", "resourceVersion": "42"})
        );
        assert_eq!(patch["status"], json!({"phase": "Running"}));
    }

    #[test]
    fn equal_statuses_need_no_patch() {
        let s = json!({"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]});
        assert_eq!(check(s.clone(), s), None);
    }

    #[test]
    fn scalars_change_and_removed_fields_become_null() {
        let got = check(
            json!({"phase": "Pending", "message": "m", "startTime": "2024-01-01T00:00:00Z"}),
            json!({"phase": "Running", "startTime": "2024-01-01T00:00:00Z"}),
        );
        assert_eq!(got, Some(json!({"phase": "Running", "message": null})));
    }

    #[test]
    fn conditions_merge_by_type() {
        let got = check(
            json!({"conditions": [
                {"type": "example.com/gate", "status": "True"},
                {"type": "Ready", "status": "False", "reason": "ContainersNotReady"},
                {"type": "Gone", "status": "True"}
            ]}),
            json!({"conditions": [
                {"type": "example.com/gate", "status": "True"},
                {"type": "Ready", "status": "True"},
                {"type": "Initialized", "status": "True"}
            ]}),
        );
        assert_eq!(
            got,
            Some(json!({
                "conditions": [
                    {"type": "Ready", "status": "True", "reason": null},
                    {"type": "Initialized", "status": "True"},
                    {"type": "Gone", "$patch": "delete"}
                ],
                "$setElementOrder/conditions": [
                    {"type": "example.com/gate"}, {"type": "Ready"}, {"type": "Initialized"}
                ]
            }))
        );
    }

    #[test]
    fn container_statuses_are_sent_whole() {
        let got = check(
            json!({"containerStatuses": [
                {"name": "a", "ready": false, "restartCount": 0, "image": "i", "imageID": "",
                 "state": {"running": {"startedAt": "2024-01-01T00:00:00Z"}}},
                {"name": "b", "ready": true, "restartCount": 0, "image": "i", "imageID": ""}
            ]}),
            json!({"containerStatuses": [
                {"name": "a", "ready": false, "restartCount": 0, "image": "i", "imageID": "",
                 "state": {"terminated": {"exitCode": 0}}},
                {"name": "b", "ready": true, "restartCount": 0, "image": "i", "imageID": ""}
            ]}),
        )
        .unwrap();
        let list = got["containerStatuses"].as_array().unwrap();
        assert_eq!(list.len(), 2);
        assert_eq!(list[0]["state"], json!({"terminated": {"exitCode": 0}}));
    }

    #[test]
    fn nested_maps_recurse() {
        let got = check(
            json!({"qosClass": "Burstable", "extraMap": {"a": 1, "b": 2}}),
            json!({"qosClass": "Burstable", "extraMap": {"a": 1, "c": 3}}),
        );
        assert_eq!(got, Some(json!({"extraMap": {"b": null, "c": 3}})));
    }

    #[test]
    fn an_emptied_condition_list_deletes_element_by_element() {
        let got = check(
            json!({"conditions": [{"type": "Ready", "status": "True"}]}),
            json!({}),
        );
        assert_eq!(
            got,
            Some(json!({"conditions": [{"type": "Ready", "$patch": "delete"}]}))
        );
    }
}
