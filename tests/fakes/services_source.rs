//! The services source (`sources::services`) against the fake API server over real
//! HTTP: its store follows services added, changed and deleted; it recovers from a
//! dropped watch and from 410 Gone (a service deleted meanwhile goes away); it is
//! synced only after the first successful list; it ends promptly on shutdown.

use std::thread::JoinHandle;
use std::time::Duration;

use crate::support::fake_api::{Fail, FakeApi};
use crate::support::sources::join_within;
use crate::support::wait_until;
use crossbeam_channel::Sender;
use litelet::sources::services::{self, Options, ServiceStore};
use serde_json::{json, Value};

const LONG: Duration = Duration::from_secs(20);

struct Source {
    store: ServiceStore,
    shutdown: Option<Sender<()>>,
    handle: Option<JoinHandle<()>>,
}

fn start(fake: &FakeApi) -> Source {
    let (shutdown, shutdown_rx) = crossbeam_channel::bounded(0);
    let options = Options {
        backoff_initial: Duration::from_millis(20),
        backoff_max: Duration::from_millis(200),
        ..Options::default()
    };
    let store = ServiceStore::new();
    let handle = services::spawn(fake.client(), options, store.clone(), shutdown_rx).unwrap();
    Source {
        store,
        shutdown: Some(shutdown),
        handle: Some(handle),
    }
}

impl Source {
    /// The cluster IP of service ns/name as stored, if stored.
    fn ip(&self, ns: &str, name: &str) -> Option<String> {
        self.store.get(ns, name).map(|s| s.spec.cluster_ip)
    }

    fn wait(&self, what: &str, check: impl Fn(&ServiceStore) -> bool) {
        assert!(
            wait_until(LONG, || check(&self.store)),
            "timed out waiting for {what}; store has {} services",
            self.store.len()
        );
    }

    /// Stops the source and joins it, failing if it does not end within LONG.
    fn stop(&mut self) {
        drop(self.shutdown.take());
        let handle = self.handle.take().unwrap();
        assert_eq!(join_within(handle, LONG), Ok(true), "services did not end");
    }
}

impl Drop for Source {
    fn drop(&mut self) {
        drop(self.shutdown.take());
    }
}

fn service(ns: &str, name: &str, ip: &str, port: i64) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"type": "ClusterIP", "clusterIP": ip, "clusterIPs": [ip],
                 "selector": {"app": name},
                 "ports": [{"name": "http", "protocol": "TCP", "port": port, "targetPort": port}]}
    })
}

fn port(store: &ServiceStore, ns: &str, name: &str) -> Option<i32> {
    store
        .get(ns, name)
        .and_then(|s| s.spec.ports.first().map(|p| p.port))
}

#[test]
fn store_follows_services_added_changed_and_deleted() {
    let fake = FakeApi::start();
    fake.create(
        "services",
        "default",
        service("default", "kubernetes", "10.0.0.1", 443),
    );
    fake.create("services", "shop", service("shop", "web", "10.0.0.2", 80));
    let mut src = start(&fake);
    src.wait("the first list", |s| s.has_synced() && s.len() == 2);
    assert_eq!(src.ip("shop", "web").as_deref(), Some("10.0.0.2"));
    assert!(wait_until(LONG, || fake.open_watches() == 1));
    assert_eq!(
        fake.count("list", "/api/v1/services"),
        1,
        "all namespaces in one list"
    );

    fake.create("services", "shop", service("shop", "db", "10.0.0.3", 5432));
    src.wait("db added", |s| port(s, "shop", "db") == Some(5432));
    fake.modify("services", "shop", "web", |s| {
        s["spec"]["ports"][0]["port"] = json!(8080);
    });
    src.wait("web's new port", |s| port(s, "shop", "web") == Some(8080));
    fake.remove("services", "shop", "db");
    src.wait("db deleted", |s| s.get("shop", "db").is_none());
    assert_eq!(src.store.len(), 2);
    assert_eq!(fake.count_verb("list"), 1, "watch events, no relists");
    src.stop();
}

#[test]
fn not_synced_until_the_first_list_succeeds() {
    let fake = FakeApi::start();
    fake.create(
        "services",
        "default",
        service("default", "kubernetes", "10.0.0.1", 443),
    );
    fake.inject(
        Fail::status(500)
            .always()
            .verb("list")
            .path("/api/v1/services"),
    );
    let mut src = start(&fake);
    assert!(wait_until(LONG, || fake.count("list", "/api/v1/services") >= 3));
    assert!(
        !src.store.has_synced(),
        "failed lists do not sync the store"
    );
    fake.clear_faults();
    src.wait("the first list", |s| s.has_synced() && s.len() == 1);
    src.stop();
}

#[test]
fn recovers_after_a_dropped_watch() {
    let fake = FakeApi::start();
    fake.create("services", "shop", service("shop", "a", "10.0.0.2", 80));
    let mut src = start(&fake);
    src.wait("the first list", |s| s.has_synced() && s.len() == 1);
    assert!(wait_until(LONG, || fake.open_watches() == 1));

    // Keep it disconnected while services change.
    fake.inject(Fail::status(503).always().verb("watch"));
    assert_eq!(fake.drop_watches(), 1);
    fake.create("services", "shop", service("shop", "b", "10.0.0.3", 81));
    fake.modify("services", "shop", "a", |s| {
        s["spec"]["ports"][0]["port"] = json!(90);
    });
    assert!(wait_until(LONG, || fake.count_verb("watch") >= 3));
    assert!(
        src.store.has_synced(),
        "an outage does not unsync the store"
    );
    fake.clear_faults();

    src.wait("b added and a changed", |s| {
        port(s, "shop", "b") == Some(81) && port(s, "shop", "a") == Some(90)
    });
    assert_eq!(
        fake.count_verb("list"),
        1,
        "watched again from the last version"
    );
    src.stop();
}

#[test]
fn relists_after_410_and_forgets_what_went_away() {
    let fake = FakeApi::start();
    fake.create("services", "shop", service("shop", "a", "10.0.0.2", 80));
    fake.create("services", "shop", service("shop", "b", "10.0.0.3", 81));
    let mut src = start(&fake);
    src.wait("the first list", |s| s.has_synced() && s.len() == 2);
    assert!(wait_until(LONG, || fake.open_watches() == 1));

    fake.inject(Fail::status(503).always().verb("watch"));
    fake.drop_watches();
    fake.remove("services", "shop", "b");
    fake.create("services", "shop", service("shop", "c", "10.0.0.4", 82));
    // The history no longer reaches back to the source's version.
    fake.compact();
    assert!(wait_until(LONG, || fake.count_verb("watch") >= 3));
    fake.clear_faults();

    src.wait("b gone and c there", |s| {
        s.get("shop", "b").is_none() && s.get("shop", "c").is_some()
    });
    assert_eq!(fake.count_verb("list"), 2, "one relist after the 410");
    // And it keeps following the watch afterwards.
    fake.create("services", "shop", service("shop", "d", "10.0.0.5", 83));
    src.wait("d added", |s| s.get("shop", "d").is_some());
    src.stop();
}

#[test]
fn a_service_that_does_not_decode_is_skipped() {
    let fake = FakeApi::start();
    let mut bad = service("shop", "bad", "10.0.0.9", 80);
    bad["spec"]["ports"] = json!("not a list");
    fake.create("services", "shop", bad);
    fake.create("services", "shop", service("shop", "good", "10.0.0.2", 80));
    let mut src = start(&fake);
    src.wait("the first list", |s| s.has_synced());
    assert!(src.store.get("shop", "good").is_some());
    assert!(src.store.get("shop", "bad").is_none());
    src.stop();
}

#[test]
fn ends_on_shutdown_while_blocked_on_an_idle_watch() {
    let fake = FakeApi::start();
    let mut src = start(&fake);
    src.wait("the first list", |s| s.has_synced());
    assert!(wait_until(LONG, || fake.open_watches() == 1));
    src.stop();
}
