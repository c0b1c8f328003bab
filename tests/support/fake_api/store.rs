//! The fake API server's in-memory store and its rules, with no HTTP in sight.
//!
//! Objects are `serde_json::Value`s keyed by (resource, namespace, name). One global
//! resourceVersion counter grows on every write, as etcd's revision does. Every write
//! is recorded in a bounded event history (what a watch from an older version
//! replays) and sent to the registered watchers. A watch from a version older than
//! the history's floor is refused with 410 Expired, like the watch cache does.
//!
//! The rules litelet relies on: create fills uid, creationTimestamp,
//! resourceVersion and generation (409 AlreadyExists when the name is taken); PUT
//! with a stale resourceVersion or another UID is a 409 Conflict; the main resource
//! cannot change status and the status subresource can change nothing else; pod spec
//! changes bump generation; writes that change nothing do not bump the version;
//! deleting a pod bound to a node with a grace period only sets deletionTimestamp.
//! Finalizers are not modelled.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crossbeam_channel::{Receiver, Sender};
use litelet::api::meta::Time;
use serde_json::{json, Map, Value};

use super::patch;

/// One resource type the fake serves.
#[derive(Debug, PartialEq, Eq)]
pub struct Kind {
    pub resource: &'static str,
    pub kind: &'static str,
    pub api_version: &'static str,
    /// URL prefix of its group version.
    pub prefix: &'static str,
    /// `""` for the core group.
    pub group: &'static str,
    pub namespaced: bool,
    pub has_status: bool,
}

impl Kind {
    /// The name used in messages: `pods`, `leases.coordination.k8s.io`.
    pub fn qualified(&self) -> String {
        if self.group.is_empty() {
            self.resource.to_owned()
        } else {
            format!("{}.{}", self.resource, self.group)
        }
    }
}

const fn core(
    resource: &'static str,
    kind: &'static str,
    namespaced: bool,
    has_status: bool,
) -> Kind {
    Kind {
        resource,
        kind,
        api_version: "v1",
        prefix: "/api/v1",
        group: "",
        namespaced,
        has_status,
    }
}

pub static KINDS: [Kind; 7] = [
    core("pods", "Pod", true, true),
    core("services", "Service", true, true),
    core("nodes", "Node", false, true),
    core("events", "Event", true, false),
    core("configmaps", "ConfigMap", true, false),
    core("secrets", "Secret", true, false),
    Kind {
        resource: "leases",
        kind: "Lease",
        api_version: "coordination.k8s.io/v1",
        prefix: "/apis/coordination.k8s.io/v1",
        group: "coordination.k8s.io",
        namespaced: true,
        has_status: false,
    },
];

/// The kind served at `prefix` + `/resource`.
pub fn kind_at(prefix: &str, resource: &str) -> Option<&'static Kind> {
    KINDS
        .iter()
        .find(|k| k.prefix == prefix && k.resource == resource)
}

/// The kind of a resource name (`pods`, `leases`, ...).
pub fn kind(resource: &str) -> &'static Kind {
    KINDS
        .iter()
        .find(|k| k.resource == resource)
        .unwrap_or_else(|| panic!("fake api: unknown resource {resource}"))
}

/// A failed request, rendered as a `Status` body.
#[derive(Clone, Debug)]
pub struct Failure {
    pub code: u16,
    pub reason: &'static str,
    pub message: String,
    pub retry_after: Option<u32>,
}

impl Failure {
    pub fn new(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            code,
            reason,
            message: message.into(),
            retry_after: None,
        }
    }

    pub fn not_found(kind: &Kind, name: &str) -> Self {
        Self::new(
            404,
            "NotFound",
            format!("{} {name:?} not found", kind.qualified()),
        )
    }

    pub fn conflict(kind: &Kind, name: &str) -> Self {
        Self::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} {name:?}: the object has been modified; please apply your changes to the latest version and try again",
                kind.qualified()
            ),
        )
    }

    fn precondition(kind: &Kind, name: &str, what: &str, want: &str, have: &str) -> Self {
        Self::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} {name:?}: Precondition failed: {what} in precondition: {want}, {what} in object meta: {have}",
                kind.qualified()
            ),
        )
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message)
    }

    pub fn status_json(&self) -> Value {
        let mut s = json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {},
            "status": "Failure", "message": self.message, "reason": self.reason,
            "code": self.code,
        });
        if let Some(secs) = self.retry_after {
            s["details"] = json!({"retryAfterSeconds": secs});
        }
        s
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventType {
    Added,
    Modified,
    Deleted,
}

impl EventType {
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }
}

/// One write, as kept in the history and sent to watchers.
#[derive(Debug)]
pub struct Change {
    pub rv: u64,
    pub resource: &'static str,
    pub type_: EventType,
    /// The object before the write (for selector transitions).
    pub old: Option<Value>,
    pub object: Value,
}

/// What a watcher's channel carries.
#[derive(Debug)]
pub enum WatchMsg {
    Change(Arc<Change>),
    /// Close the connection now, without ending the stream cleanly.
    Drop,
}

struct Watcher {
    id: u64,
    resource: &'static str,
    tx: Sender<WatchMsg>,
}

/// A registered watch: what to send first, then the live channel.
pub struct Subscription {
    pub id: u64,
    /// Objects existing at the start, sent as ADDED (watch without a version).
    pub initial: Vec<Value>,
    /// Recorded changes after the requested version.
    pub backlog: Vec<Arc<Change>>,
    pub rx: Receiver<WatchMsg>,
    /// The store's version when the watch started.
    pub start_rv: u64,
}

/// Options of a DELETE.
#[derive(Clone, Debug, Default)]
pub struct DeleteOpts {
    pub grace: Option<i64>,
    pub uid: Option<String>,
    pub resource_version: Option<String>,
}

/// A PATCH as it came: the body and its content type, and whether it went to the
/// `status` subresource.
pub struct PatchRequest<'a> {
    pub content_type: &'a str,
    pub body: &'a Value,
    pub status_only: bool,
}

type Key = (&'static str, String, String);

pub struct Store {
    objects: BTreeMap<Key, Value>,
    rv: u64,
    history: VecDeque<Arc<Change>>,
    pub history_limit: usize,
    /// Watches from a version below this get 410.
    floor: u64,
    watchers: Vec<Watcher>,
    next_id: u64,
}

fn now_string() -> String {
    Time::now().to_string()
}

fn str_at<'a>(v: &'a Value, ptr: &str) -> Option<&'a str> {
    v.pointer(ptr)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
}

fn meta_mut(obj: &mut Value) -> &mut Map<String, Value> {
    if !obj["metadata"].is_object() {
        obj["metadata"] = json!({});
    }
    obj["metadata"]
        .as_object_mut()
        .expect("metadata was just made an object")
}

impl Store {
    pub fn new() -> Self {
        Self {
            objects: BTreeMap::new(),
            rv: 100,
            history: VecDeque::new(),
            history_limit: 1000,
            floor: 0,
            watchers: Vec::new(),
            next_id: 1,
        }
    }

    /// The newest resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.rv
    }

    fn next_rv(&mut self) -> u64 {
        self.rv += 1;
        self.rv
    }

    fn key(kind: &Kind, ns: &str, name: &str) -> Key {
        let ns = if kind.namespaced { ns } else { "" };
        (kind.resource, ns.to_owned(), name.to_owned())
    }

    fn record(&mut self, kind: &Kind, type_: EventType, old: Option<Value>, object: Value) {
        let change = Arc::new(Change {
            rv: self.rv,
            resource: kind.resource,
            type_,
            old,
            object,
        });
        self.history.push_back(change.clone());
        while self.history.len() > self.history_limit {
            if let Some(dropped) = self.history.pop_front() {
                self.floor = self.floor.max(dropped.rv);
            }
        }
        self.watchers.retain(|w| {
            w.resource != kind.resource || w.tx.send(WatchMsg::Change(change.clone())).is_ok()
        });
    }

    pub fn get(&self, kind: &Kind, ns: &str, name: &str) -> Result<Value, Failure> {
        self.objects
            .get(&Self::key(kind, ns, name))
            .cloned()
            .ok_or_else(|| Failure::not_found(kind, name))
    }

    /// Objects of `kind` in `ns` (all namespaces when `None`), by namespace and name.
    pub fn list(&self, kind: &Kind, ns: Option<&str>) -> Vec<Value> {
        self.objects
            .iter()
            .filter(|((r, n, _), _)| *r == kind.resource && ns.is_none_or(|ns| ns == n))
            .map(|(_, v)| v.clone())
            .collect()
    }

    pub fn create(&mut self, kind: &Kind, ns: &str, mut obj: Value) -> Result<Value, Failure> {
        if !obj.is_object() {
            return Err(Failure::bad_request("the body is not a JSON object"));
        }
        let name = match (
            str_at(&obj, "/metadata/name"),
            str_at(&obj, "/metadata/generateName"),
        ) {
            (Some(n), _) => n.to_owned(),
            (None, Some(prefix)) => format!("{prefix}{:05x}", self.next_id * 7919 % 0xfffff),
            (None, None) => {
                return Err(Failure::new(
                    422,
                    "Invalid",
                    format!("{} is invalid: metadata.name: Required value", kind.kind),
                ))
            }
        };
        if kind.namespaced {
            if let Some(body_ns) = str_at(&obj, "/metadata/namespace") {
                if body_ns != ns {
                    return Err(Failure::bad_request(
                        "the namespace of the provided object does not match the namespace sent on the request",
                    ));
                }
            }
        }
        validate(kind, &name, &obj)?;
        let key = Self::key(kind, ns, &name);
        if self.objects.contains_key(&key) {
            return Err(Failure::new(
                409,
                "AlreadyExists",
                format!("{} {name:?} already exists", kind.qualified()),
            ));
        }
        self.next_id += 1;
        let uid = format!(
            "{:08x}-fa4e-4a91-8000-{:012x}",
            std::process::id(),
            self.next_id
        );
        let rv = self.next_rv();
        obj["kind"] = kind.kind.into();
        obj["apiVersion"] = kind.api_version.into();
        let meta = meta_mut(&mut obj);
        meta.insert("name".into(), name.into());
        if kind.namespaced {
            meta.insert("namespace".into(), ns.into());
        } else {
            meta.remove("namespace");
        }
        meta.insert("uid".into(), uid.into());
        meta.insert("creationTimestamp".into(), now_string().into());
        meta.insert("resourceVersion".into(), rv.to_string().into());
        meta.insert("generation".into(), 1.into());
        meta.remove("deletionTimestamp");
        meta.remove("deletionGracePeriodSeconds");
        if kind.resource == "pods" && obj.pointer("/status/phase").is_none() {
            if !obj["status"].is_object() {
                obj["status"] = json!({});
            }
            obj["status"]["phase"] = "Pending".into();
        }
        self.objects.insert(key, obj.clone());
        self.record(kind, EventType::Added, None, obj.clone());
        Ok(obj)
    }

    /// PUT (`status_only`: on the status subresource). `check_rv`: a non-empty
    /// resourceVersion in the body must be the current one.
    pub fn update(
        &mut self,
        kind: &Kind,
        ns: &str,
        name: &str,
        body: Value,
        status_only: bool,
    ) -> Result<Value, Failure> {
        let current = self.get(kind, ns, name)?;
        if !body.is_object() {
            return Err(Failure::bad_request("the body is not a JSON object"));
        }
        if let Some(body_name) = str_at(&body, "/metadata/name") {
            if body_name != name {
                return Err(Failure::bad_request(format!(
                    "the name of the object ({body_name}) does not match the name on the URL ({name})"
                )));
            }
        }
        // As the real server: the resourceVersion check comes first (409), then
        // validation, where another UID is an immutable-field error (422), not a
        // precondition failure.
        let cur_rv = str_at(&current, "/metadata/resourceVersion").unwrap_or("");
        if str_at(&body, "/metadata/resourceVersion").is_some_and(|rv| rv != cur_rv) {
            return Err(Failure::conflict(kind, name));
        }
        let cur_uid = str_at(&current, "/metadata/uid").unwrap_or("");
        if let Some(uid) = str_at(&body, "/metadata/uid") {
            if uid != cur_uid {
                return Err(Failure::new(
                    422,
                    "Invalid",
                    format!(
                        "{} {name:?} is invalid: metadata.uid: Invalid value: {uid:?}: field is immutable",
                        kind.kind
                    ),
                ));
            }
        }

        let mut new = if status_only {
            let mut n = current.clone();
            match body.get("status") {
                Some(s) => n["status"] = s.clone(),
                None => {
                    if let Some(m) = n.as_object_mut() {
                        m.remove("status");
                    }
                }
            }
            n
        } else {
            let mut n = body;
            if kind.has_status {
                match current.get("status") {
                    Some(s) => n["status"] = s.clone(),
                    None => {
                        if let Some(m) = n.as_object_mut() {
                            m.remove("status");
                        }
                    }
                }
            }
            // System-owned metadata stays as it is.
            let cur_meta = current["metadata"].clone();
            let meta = meta_mut(&mut n);
            for f in [
                "uid",
                "creationTimestamp",
                "deletionTimestamp",
                "deletionGracePeriodSeconds",
                "generation",
                "namespace",
                "name",
            ] {
                match cur_meta.get(f) {
                    Some(v) => meta.insert(f.into(), v.clone()),
                    None => meta.remove(f),
                };
            }
            n
        };
        new["kind"] = kind.kind.into();
        new["apiVersion"] = kind.api_version.into();
        self.write(kind, ns, name, current, new)
    }

    /// Stores `new` in place of `current` unless nothing changed; bumps generation on
    /// a pod spec change.
    fn write(
        &mut self,
        kind: &Kind,
        ns: &str,
        name: &str,
        current: Value,
        mut new: Value,
    ) -> Result<Value, Failure> {
        meta_mut(&mut new).insert(
            "resourceVersion".into(),
            current["metadata"]["resourceVersion"].clone(),
        );
        if new == current {
            return Ok(current);
        }
        validate(kind, name, &new)?;
        if kind.resource == "pods" && new.get("spec") != current.get("spec") {
            let generation = current["metadata"]["generation"].as_i64().unwrap_or(0) + 1;
            meta_mut(&mut new).insert("generation".into(), generation.into());
        }
        let rv = self.next_rv();
        meta_mut(&mut new).insert("resourceVersion".into(), rv.to_string().into());
        self.objects.insert(Self::key(kind, ns, name), new.clone());
        self.record(kind, EventType::Modified, Some(current), new.clone());
        Ok(new)
    }

    /// PATCH with a content type; `metadata.uid` and `metadata.resourceVersion` in the
    /// patch act as preconditions (the patched object must keep the current values).
    pub fn patch(
        &mut self,
        kind: &Kind,
        ns: &str,
        name: &str,
        request: PatchRequest,
    ) -> Result<Value, Failure> {
        let current = self.get(kind, ns, name)?;
        let mut candidate = current.clone();
        let patch = request.body;
        match request.content_type {
            "application/merge-patch+json" => patch::merge_patch(&mut candidate, patch),
            "application/strategic-merge-patch+json" => {
                if !patch.is_object() {
                    return Err(Failure::bad_request("a strategic merge patch must be an object"));
                }
                patch::strategic_merge(&mut candidate, patch, "")
            }
            "application/json-patch+json" => patch::json_patch(&mut candidate, patch)
                .map_err(|e| Failure::new(422, "Invalid", format!("json patch: {e}")))?,
            other => {
                return Err(Failure::new(
                    415,
                    "UnsupportedMediaType",
                    format!("the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/strategic-merge-patch+json (got {other:?})"),
                ))
            }
        }
        self.update(kind, ns, name, candidate, request.status_only)
    }

    pub fn delete(
        &mut self,
        kind: &Kind,
        ns: &str,
        name: &str,
        opts: &DeleteOpts,
    ) -> Result<Value, Failure> {
        let current = self.get(kind, ns, name)?;
        let cur_uid = str_at(&current, "/metadata/uid").unwrap_or("");
        if let Some(uid) = opts.uid.as_deref().filter(|u| !u.is_empty()) {
            if uid != cur_uid {
                return Err(Failure::precondition(kind, name, "UID", uid, cur_uid));
            }
        }
        let cur_rv = str_at(&current, "/metadata/resourceVersion").unwrap_or("");
        if let Some(rv) = opts.resource_version.as_deref().filter(|r| !r.is_empty()) {
            if rv != cur_rv {
                return Err(Failure::precondition(
                    kind,
                    name,
                    "ResourceVersion",
                    rv,
                    cur_rv,
                ));
            }
        }
        if kind.resource == "pods" {
            let default_grace = current
                .pointer("/spec/terminationGracePeriodSeconds")
                .and_then(Value::as_i64)
                .unwrap_or(30);
            let mut grace = opts.grace.unwrap_or(default_grace).max(0);
            let unbound = str_at(&current, "/spec/nodeName").is_none();
            let finished = matches!(
                str_at(&current, "/status/phase"),
                Some("Succeeded" | "Failed")
            );
            if unbound || finished {
                grace = 0;
            }
            if grace > 0 {
                let existing = current
                    .pointer("/metadata/deletionGracePeriodSeconds")
                    .and_then(Value::as_i64);
                if existing.is_some_and(|g| g <= grace) {
                    return Ok(current);
                }
                let at = SystemTime::now() + Duration::from_secs(grace as u64);
                let mut new = current.clone();
                let meta = meta_mut(&mut new);
                meta.insert(
                    "deletionTimestamp".into(),
                    Time::from_system_time(at).to_string().into(),
                );
                meta.insert("deletionGracePeriodSeconds".into(), grace.into());
                return self.write(kind, ns, name, current, new);
            }
        }
        Ok(self
            .remove(kind, ns, name)
            .expect("object was just read under the same lock"))
    }

    /// Removes an object at once (grace 0); returns it with the deletion's version.
    pub fn remove(&mut self, kind: &Kind, ns: &str, name: &str) -> Option<Value> {
        let mut obj = self.objects.remove(&Self::key(kind, ns, name))?;
        let old = obj.clone();
        let rv = self.next_rv();
        meta_mut(&mut obj).insert("resourceVersion".into(), rv.to_string().into());
        self.record(kind, EventType::Deleted, Some(old), obj.clone());
        Some(obj)
    }

    /// Replaces an object wholesale (test-side writes: status included), bumping the
    /// version and generation like a write through the API would.
    pub fn put_raw(
        &mut self,
        kind: &Kind,
        ns: &str,
        name: &str,
        new: Value,
    ) -> Result<Value, Failure> {
        let current = self.get(kind, ns, name)?;
        self.write(kind, ns, name, current, new)
    }

    /// Registers a watch of `kind` from `since` (None or 0: current objects first).
    pub fn subscribe(
        &mut self,
        kind: &Kind,
        ns: Option<&str>,
        since: Option<u64>,
    ) -> Result<Subscription, Failure> {
        let mut initial = Vec::new();
        let mut backlog = Vec::new();
        match since {
            None | Some(0) => initial = self.list(kind, ns),
            Some(rv) if rv < self.floor => {
                return Err(Failure::new(
                    410,
                    "Expired",
                    format!("too old resource version: {rv} ({})", self.floor),
                ))
            }
            Some(rv) => {
                backlog = self
                    .history
                    .iter()
                    .filter(|c| c.rv > rv && c.resource == kind.resource)
                    .cloned()
                    .collect();
            }
        }
        let (tx, rx) = crossbeam_channel::unbounded();
        let id = self.next_id;
        self.next_id += 1;
        self.watchers.push(Watcher {
            id,
            resource: kind.resource,
            tx,
        });
        Ok(Subscription {
            id,
            initial,
            backlog,
            rx,
            start_rv: self.rv,
        })
    }

    pub fn unsubscribe(&mut self, id: u64) {
        self.watchers.retain(|w| w.id != id);
    }

    /// Tells every open watch to drop its connection.
    pub fn drop_watches(&mut self) -> usize {
        let n = self.watchers.len();
        for w in self.watchers.drain(..) {
            let _ = w.tx.send(WatchMsg::Drop);
        }
        n
    }

    pub fn open_watches(&self) -> usize {
        self.watchers.len()
    }

    /// Forgets the event history: every version up to now becomes too old to watch from.
    pub fn compact(&mut self) {
        self.history.clear();
        self.floor = self.rv;
    }
}

/// The real apiserver's validation where litelet once sent what it refuses: a Node's
/// `nodeInfo.swap.capacity` must be above zero (a node without swap leaves it out).
fn validate(kind: &Kind, name: &str, obj: &Value) -> Result<(), Failure> {
    if kind.resource == "nodes" {
        if let Some(capacity) = obj.pointer("/status/nodeInfo/swap/capacity") {
            if capacity.as_i64().is_none_or(|c| c <= 0) {
                return Err(Failure::new(
                    422,
                    "Invalid",
                    format!(
                        "Node {name:?} is invalid: metadata.nodeSwapStatus.capacity: \
                         Invalid value: {capacity}: must be greater than zero"
                    ),
                ));
            }
        }
    }
    Ok(())
}
