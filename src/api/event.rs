//! The core/v1 Event object the kubelet posts about pods and its node,
//! plus `ObjectReference` and helpers to build references to a pod, one of
//! its containers, or the node.
//!
//! This module holds wire types only: it models the JSON the API server
//! sends and accepts and performs no I/O.

use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::api::meta::{is_default, nullable, MicroTime, ObjectMeta, Time};
use crate::api::node::Node;
use crate::api::pod::Pod;

/// Event type for routine occurrences.
pub const EVENT_TYPE_NORMAL: &str = "Normal";
/// Event type for problems.
pub const EVENT_TYPE_WARNING: &str = "Warning";

/// Namespace used for events about objects without one (e.g. the node).
const DEFAULT_NAMESPACE: &str = "default";

/// Points at another object, optionally at a part of it (`field_path`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ObjectReference {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resource_version: Option<String>,
    /// Part of the object, e.g. `spec.containers{app}`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub field_path: Option<String>,
}

impl ObjectReference {
    /// A reference to the pod as a whole.
    pub fn from_pod(pod: &Pod) -> Self {
        Self {
            kind: Some(Pod::KIND.to_owned()),
            namespace: pod.metadata.namespace.clone(),
            name: pod.metadata.name.clone(),
            uid: pod.metadata.uid.clone(),
            api_version: Some(Pod::API_VERSION.to_owned()),
            resource_version: pod.metadata.resource_version.clone(),
            field_path: None,
        }
    }

    /// A reference to one container of the pod, with the field path the
    /// kubelet uses (`spec.containers{name}`, `spec.initContainers{name}` or
    /// `spec.ephemeralContainers{name}`). `None` if the pod has no such container.
    pub fn for_container(pod: &Pod, container_name: &str) -> Option<Self> {
        let spec = &pod.spec;
        let list = if spec.containers.iter().any(|c| c.name == container_name) {
            "containers"
        } else if spec
            .init_containers
            .iter()
            .any(|c| c.name == container_name)
        {
            "initContainers"
        } else if spec
            .ephemeral_containers
            .iter()
            .any(|c| c.container.name == container_name)
        {
            "ephemeralContainers"
        } else {
            return None;
        };
        Some(Self {
            field_path: Some(format!("spec.{list}{{{container_name}}}")),
            ..Self::from_pod(pod)
        })
    }

    /// A reference to a node. As the kubelet does, the node name doubles as
    /// the uid so events stay attached across node re-registration.
    pub fn for_node(node_name: &str) -> Self {
        Self {
            kind: Some(Node::KIND.to_owned()),
            name: Some(node_name.to_owned()),
            uid: Some(node_name.to_owned()),
            ..Self::default()
        }
    }
}

/// Who reported an event.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct EventSource {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub component: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
}

/// A core/v1 event.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Event {
    #[serde(skip_serializing_if = "String::is_empty")]
    pub api_version: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub kind: String,
    #[serde(deserialize_with = "nullable", skip_serializing_if = "is_default")]
    pub metadata: ObjectMeta,
    #[serde(deserialize_with = "nullable")]
    pub involved_object: ObjectReference,
    /// Short CamelCase cause, e.g. "Pulled", "BackOff".
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(deserialize_with = "nullable", skip_serializing_if = "is_default")]
    pub source: EventSource,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_timestamp: Option<Time>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_timestamp: Option<Time>,
    /// How many times this event has occurred.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub count: Option<i32>,
    /// [`EVENT_TYPE_NORMAL`] or [`EVENT_TYPE_WARNING`].
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    pub type_: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub event_time: Option<MicroTime>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub action: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reporting_component: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reporting_instance: Option<String>,
}

impl Event {
    pub const API_VERSION: &'static str = "v1";
    pub const KIND: &'static str = "Event";

    /// A first occurrence (count 1) of an event, named and namespaced the way
    /// client-go's recorder does: `<object name>.<unix nanos in hex>` in the
    /// object's namespace (or `default`).
    pub fn new(
        involved_object: ObjectReference,
        event_type: &str,
        reason: &str,
        message: &str,
        source: EventSource,
        now: SystemTime,
    ) -> Self {
        let nanos = now
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let object_name = involved_object.name.as_deref().unwrap_or("");
        let namespace = involved_object
            .namespace
            .as_deref()
            .filter(|ns| !ns.is_empty())
            .unwrap_or(DEFAULT_NAMESPACE);
        let at = Time::from_system_time(now);
        Self {
            api_version: Self::API_VERSION.to_owned(),
            kind: Self::KIND.to_owned(),
            metadata: ObjectMeta {
                name: Some(format!("{object_name}.{nanos:x}")),
                namespace: Some(namespace.to_owned()),
                ..ObjectMeta::default()
            },
            reason: Some(reason.to_owned()),
            message: Some(message.to_owned()),
            first_timestamp: Some(at),
            last_timestamp: Some(at),
            count: Some(1),
            type_: Some(event_type.to_owned()),
            reporting_component: source.component.clone(),
            reporting_instance: source.host.clone(),
            source,
            involved_object,
            ..Self::default()
        }
    }

    /// The strategic merge patch recording another occurrence of a stored event: its
    /// new `count`, `lastTimestamp` and `message` (what client-go sends).
    pub fn repeat_patch(&self) -> serde_json::Value {
        serde_json::json!({
            "count": self.count,
            "lastTimestamp": self.last_timestamp,
            "message": self.message,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::pod::{Container, EphemeralContainer};
    use std::time::Duration;

    fn pod() -> Pod {
        let mut p = Pod::default();
        p.metadata.name = Some("web".into());
        p.metadata.namespace = Some("prod".into());
        p.metadata.uid = Some("uid-1".into());
        p.metadata.resource_version = Some("77".into());
        let c = |n: &str| Container {
            name: n.into(),
            ..Container::default()
        };
        p.spec.containers = vec![c("app")];
        p.spec.init_containers = vec![c("init")];
        p.spec.ephemeral_containers = vec![EphemeralContainer {
            container: c("debug"),
            target_container_name: Some("app".into()),
        }];
        p
    }

    #[test]
    fn references() {
        let p = pod();
        let r = ObjectReference::from_pod(&p);
        assert_eq!(r.kind.as_deref(), Some("Pod"));
        assert_eq!(r.uid.as_deref(), Some("uid-1"));
        let paths: Vec<_> = ["app", "init", "debug"]
            .iter()
            .map(|n| ObjectReference::for_container(&p, n).and_then(|r| r.field_path))
            .collect();
        assert_eq!(
            paths,
            [
                Some("spec.containers{app}".to_string()),
                Some("spec.initContainers{init}".to_string()),
                Some("spec.ephemeralContainers{debug}".to_string())
            ]
        );
        assert!(ObjectReference::for_container(&p, "nope").is_none());
        let n = ObjectReference::for_node("edge-1");
        assert_eq!(
            serde_json::to_value(n).unwrap(),
            serde_json::json!({"kind": "Node", "name": "edge-1", "uid": "edge-1"})
        );
    }

    #[test]
    fn new_event_wire_shape() {
        let now = UNIX_EPOCH + Duration::new(1_700_000_000, 5);
        let source = EventSource {
            component: Some("kubelet".into()),
            host: Some("edge-1".into()),
        };
        let reference = ObjectReference::for_container(&pod(), "app").unwrap();
        let ev = Event::new(
            reference,
            EVENT_TYPE_WARNING,
            "BackOff",
            "restarting",
            source,
            now,
        );
        let v = serde_json::to_value(&ev).unwrap();
        assert_eq!(v["metadata"]["name"], "web.17979cfe362a0005");
        assert_eq!(v["metadata"]["namespace"], "prod");
        assert_eq!(v["involvedObject"]["fieldPath"], "spec.containers{app}");
        assert_eq!(v["firstTimestamp"], "2023-11-14T22:13:20Z");
        assert_eq!(v["type"], "Warning");
        assert_eq!(v["count"], 1);
        assert_eq!(v["source"]["component"], "kubelet");
        assert_eq!(v["reportingInstance"], "edge-1");
        assert!(v.get("eventTime").is_none());
        let back: Event = serde_json::from_value(v).unwrap();
        assert_eq!(back, ev);

        let node_ev = Event::new(
            ObjectReference::for_node("edge-1"),
            EVENT_TYPE_NORMAL,
            "NodeReady",
            "ready",
            EventSource::default(),
            now,
        );
        assert_eq!(node_ev.metadata.namespace.as_deref(), Some("default"));
    }

    #[test]
    fn repeat_patch_shape() {
        let mut ev = Event::new(
            ObjectReference::for_node("edge-1"),
            EVENT_TYPE_WARNING,
            "BackOff",
            "again",
            EventSource::default(),
            UNIX_EPOCH + Duration::from_secs(1_700_000_000),
        );
        ev.count = Some(3);
        assert_eq!(
            ev.repeat_patch(),
            serde_json::json!({"count": 3, "lastTimestamp": "2023-11-14T22:13:20Z", "message": "again"})
        );
    }
}
