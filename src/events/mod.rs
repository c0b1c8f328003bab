//! Kubernetes events about pods and the node, as the kubelet emits them (Pulling,
//! Pulled, Created, Started, Killing, BackOff, FailedCreatePodSandBox, ...).
//!
//! Any thread records through a cloned [`Recorder`]; every event is logged, and when an
//! API server is configured it is also queued (bounded, dropped when full: events are
//! best effort) for the events thread that aggregates and sends them.
//!
//! - `sink.rs`: the `events` thread that sends recorded events as core/v1 Events.
//! - `correlator.rs`: its pure spam filter and deduplication (counting repeats and
//!   rate-limiting each object).
//! - `buffer.rs`: the events kept, in order, while the API server is unreachable.

pub mod buffer;
pub mod correlator;
pub mod sink;

use crossbeam_channel::{Sender, TrySendError};

use crate::api::pod::Pod;

/// Event severity, as the API's `type` field.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventType {
    Normal,
    Warning,
}

impl EventType {
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        }
    }
}

/// What an event is about: a pod, a container in it, or the node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EventObject {
    Pod {
        namespace: String,
        name: String,
        uid: String,
        /// `spec.containers{name}` and the like, when about one container.
        field_path: Option<String>,
    },
    Node {
        name: String,
    },
}

/// One event to record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventRecord {
    pub object: EventObject,
    pub kind: EventType,
    pub reason: String,
    pub message: String,
}

/// Records events: always to the log, and to the events thread when one exists.
#[derive(Clone, Default)]
pub struct Recorder {
    sink: Option<Sender<EventRecord>>,
}

impl Recorder {
    /// A recorder that only logs (standalone mode, tests).
    pub fn log_only() -> Recorder {
        Recorder { sink: None }
    }

    /// A recorder that also queues events on `sink`.
    pub fn new(sink: Sender<EventRecord>) -> Recorder {
        Recorder { sink: Some(sink) }
    }

    fn record(&self, record: EventRecord) {
        let subject = match &record.object {
            EventObject::Pod {
                namespace,
                name,
                field_path,
                ..
            } => match field_path {
                Some(path) => format!("pod {namespace}/{name} {path}"),
                None => format!("pod {namespace}/{name}"),
            },
            EventObject::Node { name } => format!("node {name}"),
        };
        match record.kind {
            EventType::Normal => {
                log::info!("event {subject}: {}: {}", record.reason, record.message)
            }
            EventType::Warning => {
                log::warn!("event {subject}: {}: {}", record.reason, record.message)
            }
        }
        if let Some(sink) = &self.sink {
            if let Err(TrySendError::Full(dropped)) = sink.try_send(record) {
                log::debug!("event queue full, dropping {}", dropped.reason);
            }
        }
    }

    /// An event about a whole pod.
    pub fn pod(&self, pod: &Pod, kind: EventType, reason: &str, message: impl Into<String>) {
        self.record(EventRecord {
            object: pod_object(pod, None),
            kind,
            reason: reason.to_owned(),
            message: message.into(),
        });
    }

    /// An event about one container of a pod.
    pub fn container(
        &self,
        pod: &Pod,
        container: &str,
        kind: EventType,
        reason: &str,
        message: impl Into<String>,
    ) {
        self.record(EventRecord {
            object: pod_object(pod, Some(field_path(pod, container))),
            kind,
            reason: reason.to_owned(),
            message: message.into(),
        });
    }

    /// An event about the node.
    pub fn node(&self, node: &str, kind: EventType, reason: &str, message: impl Into<String>) {
        self.record(EventRecord {
            object: EventObject::Node {
                name: node.to_owned(),
            },
            kind,
            reason: reason.to_owned(),
            message: message.into(),
        });
    }
}

fn pod_object(pod: &Pod, field_path: Option<String>) -> EventObject {
    EventObject::Pod {
        namespace: pod.namespace().to_owned(),
        name: pod.name().to_owned(),
        uid: pod.uid().to_owned(),
        field_path,
    }
}

/// The API field path of a container: `spec.containers{app}`, `spec.initContainers{x}`
/// or `spec.ephemeralContainers{x}`.
pub fn field_path(pod: &Pod, container: &str) -> String {
    let list = if pod.spec.init_containers.iter().any(|c| c.name == container) {
        "initContainers"
    } else if pod
        .spec
        .ephemeral_containers
        .iter()
        .any(|c| c.container.name == container)
    {
        "ephemeralContainers"
    } else {
        "containers"
    };
    format!("spec.{list}{{{container}}}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::pod::Container;

    #[test]
    fn events_reach_the_sink_with_field_paths() {
        let (tx, rx) = crossbeam_channel::bounded(1);
        let recorder = Recorder::new(tx);
        let mut pod = Pod::default();
        pod.metadata.name = Some("web".into());
        pod.metadata.namespace = Some("default".into());
        pod.spec.init_containers.push(Container {
            name: "setup".into(),
            ..Default::default()
        });
        recorder.container(
            &pod,
            "setup",
            EventType::Normal,
            "Started",
            "Started container setup",
        );
        // A full queue drops instead of blocking.
        recorder.pod(&pod, EventType::Warning, "BackOff", "again");
        let got = rx.try_recv().unwrap();
        assert_eq!(got.reason, "Started");
        assert!(matches!(
            got.object,
            EventObject::Pod { field_path: Some(ref p), .. } if p == "spec.initContainers{setup}"
        ));
        assert!(rx.try_recv().is_err());
        assert_eq!(field_path(&pod, "app"), "spec.containers{app}");
    }
}
