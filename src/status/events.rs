//! The `events` thread: turns the [`EventRecord`]s every thread records (through
//! `events::Recorder`) into core/v1 Events on the API server.
//!
//! Input: the receiving end of the bounded channel the `Recorder` writes to (the
//! recorder drops events when it is full, so no thread ever waits on the API server
//! for an event). Each event goes through the [`Correlator`] (pure: spam filter per
//! object, then deduplication) and then one request: POST a new event, or PATCH the
//! stored one with its new count (re-created if the server has expired it). Events
//! are best effort: one over the rate limit, or one the API server refuses or cannot
//! take, is dropped with a debug log (the client has already retried what was worth
//! retrying). The thread ends when `shutdown` disconnects or every recorder is gone.

pub mod correlator;

use std::thread::JoinHandle;
use std::time::{Instant, SystemTime};

use crossbeam_channel::{select_biased, Receiver};

pub use correlator::{Correlator, CorrelatorOptions, Decision};

use crate::api::event::{Event, EventSource};
use crate::api::{paths, ApiClient, ApiError, PatchType};
use crate::events::EventRecord;

/// Who reports the events.
#[derive(Clone, Debug, PartialEq)]
pub struct Options {
    /// `source.host`: the node name.
    pub node_name: String,
    /// `source.component`.
    pub component: String,
    pub correlator: CorrelatorOptions,
}

impl Options {
    pub fn new(node_name: &str) -> Self {
        Self {
            node_name: node_name.to_owned(),
            component: "kubelet".to_owned(),
            correlator: CorrelatorOptions::default(),
        }
    }
}

/// Starts the `events` thread.
pub fn spawn(
    client: ApiClient,
    options: Options,
    events: Receiver<EventRecord>,
    shutdown: Receiver<()>,
) -> std::io::Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name("events".into())
        .stack_size(512 * 1024)
        .spawn(move || run(client, options, events, shutdown))
}

fn run(client: ApiClient, options: Options, events: Receiver<EventRecord>, shutdown: Receiver<()>) {
    let mut sink = Sink {
        client,
        source: EventSource {
            component: Some(options.component),
            host: Some(options.node_name),
        },
        correlator: Correlator::new(options.correlator),
    };
    loop {
        select_biased! {
            recv(shutdown) -> _ => return,
            recv(events) -> record => match record {
                Ok(record) => sink.handle(&record),
                Err(_) => return,
            },
        }
    }
}

struct Sink {
    client: ApiClient,
    source: EventSource,
    correlator: Correlator,
}

fn namespace(e: &Event) -> &str {
    e.metadata.namespace.as_deref().unwrap_or("default")
}

impl Sink {
    fn handle(&mut self, record: &EventRecord) {
        let event = correlator::to_event(record, &self.source, SystemTime::now());
        let result = match self.correlator.decide(event, Instant::now()) {
            Decision::Drop => {
                log::debug!(
                    "event {} ({}) dropped: over the rate limit for its object",
                    record.reason,
                    record.message
                );
                return;
            }
            Decision::Create(e) => self.create(e),
            Decision::Repeat(e) => self.repeat(e),
        };
        match result {
            Ok(stored) => self.correlator.stored(stored),
            Err(e) => log::debug!("event {} dropped: {e}", record.reason),
        }
    }

    fn create(&self, event: Event) -> Result<Event, ApiError> {
        self.client
            .create(&paths::events(namespace(&event)), &event)
    }

    /// PATCHes the stored event's count; creates it again (same name, same count) if
    /// the server has expired it. On failure the correlator keeps the previous count.
    fn repeat(&self, event: Event) -> Result<Event, ApiError> {
        let name = event.metadata.name.clone().unwrap_or_default();
        let path = paths::event(namespace(&event), &name);
        match self
            .client
            .patch(&path, PatchType::StrategicMerge, &event.repeat_patch())
        {
            Err(e) if e.is_not_found() => {
                let mut fresh = event;
                let meta = &mut fresh.metadata;
                meta.uid = None;
                meta.resource_version = None;
                meta.creation_timestamp = None;
                self.create(fresh)
            }
            other => other,
        }
    }
}
