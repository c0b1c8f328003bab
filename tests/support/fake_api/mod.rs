//! A fake kube-apiserver: real HTTP/1.1 on 127.0.0.1 (std `TcpListener`, one thread
//! per connection, keep-alive, chunked watch streams) over an in-memory store.
//!
//! It behaves like the real server where litelet relies on it (see `store.rs` for the
//! write rules): lists carry `metadata.resourceVersion`; field selectors
//! (`spec.nodeName`, `metadata.name`, ...) and simple label selectors work on lists
//! and watches; a watch from a version replays later events from a bounded history,
//! or answers an ERROR event with a 410 `Expired` Status when the version is older
//! than the history; `allowWatchBookmarks` brings periodic BOOKMARK events;
//! `timeoutSeconds` ends a watch cleanly; PATCH takes merge, strategic merge and JSON
//! patches; 404s carry a proper Status.
//!
//! Tests drive it through [`FakeApi`]: write objects directly (as a scheduler or user
//! would), read the request log, and inject faults: drop every open watch, fail the
//! next requests (by verb and path) with a code and `Retry-After`, delay every
//! request, force a 409 on the next write to a path, hold the next request to a path
//! until the test lets it through ([`FakeApi::pause_next`], to change the store
//! between two requests of a client), compact the history so older versions get 410.
//! The request log keeps each request's body, so tests can assert what a DELETE or
//! PATCH carried. Plain HTTP by default; [`FakeApi::start_tls`] serves HTTPS with
//! a throwaway PKI (made with the `openssl` command; `None` without it), verifying
//! client certificates when presented.

mod http;
pub mod patch;
mod review;
mod selector;
mod server;
mod store;
pub mod tls;
mod token;

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use litelet::api::{ApiClient, ClientConfig, RetryPolicy};
use serde_json::Value;

use super::pods::ApiPod;
use server::{lock, Pause, Shared};
pub use store::{DeleteOpts, Failure, WatchMsg};
pub use tls::TlsFiles;
pub use token::IssuedToken;

/// One served request, for assertions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RequestRecord {
    /// Kubernetes verb: get, list, watch, create, update, patch, delete.
    pub verb: String,
    pub method: String,
    /// Decoded path without the query.
    pub path: String,
    /// Raw query string.
    pub query: String,
    /// HTTP status answered.
    pub status: u16,
    pub content_type: String,
    pub user_agent: String,
    pub authorization: Option<String>,
    /// The client presented a certificate the server verified (HTTPS only).
    pub client_cert: bool,
    /// When the request was handled (before the answer was written).
    pub at: Instant,
    /// The request body as sent (lossy UTF-8); `None` when it had none.
    pub body: Option<String>,
}

impl RequestRecord {
    /// The body parsed as JSON (`None` without a body or when it is not JSON).
    pub fn body_json(&self) -> Option<Value> {
        serde_json::from_str(self.body.as_deref()?).ok()
    }
}

/// An injected failure: answer matching requests with `code`.
#[derive(Clone, Debug)]
pub struct Fail {
    pub code: u16,
    /// How many requests to fail; `None` until cleared.
    pub times: Option<usize>,
    /// Only requests of this verb (get, list, watch, create, update, patch, delete).
    pub verb: Option<String>,
    /// Only requests whose path contains this.
    pub path: Option<String>,
    /// Sent as the `Retry-After` header (seconds).
    pub retry_after: Option<u32>,
}

impl Fail {
    /// Fails the next request with `code`.
    pub fn status(code: u16) -> Self {
        Self {
            code,
            times: Some(1),
            verb: None,
            path: None,
            retry_after: None,
        }
    }

    pub fn times(mut self, n: usize) -> Self {
        self.times = Some(n);
        self
    }

    /// Until [`FakeApi::clear_faults`].
    pub fn always(mut self) -> Self {
        self.times = None;
        self
    }

    pub fn verb(mut self, verb: &str) -> Self {
        self.verb = Some(verb.to_owned());
        self
    }

    pub fn path(mut self, part: &str) -> Self {
        self.path = Some(part.to_owned());
        self
    }

    pub fn retry_after(mut self, secs: u32) -> Self {
        self.retry_after = Some(secs);
        self
    }

    fn matches(&self, verb: &str, path: &str) -> bool {
        self.times != Some(0)
            && self.verb.as_deref().is_none_or(|v| v == verb)
            && self.path.as_deref().is_none_or(|p| path.contains(p))
    }
}

/// A request held by [`FakeApi::pause_next`]. Dropping it lets the request through.
pub struct Paused {
    arrived: crossbeam_channel::Receiver<()>,
    release: Option<crossbeam_channel::Sender<()>>,
}

impl Paused {
    /// Waits until the request is being held; false when none came within `timeout`.
    pub fn wait(&self, timeout: Duration) -> bool {
        self.arrived.recv_timeout(timeout).is_ok()
    }

    /// Lets the held request through (to be handled by the store as it is now).
    pub fn release(mut self) {
        if let Some(tx) = self.release.take() {
            let _ = tx.send(());
        }
    }
}

/// A running fake API server. Dropping it stops the server and closes every connection.
pub struct FakeApi {
    addr: SocketAddr,
    shared: Arc<Shared>,
    listener: Option<JoinHandle<()>>,
    tls: Option<TlsFiles>,
}

/// A minimal pod bound to `node` (no nodeName when `node` is empty), labelled
/// `app=<name>`.
pub fn pod_json(namespace: &str, name: &str, node: &str) -> Value {
    ApiPod::new(namespace, name, node, "busybox")
        .label("app", name)
        .json()
}

impl FakeApi {
    /// Starts a server on a free port of 127.0.0.1.
    pub fn start() -> FakeApi {
        Self::serve(None)
    }

    /// Starts an HTTPS server with a fresh PKI made in `dir` (client certificate for
    /// `node`); `None` when the `openssl` command is not available.
    pub fn start_tls(dir: &std::path::Path, node: &str) -> Option<FakeApi> {
        let files = tls::generate(dir, node)?;
        Some(Self::serve(Some(files)))
    }

    fn serve(tls: Option<TlsFiles>) -> FakeApi {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind fake api listener");
        let addr = listener.local_addr().expect("fake api address");
        let shared = Arc::new(Shared::new(tls.as_ref().map(tls::server_config)));
        let s = shared.clone();
        let handle = std::thread::Builder::new()
            .name("fake-api".into())
            .spawn(move || server::accept_loop(s, listener))
            .expect("spawn fake api thread");
        FakeApi {
            addr,
            shared,
            listener: Some(handle),
            tls,
        }
    }

    /// `http://127.0.0.1:<port>` (`https://` with TLS).
    pub fn url(&self) -> String {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        format!("{scheme}://{}", self.addr)
    }

    /// Writes to `path` a kubeconfig a litelet process uses to reach this (plain
    /// HTTP) server as user `node`.
    pub fn write_kubeconfig(&self, path: &std::path::Path) {
        let yaml = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster:\n    server: {}\n\
             users:\n- name: node\n  user: {{}}\ncontexts:\n- name: default\n  context:\n    \
             cluster: fake\n    user: node\ncurrent-context: default\n",
            self.url()
        );
        std::fs::write(path, yaml).expect("write the fake API's kubeconfig");
    }

    /// The PKI of a TLS server.
    pub fn tls_files(&self) -> Option<&TlsFiles> {
        self.tls.as_ref()
    }

    /// A client config for this server with quick retries (tests stay fast); with TLS,
    /// the CA is pinned and the node's client certificate is used.
    pub fn client_config(&self) -> ClientConfig {
        let mut c = ClientConfig::new(&self.url());
        c.retry = RetryPolicy {
            max_retries: 4,
            initial_backoff: Duration::from_millis(10),
            max_backoff: Duration::from_millis(100),
            max_retry_after: Duration::from_secs(2),
        };
        c.timeout = Duration::from_secs(20);
        if let Some(files) = &self.tls {
            c.ca_pem = Some(files.ca_pem.clone());
            c.client_cert_pem = Some(files.client_cert_pem.clone());
            c.client_key_pem = Some(files.client_key_pem.clone());
        }
        c
    }

    pub fn client(&self) -> ApiClient {
        ApiClient::new(&self.client_config()).expect("client for the fake api")
    }

    // ---- objects, as a scheduler or user would write them ----

    /// Creates an object of `resource` (pods, services, nodes, leases, events, configmaps,
    /// secrets).
    pub fn create(&self, resource: &str, namespace: &str, obj: Value) -> Value {
        let kind = store::kind(resource);
        lock(&self.shared.store)
            .create(kind, namespace, obj)
            .unwrap_or_else(|f| panic!("fake api create {resource} {namespace}: {}", f.message))
    }

    /// Creates [`pod_json`] and returns the stored pod.
    pub fn create_pod(&self, namespace: &str, name: &str, node: &str) -> Value {
        self.create("pods", namespace, pod_json(namespace, name, node))
    }

    pub fn get(&self, resource: &str, namespace: &str, name: &str) -> Option<Value> {
        lock(&self.shared.store)
            .get(store::kind(resource), namespace, name)
            .ok()
    }

    /// Changes an object in place (status included) as another writer would; bumps
    /// resourceVersion (and a pod's generation on spec change). Returns the new object.
    pub fn modify(
        &self,
        resource: &str,
        namespace: &str,
        name: &str,
        f: impl FnOnce(&mut Value),
    ) -> Value {
        let kind = store::kind(resource);
        let mut store = lock(&self.shared.store);
        let mut obj = store
            .get(kind, namespace, name)
            .unwrap_or_else(|f| panic!("fake api modify: {}", f.message));
        f(&mut obj);
        store
            .put_raw(kind, namespace, name, obj)
            .unwrap_or_else(|f| panic!("fake api modify: {}", f.message))
    }

    /// Deletes through the API's rules (a bound pod with grace > 0 only gets a
    /// deletionTimestamp).
    pub fn delete(
        &self,
        resource: &str,
        namespace: &str,
        name: &str,
        grace: Option<i64>,
    ) -> Result<Value, Failure> {
        let opts = DeleteOpts {
            grace,
            ..DeleteOpts::default()
        };
        lock(&self.shared.store).delete(store::kind(resource), namespace, name, &opts)
    }

    /// Removes an object now, whatever it is (grace 0).
    pub fn remove(&self, resource: &str, namespace: &str, name: &str) -> Option<Value> {
        lock(&self.shared.store).remove(store::kind(resource), namespace, name)
    }

    /// The store's newest resourceVersion.
    pub fn resource_version(&self) -> u64 {
        lock(&self.shared.store).resource_version()
    }

    // ---- faults ----

    pub fn inject(&self, fail: Fail) {
        lock(&self.shared.faults).rules.push(fail);
    }

    /// Removes injected failures, conflicts, pauses not yet hit and the delay.
    /// From now on, answer about pods as the real Node authorizer answers node
    /// `node` (see `server::node_authorizer_denies`); `None` turns it off.
    pub fn act_as_node_authorizer(&self, node: Option<&str>) {
        *lock(&self.shared.node_authorizer) = node.map(str::to_owned);
    }

    pub fn clear_faults(&self) {
        let mut f = lock(&self.shared.faults);
        f.rules.clear();
        f.conflicts.clear();
        f.pauses.clear();
        f.delay = Duration::ZERO;
    }

    /// Delays every request by `d` before it is handled.
    pub fn set_delay(&self, d: Duration) {
        lock(&self.shared.faults).delay = d;
    }

    /// Paths of the requests that have started waiting out a [`FakeApi::set_delay`]
    /// so far: a test waits on them to know a client is stuck in a request.
    pub fn delayed_paths(&self) -> Vec<String> {
        lock(&self.shared.delayed).clone()
    }

    /// The next PUT, PATCH or DELETE of exactly `path` fails with 409 Conflict.
    pub fn conflict_next_write(&self, path: &str) {
        lock(&self.shared.faults).conflicts.push(path.to_owned());
    }

    /// Holds the next request with this verb and exactly this path (before it is
    /// handled, faults and delay aside) until the returned [`Paused`] is released or
    /// dropped, or 60 s pass: the test can change the store between a client's read
    /// and its write.
    pub fn pause_next(&self, verb: &str, path: &str) -> Paused {
        let (arrived_tx, arrived) = crossbeam_channel::bounded(1);
        let (release, release_rx) = crossbeam_channel::bounded(1);
        lock(&self.shared.faults).pauses.push(Pause {
            verb: verb.to_owned(),
            path: path.to_owned(),
            arrived: arrived_tx,
            release: release_rx,
        });
        Paused {
            arrived,
            release: Some(release),
        }
    }

    /// Closes every open watch connection now (no clean end of stream); returns how many.
    pub fn drop_watches(&self) -> usize {
        lock(&self.shared.store).drop_watches()
    }

    /// Watches being served right now.
    pub fn open_watches(&self) -> usize {
        lock(&self.shared.store).open_watches()
    }

    /// Forgets the event history: watches from any version up to now get 410 Expired.
    pub fn compact(&self) {
        lock(&self.shared.store).compact();
    }

    /// Keeps at most `n` events in the history (older versions become 410).
    pub fn set_history_limit(&self, n: usize) {
        lock(&self.shared.store).history_limit = n.max(1);
    }

    /// How often watches with bookmarks get one (default 1 s).
    pub fn set_bookmark_interval(&self, d: Duration) {
        *lock(&self.shared.bookmark_interval) = d;
    }

    /// BOOKMARK events sent so far, over all watches.
    pub fn bookmarks_sent(&self) -> u64 {
        self.shared.bookmarks_sent.load(Ordering::SeqCst)
    }

    /// Answers 401 to requests without `Authorization: Bearer <token>`.
    pub fn require_token(&self, token: Option<&str>) {
        *lock(&self.shared.required_token) = token.map(str::to_owned);
    }

    /// Tokens issued through TokenRequest (`serviceaccounts/<name>/token`), in order.
    pub fn issued_tokens(&self) -> Vec<IssuedToken> {
        lock(&self.shared.tokens).clone()
    }

    /// TokenReviews of `token` authenticate `user` with `groups`.
    pub fn add_token(&self, token: &str, user: &str, groups: &[&str]) {
        let groups = groups.iter().map(|g| g.to_string()).collect();
        lock(&self.shared.reviews)
            .tokens
            .push((token.to_owned(), user.to_owned(), groups));
    }

    /// SubjectAccessReviews allow `user` to `verb` nodes/`subresource` (`*` matches any).
    pub fn grant(&self, user: &str, verb: &str, subresource: &str) {
        lock(&self.shared.reviews).grants.push((
            user.to_owned(),
            verb.to_owned(),
            subresource.to_owned(),
        ));
    }

    /// The specs of the SubjectAccessReviews received so far.
    pub fn access_reviews(&self) -> Vec<Value> {
        lock(&self.shared.reviews).access_specs.clone()
    }

    /// Every later write to `resource`, in process and as it happens (no HTTP): for
    /// benchmarks that time when a change lands in the store.
    pub fn changes(&self, resource: &str) -> crossbeam_channel::Receiver<WatchMsg> {
        let mut store = lock(&self.shared.store);
        let now = store.resource_version();
        store
            .subscribe(store::kind(resource), None, Some(now))
            .unwrap_or_else(|f| panic!("fake api subscribe {resource}: {}", f.message))
            .rx
    }

    // ---- the request log ----

    pub fn requests(&self) -> Vec<RequestRecord> {
        lock(&self.shared.log).clone()
    }

    /// Requests with this verb and exactly this path.
    pub fn count(&self, verb: &str, path: &str) -> usize {
        lock(&self.shared.log)
            .iter()
            .filter(|r| r.verb == verb && r.path == path)
            .count()
    }

    /// Requests with this verb.
    pub fn count_verb(&self, verb: &str) -> usize {
        lock(&self.shared.log)
            .iter()
            .filter(|r| r.verb == verb)
            .count()
    }

    pub fn clear_requests(&self) {
        lock(&self.shared.log).clear();
    }
}

impl Drop for FakeApi {
    fn drop(&mut self) {
        self.shared.stopping.store(true, Ordering::SeqCst);
        lock(&self.shared.store).drop_watches();
        for (_, conn) in lock(&self.shared.conns).drain() {
            let _ = conn.shutdown(std::net::Shutdown::Both);
        }
        // Wake the accept loop so it sees `stopping`.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
        if let Some(h) = self.listener.take() {
            let _ = h.join();
        }
    }
}
