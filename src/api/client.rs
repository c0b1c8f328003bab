//! `ApiClient`: the blocking HTTP client for the Kubernetes API server.
//!
//! One ureq `Agent` (rustls, connection pool) per client and its clones; TLS with a
//! pinned CA, client-certificate or bearer-token auth, or plain `http://` (tests).
//! Every request goes through `ApiClient::send`: take a token from the shared rate
//! limiter, count the attempt, send, map failures to [`ApiError`], and retry what is
//! safe to retry:
//! - 429 and 5xx answers and transport failures, for idempotent verbs (GET, PUT,
//!   PATCH, DELETE); POST only when the connection failed before anything was sent,
//!   or on 429 (the server refused it before doing anything);
//! - with capped exponential backoff plus jitter, or the server's `Retry-After`
//!   (capped), for at most `RetryPolicy::max_retries` extra attempts.
//!
//! Any thread may call any method; clones share the pool, the rate limiter and the
//! request counters. No lock is held across a request. [`ApiClient::close_connections`]
//! tears down this pool's connections, which wakes a thread blocked reading a watch;
//! [`ApiClient::with_own_connections`] gives a thread a pool it can close alone, and
//! [`ApiClient::with_own_limit`] a rate limit of its own too (Events).
//! Every attempt's outcome goes to the clients' shared [`Reachability`]
//! ([`ApiClient::reachability`]): the first answer after an outage wakes the
//! back-off loops that wait on the API server.
//!
//! Invariant: only `src/api/` knows the wire JSON; callers get typed values.

use std::fmt;
use std::io::Read;
use std::sync::{Arc, Condvar, Mutex, RwLock};
use std::time::Duration;

use percent_encoding::utf8_percent_encode;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;
use ureq::http;
use ureq::tls::{ClientCert, PemItem, RootCerts, TlsConfig};
use ureq::RequestExt;

use crate::api::certs;
use crate::api::error::{ApiError, ClientConfigError, DecodeError, TransportError};
use crate::api::meta::{List, Status};
use crate::api::paths;
use crate::api::ratelimit::{jitter, Backoff, RateLimiter, DEFAULT_BURST, DEFAULT_QPS};
use crate::api::reachability::{Outcome, Reachability};
use crate::api::request_threads::RequestThreads;
use crate::api::stats::{RequestCounters, RequestStats, Verb};
use crate::api::watch::WatchStream;

/// Largest JSON answer read into memory (a list of every pod of a big node fits).
const MAX_BODY_BYTES: u64 = 64 * 1024 * 1024;
/// Extra time past a watch's `timeoutSeconds` before the client gives up on a
/// silent connection (the server should have ended it by then).
const WATCH_BODY_GRACE: Duration = Duration::from_secs(30);

/// When and how often failed requests are retried.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Extra attempts after the first; 0 disables retries.
    pub max_retries: u32,
    /// Delay before the first retry; doubles each time.
    pub initial_backoff: Duration,
    /// Cap of the doubling delay.
    pub max_backoff: Duration,
    /// Cap on a server's `Retry-After` (a thread never sleeps longer than this).
    pub max_retry_after: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_retries: 4,
            initial_backoff: Duration::from_millis(200),
            max_backoff: Duration::from_secs(5),
            max_retry_after: Duration::from_secs(10),
        }
    }
}

/// Everything needed to reach and authenticate to the API server; produced by
/// `kubeconfig::load` or built directly (tests).
#[derive(Clone)]
pub struct ClientConfig {
    /// `https://host:port` (or `http://` for tests), possibly with a path prefix.
    pub server: String,
    /// PEM bundle of CAs trusted for the server; `None` uses the webpki roots.
    pub ca_pem: Option<Vec<u8>>,
    /// PEM client certificate chain (with `client_key_pem`).
    pub client_cert_pem: Option<Vec<u8>>,
    /// PEM private key of the client certificate.
    pub client_key_pem: Option<Vec<u8>>,
    /// Bearer token sent as `Authorization: Bearer ...`.
    pub token: Option<String>,
    /// Accept any server certificate (insecure, as kubectl's flag of the same name).
    pub insecure_skip_tls_verify: bool,
    /// Sustained requests per second; `<= 0` disables the limit.
    pub qps: f32,
    /// Requests allowed at once above the sustained rate.
    pub burst: u32,
    /// Budget of one request, answer body included (watches excepted).
    pub timeout: Duration,
    /// Budget to connect (TCP + TLS).
    pub connect_timeout: Duration,
    pub retry: RetryPolicy,
    pub user_agent: String,
}

impl ClientConfig {
    /// Defaults for everything but the server.
    pub fn new(server: &str) -> Self {
        Self {
            server: server.to_owned(),
            ca_pem: None,
            client_cert_pem: None,
            client_key_pem: None,
            token: None,
            insecure_skip_tls_verify: false,
            qps: DEFAULT_QPS,
            burst: DEFAULT_BURST,
            timeout: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(10),
            retry: RetryPolicy::default(),
            user_agent: concat!("litelet/", env!("CARGO_PKG_VERSION")).to_owned(),
        }
    }
}

impl ClientConfig {
    /// The risks this configuration accepts, one sentence each, for a warning at
    /// start: a plain `http://` server or `insecure-skip-tls-verify`. Both stay
    /// allowed (tests and lab set-ups use them) but never silently.
    pub fn security_warnings(&self) -> Vec<String> {
        let mut risks = Vec::new();
        if self.server.trim_start().starts_with("http://") {
            risks.push(format!(
                "API server {} is plain http://: requests, the node's credentials and \
                 pod secrets travel unencrypted, and anyone on the path can read or \
                 change them",
                self.server
            ));
        }
        if self.insecure_skip_tls_verify && !self.server.trim_start().starts_with("http://") {
            risks.push(format!(
                "insecure-skip-tls-verify is set for API server {}: its certificate is \
                 not checked, so anyone on the path can impersonate it and receive the \
                 node's credentials",
                self.server
            ));
        }
        risks
    }
}

// Hand-written so the token and key never reach a log.
impl fmt::Debug for ClientConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let redacted = |o: bool| if o { "<redacted>" } else { "<none>" };
        f.debug_struct("ClientConfig")
            .field("server", &self.server)
            .field("ca_pem", &self.ca_pem.as_ref().map(|p| p.len()))
            .field(
                "client_cert_pem",
                &self.client_cert_pem.as_ref().map(|p| p.len()),
            )
            .field("client_key_pem", &redacted(self.client_key_pem.is_some()))
            .field("token", &redacted(self.token.is_some()))
            .field("insecure_skip_tls_verify", &self.insecure_skip_tls_verify)
            .field("qps", &self.qps)
            .field("burst", &self.burst)
            .field("timeout", &self.timeout)
            .field("retry", &self.retry)
            .finish_non_exhaustive()
    }
}

/// Query options of a list (`GET` of a collection).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ListOptions {
    /// e.g. `spec.nodeName=node-1`.
    pub field_selector: Option<String>,
    pub label_selector: Option<String>,
    /// `"0"` allows a cached answer; `None` asks for the latest state.
    pub resource_version: Option<String>,
    /// Page size; follow `metadata.continue` for the next page.
    pub limit: Option<u32>,
    pub continue_: Option<String>,
}

/// Query options of a watch.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WatchOptions {
    pub field_selector: Option<String>,
    pub label_selector: Option<String>,
    /// Events after this version; `None` starts with synthetic ADDED events for all
    /// current objects.
    pub resource_version: Option<String>,
    /// Ask for BOOKMARK events carrying newer resourceVersions.
    pub allow_bookmarks: bool,
    /// The server ends the watch after this long.
    pub timeout_seconds: Option<u64>,
}

/// Body encoding of a PATCH.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PatchType {
    /// RFC 7386 JSON merge patch.
    Merge,
    /// Kubernetes strategic merge patch (lists merged by key).
    StrategicMerge,
    /// RFC 6902 JSON patch (a list of operations).
    Json,
}

impl PatchType {
    pub fn content_type(self) -> &'static str {
        match self {
            PatchType::Merge => "application/merge-patch+json",
            PatchType::StrategicMerge => "application/strategic-merge-patch+json",
            PatchType::Json => "application/json-patch+json",
        }
    }
}

/// Options of a DELETE.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DeleteOptions {
    /// 0 deletes now; `None` uses the object's default.
    pub grace_period_seconds: Option<i64>,
    /// Delete only if the object still has this UID.
    pub precondition_uid: Option<String>,
    /// Delete only if the object still has this resourceVersion.
    pub precondition_resource_version: Option<String>,
}

impl DeleteOptions {
    fn to_json(&self) -> Value {
        let mut body = serde_json::json!({"kind": "DeleteOptions", "apiVersion": "v1"});
        if let Some(g) = self.grace_period_seconds {
            body["gracePeriodSeconds"] = g.into();
        }
        let mut pre = serde_json::Map::new();
        if let Some(uid) = &self.precondition_uid {
            pre.insert("uid".into(), uid.clone().into());
        }
        if let Some(rv) = &self.precondition_resource_version {
            pre.insert("resourceVersion".into(), rv.clone().into());
        }
        if !pre.is_empty() {
            body["preconditions"] = Value::Object(pre);
        }
        body
    }
}

/// Wakes retry sleeps when the client's connections are closed.
#[derive(Debug, Default)]
struct Closer {
    closed: Mutex<bool>,
    cv: Condvar,
}

impl Closer {
    fn is_closed(&self) -> bool {
        *self.closed.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn close(&self) {
        *self.closed.lock().unwrap_or_else(|e| e.into_inner()) = true;
        self.cv.notify_all();
    }

    /// Sleeps for `d`; returns false (early) when closed.
    fn sleep(&self, d: Duration) -> bool {
        let guard = self.closed.lock().unwrap_or_else(|e| e.into_inner());
        let (guard, _) = self
            .cv
            .wait_timeout_while(guard, d, |closed| !*closed)
            .unwrap_or_else(|e| e.into_inner());
        !*guard
    }
}

/// State shared by all clones, whatever their pool.
struct Shared {
    /// Server URL without a trailing slash.
    base: String,
    /// Its `host:port`, for the request metrics.
    host: String,
    authorization: Option<String>,
    /// The agent settings (TLS identity included) and their generation, bumped by
    /// [`ApiClient::set_client_certificate`]; each pool rebuilds its agent when its
    /// generation is behind.
    agent_config: RwLock<(u64, ureq::config::Config)>,
    /// What the agent settings were built from (for a new client certificate).
    client_config: ClientConfig,
    counters: RequestCounters,
    /// Whether the server answers, as every attempt of every clone saw it.
    reachability: Reachability,
    timeout: Duration,
    retry: RetryPolicy,
}

impl Shared {
    fn agent_config(&self) -> (u64, ureq::config::Config) {
        self.agent_config
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

/// One connection pool: the agent of the newest settings, and the agents of older
/// settings whose connections (a watch started before a certificate rotation) may
/// still be in use; closing the pool closes them all.
struct Pool {
    generation: u64,
    agent: ureq::Agent,
    retired: Vec<ureq::Agent>,
}

/// A client of one API server. Cheap to clone; clones share everything.
#[derive(Clone)]
pub struct ApiClient {
    pool: Arc<Mutex<Pool>>,
    closer: Arc<Closer>,
    limiter: Arc<RateLimiter>,
    shared: Arc<Shared>,
    /// When set, unary requests run on these threads (see [`RequestThreads`]).
    request_threads: Option<RequestThreads>,
}

impl fmt::Debug for ApiClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ApiClient")
            .field("server", &self.shared.base)
            .finish_non_exhaustive()
    }
}

fn invalid(why: &'static str) -> ApiError {
    ApiError::Config(ClientConfigError::Invalid(why))
}

fn bad_pem(what: &'static str) -> impl Fn(ureq::Error) -> ApiError {
    move |e| {
        ApiError::Config(ClientConfigError::Pem {
            what,
            source: Arc::new(e),
        })
    }
}

fn bad_certificate(what: &'static str) -> impl Fn(certs::CertError) -> ApiError {
    move |source| ApiError::Config(ClientConfigError::Certificate { what, source })
}

impl Pool {
    fn new(generation: u64, config: ureq::config::Config) -> Arc<Mutex<Pool>> {
        Arc::new(Mutex::new(Pool {
            generation,
            agent: ureq::Agent::new_with_config(config),
            retired: Vec::new(),
        }))
    }
}

/// How long an idle connection stays pooled for the next request. ureq's default,
/// 15 s, closes the connection of anything asked less often (a node status, a pod's
/// configMap), and a new one costs a TLS handshake with the client certificate, about
/// 5 KB on the uplink. The API server closes connections idle for 90 s; ureq checks
/// a pooled connection is still open before it reuses it.
const POOLED_CONNECTION_IDLE: Duration = Duration::from_secs(75);

/// The agent settings for `config`.
fn agent_config(config: &ClientConfig) -> Result<ureq::config::Config, ApiError> {
    // ureq's default buffers are 128 KiB each way per pooled connection; API
    // requests and response heads are far smaller (bodies stream through), and
    // litelet keeps several pools (watch, status, node, lease, events).
    Ok(ureq::Agent::config_builder()
        .http_status_as_error(false)
        .input_buffer_size(32 * 1024)
        .output_buffer_size(32 * 1024)
        .max_response_header_size(16 * 1024)
        .max_idle_age(POOLED_CONNECTION_IDLE)
        .user_agent(config.user_agent.as_str())
        .timeout_global(Some(config.timeout))
        .timeout_connect(Some(config.connect_timeout))
        .tls_config(tls_config(config)?)
        .build())
}

fn tls_config(config: &ClientConfig) -> Result<TlsConfig, ApiError> {
    let mut tls = TlsConfig::builder();
    if let Some(ca) = &config.ca_pem {
        certs::check_ca_bundle(ca).map_err(bad_certificate("CA bundle"))?;
        let mut roots = Vec::new();
        for item in ureq::tls::parse_pem(ca) {
            if let PemItem::Certificate(c) = item.map_err(bad_pem("CA bundle"))? {
                roots.push(c);
            }
        }
        if roots.is_empty() {
            return Err(invalid("CA bundle holds no certificate"));
        }
        tls = tls.root_certs(RootCerts::Specific(Arc::new(roots)));
    }
    match (&config.client_cert_pem, &config.client_key_pem) {
        (Some(cert), Some(key)) => {
            // ureq builds its rustls config on the first connection and panics there
            // on a certificate rustls refuses: check it here, where it is an error.
            certs::check_pair_pem(cert, key).map_err(bad_certificate("client certificate"))?;
            let mut chain = Vec::new();
            for item in ureq::tls::parse_pem(cert) {
                if let PemItem::Certificate(c) = item.map_err(bad_pem("client certificate"))? {
                    chain.push(c);
                }
            }
            let mut private = None;
            for item in ureq::tls::parse_pem(key) {
                if let PemItem::PrivateKey(k) = item.map_err(bad_pem("client key"))? {
                    private.get_or_insert(k);
                }
            }
            let private = private.ok_or_else(|| invalid("client key holds no private key"))?;
            if chain.is_empty() {
                return Err(invalid("client certificate holds no certificate"));
            }
            tls = tls.client_cert(Some(ClientCert::new_with_certs(&chain, private)));
        }
        (None, None) => {}
        _ => return Err(invalid("client certificate and key must be given together")),
    }
    if config.insecure_skip_tls_verify {
        tls = tls.disable_verification(true);
    }
    Ok(tls.build())
}

impl ApiClient {
    /// Builds a client; fails on a bad server URL or unusable PEM data.
    pub fn new(config: &ClientConfig) -> Result<Self, ApiError> {
        let base = config.server.trim_end_matches('/').to_owned();
        let server = |why| {
            ApiError::Config(ClientConfigError::Server {
                server: config.server.clone(),
                why,
            })
        };
        let uri: http::Uri = base.parse().map_err(|e| {
            ApiError::Config(ClientConfigError::ServerUrl {
                server: config.server.clone(),
                source: Arc::new(e),
            })
        })?;
        match uri.scheme_str() {
            Some("https") | Some("http") => {}
            _ => return Err(server("scheme must be https or http")),
        }
        if uri.host().is_none() {
            return Err(server("no host"));
        }
        let agent_config = agent_config(config)?;
        let authorization = config.token.as_ref().map(|t| format!("Bearer {t}"));
        let host = uri
            .authority()
            .map(|a| a.as_str().to_owned())
            .unwrap_or_default();
        let shared = Shared {
            host,
            base,
            authorization,
            agent_config: RwLock::new((0, agent_config.clone())),
            client_config: config.clone(),
            counters: RequestCounters::default(),
            reachability: Reachability::default(),
            timeout: config.timeout,
            retry: config.retry,
        };
        Ok(Self {
            pool: Pool::new(0, agent_config),
            closer: Arc::new(Closer::default()),
            limiter: Arc::new(RateLimiter::new(config.qps, config.burst)),
            shared: Arc::new(shared),
            request_threads: None,
        })
    }

    /// The server URL (no trailing slash).
    pub fn server(&self) -> &str {
        &self.shared.base
    }

    /// Whether the API server answers, shared by this client and all its clones
    /// (whatever their pool): subscribe to learn when an outage ends.
    pub fn reachability(&self) -> &Reachability {
        &self.shared.reachability
    }

    /// Requests made so far by this client and all its clones, per verb.
    pub fn stats(&self) -> RequestStats {
        self.shared.counters.snapshot()
    }

    /// A clone with its own connection pool (sharing limiter and counters), so that
    /// [`close_connections`](Self::close_connections) on it affects no one else.
    pub fn with_own_connections(&self) -> Self {
        let (generation, config) = self.shared.agent_config();
        Self {
            pool: Pool::new(generation, config),
            closer: Arc::new(Closer::default()),
            limiter: self.limiter.clone(),
            shared: self.shared.clone(),
            request_threads: self.request_threads.clone(),
        }
    }

    /// A clone with its own connection pool and its own rate limit (sharing the
    /// counters): for Events, which upstream limits apart from everything else.
    pub fn with_own_limit(&self, qps: f32, burst: u32) -> Self {
        Self {
            limiter: Arc::new(RateLimiter::new(qps, burst)),
            ..self.with_own_connections()
        }
    }

    /// Closes every connection of this client's pool, in use or idle: a thread blocked
    /// in a request or reading a watch gets a transport error at once. Afterwards this
    /// pool refuses requests (no retries); use it on shutdown.
    pub fn close_connections(&self) {
        self.closer.close();
        let pool = self.pool.lock().unwrap_or_else(|e| e.into_inner());
        for agent in pool.retired.iter().chain([&pool.agent]) {
            agent.clone().shutdown();
        }
    }

    /// Swaps the client certificate and key (PEM) of this client and every clone,
    /// whatever its pool (certificate rotation). Requests and watches started from
    /// now on present the new certificate; those in flight finish on their
    /// connections. Fails, changing nothing, on PEM the TLS layer cannot use.
    pub fn set_client_certificate(&self, cert_pem: &[u8], key_pem: &[u8]) -> Result<(), ApiError> {
        let mut config = self.shared.client_config.clone();
        config.client_cert_pem = Some(cert_pem.to_vec());
        config.client_key_pem = Some(key_pem.to_vec());
        let fresh = agent_config(&config)?;
        let mut current = self
            .shared
            .agent_config
            .write()
            .unwrap_or_else(|e| e.into_inner());
        *current = (current.0 + 1, fresh);
        Ok(())
    }

    /// This pool's agent, rebuilt first when the settings changed since.
    fn agent(&self) -> ureq::Agent {
        let mut pool = self.pool.lock().unwrap_or_else(|e| e.into_inner());
        let (generation, config) = self.shared.agent_config();
        if pool.generation != generation {
            let fresh = ureq::Agent::new_with_config(config);
            let old = std::mem::replace(&mut pool.agent, fresh);
            pool.retired.push(old);
            pool.generation = generation;
        }
        pool.agent.clone()
    }

    /// A clone whose unary requests (not watches) run on `threads` while the caller
    /// waits: for callers that must keep a small stack, such as pod workers.
    pub fn with_request_threads(&self, threads: &RequestThreads) -> Self {
        Self {
            request_threads: Some(threads.clone()),
            ..self.clone()
        }
    }

    /// Sends one unary request and reads its answer with `read`, on a request thread
    /// when this client has them.
    fn call<T: Send + 'static>(
        &self,
        verb: Verb,
        path: &str,
        query: Vec<(&'static str, String)>,
        body: Option<(&'static str, Vec<u8>)>,
        read: Reader<T>,
    ) -> Result<T, ApiError> {
        let Some(threads) = &self.request_threads else {
            let resp = self.send(verb, path, &query, body, Mode::Unary(read.accept))?;
            return (read.read)(resp, path);
        };
        let direct = Self {
            request_threads: None,
            ..self.clone()
        };
        let owned_path = path.to_owned();
        threads.run(path, move || {
            let resp = direct.send(verb, &owned_path, &query, body, Mode::Unary(read.accept))?;
            (read.read)(resp, &owned_path)
        })
    }

    /// GET one object.
    pub fn get<T: DeserializeOwned + Send + 'static>(&self, path: &str) -> Result<T, ApiError> {
        self.call(Verb::Get, path, Vec::new(), None, Reader::JSON)
    }

    /// GET a collection.
    pub fn list<T: DeserializeOwned + Send + 'static>(
        &self,
        path: &str,
        opts: &ListOptions,
    ) -> Result<List<T>, ApiError> {
        let mut q = Vec::new();
        push_opt(&mut q, "fieldSelector", &opts.field_selector);
        push_opt(&mut q, "labelSelector", &opts.label_selector);
        push_opt(&mut q, "resourceVersion", &opts.resource_version);
        push_opt(&mut q, "limit", &opts.limit.map(|l| l.to_string()));
        push_opt(&mut q, "continue", &opts.continue_);
        self.call(Verb::List, path, q, None, Reader::JSON)
    }

    /// POST `obj` to the collection at `path`; returns the stored object.
    pub fn create<T: Serialize + DeserializeOwned + Send + 'static>(
        &self,
        path: &str,
        obj: &T,
    ) -> Result<T, ApiError> {
        let body = encode(obj, path)?;
        let body = Some(("application/json", body));
        self.call(Verb::Create, path, Vec::new(), body, Reader::JSON)
    }

    /// PUT `obj` at `path` (optimistic concurrency through its resourceVersion).
    pub fn replace<T: Serialize + DeserializeOwned + Send + 'static>(
        &self,
        path: &str,
        obj: &T,
    ) -> Result<T, ApiError> {
        let body = encode(obj, path)?;
        let body = Some(("application/json", body));
        self.call(Verb::Update, path, Vec::new(), body, Reader::JSON)
    }

    /// PATCH the object at `path`; returns the patched object.
    pub fn patch<T: DeserializeOwned + Send + 'static>(
        &self,
        path: &str,
        patch_type: PatchType,
        patch: &Value,
    ) -> Result<T, ApiError> {
        let body = encode(patch, path)?;
        let body = Some((patch_type.content_type(), body));
        self.call(Verb::Patch, path, Vec::new(), body, Reader::JSON)
    }

    /// DELETE the object at `path`.
    pub fn delete(&self, path: &str, opts: &DeleteOptions) -> Result<(), ApiError> {
        let body = encode(&opts.to_json(), path)?;
        let body = Some(("application/json", body));
        self.call(Verb::Delete, path, Vec::new(), body, Reader::DRAIN)
    }

    /// PATCH the object at `path` when the caller needs nothing of the answer but its
    /// success (a lease renewal, a node status): the answer is asked in protobuf, as
    /// `answer` says, and dropped unread. Errors keep their HTTP status; their message
    /// is not decoded.
    pub fn patch_unread(
        &self,
        path: &str,
        patch_type: PatchType,
        patch: &Value,
        answer: Unread,
    ) -> Result<(), ApiError> {
        let body = encode(patch, path)?;
        let body = Some((patch_type.content_type(), body));
        let reader = Reader {
            accept: answer.accept(),
            read: drain,
        };
        self.call(Verb::Patch, path, Vec::new(), body, reader)
    }

    /// Starts a watch of the collection at `path`. The request itself is retried like
    /// a GET; the returned stream is not (the caller re-watches from its last version).
    pub fn watch(&self, path: &str, opts: &WatchOptions) -> Result<WatchStream, ApiError> {
        let mut q = vec![("watch", "true".to_owned())];
        push_opt(&mut q, "resourceVersion", &opts.resource_version);
        if opts.allow_bookmarks {
            q.push(("allowWatchBookmarks", "true".to_owned()));
        }
        push_opt(
            &mut q,
            "timeoutSeconds",
            &opts.timeout_seconds.map(|t| t.to_string()),
        );
        push_opt(&mut q, "fieldSelector", &opts.field_selector);
        push_opt(&mut q, "labelSelector", &opts.label_selector);
        let body_budget = opts
            .timeout_seconds
            .map(|t| Duration::from_secs(t) + WATCH_BODY_GRACE);
        let resp = self.send(Verb::Watch, path, &q, None, Mode::Watch(body_budget))?;
        Ok(WatchStream::new(resp.into_body().into_reader(), path))
    }

    /// Sends one request with retries; returns a 2xx answer or the mapped failure.
    /// A watch (`Mode::Watch`) has a body budget instead of an overall timeout.
    fn send(
        &self,
        verb: Verb,
        path: &str,
        query: &[(&str, String)],
        body: Option<(&str, Vec<u8>)>,
        mode: Mode,
    ) -> Result<http::Response<ureq::Body>, ApiError> {
        let url = format!("{}{}{}", self.shared.base, path, query_string(query));
        let policy = self.shared.retry;
        let mut backoff = Backoff::new(policy.initial_backoff, policy.max_backoff);
        let mut attempt = 0;
        loop {
            if self.closer.is_closed() {
                return Err(ApiError::Transport {
                    verb,
                    path: path.to_owned(),
                    source: TransportError::Closed,
                });
            }
            self.limiter.acquire();
            self.shared.counters.record(verb);
            if attempt > 0 {
                self.shared.counters.record_retry();
            }
            let may_retry = attempt < policy.max_retries;
            attempt += 1;
            let started = std::time::Instant::now();
            let outcome = self.send_once(verb, &url, body.as_ref(), mode);
            super::stats::observed(&super::stats::Attempt {
                method: verb.method(),
                host: &self.shared.host,
                code: outcome.as_ref().ok().map(|r| r.status().as_u16()),
                took: started.elapsed(),
            });
            self.shared.reachability.record(reached(&outcome));
            let (err, retry, retry_after) = match outcome {
                Ok(resp) if resp.status().is_success() => return Ok(resp),
                Ok(resp) => {
                    let code = resp.status().as_u16();
                    let retry_after = resp
                        .headers()
                        .get("retry-after")
                        .and_then(|v| v.to_str().ok())
                        .and_then(|v| v.trim().parse::<u64>().ok())
                        .map(Duration::from_secs);
                    let retryable = code == 429
                        || (verb.is_idempotent() && matches!(code, 500 | 502 | 503 | 504));
                    let status = match mode.accept() {
                        Accept::Json => read_status(resp),
                        // A protobuf Status is not worth a decoder: the code says enough.
                        Accept::Protobuf | Accept::MetadataProtobuf => None,
                    };
                    let err = ApiError::from_status(verb, path, code, status);
                    (err, retryable, retry_after)
                }
                Err(e) => {
                    let retryable = is_transient(&e) && (verb.is_idempotent() || before_send(&e));
                    let err = ApiError::Transport {
                        verb,
                        path: path.to_owned(),
                        source: TransportError::Http(Arc::new(e)),
                    };
                    (err, retryable, None)
                }
            };
            if !(retry && may_retry) {
                return Err(err);
            }
            let delay = match retry_after {
                Some(d) => d.min(policy.max_retry_after),
                None => jitter(backoff.next_delay()),
            };
            log::debug!("api {verb} {path}: {err}; retry {attempt} in {delay:?}");
            if !self.closer.sleep(delay) {
                return Err(err);
            }
        }
    }

    fn send_once(
        &self,
        verb: Verb,
        url: &str,
        body: Option<&(&str, Vec<u8>)>,
        mode: Mode,
    ) -> Result<http::Response<ureq::Body>, ureq::Error> {
        let mut builder = http::Request::builder()
            .method(verb.method())
            .uri(url)
            .header("accept", mode.accept().media_type());
        if let Some(auth) = &self.shared.authorization {
            builder = builder.header("authorization", auth.as_str());
        }
        match body {
            Some((content_type, bytes)) => {
                let req = builder
                    .header("content-type", *content_type)
                    .body(bytes.as_slice())?;
                self.run(req, mode)
            }
            None => {
                let req = builder.body(())?;
                self.run(req, mode)
            }
        }
    }

    fn run<S: ureq::AsSendBody>(
        &self,
        req: http::Request<S>,
        mode: Mode,
    ) -> Result<http::Response<ureq::Body>, ureq::Error> {
        let agent = self.agent();
        let with_agent = req.with_agent(&agent);
        match mode {
            Mode::Unary(_) => with_agent.run(),
            Mode::Watch(body_budget) => with_agent
                .configure()
                .timeout_global(None)
                .timeout_recv_response(Some(self.shared.timeout))
                .timeout_recv_body(body_budget)
                .build()
                .run(),
        }
    }
}

fn push_opt(q: &mut Vec<(&'static str, String)>, key: &'static str, value: &Option<String>) {
    if let Some(v) = value {
        q.push((key, v.clone()));
    }
}

fn query_string(query: &[(&str, String)]) -> String {
    if query.is_empty() {
        return String::new();
    }
    let parts: Vec<String> = query
        .iter()
        .map(|(k, v)| {
            let enc = |s| utf8_percent_encode(s, paths::QUERY_KEEPS);
            format!("{}={}", enc(k), enc(v))
        })
        .collect();
    format!("?{}", parts.join("&"))
}

fn encode<T: Serialize + ?Sized>(obj: &T, path: &str) -> Result<Vec<u8>, ApiError> {
    serde_json::to_vec(obj).map_err(|e| ApiError::Encode {
        path: path.to_owned(),
        source: Arc::new(e),
    })
}

/// Reads and drops an answer whose body says nothing we need, so the connection can
/// be reused.
/// A unary request (with the representation it asks for) or a watch (with the
/// budget of its body, no overall timeout).
#[derive(Clone, Copy, Debug)]
enum Mode {
    Unary(Accept),
    Watch(Option<Duration>),
}

impl Mode {
    fn accept(self) -> Accept {
        match self {
            Mode::Unary(accept) => accept,
            Mode::Watch(_) => Accept::Json,
        }
    }
}

/// What an unread answer is asked to be: whichever costs fewer bytes on the wire,
/// the Accept header counted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unread {
    /// The object in protobuf: for a small object (a Lease, about 0.5 KB), where the
    /// longer Accept of `Metadata` would cost more than it saves.
    Object,
    /// Its metadata alone in protobuf (a PartialObjectMetadata, about 1 KB): for a
    /// large object (a Node with its images is 5 to 20 KB as protobuf).
    Metadata,
}

impl Unread {
    fn accept(self) -> Accept {
        match self {
            Unread::Object => Accept::Protobuf,
            Unread::Metadata => Accept::MetadataProtobuf,
        }
    }
}

/// The representation asked of the API server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Accept {
    /// JSON, which litelet decodes.
    Json,
    /// Protobuf, for an answer litelet drops unread.
    Protobuf,
    /// The object's metadata in protobuf, else the object in protobuf (the API
    /// server takes the first it can give), for an answer litelet drops unread.
    MetadataProtobuf,
}

impl Accept {
    fn media_type(self) -> &'static str {
        match self {
            Accept::Json => "application/json",
            Accept::Protobuf => "application/vnd.kubernetes.protobuf",
            Accept::MetadataProtobuf => {
                "application/vnd.kubernetes.protobuf;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,\
                 application/vnd.kubernetes.protobuf"
            }
        }
    }
}

/// How a unary call reads its answer, and the representation it asks for.
struct Reader<T> {
    accept: Accept,
    read: fn(http::Response<ureq::Body>, &str) -> Result<T, ApiError>,
}

impl<T: DeserializeOwned> Reader<T> {
    const JSON: Reader<T> = Reader {
        accept: Accept::Json,
        read: read_json,
    };
}

impl Reader<()> {
    const DRAIN: Reader<()> = Reader {
        accept: Accept::Json,
        read: drain,
    };
}

fn drain(resp: http::Response<ureq::Body>, _path: &str) -> Result<(), ApiError> {
    let _ = resp
        .into_body()
        .into_with_config()
        .limit(MAX_BODY_BYTES)
        .read_to_vec();
    Ok(())
}

fn read_json<T: DeserializeOwned>(
    resp: http::Response<ureq::Body>,
    path: &str,
) -> Result<T, ApiError> {
    let decode_err = |source: DecodeError| ApiError::Decode {
        path: path.to_owned(),
        source,
    };
    let bytes = resp
        .into_body()
        .into_with_config()
        .limit(MAX_BODY_BYTES)
        .read_to_vec()
        .map_err(|e| decode_err(DecodeError::Body(Arc::new(e))))?;
    serde_json::from_slice(&bytes).map_err(|e| decode_err(DecodeError::Json(Arc::new(e))))
}

/// Reads a failure answer's `Status` object; a body that is not one becomes the message.
fn read_status(resp: http::Response<ureq::Body>) -> Option<Status> {
    let mut text = String::new();
    let _ = resp
        .into_body()
        .into_with_config()
        .limit(1024 * 1024)
        .reader()
        .read_to_string(&mut text);
    match serde_json::from_str::<Status>(&text) {
        Ok(status) if status.kind == "Status" || status.code.is_some() => Some(status),
        _ => {
            let text = text.trim();
            (!text.is_empty()).then(|| Status {
                message: Some(text.chars().take(256).collect()),
                ..Status::default()
            })
        }
    }
}

/// What an attempt showed about the way to the server: any answer but 5xx or 429
/// proves it works (a 404 is the server answering).
fn reached(outcome: &Result<http::Response<ureq::Body>, ureq::Error>) -> Outcome {
    match outcome {
        Ok(resp) if resp.status().is_server_error() || resp.status().as_u16() == 429 => {
            Outcome::Failed
        }
        Ok(_) => Outcome::Answered,
        Err(_) => Outcome::Failed,
    }
}

/// Failures that may go away by themselves (network trouble, timeouts), as opposed to
/// configuration or protocol mistakes that would fail the same way again.
fn is_transient(e: &ureq::Error) -> bool {
    matches!(
        e,
        ureq::Error::Io(_)
            | ureq::Error::Timeout(_)
            | ureq::Error::HostNotFound
            | ureq::Error::ConnectionFailed
            | ureq::Error::Protocol(_)
    )
}

/// True when the request cannot have reached the server (nothing was sent), so even
/// a POST is safe to repeat.
fn before_send(e: &ureq::Error) -> bool {
    use std::io::ErrorKind;
    match e {
        ureq::Error::HostNotFound | ureq::Error::ConnectionFailed => true,
        ureq::Error::Timeout(t) => {
            matches!(t, ureq::Timeout::Connect | ureq::Timeout::Resolve)
        }
        ureq::Error::Io(io) => matches!(
            io.kind(),
            ErrorKind::ConnectionRefused
                | ErrorKind::AddrNotAvailable
                | ErrorKind::NetworkUnreachable
                | ErrorKind::HostUnreachable
        ),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_is_encoded() {
        let q = [
            ("fieldSelector", "spec.nodeName=n 1".to_owned()),
            ("watch", "true".to_owned()),
        ];
        assert_eq!(
            query_string(&q),
            "?fieldSelector=spec.nodeName%3Dn%201&watch=true"
        );
        assert_eq!(query_string(&[]), "");
        // Unlike a path segment, a query value escapes `:` too.
        let q = [("labelSelector", "app in (a,b),t!=x:y/z~é".to_owned())];
        assert_eq!(
            query_string(&q),
            "?labelSelector=app%20in%20%28a%2Cb%29%2Ct%21%3Dx%3Ay%2Fz~%C3%A9"
        );
    }

    #[test]
    fn delete_options_json() {
        let o = DeleteOptions {
            grace_period_seconds: Some(0),
            precondition_uid: Some("u1".into()),
            precondition_resource_version: None,
        };
        assert_eq!(
            o.to_json(),
            serde_json::json!({"kind": "DeleteOptions", "apiVersion": "v1",
                "gracePeriodSeconds": 0, "preconditions": {"uid": "u1"}})
        );
        assert_eq!(
            DeleteOptions::default().to_json(),
            serde_json::json!({"kind": "DeleteOptions", "apiVersion": "v1"})
        );
    }

    #[test]
    fn bad_configs_are_refused() {
        for server in ["ftp://x", "not a url", "https://"] {
            let e = ApiClient::new(&ClientConfig::new(server)).unwrap_err();
            assert!(matches!(e, ApiError::Config(_)), "{server}: {e}");
        }
        let mut c = ClientConfig::new("https://127.0.0.1:6443");
        c.client_cert_pem = Some(b"x".to_vec());
        assert!(ApiClient::new(&c).is_err());
        c.client_cert_pem = None;
        c.ca_pem = Some(b"no pem here".to_vec());
        let e = ApiClient::new(&c).unwrap_err();
        assert_eq!(
            e.to_string(),
            "api client config: CA bundle: no PEM certificate found"
        );
        let dbg = format!(
            "{:?}",
            ClientConfig {
                token: Some("t0ken".into()),
                ..ClientConfig::new("http://x")
            }
        );
        assert!(!dbg.contains("t0ken"), "{dbg}");
    }

    #[test]
    fn closer_wakes_sleepers() {
        let c = Arc::new(Closer::default());
        assert!(c.sleep(Duration::from_millis(1)));
        let c2 = c.clone();
        let t = std::thread::spawn(move || c2.sleep(Duration::from_secs(600)));
        c.close();
        assert!(!t.join().unwrap());
        assert!(c.is_closed());
    }

    /// Remembers which thread decoded it.
    struct DecodedOn(Option<String>);

    impl<'de> serde::Deserialize<'de> for DecodedOn {
        fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            serde::de::IgnoredAny::deserialize(d)?;
            Ok(DecodedOn(std::thread::current().name().map(str::to_owned)))
        }
    }

    /// Answers `count` requests with `{}` on a local port.
    fn answer_empty_objects(count: usize) -> String {
        use std::io::{BufRead, BufReader, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        std::thread::spawn(move || {
            for stream in listener.incoming().take(count) {
                let mut stream = stream.unwrap();
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut line = String::new();
                while reader.read_line(&mut line).is_ok_and(|n| n > 2) {
                    line.clear();
                }
                let body = "{}";
                let head = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                    body.len()
                );
                stream.write_all(head.as_bytes()).unwrap();
                stream.write_all(body.as_bytes()).unwrap();
            }
        });
        url
    }

    #[test]
    fn a_client_with_request_threads_sends_and_decodes_there_and_others_do_it_in_place() {
        let client = ApiClient::new(&ClientConfig::new(&answer_empty_objects(2))).unwrap();
        let threads = RequestThreads::start("req-test", 1).unwrap();
        let here = std::thread::current().name().map(str::to_owned);

        let pooled = client
            .with_request_threads(&threads)
            .get::<DecodedOn>("/a")
            .unwrap();
        assert_eq!(pooled.0.as_deref(), Some("req-test-0"));

        let direct = client.get::<DecodedOn>("/b").unwrap();
        assert_eq!(direct.0, here);
    }
}
