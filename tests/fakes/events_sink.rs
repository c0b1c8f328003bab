//! The `events` thread (`events::sink`) against the fake API server: identical events
//! become one Event whose count grows, a crash loop is capped by the per-object spam
//! filter, node events reference the node, an expired event is created again, an
//! event the server refuses costs that event, never the thread, and the events of an
//! API server outage wait in a bounded buffer and are sent when it is back, with the
//! drops told once.
//!
//! Events are processed in order by one thread, so a final "marker" event that shows
//! up on the server proves every earlier one was handled (sent or dropped).

use std::thread::JoinHandle;
use std::time::Duration;

use crate::support::fake_api::{Fail, FakeApi};
use crate::support::pods;
use crate::support::wait_until;
use crossbeam_channel::Sender;
use litelet::api::event::Event;
use litelet::api::pod::{Container, Pod};
use litelet::api::{paths, ListOptions};
use litelet::events::sink::{self as event_sink, Options};
use litelet::events::{EventType, Recorder};

const LONG: Duration = Duration::from_secs(20);

struct Sink {
    recorder: Recorder,
    shutdown: Option<Sender<()>>,
    handle: Option<JoinHandle<()>>,
}

impl Drop for Sink {
    fn drop(&mut self) {
        self.shutdown.take();
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

fn start(fake: &FakeApi) -> Sink {
    start_with(fake, Options::new("node-1"))
}

fn start_with(fake: &FakeApi, options: Options) -> Sink {
    let (tx, rx) = crossbeam_channel::bounded(1000);
    let (shutdown, shutdown_rx) = crossbeam_channel::bounded(0);
    let handle = event_sink::spawn(fake.client(), options, rx, shutdown_rx).unwrap();
    Sink {
        recorder: Recorder::new(tx),
        shutdown: Some(shutdown),
        handle: Some(handle),
    }
}

fn pod(name: &str) -> Pod {
    let mut p = pods::meta("prod", name, &format!("uid-{name}"));
    p.spec.containers = vec![Container {
        name: "app".into(),
        ..Default::default()
    }];
    p
}

fn events(fake: &FakeApi, ns: &str) -> Vec<Event> {
    fake.client()
        .list::<Event>(&paths::events(ns), &ListOptions::default())
        .map(|l| l.items)
        .unwrap_or_default()
}

fn about<'a>(events: &'a [Event], name: &str) -> Vec<&'a Event> {
    events
        .iter()
        .filter(|e| e.involved_object.name.as_deref() == Some(name))
        .collect()
}

/// Records a marker event about its own pod and waits until the server has it.
fn flush(fake: &FakeApi, sink: &Sink, marker: &str) {
    sink.recorder
        .pod(&pod(marker), EventType::Normal, "Marker", "flush");
    assert!(wait_until(LONG, || !about(&events(fake, "prod"), marker).is_empty()));
}

fn requests(fake: &FakeApi, verb: &str) -> usize {
    fake.requests()
        .iter()
        .filter(|r| r.verb == verb && r.path.contains("/events"))
        .count()
}

#[test]
fn a_crash_loop_is_counted_then_capped() {
    let fake = FakeApi::start();
    let sink = start(&fake);
    let web = pod("web");
    for _ in 0..40 {
        sink.recorder.container(
            &web,
            "app",
            EventType::Warning,
            "BackOff",
            "Back-off restarting failed container app",
        );
    }
    flush(&fake, &sink, "marker");
    let all = events(&fake, "prod");
    let web_events = about(&all, "web");
    assert_eq!(web_events.len(), 1);
    let e = web_events[0];
    // Burst 25: one create and 24 count updates, then the rest dropped.
    assert_eq!(e.count, Some(25));
    assert_eq!(e.reason.as_deref(), Some("BackOff"));
    assert_eq!(e.type_.as_deref(), Some("Warning"));
    assert_eq!(
        e.involved_object.field_path.as_deref(),
        Some("spec.containers{app}")
    );
    assert_eq!(e.source.host.as_deref(), Some("node-1"));
    assert_eq!(e.source.component.as_deref(), Some("kubelet"));
    assert_eq!(requests(&fake, "create"), 2); // web's event and the marker
    assert_eq!(requests(&fake, "patch"), 24);
    // The next BackOff of that pod is dropped too; other pods are not limited.
    sink.recorder
        .pod(&web, EventType::Warning, "BackOff", "still crashing");
    flush(&fake, &sink, "marker2");
    assert_eq!(about(&events(&fake, "prod"), "web").len(), 1);
}

#[test]
fn different_messages_are_different_events() {
    let fake = FakeApi::start();
    let sink = start(&fake);
    let web = pod("web");
    for msg in ["one", "two", "one"] {
        sink.recorder
            .container(&web, "app", EventType::Normal, "Pulled", msg);
    }
    flush(&fake, &sink, "marker");
    let all = events(&fake, "prod");
    let mut counts: Vec<(String, i32)> = about(&all, "web")
        .iter()
        .map(|e| (e.message.clone().unwrap_or_default(), e.count.unwrap_or(0)))
        .collect();
    counts.sort();
    assert_eq!(counts, [("one".to_string(), 2), ("two".to_string(), 1)]);
}

#[test]
fn node_events_reference_the_node() {
    let fake = FakeApi::start();
    let sink = start(&fake);
    sink.recorder
        .node("node-1", EventType::Normal, "NodeReady", "node is ready");
    assert!(wait_until(LONG, || !events(&fake, "default").is_empty()));
    let e = &events(&fake, "default")[0];
    assert_eq!(e.involved_object.kind.as_deref(), Some("Node"));
    assert_eq!(e.involved_object.name.as_deref(), Some("node-1"));
    assert_eq!(e.involved_object.uid.as_deref(), Some("node-1"));
    assert_eq!(e.reason.as_deref(), Some("NodeReady"));
}

#[test]
fn an_expired_event_is_created_again() {
    let fake = FakeApi::start();
    let sink = start(&fake);
    let web = pod("web");
    sink.recorder
        .pod(&web, EventType::Normal, "Scheduled", "again");
    assert!(wait_until(LONG, || about(&events(&fake, "prod"), "web")
        .len()
        == 1));
    let name = about(&events(&fake, "prod"), "web")[0]
        .metadata
        .name
        .clone()
        .unwrap();
    fake.remove("events", "prod", &name);
    sink.recorder
        .pod(&web, EventType::Normal, "Scheduled", "again");
    assert!(wait_until(LONG, || about(&events(&fake, "prod"), "web")
        .len()
        == 1));
    let e = about(&events(&fake, "prod"), "web")[0].clone();
    assert_eq!(e.count, Some(2));
    assert_eq!(e.metadata.name.as_deref(), Some(name.as_str()));
}

#[test]
fn an_event_the_api_server_refuses_is_dropped_not_the_thread() {
    let fake = FakeApi::start();
    let sink = start(&fake);
    fake.inject(Fail::status(422).always().verb("create"));
    let web = pod("web");
    sink.recorder
        .pod(&web, EventType::Warning, "Failed", "lost");
    assert!(wait_until(LONG, || requests(&fake, "create") == 1));
    fake.clear_faults();
    flush(&fake, &sink, "marker");
    assert!(about(&events(&fake, "prod"), "web").is_empty());
    // The dropped event was never stored, so its next occurrence is a new event.
    sink.recorder
        .pod(&web, EventType::Warning, "Failed", "lost");
    assert!(wait_until(LONG, || about(&events(&fake, "prod"), "web")
        .len()
        == 1));
    assert_eq!(about(&events(&fake, "prod"), "web")[0].count, Some(1));
}

/// Log lines of the `events` thread, captured for the outage test.
mod captured_log {
    use std::sync::{Mutex, Once};

    static LINES: Mutex<Vec<String>> = Mutex::new(Vec::new());
    static INSTALL: Once = Once::new();

    struct Capture;

    impl log::Log for Capture {
        fn enabled(&self, meta: &log::Metadata) -> bool {
            meta.target().starts_with("litelet::events::sink") && meta.level() <= log::Level::Info
        }
        fn log(&self, record: &log::Record) {
            if self.enabled(record.metadata()) {
                let line = format!("{} {}", record.level(), record.args());
                LINES.lock().unwrap().push(line);
            }
        }
        fn flush(&self) {}
    }

    pub fn install() {
        INSTALL.call_once(|| {
            log::set_boxed_logger(Box::new(Capture)).expect("no other logger");
            log::set_max_level(log::LevelFilter::Info);
        });
    }

    pub fn lines_with(part: &str) -> Vec<String> {
        let lines = LINES.lock().unwrap();
        lines.iter().filter(|l| l.contains(part)).cloned().collect()
    }
}

// Issue 23 item 5: events raised during an API outage vanished without a word.
#[test]
fn events_of_an_outage_wait_in_a_bounded_buffer_and_the_drops_are_logged_once() {
    captured_log::install();
    let fake = FakeApi::start();
    let mut options = Options::new("node-1");
    options.outage_buffer = 5;
    options.retry_initial = Duration::from_millis(100);
    options.retry_max = Duration::from_millis(400);
    let sink = start_with(&fake, options);
    fake.inject(Fail::status(503).always());
    for i in 0..8 {
        sink.recorder.pod(
            &pod(&format!("outage-{i}")),
            EventType::Warning,
            "Failed",
            "during the outage",
        );
    }
    // Retried with back-off while the server is down.
    assert!(wait_until(LONG, || requests(&fake, "create") >= 3));
    // (Other tests of this binary log outages too: theirs keep up to 1000 events.)
    let started = captured_log::lines_with("keeping up to 5 events");
    assert_eq!(started.len(), 1, "{started:?}");
    fake.clear_faults();
    assert!(wait_until(LONG, || !captured_log::lines_with(
        "more than 5 were waiting"
    )
    .is_empty()));
    flush(&fake, &sink, "after-outage");
    // The oldest three did not fit; the five newest arrive, in order.
    let stored = events(&fake, "prod");
    let names: Vec<&str> = stored
        .iter()
        .filter_map(|e| e.involved_object.name.as_deref())
        .filter(|n| n.starts_with("outage-"))
        .collect();
    assert_eq!(
        names,
        ["outage-3", "outage-4", "outage-5", "outage-6", "outage-7"],
        "{:?}",
        captured_log::lines_with("")
    );
    let summary = captured_log::lines_with("more than 5 were waiting");
    assert_eq!(summary.len(), 1, "{summary:?}");
    assert!(
        summary[0].contains("5 delayed events sent") && summary[0].contains("3 dropped"),
        "{summary:?}"
    );
}

/// Catching up after an outage: the events waiting for the API server go out as
/// soon as it answers any request of the client (here the test's own GET through a
/// clone), not when the grown back-off ends.
#[test]
fn the_api_servers_return_sends_the_waiting_events_at_once() {
    let fake = FakeApi::start();
    let mut options = Options::new("node-1");
    options.retry_initial = Duration::from_secs(600);
    options.retry_max = Duration::from_secs(600);
    let client = fake.client();
    let (tx, rx) = crossbeam_channel::bounded(1000);
    let (shutdown, shutdown_rx) = crossbeam_channel::bounded(0);
    let handle = event_sink::spawn(client.clone(), options, rx, shutdown_rx).unwrap();
    let sink = Sink {
        recorder: Recorder::new(tx),
        shutdown: Some(shutdown),
        handle: Some(handle),
    };
    fake.inject(Fail::status(503).always().path("/events"));
    sink.recorder.pod(
        &pod("cut-off"),
        EventType::Warning,
        "Failed",
        "during the outage",
    );
    // The create failed (a POST is not retried on a 503): the next try is 10 minutes
    // away.
    assert!(wait_until(LONG, || requests(&fake, "create") >= 1));
    fake.clear_faults();
    let answer: Result<serde_json::Value, _> = client.get("/api/v1/namespaces/prod");
    assert!(
        answer.is_ok() || answer.as_ref().is_err_and(|e| e.is_not_found()),
        "{answer:?}"
    );
    assert!(
        wait_until(LONG, || !about(&events(&fake, "prod"), "cut-off")
            .is_empty()),
        "the event waited for its back-off"
    );
}
