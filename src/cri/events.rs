//! The runtime's container event stream (CRI `GetContainerEvents`, server-streaming),
//! read on a thread of its own for the PLEG's evented mode (upstream Evented PLEG).
//!
//! [`spawn_reader`] starts the `cri-events` thread: it opens the stream, forwards
//! every event reduced to what the PLEG acts on ([`ContainerEvent`]), and ends with
//! one [`StreamItem::Ended`] saying how the stream ended. A runtime without the
//! stream answers UNIMPLEMENTED at once (containerd before 1.7); a runtime restart
//! ends it with UNAVAILABLE. The thread also ends when `shutdown` disconnects (looked
//! at every [`SHUTDOWN_POLL`] while the stream is quiet) or when nobody listens any
//! more; dropping the stream cancels the call. The stream has no deadline.

use std::task::Poll;
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crossbeam_channel::{Receiver, Sender, TryRecvError};

use super::{pb, CriError, RuntimeClient};

/// The operation name errors and logs carry.
pub(super) const OP: &str = "get_container_events";

/// How often a reader on a quiet stream looks whether litelet is shutting down.
pub const SHUTDOWN_POLL: Duration = Duration::from_secs(2);

/// What happened to a container (or a sandbox: runtimes report those too).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ContainerEventKind {
    Created,
    Started,
    Stopped,
    Deleted,
    /// A type this build does not know (a newer runtime); the pod is looked at anyway.
    Other(i32),
}

/// The pod an event's container belongs to, from the event's sandbox status.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventPod {
    pub uid: String,
    pub name: String,
    pub namespace: String,
}

/// One container event as the PLEG uses it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContainerEvent {
    pub container_id: String,
    pub kind: ContainerEventKind,
    /// When it happened, Unix nanoseconds.
    pub created_at: i64,
    /// `None` when the event carried no sandbox metadata with a pod UID (the sandbox
    /// was already gone, or it is not a Kubernetes pod's).
    pub pod: Option<EventPod>,
}

impl From<&pb::ContainerEventResponse> for ContainerEvent {
    fn from(event: &pb::ContainerEventResponse) -> ContainerEvent {
        use pb::ContainerEventType as T;
        let kind = match event.container_event_type.enum_value() {
            Ok(T::CONTAINER_CREATED_EVENT) => ContainerEventKind::Created,
            Ok(T::CONTAINER_STARTED_EVENT) => ContainerEventKind::Started,
            Ok(T::CONTAINER_STOPPED_EVENT) => ContainerEventKind::Stopped,
            Ok(T::CONTAINER_DELETED_EVENT) => ContainerEventKind::Deleted,
            Err(other) => ContainerEventKind::Other(other),
        };
        let pod = event
            .pod_sandbox_status
            .as_ref()
            .and_then(|s| s.metadata.as_ref())
            .filter(|m| !m.uid.is_empty())
            .map(|m| EventPod {
                uid: m.uid.clone(),
                name: m.name.clone(),
                namespace: m.namespace.clone(),
            });
        ContainerEvent {
            container_id: event.container_id.clone(),
            kind,
            created_at: event.created_at,
            pod,
        }
    }
}

impl ContainerEvent {
    /// How long before `now` the runtime stamped the event (zero if its clock is ahead).
    pub fn age(&self, now: SystemTime) -> Duration {
        let stamped = UNIX_EPOCH + Duration::from_nanos(self.created_at.max(0).unsigned_abs());
        now.duration_since(stamped).unwrap_or_default()
    }
}

/// What the reader thread sends.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StreamItem {
    /// One event, in the runtime's order.
    Event(ContainerEvent),
    /// The stream is over: `Ok` when the runtime closed it cleanly (or litelet is
    /// shutting down), else why it failed. Always the reader's last item.
    Ended(Result<(), CriError>),
}

/// Starts the `cri-events` thread reading `runtime`'s container event stream into
/// `out` until the stream ends or `shutdown` disconnects.
pub fn spawn_reader(
    runtime: RuntimeClient,
    out: Sender<StreamItem>,
    shutdown: Receiver<()>,
) -> std::io::Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name("cri-events".into())
        .stack_size(128 * 1024)
        .spawn(move || {
            let ended = read(&runtime, &out, &shutdown);
            let _ = out.send(StreamItem::Ended(ended));
        })
}

fn shutting_down(shutdown: &Receiver<()>) -> bool {
    matches!(shutdown.try_recv(), Err(TryRecvError::Disconnected))
}

/// Forwards the stream's events; how it ended.
fn read(
    runtime: &RuntimeClient,
    out: &Sender<StreamItem>,
    shutdown: &Receiver<()>,
) -> Result<(), CriError> {
    let stream = runtime.open_container_events()?;
    let mut items = crate::blocking::iter_stream(stream);
    loop {
        match items.next_within(SHUTDOWN_POLL) {
            Poll::Pending if shutting_down(shutdown) => return Ok(()),
            Poll::Pending => {}
            Poll::Ready(None) => return Ok(()),
            Poll::Ready(Some(Err(err))) => return Err(CriError::from_grpc(OP, err)),
            Poll::Ready(Some(Ok(event))) => {
                let item = StreamItem::Event(ContainerEvent::from(&event));
                if out.send(item).is_err() {
                    return Ok(());
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use protobuf::MessageField;

    #[test]
    fn an_event_names_its_pod_from_the_sandbox_metadata() {
        let response = pb::ContainerEventResponse {
            container_id: "c1".into(),
            container_event_type: pb::ContainerEventType::CONTAINER_STOPPED_EVENT.into(),
            created_at: 42,
            pod_sandbox_status: MessageField::some(pb::PodSandboxStatus {
                metadata: MessageField::some(pb::PodSandboxMetadata {
                    uid: "u1".into(),
                    name: "web".into(),
                    namespace: "prod".into(),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(
            ContainerEvent::from(&response),
            ContainerEvent {
                container_id: "c1".into(),
                kind: ContainerEventKind::Stopped,
                created_at: 42,
                pod: Some(EventPod {
                    uid: "u1".into(),
                    name: "web".into(),
                    namespace: "prod".into(),
                }),
            }
        );
    }

    #[test]
    fn an_event_without_a_pod_uid_or_with_an_unknown_type_is_kept_as_such() {
        let mut response = pb::ContainerEventResponse {
            container_id: "c2".into(),
            ..Default::default()
        };
        response.container_event_type = protobuf::EnumOrUnknown::from_i32(9);
        response.pod_sandbox_status = MessageField::some(pb::PodSandboxStatus::default());
        let event = ContainerEvent::from(&response);
        assert_eq!(event.kind, ContainerEventKind::Other(9));
        assert_eq!(event.pod, None);
    }

    #[test]
    fn an_events_age_counts_from_its_stamp_and_never_goes_negative() {
        let event = |created_at| ContainerEvent {
            container_id: "c".into(),
            kind: ContainerEventKind::Stopped,
            created_at,
            pod: None,
        };
        let now = UNIX_EPOCH + Duration::from_secs(100);
        assert_eq!(event(99_500_000_000).age(now), Duration::from_millis(500));
        assert_eq!(event(101_000_000_000).age(now), Duration::ZERO);
        assert_eq!(event(-5).age(now), Duration::from_secs(100));
    }
}
