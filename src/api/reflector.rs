//! The list+watch loop (upstream client-go's reflector), shared by the threads that
//! mirror a collection of the API server: the pod source (`sources/apiserver.rs`),
//! the services source (`sources/services.rs`) and the node lister
//! (`node/lister.rs`). Each keeps only its handling of objects, as a [`Handler`].
//!
//! Loop: list the collection, hand every item to the handler, then watch from the
//! list's resourceVersion with bookmarks and a server-side timeout drawn from a range
//! (5–10 minutes in production, so many kubelets do not reconnect in step). Every
//! event and bookmark advances the resourceVersion. When a watch ends or breaks,
//! watch again from the last resourceVersion; on 410 Gone, list again. Failures back
//! off exponentially (capped, jittered); a watch that ends at once with no event
//! counts as a failure, so a server that closes every watch cannot make us spin. A
//! back-off sleep also ends, and the back-off starts over, when the API server
//! answers again after an outage (any request of any clone of the client:
//! `api::reachability`), so a long outage's grown back-off never delays the catch-up.
//! The loop ends on shutdown or when the handler says so.
//!
//! Items are decoded one by one, so one object that does not decode cannot hide the
//! others; the handler gets a [`DecodeError`] naming it instead.
//!
//! Shutdown of a blocked read: [`Reflector::new`] gives the reflector a client with
//! its own connection pool, and a [`Stopper`] that the caller runs on a small thread
//! of its own (named `<name>-stop`). On shutdown the stopper closes that pool's
//! connections, which makes a blocked watch read (or list) return at once, and drops
//! the channel the back-off sleeps wait on. No read timeout is needed, so an idle
//! watch costs no requests. The stopper also ends when the reflector is dropped.
//!
//! This module spawns no thread itself (threads are started by the layers above,
//! through `process::spawn_essential`).

use std::time::{Duration, Instant};

use crossbeam_channel::{select, Receiver, Sender, TryRecvError};
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::Value;

use crate::api::client::{ApiClient, ListOptions, WatchOptions};
use crate::api::error::ApiError;
use crate::api::meta::{WatchEvent, WatchEventType};
use crate::api::ratelimit::{jitter, random_between, Backoff};

/// A watch shorter than this that brought no event counts as a failure.
const SHORT_WATCH: Duration = Duration::from_secs(1);

/// What to mirror and how patiently.
#[derive(Clone, Debug)]
pub struct Config {
    /// The thread's name, which starts every log line.
    pub name: &'static str,
    /// What is watched, in words for log lines ("pods of node n1").
    pub what: String,
    /// The collection's path (from `api::paths`).
    pub path: String,
    /// Sent with both the list and the watch.
    pub field_selector: Option<String>,
    /// First delay after a failure; doubles up to `backoff_max`.
    pub backoff_initial: Duration,
    pub backoff_max: Duration,
    /// The server-side watch timeout is drawn from this range, in seconds.
    pub watch_timeout_secs: (u64, u64),
}

impl Config {
    /// The production tunables: back-off from 800 ms to 30 s, watches of 5–10 minutes.
    pub fn new(name: &'static str, what: String, path: String) -> Self {
        Self {
            name,
            what,
            path,
            field_selector: None,
            backoff_initial: Duration::from_millis(800),
            backoff_max: Duration::from_secs(30),
            watch_timeout_secs: (300, 600),
        }
    }
}

/// An object of a list or a watch event that did not decode, named as far as its
/// metadata could be read.
#[derive(Debug, thiserror::Error)]
#[error("{namespace}/{name}: does not decode: {source}")]
pub struct DecodeError {
    pub namespace: String,
    pub name: String,
    #[source]
    pub source: serde_json::Error,
}

/// What a watch event did to its object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventKind {
    Added,
    Modified,
    Deleted,
}

/// One decoded watch event (bookmarks are consumed by the reflector).
#[derive(Debug)]
pub struct Event<T> {
    pub kind: EventKind,
    pub object: Result<T, DecodeError>,
}

/// The part of an object the reflector reads whatever its kind.
#[derive(Default, Deserialize)]
#[serde(default)]
struct Head {
    metadata: HeadMeta,
}

#[derive(Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
struct HeadMeta {
    namespace: Option<String>,
    name: Option<String>,
    resource_version: Option<String>,
}

fn head(object: &Value) -> HeadMeta {
    Head::deserialize(object).unwrap_or_default().metadata
}

/// Decodes one object as `T`, naming it when it does not decode.
pub fn decode<T: DeserializeOwned>(object: Value) -> Result<T, DecodeError> {
    let meta = head(&object);
    serde_json::from_value(object).map_err(|source| DecodeError {
        namespace: meta.namespace.unwrap_or_default(),
        name: meta.name.unwrap_or_default(),
        source,
    })
}

/// Decodes a watch event: `None` for a bookmark or a type this loop does not know.
pub fn decode_event<T: DeserializeOwned>(event: WatchEvent) -> Option<Event<T>> {
    let kind = match event.type_ {
        WatchEventType::Added => EventKind::Added,
        WatchEventType::Modified => EventKind::Modified,
        WatchEventType::Deleted => EventKind::Deleted,
        _ => return None,
    };
    Some(Event {
        kind,
        object: decode(event.object),
    })
}

/// The newest resourceVersion an event carries (bookmarks included), if any.
pub fn event_resource_version(event: &WatchEvent) -> Option<String> {
    head(&event.object)
        .resource_version
        .filter(|rv| !rv.is_empty())
}

/// A mirror of one collection: what the reflector calls with what it reads. Every
/// method returns false to stop the reflector (say, its receiver has gone).
pub trait Handler {
    type Object: DeserializeOwned;

    /// Every item of a fresh list; `resource_version` is the list's.
    fn listed(
        &mut self,
        items: Vec<Result<Self::Object, DecodeError>>,
        resource_version: Option<&str>,
    ) -> bool;

    /// A list failed (called before the back-off sleep, not on shutdown).
    fn list_failed(&mut self, _err: &ApiError) -> bool {
        true
    }

    /// One added, modified or deleted object; `resource_version` is the newest seen,
    /// this event's included.
    fn event(&mut self, event: Event<Self::Object>, resource_version: Option<&str>) -> bool;
}

/// How one watch request ended.
enum WatchEnd {
    /// The server ended the stream (its timeout) after `events` events.
    Closed { events: usize, lasted: Duration },
    /// 410: our resourceVersion is too old.
    Gone,
    /// The request or the stream failed after `events` events.
    Failed { err: ApiError, events: usize },
    /// The handler asked to stop.
    Done,
}

/// The list+watch loop over one collection; [`Reflector::run`] is a thread's body.
pub struct Reflector {
    client: ApiClient,
    config: Config,
    /// Disconnected by the stopper on shutdown; what back-off sleeps wait on.
    stop: Receiver<()>,
    /// A message each time the API server answers again after an outage.
    reachable_again: Receiver<()>,
    resource_version: Option<String>,
    /// Dropped with the reflector, which releases the stopper.
    _done: Sender<()>,
}

/// The reflector's helper: closes its connections when `shutdown` fires.
pub struct Stopper {
    client: ApiClient,
    shutdown: Receiver<()>,
    stop: Sender<()>,
    done: Receiver<()>,
}

impl Stopper {
    /// Waits for shutdown (a message or disconnection) or for the reflector to end.
    pub fn run(self) {
        let Stopper {
            client,
            shutdown,
            stop,
            done,
        } = self;
        select! {
            recv(shutdown) -> _ => {
                client.close_connections();
                drop(stop);
            }
            recv(done) -> _ => {}
        }
    }
}

impl Reflector {
    /// A reflector over `config`'s collection and the stopper that ends it on
    /// `shutdown`; the caller runs each on a thread of its own.
    pub fn new(client: &ApiClient, config: Config, shutdown: Receiver<()>) -> (Self, Stopper) {
        let client = client.with_own_connections();
        let (stop_tx, stop_rx) = crossbeam_channel::bounded::<()>(0);
        let (done_tx, done_rx) = crossbeam_channel::bounded::<()>(0);
        let stopper = Stopper {
            client: client.clone(),
            shutdown,
            stop: stop_tx,
            done: done_rx,
        };
        let reachable_again = client.reachability().subscribe();
        let reflector = Reflector {
            client,
            config,
            stop: stop_rx,
            reachable_again,
            resource_version: None,
            _done: done_tx,
        };
        (reflector, stopper)
    }

    /// Lists and watches until shutdown or until `handler` returns false.
    pub fn run<H: Handler>(mut self, handler: &mut H) {
        let name = self.config.name;
        log::info!("{name}: watching {}", self.config.what);
        let mut backoff = Backoff::new(self.config.backoff_initial, self.config.backoff_max);
        'list: while !self.stopped() {
            match self.list(handler) {
                Ok(true) => backoff.reset(),
                Ok(false) => break,
                Err(e) => {
                    if self.stopped() || !handler.list_failed(&e) {
                        break;
                    }
                    let delay = jitter(backoff.next_delay());
                    log::warn!("{name}: list {}: {e}; retry in {delay:?}", self.config.what);
                    if !self.sleep(delay, &mut backoff) {
                        break;
                    }
                    continue;
                }
            }
            while !self.stopped() {
                let delay = match self.watch_once(handler) {
                    WatchEnd::Done => break 'list,
                    WatchEnd::Gone => {
                        log::info!(
                            "{name}: resourceVersion {} expired; listing again",
                            self.resource_version.as_deref().unwrap_or("")
                        );
                        continue 'list;
                    }
                    WatchEnd::Closed { events, lasted } if events > 0 || lasted >= SHORT_WATCH => {
                        backoff.reset();
                        continue;
                    }
                    WatchEnd::Closed { .. } => {
                        let delay = jitter(backoff.next_delay());
                        log::debug!("{name}: watch ended at once; again in {delay:?}");
                        delay
                    }
                    WatchEnd::Failed { err, events } => {
                        if self.stopped() {
                            break 'list;
                        }
                        if events > 0 {
                            backoff.reset();
                        }
                        let delay = jitter(backoff.next_delay());
                        log::warn!(
                            "{name}: watch {}: {err}; again in {delay:?}",
                            self.config.what
                        );
                        delay
                    }
                };
                if !self.sleep(delay, &mut backoff) {
                    break 'list;
                }
            }
        }
        log::info!("{name}: stopped");
    }

    fn stopped(&self) -> bool {
        matches!(self.stop.try_recv(), Err(TryRecvError::Disconnected))
    }

    /// Sleeps `d` unless stopped first (false) or the API server answers again
    /// after an outage (the back-off starts over and the loop tries at once).
    fn sleep(&self, d: Duration, backoff: &mut Backoff) -> bool {
        select! {
            recv(self.stop) -> _ => false,
            recv(self.reachable_again) -> _ => {
                log::info!("{}: the API server answers again; retrying now", self.config.name);
                backoff.reset();
                true
            }
            default(d) => true,
        }
    }

    /// Lists the collection into the handler; Ok(false) when the handler is done.
    fn list<H: Handler>(&mut self, handler: &mut H) -> Result<bool, ApiError> {
        let opts = ListOptions {
            field_selector: self.config.field_selector.clone(),
            ..ListOptions::default()
        };
        let list = self.client.list::<Value>(&self.config.path, &opts)?;
        let items = list.items.into_iter().map(decode).collect();
        self.resource_version = list.metadata.resource_version;
        Ok(handler.listed(items, self.resource_version.as_deref()))
    }

    fn watch_once<H: Handler>(&mut self, handler: &mut H) -> WatchEnd {
        let (low, high) = self.config.watch_timeout_secs;
        let opts = WatchOptions {
            field_selector: self.config.field_selector.clone(),
            resource_version: self.resource_version.clone(),
            allow_bookmarks: true,
            timeout_seconds: Some(random_between(low, high)),
            ..WatchOptions::default()
        };
        let started = Instant::now();
        let stream = match self.client.watch(&self.config.path, &opts) {
            Ok(s) => s,
            Err(e) if e.is_gone() => return WatchEnd::Gone,
            Err(err) => return WatchEnd::Failed { err, events: 0 },
        };
        let mut events = 0;
        for item in stream {
            let event = match item {
                Ok(event) => event,
                Err(e) if e.is_gone() => return WatchEnd::Gone,
                Err(err) => return WatchEnd::Failed { err, events },
            };
            events += 1;
            if let Some(rv) = event_resource_version(&event) {
                self.resource_version = Some(rv);
            }
            let type_ = event.type_.clone();
            match decode_event(event) {
                Some(event) => {
                    if !handler.event(event, self.resource_version.as_deref()) {
                        return WatchEnd::Done;
                    }
                }
                None if type_ == WatchEventType::Bookmark => {}
                None => log::debug!("{}: ignoring watch event of type {type_}", self.config.name),
            }
        }
        WatchEnd::Closed {
            events,
            lasted: started.elapsed(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[derive(Debug, Deserialize)]
    struct Named {
        metadata: Meta,
    }

    #[derive(Debug, Deserialize)]
    struct Meta {
        name: String,
    }

    #[test]
    fn a_bad_object_is_named_in_its_error() {
        let bad = json!({"metadata": {"namespace": "ns", "name": 7}});
        // The name is not a string, so the head reads nothing either; a missing
        // field names what it can.
        assert!(decode::<Named>(bad).is_err());
        let err = decode::<Named>(json!({"metadata": {"namespace": "ns"}, "spec": 1}))
            .expect_err("no name");
        assert_eq!(err.namespace, "ns");
        let ok: Named = decode(json!({"metadata": {"name": "a"}})).expect("decodes");
        assert_eq!(ok.metadata.name, "a");
    }

    #[test]
    fn events_advance_the_version_and_bookmarks_are_not_handed_on() {
        let bookmark = WatchEvent {
            type_: WatchEventType::Bookmark,
            object: json!({"metadata": {"resourceVersion": "9"}}),
        };
        assert_eq!(event_resource_version(&bookmark).as_deref(), Some("9"));
        assert!(decode_event::<Value>(bookmark).is_none());
        let empty = WatchEvent {
            type_: WatchEventType::Deleted,
            object: json!({"metadata": {"resourceVersion": ""}}),
        };
        assert_eq!(event_resource_version(&empty), None);
        let event = decode_event::<Value>(empty).expect("a deletion");
        assert_eq!(event.kind, EventKind::Deleted);
    }
}
