//! The `events` thread: turns the [`EventRecord`]s every thread records (through
//! `events::Recorder`) into core/v1 Events on the API server.
//!
//! Input: the receiving end of the bounded channel the `Recorder` writes to (the
//! recorder drops events when it is full, so no thread ever waits on the API server
//! for an event). Each event goes through the [`Correlator`] (pure: spam filter per
//! object, then deduplication) and then one request: POST a new event, or PATCH the
//! stored one with its new count (re-created if the server has expired it).
//!
//! An API server outage (no answer, 5xx or 429, after the client's own retries) does
//! not lose events silently: the event and every later one wait, in order, in a
//! bounded [`OutageBuffer`] (1000 by default; the oldest are dropped when full), the
//! first in line retried with a back-off (2 s doubling to 60 s), or at once when the
//! API server answers another request again (`api::reachability`). The thread logs once
//! when an outage starts and once when it ends, with how many events were sent late
//! and how many were dropped. An event the server refuses (a 4xx) is dropped with a
//! debug log, as is one over the rate limit. The thread ends when `shutdown`
//! disconnects or every recorder is gone.

use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

use crossbeam_channel::{at, never, select_biased, Receiver};

use super::buffer::OutageBuffer;
use super::correlator::{self, Correlator, CorrelatorOptions, Decision};

use super::EventRecord;
use crate::api::event::{Event, EventSource};
use crate::api::{paths, ApiClient, ApiError, PatchType};

/// Who reports the events.
#[derive(Clone, Debug, PartialEq)]
pub struct Options {
    /// `source.host`: the node name.
    pub node_name: String,
    /// `source.component`.
    pub component: String,
    pub correlator: CorrelatorOptions,
    /// Events kept while the API server is unreachable.
    pub outage_buffer: usize,
    /// First retry delay in an outage; doubles up to `retry_max`.
    pub retry_initial: Duration,
    pub retry_max: Duration,
}

impl Options {
    pub fn new(node_name: &str) -> Self {
        Self {
            node_name: node_name.to_owned(),
            component: "kubelet".to_owned(),
            correlator: CorrelatorOptions::default(),
            // Upstream's broadcaster queues up to 1000 events too.
            outage_buffer: 1000,
            retry_initial: Duration::from_secs(2),
            retry_max: Duration::from_secs(60),
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
    crate::process::spawn_essential("events", 512 * 1024, move || {
        run(client, options, events, shutdown)
    })
}

fn run(client: ApiClient, options: Options, events: Receiver<EventRecord>, shutdown: Receiver<()>) {
    let mut sink = Sink {
        client,
        source: EventSource {
            component: Some(options.component),
            host: Some(options.node_name),
        },
        correlator: Correlator::new(options.correlator),
        pending: OutageBuffer::new(
            options.outage_buffer,
            options.retry_initial,
            options.retry_max,
        ),
    };
    let reachable_again = sink.client.reachability().subscribe();
    loop {
        let retry = sink.pending.next_try().map_or_else(never, at);
        select_biased! {
            recv(shutdown) -> _ => return sink.abandon(),
            recv(reachable_again) -> _ => {
                sink.pending.retry_now(Instant::now());
                sink.retry(Instant::now());
            }
            recv(retry) -> _ => sink.retry(Instant::now()),
            recv(events) -> record => match record {
                Ok(record) => sink.handle(&record),
                Err(_) => return sink.abandon(),
            },
        }
    }
}

/// True for a failure that says the API server is unreachable or overloaded (worth
/// keeping the event for), rather than one that refuses this event.
fn is_outage(err: &ApiError) -> bool {
    match err {
        ApiError::Transport { .. } => true,
        other => other
            .status_code()
            .is_some_and(|code| code >= 500 || code == 429),
    }
}

struct Sink {
    client: ApiClient,
    source: EventSource,
    correlator: Correlator,
    pending: OutageBuffer<Decision>,
}

fn namespace(e: &Event) -> &str {
    e.metadata.namespace.as_deref().unwrap_or("default")
}

impl Sink {
    fn handle(&mut self, record: &EventRecord) {
        let event = correlator::to_event(record, &self.source, SystemTime::now());
        let decision = self.correlator.decide(event, Instant::now());
        if decision == Decision::Drop {
            log::debug!(
                "event {} ({}) dropped: over the rate limit for its object",
                record.reason,
                record.message
            );
            return;
        }
        if self.pending.in_outage() {
            // Behind the events already waiting, so the server sees them in order.
            self.pending.push(decision);
            return;
        }
        if let Err(err) = self.send(decision.clone()) {
            if is_outage(&err) {
                if self.pending.failed(decision, Instant::now()) {
                    log::warn!(
                        "events: API server unavailable ({err}); keeping up to {} events \
                         until it answers",
                        self.pending_capacity()
                    );
                }
            } else {
                log::debug!("event {} dropped: {err}", record.reason);
            }
        }
    }

    /// Tries the first waiting event again.
    fn retry(&mut self, now: Instant) {
        let Some(decision) = self.pending.due(now) else {
            return;
        };
        let report = match self.send(decision.clone()) {
            Ok(()) => self.pending.sent(Instant::now()),
            Err(err) if is_outage(&err) => {
                log::debug!("events: still unavailable: {err}");
                self.pending.failed(decision, Instant::now());
                None
            }
            Err(err) => {
                log::debug!("delayed event dropped: {err}");
                self.pending.refused(Instant::now())
            }
        };
        if let Some(r) = report {
            let summary = format!(
                "events: API server answering again after {:.1}s: {} delayed events sent, \
                 {} refused, {} dropped because more than {} were waiting",
                r.lasted.as_secs_f64(),
                r.sent,
                r.refused,
                r.dropped,
                self.pending_capacity()
            );
            if r.dropped > 0 {
                log::warn!("{summary}");
            } else {
                log::info!("{summary}");
            }
        }
    }

    /// Says what an outage still in progress at shutdown costs.
    fn abandon(&self) {
        if self.pending.in_outage() {
            log::warn!(
                "events: stopping during an API server outage: {} waiting events not sent, \
                 {} dropped before",
                self.pending.len(),
                self.pending.dropped()
            );
        }
    }

    fn pending_capacity(&self) -> usize {
        self.pending.capacity()
    }

    /// Sends one decision; on success the correlator learns what the server stores.
    fn send(&mut self, decision: Decision) -> Result<(), ApiError> {
        let stored = match decision {
            Decision::Create(e) => self.create(e)?,
            Decision::Repeat(e) => self.repeat(e)?,
            Decision::Drop => return Ok(()),
        };
        self.correlator.stored(stored);
        Ok(())
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
