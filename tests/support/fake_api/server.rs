//! The fake API server's connections: accept loop, one thread per connection with
//! keep-alive, routing of `/api/v1/...` and `/apis/coordination.k8s.io/v1/...` paths
//! to the store, injected faults, the request log, and chunked watch streams with
//! bookmarks and timeouts.

use std::collections::HashMap;
use std::io::{BufReader, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use serde_json::{json, Value};

use super::http::{self, Request};
use super::review::{self, Reviews};
use super::selector::Selector;
use super::store::{
    self, Change, DeleteOpts, EventType, Failure, Kind, PatchRequest, Store, WatchMsg,
};
use super::token::{self, IssuedToken};
use super::{Fail, RequestRecord};

/// Injected misbehaviour.
#[derive(Default)]
pub struct Faults {
    pub rules: Vec<Fail>,
    pub delay: Duration,
    /// Paths whose next write (PUT, PATCH, DELETE) fails with 409.
    pub conflicts: Vec<String>,
    /// Requests to hold until the test releases them, each used once.
    pub pauses: Vec<Pause>,
}

/// The next request with `verb` and exactly `path` is held: `arrived` gets a message,
/// then the request waits for `release` (a message or a disconnect; 60 s at most).
pub struct Pause {
    pub verb: String,
    pub path: String,
    pub arrived: Sender<()>,
    pub release: Receiver<()>,
}

/// State shared by the accept thread, connection threads and the test.
pub struct Shared {
    pub store: Mutex<Store>,
    pub faults: Mutex<Faults>,
    pub log: Mutex<Vec<RequestRecord>>,
    pub bookmark_interval: Mutex<Duration>,
    pub required_token: Mutex<Option<String>>,
    /// Tokens issued through TokenRequest, in order.
    pub tokens: Mutex<Vec<IssuedToken>>,
    /// Known tokens and access grants of the review APIs.
    pub reviews: Mutex<Reviews>,
    pub conns: Mutex<HashMap<u64, TcpStream>>,
    pub stopping: AtomicBool,
    /// BOOKMARK events written so far, over all watches.
    pub bookmarks_sent: AtomicU64,
    /// Paths of the requests held by the delay of `FakeApi::set_delay` so far
    /// (noted as the delay starts).
    pub delayed: Mutex<Vec<String>>,
    /// Serve HTTPS with this config instead of plain HTTP.
    pub tls: Option<Arc<rustls::ServerConfig>>,
    /// Answer every request as the real Node authorizer answers node `<name>`.
    pub node_authorizer: Mutex<Option<String>>,
    next_conn: AtomicU64,
}

/// Locks a test-side mutex; a panicking test thread must not hide the original panic.
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Shared {
    pub fn new(tls: Option<Arc<rustls::ServerConfig>>) -> Self {
        Self {
            tls,
            store: Mutex::new(Store::new()),
            faults: Mutex::new(Faults::default()),
            log: Mutex::new(Vec::new()),
            bookmark_interval: Mutex::new(Duration::from_secs(1)),
            required_token: Mutex::new(None),
            tokens: Mutex::new(Vec::new()),
            reviews: Mutex::new(Reviews::default()),
            conns: Mutex::new(HashMap::new()),
            stopping: AtomicBool::new(false),
            bookmarks_sent: AtomicU64::new(0),
            delayed: Mutex::default(),
            node_authorizer: Mutex::new(None),
            next_conn: AtomicU64::new(1),
        }
    }
}

pub fn accept_loop(shared: Arc<Shared>, listener: TcpListener) {
    for conn in listener.incoming() {
        if shared.stopping.load(Ordering::SeqCst) {
            break;
        }
        let Ok(stream) = conn else { continue };
        let _ = stream.set_nodelay(true);
        let id = shared.next_conn.fetch_add(1, Ordering::SeqCst);
        if let Ok(clone) = stream.try_clone() {
            lock(&shared.conns).insert(id, clone);
        }
        let shared = shared.clone();
        let spawned = std::thread::Builder::new()
            .name("fake-api-conn".into())
            .spawn(move || {
                match shared.tls.clone() {
                    None => serve_connection(&shared, stream),
                    Some(config) => match rustls::ServerConnection::new(config) {
                        Ok(conn) => {
                            serve_connection(&shared, rustls::StreamOwned::new(conn, stream))
                        }
                        Err(_) => {
                            let _ = stream.shutdown(Shutdown::Both);
                        }
                    },
                }
                lock(&shared.conns).remove(&id);
            });
        if spawned.is_err() {
            break;
        }
    }
}

/// A served connection: plain TCP or TLS over TCP.
pub trait Conn: Read + Write {
    /// The TCP socket underneath (to cut the connection).
    fn socket(&self) -> &TcpStream;
    /// True when the client presented a certificate the server verified.
    fn client_cert(&self) -> bool;
}

impl Conn for TcpStream {
    fn socket(&self) -> &TcpStream {
        self
    }

    fn client_cert(&self) -> bool {
        false
    }
}

impl Conn for rustls::StreamOwned<rustls::ServerConnection, TcpStream> {
    fn socket(&self) -> &TcpStream {
        &self.sock
    }

    fn client_cert(&self) -> bool {
        self.conn.peer_certificates().is_some_and(|c| !c.is_empty())
    }
}

fn serve_connection(shared: &Shared, stream: impl Conn) {
    let mut reader = BufReader::new(stream);
    while let Ok(Some(req)) = http::read_request(&mut reader) {
        if shared.stopping.load(Ordering::SeqCst) {
            break;
        }
        let close = req
            .header("connection")
            .is_some_and(|v| v.eq_ignore_ascii_case("close"));
        let keep = handle(shared, req, reader.get_mut());
        if !keep || close {
            break;
        }
    }
    let _ = reader.get_ref().socket().shutdown(Shutdown::Both);
}

/// Where a request points.
struct Route {
    kind: &'static Kind,
    namespace: Option<String>,
    name: Option<String>,
    status: bool,
}

fn route(path: &str) -> Option<Route> {
    let (prefix, rest) = if let Some(r) = path.strip_prefix("/api/v1/") {
        ("/api/v1", r)
    } else if let Some(r) = path.strip_prefix("/apis/coordination.k8s.io/v1/") {
        ("/apis/coordination.k8s.io/v1", r)
    } else {
        return None;
    };
    let segs: Vec<&str> = rest.trim_end_matches('/').split('/').collect();
    let (namespace, segs) = match segs.as_slice() {
        ["namespaces", ns, tail @ ..] if !tail.is_empty() => (Some(ns.to_string()), tail.to_vec()),
        _ => (None, segs),
    };
    let (resource, name, sub) = match segs.as_slice() {
        [r] => (*r, None, None),
        [r, n] => (*r, Some(n.to_string()), None),
        [r, n, s] => (*r, Some(n.to_string()), Some(*s)),
        _ => return None,
    };
    let kind = store::kind_at(prefix, resource)?;
    let status = match sub {
        None => false,
        Some("status") if kind.has_status => true,
        Some(_) => return None,
    };
    // Namespaced objects need a namespace unless listing across all of them;
    // cluster-scoped ones never have one.
    if kind.namespaced && namespace.is_none() && name.is_some() {
        return None;
    }
    if !kind.namespaced && namespace.is_some() {
        return None;
    }
    Some(Route {
        kind,
        namespace,
        name,
        status,
    })
}

fn verb_of(req: &Request, route: Option<&Route>) -> &'static str {
    let named = route.is_some_and(|r| r.name.is_some());
    match (req.method.as_str(), named) {
        ("GET", true) => "get",
        ("GET", false) if matches!(req.query("watch"), Some("true" | "1")) => "watch",
        ("GET", false) => "list",
        ("POST", _) => "create",
        ("PUT", _) => "update",
        ("PATCH", _) => "patch",
        ("DELETE", true) => "delete",
        ("DELETE", false) => "deletecollection",
        _ => "unknown",
    }
}

enum Reply {
    Json(u16, Value, Vec<(&'static str, String)>),
    Watch(WatchPlan),
}

impl From<Failure> for Reply {
    fn from(f: Failure) -> Self {
        let mut headers = Vec::new();
        if let Some(secs) = f.retry_after {
            headers.push(("Retry-After", secs.to_string()));
        }
        Reply::Json(f.code, f.status_json(), headers)
    }
}

struct WatchPlan {
    kind: &'static Kind,
    namespace: Option<String>,
    selector: Selector,
    bookmarks: bool,
    timeout: Option<Duration>,
    subscription: Result<store::Subscription, Failure>,
}

/// Serves one request; false when the connection must close.
fn handle(shared: &Shared, req: Request, w: &mut impl Conn) -> bool {
    let route = route(&req.path);
    let verb = verb_of(&req, route.as_ref());
    let reply = decide(shared, &req, route, verb);
    let code = match &reply {
        Reply::Json(code, ..) => *code,
        Reply::Watch(_) => 200,
    };
    lock(&shared.log).push(RequestRecord {
        verb: verb.to_owned(),
        method: req.method.clone(),
        path: req.path.clone(),
        query: req.raw_query.clone(),
        status: code,
        content_type: req.header("content-type").unwrap_or("").to_owned(),
        user_agent: req.header("user-agent").unwrap_or("").to_owned(),
        authorization: req.header("authorization").map(str::to_owned),
        client_cert: w.client_cert(),
        at: Instant::now(),
        body: (!req.body.is_empty()).then(|| String::from_utf8_lossy(&req.body).into_owned()),
    });
    match reply {
        Reply::Json(code, body, headers) => {
            let bytes = serde_json::to_vec(&body).unwrap_or_default();
            http::write_response(w, code, &headers, &bytes).is_ok()
        }
        Reply::Watch(plan) => serve_watch(shared, w, plan),
    }
}

fn take_fault(shared: &Shared, verb: &str, path: &str) -> Option<Failure> {
    let mut faults = lock(&shared.faults);
    if matches!(verb, "update" | "patch" | "delete") {
        if let Some(i) = faults.conflicts.iter().position(|p| p == path) {
            faults.conflicts.remove(i);
            return Some(Failure::new(
                409,
                "Conflict",
                "Operation cannot be fulfilled: the object has been modified; please apply your changes to the latest version and try again",
            ));
        }
    }
    let i = faults.rules.iter().position(|f| f.matches(verb, path))?;
    let rule = &mut faults.rules[i];
    let mut failure = Failure::new(
        rule.code,
        match rule.code {
            429 => "TooManyRequests",
            500 => "InternalError",
            503 => "ServiceUnavailable",
            _ => "Unknown",
        },
        format!("injected failure {}", rule.code),
    );
    failure.retry_after = rule.retry_after;
    if let Some(n) = rule.times.as_mut() {
        *n -= 1;
        if *n == 0 {
            faults.rules.remove(i);
        }
    }
    Some(failure)
}

/// Holds the request while a matching pause is set (the faults lock is not held).
fn hold_if_paused(shared: &Shared, verb: &str, path: &str) {
    let pause = {
        let mut faults = lock(&shared.faults);
        let i = faults
            .pauses
            .iter()
            .position(|p| p.verb == verb && p.path == path);
        i.map(|i| faults.pauses.remove(i))
    };
    if let Some(p) = pause {
        let _ = p.arrived.send(());
        let _ = p.release.recv_timeout(Duration::from_secs(60));
    }
}

fn decide(shared: &Shared, req: &Request, route: Option<Route>, verb: &str) -> Reply {
    let delay = lock(&shared.faults).delay;
    if !delay.is_zero() {
        lock(&shared.delayed).push(req.path.clone());
        std::thread::sleep(delay);
    }
    hold_if_paused(shared, verb, &req.path);
    if let Some(token) = lock(&shared.required_token).clone() {
        if req.header("authorization") != Some(&format!("Bearer {token}")) {
            return Failure::new(401, "Unauthorized", "Unauthorized").into();
        }
    }
    if let Some((ns, sa)) = token::token_path(&req.path) {
        if let Some(f) = take_fault(shared, verb, &req.path) {
            return f.into();
        }
        return match token::serve(shared, req, &ns, &sa) {
            Ok(body) => Reply::Json(201, body, vec![]),
            Err(f) => f.into(),
        };
    }
    if review::is_review_path(&req.path) {
        if let Some(f) = take_fault(shared, verb, &req.path) {
            return f.into();
        }
    }
    if let Some(answer) = review::serve(shared, req) {
        return match answer {
            Ok(body) => Reply::Json(201, body, vec![]),
            Err(f) => f.into(),
        };
    }
    let Some(route) = route else {
        return Failure::new(
            404,
            "NotFound",
            "the server could not find the requested resource",
        )
        .into();
    };
    if let Some(f) = take_fault(shared, verb, &req.path) {
        return f.into();
    }
    if let Some(f) = node_authorizer_denies(shared, req, &route, verb) {
        return f.into();
    }
    match dispatch(shared, req, &route, verb) {
        Ok(reply) => reply,
        Err(f) => f.into(),
    }
}

/// The real Node authorizer's answer to a node about pods: lists and watches only
/// with the node's `spec.nodeName` field selector, and a named pod only while it is
/// bound to the node. A pod that is gone, or bound elsewhere, is 403, not 404: the
/// authorizer decides before the object is read. Status writes are the exception:
/// allowed for any pod, then refused (403) by NodeRestriction for another node's pod
/// and 404 for a missing one. Creates (mirror pods) pass here; NodeRestriction's
/// other checks are not modelled.
fn node_authorizer_denies(
    shared: &Shared,
    req: &Request,
    r: &Route,
    verb: &str,
) -> Option<Failure> {
    let node = lock(&shared.node_authorizer).clone()?;
    if r.kind.resource != "pods" || verb == "create" {
        return None;
    }
    let ns = r.namespace.as_deref().unwrap_or("");
    let forbidden = |what: &str| {
        let scope = if ns.is_empty() {
            "at the cluster scope".to_owned()
        } else {
            format!("in the namespace \"{ns}\"")
        };
        Failure::new(
            403,
            "Forbidden",
            format!(
                "pods{what} is forbidden: User \"system:node:{node}\" cannot {verb} resource \"pods\" in API group \"\" {scope}: no relationship found between node '{node}' and this object"
            ),
        )
    };
    match r.name.as_deref() {
        None => {
            let wanted = format!("spec.nodeName={node}");
            let selected = req
                .query("fieldSelector")
                .is_some_and(|s| s.split(',').any(|term| term == wanted));
            (!selected).then(|| forbidden(""))
        }
        Some(name) => {
            let pod = lock(&shared.store).get(r.kind, ns, name).ok();
            let bound = pod
                .as_ref()
                .is_some_and(|pod| pod["spec"]["nodeName"] == node.as_str());
            // Status writes are authorized for any pod; NodeRestriction then refuses
            // one bound elsewhere, and the store answers 404 for a missing one.
            if r.status && (pod.is_none() || bound) {
                return None;
            }
            (!bound).then(|| forbidden(&format!(" \"{name}\"")))
        }
    }
}

fn body_json(req: &Request) -> Result<Value, Failure> {
    serde_json::from_slice(&req.body)
        .map_err(|e| Failure::bad_request(format!("the body is not valid JSON: {e}")))
}

fn dispatch(shared: &Shared, req: &Request, r: &Route, verb: &str) -> Result<Reply, Failure> {
    let kind = r.kind;
    let ns = r.namespace.as_deref().unwrap_or("");
    let name = r.name.as_deref().unwrap_or("");
    match verb {
        "get" => Ok(Reply::Json(
            200,
            lock(&shared.store).get(kind, ns, name)?,
            vec![],
        )),
        "list" => {
            let selector = Selector::parse(
                kind.resource,
                req.query("fieldSelector"),
                req.query("labelSelector"),
            )
            .map_err(Failure::bad_request)?;
            let store = lock(&shared.store);
            let mut items: Vec<Value> = store
                .list(kind, r.namespace.as_deref())
                .into_iter()
                .filter(|o| selector.matches(o))
                .collect();
            let rv = store.resource_version();
            drop(store);
            // Pages: `continue` is the index of the next item.
            let start: usize = req
                .query("continue")
                .and_then(|c| c.parse().ok())
                .unwrap_or(0);
            let limit: usize = req.query("limit").and_then(|l| l.parse().ok()).unwrap_or(0);
            let mut meta = json!({"resourceVersion": rv.to_string()});
            items = items.into_iter().skip(start).collect();
            if limit > 0 && items.len() > limit {
                items.truncate(limit);
                meta["continue"] = (start + limit).to_string().into();
            }
            Ok(Reply::Json(
                200,
                json!({"kind": format!("{}List", kind.kind), "apiVersion": kind.api_version,
                       "metadata": meta, "items": items}),
                vec![],
            ))
        }
        "watch" => {
            let selector = Selector::parse(
                kind.resource,
                req.query("fieldSelector"),
                req.query("labelSelector"),
            )
            .map_err(Failure::bad_request)?;
            let since =
                match req.query("resourceVersion").filter(|v| !v.is_empty()) {
                    None => None,
                    Some(v) => Some(v.parse::<u64>().map_err(|_| {
                        Failure::bad_request(format!("invalid resourceVersion {v:?}"))
                    })?),
                };
            let timeout = req
                .query("timeoutSeconds")
                .and_then(|t| t.parse::<u64>().ok())
                .map(Duration::from_secs);
            let subscription = lock(&shared.store).subscribe(kind, r.namespace.as_deref(), since);
            Ok(Reply::Watch(WatchPlan {
                kind,
                namespace: r.namespace.clone(),
                selector,
                bookmarks: matches!(req.query("allowWatchBookmarks"), Some("true" | "1")),
                timeout,
                subscription,
            }))
        }
        "create" => {
            if r.name.is_some() {
                return Err(Failure::new(
                    405,
                    "MethodNotAllowed",
                    "POST to a named object",
                ));
            }
            let obj = lock(&shared.store).create(kind, ns, body_json(req)?)?;
            Ok(Reply::Json(201, obj, vec![]))
        }
        "update" => {
            let obj = lock(&shared.store).update(kind, ns, name, body_json(req)?, r.status)?;
            Ok(Reply::Json(200, obj, vec![]))
        }
        "patch" => {
            let ct = req.header("content-type").unwrap_or("");
            let ct = ct.split(';').next().unwrap_or("").trim();
            let patch = body_json(req)?;
            let request = PatchRequest {
                content_type: ct,
                body: &patch,
                status_only: r.status,
            };
            let obj = lock(&shared.store).patch(kind, ns, name, request)?;
            Ok(Reply::Json(200, obj, vec![]))
        }
        "delete" => {
            let mut opts = DeleteOpts::default();
            if !req.body.is_empty() {
                let body = body_json(req)?;
                opts.grace = body.get("gracePeriodSeconds").and_then(Value::as_i64);
                opts.uid = body
                    .pointer("/preconditions/uid")
                    .and_then(Value::as_str)
                    .map(str::to_owned);
                opts.resource_version = body
                    .pointer("/preconditions/resourceVersion")
                    .and_then(Value::as_str)
                    .map(str::to_owned);
            }
            if let Some(g) = req.query("gracePeriodSeconds").and_then(|g| g.parse().ok()) {
                opts.grace = Some(g);
            }
            let obj = lock(&shared.store).delete(kind, ns, name, &opts)?;
            Ok(Reply::Json(200, obj, vec![]))
        }
        _ => Err(Failure::new(
            405,
            "MethodNotAllowed",
            format!("{} is not supported here", req.method),
        )),
    }
}

/// The event a watcher with this namespace and selector sees for `c`, if any: objects
/// that start matching appear as ADDED, objects that stop matching as DELETED.
fn translate<'a>(
    c: &'a Change,
    ns: Option<&str>,
    sel: &Selector,
) -> Option<(&'static str, &'a Value)> {
    let visible = |o: &Value| {
        ns.is_none_or(|ns| o.pointer("/metadata/namespace").and_then(Value::as_str) == Some(ns))
            && sel.matches(o)
    };
    let now = visible(&c.object);
    let before = c.old.as_ref().is_some_and(visible);
    let t = match (c.type_, before, now) {
        (EventType::Added, _, true) => EventType::Added,
        (EventType::Modified, true, true) => EventType::Modified,
        (EventType::Modified, false, true) => EventType::Added,
        (EventType::Modified, true, false) => EventType::Deleted,
        (EventType::Deleted, true, _) | (EventType::Deleted, _, true) => EventType::Deleted,
        _ => return None,
    };
    Some((t.as_str(), &c.object))
}

fn event_line(type_: &str, object: &Value) -> Vec<u8> {
    let mut line =
        serde_json::to_vec(&json!({"type": type_, "object": object})).unwrap_or_default();
    line.push(b'\n');
    line
}

/// Streams a watch; false when the connection must close.
fn serve_watch<C: Conn>(shared: &Shared, w: &mut C, plan: WatchPlan) -> bool {
    if http::start_chunked(w).is_err() {
        return false;
    }
    let sub = match plan.subscription {
        Ok(s) => s,
        Err(failure) => {
            // As the real server: a 200 stream with one ERROR event, then the end.
            let ok = http::write_chunk(w, &event_line("ERROR", &failure.status_json())).is_ok()
                && http::finish_chunked(w).is_ok();
            return ok;
        }
    };
    let ns = plan.namespace.as_deref();
    let unsubscribe = |id| lock(&shared.store).unsubscribe(id);
    let mut last_rv = sub.start_rv;
    let send =
        |w: &mut C, type_: &str, obj: &Value| http::write_chunk(w, &event_line(type_, obj)).is_ok();

    for obj in &sub.initial {
        if plan.selector.matches(obj) && !send(w, "ADDED", obj) {
            unsubscribe(sub.id);
            return false;
        }
    }
    for c in &sub.backlog {
        if let Some((t, obj)) = translate(c, ns, &plan.selector) {
            if !send(w, t, obj) {
                unsubscribe(sub.id);
                return false;
            }
        }
    }
    let deadline = plan.timeout.map(|t| Instant::now() + t);
    loop {
        let interval = *lock(&shared.bookmark_interval);
        let wait = match deadline {
            Some(d) => interval.min(d.saturating_duration_since(Instant::now())),
            None => interval,
        };
        match sub.rx.recv_timeout(wait) {
            Ok(WatchMsg::Change(c)) => {
                last_rv = last_rv.max(c.rv);
                if let Some((t, obj)) = translate(&c, ns, &plan.selector) {
                    if !send(w, t, obj) {
                        unsubscribe(sub.id);
                        return false;
                    }
                }
            }
            Ok(WatchMsg::Drop) | Err(RecvTimeoutError::Disconnected) => {
                let _ = w.socket().shutdown(Shutdown::Both);
                return false;
            }
            Err(RecvTimeoutError::Timeout) => {
                if deadline.is_some_and(|d| Instant::now() >= d) {
                    unsubscribe(sub.id);
                    return http::finish_chunked(w).is_ok();
                }
                if plan.bookmarks {
                    let bookmark = json!({"kind": plan.kind.kind, "apiVersion": plan.kind.api_version,
                        "metadata": {"resourceVersion": last_rv.to_string()}});
                    if !send(w, "BOOKMARK", &bookmark) {
                        unsubscribe(sub.id);
                        return false;
                    }
                    shared.bookmarks_sent.fetch_add(1, Ordering::SeqCst);
                }
            }
        }
    }
}
