//! `/containerLogs/{namespace}/{pod}/{container}`: finds the container instance in the
//! runtime (newest, or the one before with `previous`), opens its CRI log file and
//! streams it chunked. With `follow` it keeps sending new lines until the container
//! stops, the client goes away, litelet shuts down or `max_log_stream` passes.
//! Every request is bounded: at most `max_log_bytes` (or less with `limitBytes`), and
//! in time (`max_log_stream` with follow, `max_log_read` without), also inside one
//! read of a file that keeps growing; a log that is a symlink or not a regular file is
//! refused (the pod may own its log folder and point `0.log` at `/dev/zero`).
//! Also holds the pod and container lookups the streaming routes share.
//!
//! A follow is a loop on its connection's thread: it gives its touched stack pages
//! back before settling in (`server::settle_stack`), learns that its container
//! stopped from the PLEG's status cache (a CRI call every 5 s only when the cache does
//! not know the container), and holds no buffer between reads, so a held follow costs
//! little more than its thread and its TLS state.

use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::api::meta::parse_rfc3339_nanos;
use crate::api::pod::Pod;
use crate::cri::{pb, CriError};
use crate::runtime::gc::{container_log_file, pod_log_dir_of};
use crate::runtime::inspect;
use crate::runtime::logs::dir::is_not_regular;
use crate::runtime::logs::{LogOptions, LogReader, Pumped};
use crate::runtime::model::{ContainerState, ContainerStatus, PodRuntimeStatus};
use crate::server::http::{self, Chunked, Request, Response};
use crate::server::routes::Target;
use crate::server::transport::{Reply, Transport};
use crate::server::Shared;

/// How often a follow checks whether the container still runs, in the PLEG's
/// status cache (no runtime call).
const RUNNING_CHECK: Duration = Duration::from_secs(1);
/// How often it asks the runtime instead, when the cache does not know the
/// container (upstream's `stateCheckPeriod`).
const RUNTIME_CHECK: Duration = Duration::from_secs(5);
/// How long a follow waits for new lines (or the client) between file reads.
const FOLLOW_POLL: Duration = Duration::from_millis(200);

/// A boolean query parameter as upstream parses them; a bare `?follow` is true.
pub(super) fn bool_param(req: &Request, name: &str) -> Result<bool, Response> {
    match req.param(name) {
        None => Ok(false),
        Some("" | "1" | "t" | "T" | "true" | "TRUE" | "True") => Ok(true),
        Some("0" | "f" | "F" | "false" | "FALSE" | "False") => Ok(false),
        Some(other) => Err(Response::text(
            400,
            format!("invalid boolean {other:?} for parameter {name:?}"),
        )),
    }
}

fn int_param(req: &Request, name: &str, min: i64) -> Result<Option<i64>, Response> {
    let Some(text) = req.param(name) else {
        return Ok(None);
    };
    match text.parse::<i64>() {
        Ok(v) if v >= min => Ok(Some(v)),
        Ok(_) => Err(Response::text(
            400,
            format!("{name} must be at least {min}"),
        )),
        Err(_) => Err(Response::text(
            400,
            format!("invalid integer {text:?} for parameter {name:?}"),
        )),
    }
}

/// The log options of a request (pure apart from reading the clock for sinceSeconds).
pub fn log_options(req: &Request, now_nanos: i128) -> Result<(LogOptions, bool), Response> {
    let since_seconds = int_param(req, "sinceSeconds", 1)?;
    let since_time = match req.param("sinceTime") {
        None => None,
        Some(t) => Some(
            parse_rfc3339_nanos(t)
                .map_err(|e| Response::text(400, format!("invalid sinceTime: {e}")))?,
        ),
    };
    if since_seconds.is_some() && since_time.is_some() {
        return Err(Response::text(
            400,
            "at most one of sinceTime or sinceSeconds may be specified",
        ));
    }
    let options = LogOptions {
        tail_lines: int_param(req, "tailLines", 0)?.map(|n| n as u64),
        since_nanos: since_time
            .or(since_seconds.map(|s| now_nanos - i128::from(s) * 1_000_000_000)),
        timestamps: bool_param(req, "timestamps")?,
        limit_bytes: int_param(req, "limitBytes", 1)?.map(|n| n as u64),
        follow: bool_param(req, "follow")?,
    };
    Ok((options, bool_param(req, "previous")?))
}

/// The desired pod a target names (UID checked when given).
pub(super) fn find_pod(shared: &Shared, t: &Target) -> Result<std::sync::Arc<Pod>, Response> {
    let missing = || {
        Response::text(
            404,
            format!("pod \"{}/{}\" does not exist", t.namespace, t.pod),
        )
    };
    let pod = shared
        .ctx
        .pods
        .find(&t.namespace, &t.pod)
        .ok_or_else(missing)?;
    if t.uid.as_deref().is_some_and(|uid| uid != pod.uid()) {
        return Err(missing());
    }
    Ok(pod)
}

/// True when the pod's spec has a container (init and ephemeral included) so named.
pub(super) fn has_container(pod: &Pod, name: &str) -> bool {
    let spec = &pod.spec;
    spec.containers.iter().any(|c| c.name == name)
        || spec.init_containers.iter().any(|c| c.name == name)
        || spec
            .ephemeral_containers
            .iter()
            .any(|c| c.container.name == name)
}

pub(super) fn cri_error(err: &CriError) -> Response {
    let code = if err.is_not_found() { 404 } else { 500 };
    Response::text(code, err.to_string())
}

/// What the runtime has for the pod.
pub(super) fn runtime_status(shared: &Shared, pod: &Pod) -> Result<PodRuntimeStatus, Response> {
    inspect::pod_status(&shared.ctx.runtime, pod.uid(), pod.name(), pod.namespace())
        .map_err(|e| cri_error(&e))
}

fn log_file(shared: &Shared, pod: &Pod, c: &ContainerStatus) -> Option<PathBuf> {
    let dir = pod_log_dir_of(
        &shared.config.pod_logs_dir,
        pod.namespace(),
        pod.name(),
        pod.uid(),
    )?;
    if c.log_path.starts_with('/') {
        return Some(PathBuf::from(&c.log_path));
    }
    container_log_file(&dir, &c.log_path)
}

fn now_nanos() -> i128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as i128)
        .unwrap_or(0)
}

pub fn serve(shared: &Shared, req: &Request, t: &Target, transport: &mut Transport) -> Reply {
    match prepare(shared, req, t) {
        Ok((reader, watched, follow)) => stream(shared, transport, reader, &watched, follow),
        Err(resp) => Reply::Full(resp),
    }
}

/// The container instance a follow watches.
struct Watched {
    pod_uid: String,
    id: String,
}

#[inline(never)]
fn prepare(
    shared: &Shared,
    req: &Request,
    t: &Target,
) -> Result<(LogReader, Watched, bool), Response> {
    let (options, previous) = log_options(req, now_nanos())?;
    let pod = find_pod(shared, t)?;
    if !has_container(&pod, &t.container) {
        return Err(Response::text(
            404,
            format!(
                "container \"{}\" not found in pod \"{}/{}\"",
                t.container, t.namespace, t.pod
            ),
        ));
    }
    let status = runtime_status(shared, &pod)?;
    let mut instances = status.instances(&t.container);
    let instance = if previous {
        instances.nth(1).ok_or_else(|| {
            Response::text(
                400,
                format!(
                    "previous terminated container \"{}\" in pod \"{}\" not found",
                    t.container, t.pod
                ),
            )
        })?
    } else {
        instances.next().ok_or_else(|| {
            Response::text(
                400,
                format!(
                    "container \"{}\" in pod \"{}\" is waiting to start",
                    t.container, t.pod
                ),
            )
        })?
    };
    let path = log_file(shared, &pod, instance).ok_or_else(|| {
        Response::text(
            500,
            format!("container \"{}\" has no usable log path", t.container),
        )
    })?;
    let follow = options.follow && !previous;
    let limits = &shared.config.limits;
    let options = LogOptions {
        limit_bytes: Some(
            options
                .limit_bytes
                .map_or(limits.max_log_bytes, |n| n.min(limits.max_log_bytes)),
        ),
        follow,
        ..options
    };
    let root = &shared.config.pod_logs_dir;
    let mut reader = LogReader::open_below(root, &path, options).map_err(|e| {
        let code = if e.kind() == std::io::ErrorKind::NotFound {
            404
        } else {
            500
        };
        if is_not_regular(&e) {
            log::warn!("container logs of {}/{}: {e}", t.namespace, t.pod);
        }
        Response::text(
            code,
            format!("cannot open the log of container \"{}\": {e}", t.container),
        )
    })?;
    let budget = if follow {
        limits.max_log_stream
    } else {
        limits.max_log_read
    };
    reader.set_deadline(Instant::now() + budget);
    let watched = Watched {
        pod_uid: pod.uid().to_owned(),
        id: instance.id.clone(),
    };
    Ok((reader, watched, follow))
}

/// What the PLEG's cache says of a container: `Some(running)`, or None when it does
/// not know it (pure).
fn cached_state(status: &PodRuntimeStatus, id: &str) -> Option<bool> {
    let container = status.containers.iter().find(|c| c.id == id)?;
    Some(container.state == ContainerState::Running)
}

/// Whether the container still runs: the cache when it knows, else the runtime at
/// most every [`RUNTIME_CHECK`] (`last_asked`); `None` means "not checked now".
fn still_running(shared: &Shared, w: &Watched, last_asked: &mut Instant) -> Option<bool> {
    let cached = shared.ctx.runtime_cache.as_ref().and_then(|cache| {
        let status = cache.get(&w.pod_uid).status.ok()?;
        cached_state(&status, &w.id)
    });
    if cached.is_some() {
        return cached;
    }
    if last_asked.elapsed() < RUNTIME_CHECK {
        return None;
    }
    *last_asked = Instant::now();
    Some(running(shared, &w.id))
}

#[inline(never)]
fn running(shared: &Shared, id: &str) -> bool {
    let request = pb::ContainerStatusRequest {
        container_id: id.to_owned(),
        ..Default::default()
    };
    match shared.ctx.runtime.container_status(&request) {
        Ok(resp) => resp
            .status
            .as_ref()
            .is_some_and(|s| inspect::container_from_cri(s).state == ContainerState::Running),
        Err(err) => !err.is_not_found(),
    }
}

fn stream(
    shared: &Shared,
    transport: &mut Transport,
    mut reader: LogReader,
    w: &Watched,
    follow: bool,
) -> Reply {
    if http::start_chunked(transport, "text/plain").is_err() {
        return Reply::Streamed { close: true };
    }
    let mut last_check = Instant::now();
    let mut last_asked = Instant::now();
    let mut alive = follow && running(shared, &w.id);
    let mut settled = false;
    loop {
        match reader.pump(&mut Chunked::new(transport)) {
            Ok(Pumped::LimitReached | Pumped::TimeUp) => break,
            Ok(Pumped::CaughtUp(_)) => {}
            Err(err) => {
                log::debug!("log stream of container {} ended: {err}", w.id);
                return Reply::Streamed { close: true };
            }
        }
        if !alive || shared.stopping.load(Ordering::Relaxed) {
            break;
        }
        if !settled {
            // Caught up with the tail: from here on the loop is shallow.
            crate::server::settle_stack();
            settled = true;
        }
        if transport.client_stirred(FOLLOW_POLL) {
            // A follow client never sends; data or a hang-up means it is done.
            return Reply::Streamed { close: true };
        }
        if last_check.elapsed() >= RUNNING_CHECK {
            last_check = Instant::now();
            // One more pump after the container stopped catches its last lines.
            if let Some(running) = still_running(shared, w, &mut last_asked) {
                alive = running;
            }
        }
    }
    let ok = transport
        .write_all(b"0\r\n\r\n")
        .and_then(|()| transport.flush())
        .is_ok();
    Reply::Streamed { close: !ok }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(query: &str) -> Request {
        Request {
            method: "GET".into(),
            query: http::parse_query(query).unwrap(),
            ..Default::default()
        }
    }

    #[test]
    fn the_cache_decides_whether_a_followed_container_runs() {
        use crate::runtime::model::ContainerStatus;
        let container = |id: &str, state| ContainerStatus {
            id: id.into(),
            state,
            ..Default::default()
        };
        let status = PodRuntimeStatus {
            containers: vec![
                container("new", ContainerState::Running),
                container("old", ContainerState::Exited),
            ],
            ..Default::default()
        };
        assert_eq!(cached_state(&status, "new"), Some(true));
        assert_eq!(cached_state(&status, "old"), Some(false));
        assert_eq!(cached_state(&status, "unknown"), None, "ask the runtime");
    }

    #[test]
    fn options_table() {
        let now = 100 * 1_000_000_000;
        let (o, prev) = log_options(
            &req("follow=true&tailLines=10&timestamps=1&limitBytes=5&previous=false"),
            now,
        )
        .unwrap();
        assert!(o.follow && o.timestamps && !prev);
        assert_eq!((o.tail_lines, o.limit_bytes), (Some(10), Some(5)));
        let (o, _) = log_options(&req("sinceSeconds=10"), now).unwrap();
        assert_eq!(o.since_nanos, Some(90 * 1_000_000_000));
        let (o, _) = log_options(&req("sinceTime=1970-01-01T00:00:05Z"), now).unwrap();
        assert_eq!(o.since_nanos, Some(5 * 1_000_000_000));
        for bad in [
            "tailLines=-1",
            "tailLines=x",
            "limitBytes=0",
            "sinceSeconds=0",
            "follow=maybe",
            "sinceTime=yesterday",
            "sinceSeconds=5&sinceTime=1970-01-01T00:00:05Z",
        ] {
            let err = log_options(&req(bad), now).unwrap_err();
            assert_eq!(err.status, 400, "{bad}");
        }
    }
}
