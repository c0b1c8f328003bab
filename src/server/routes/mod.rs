//! The node server's paths: [`parse`] turns a method and raw path into a [`Route`]
//! (pure; malformed paths are 400, unknown ones 404, wrong methods 405) and
//! [`dispatch`] runs its handler. Requests reach here only after authentication and
//! authorization, so error messages may name the pod the caller asked for.
//!
//! Handlers run on the connection's thread: `/pods`, `/runningpods/` (one CRI list),
//! `/metrics`, `/metrics/resource`, `/metrics/cadvisor`, `/metrics/probes`,
//! `/metrics/slis`, `/configz`,
//! `/stats/summary` and `/healthz` answer at once (usage comes from the `stats`
//! thread's last sample, never measured on request); `/containerLogs` may follow for a long time; `/exec`, `/attach` and
//! `/portForward` proxy the runtime's streaming server until either side closes.

mod container_logs;
mod healthz;
mod pods;
mod running_pods;
mod stats;
mod stream;

use crate::server::http::{percent_decode, Request, Response};
use crate::server::transport::{Reply, Transport};
use crate::server::Shared;

pub use healthz::{health_report, HealthInput};

/// A pod and container a request points at.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    pub namespace: String,
    pub pod: String,
    /// Optional pod UID (`/exec/<ns>/<pod>/<uid>/<container>`); must match.
    pub uid: Option<String>,
    /// Empty for port forwarding.
    pub container: String,
}

/// What a request asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Route {
    Healthz,
    Pods,
    /// `/runningpods/`: what the runtime runs.
    RunningPods,
    Metrics,
    /// `/metrics/resource`: usage for metrics-server.
    MetricsResource,
    /// `/metrics/cadvisor`: usage in cAdvisor's names, for Prometheus.
    MetricsCadvisor,
    /// `/metrics/slis`: the health checks as SLI series.
    MetricsSlis,
    /// `/metrics/probes`: the prober's attempt counters.
    MetricsProbes,
    /// `/stats/summary`: the stats API summary.
    StatsSummary,
    /// `/configz`: the running KubeletConfiguration.
    Configz,
    ContainerLogs(Target),
    Exec(Target),
    Attach(Target),
    PortForward(Target),
    Run(Target),
}

/// Why a path has no route.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RouteError {
    BadRequest(String),
    NotFound,
    MethodNotAllowed,
}

/// The route of `method` on `raw_path` (still percent-encoded).
pub fn parse(method: &str, raw_path: &str) -> Result<Route, RouteError> {
    let trimmed = raw_path.strip_prefix('/').unwrap_or(raw_path);
    let trimmed = trimmed.strip_suffix('/').unwrap_or(trimmed);
    let segs: Vec<String> = trimmed
        .split('/')
        .map(|s| {
            percent_decode(s)
                .ok_or_else(|| RouteError::BadRequest(format!("malformed path {raw_path:?}")))
        })
        .collect::<Result<_, _>>()?;
    let Some((head, rest)) = segs.split_first() else {
        return Err(RouteError::NotFound);
    };
    let get = matches!(method, "GET" | "HEAD");
    let stream = matches!(method, "GET" | "POST");
    let (route, allowed) = match head.as_str() {
        "healthz" if rest.is_empty() => (Route::Healthz, get),
        "pods" if rest.is_empty() => (Route::Pods, get),
        "runningpods" if rest.is_empty() => (Route::RunningPods, get),
        "metrics" if rest.is_empty() => (Route::Metrics, get),
        "metrics" if rest == ["resource"] => (Route::MetricsResource, get),
        "metrics" if rest == ["cadvisor"] => (Route::MetricsCadvisor, get),
        "metrics" if rest == ["slis"] => (Route::MetricsSlis, get),
        "metrics" if rest == ["probes"] => (Route::MetricsProbes, get),
        "stats" if rest == ["summary"] => (Route::StatsSummary, get),
        "configz" if rest.is_empty() => (Route::Configz, get),
        "containerLogs" => (Route::ContainerLogs(target(rest, true, false)?), get),
        "exec" => (Route::Exec(target(rest, true, true)?), stream),
        "attach" => (Route::Attach(target(rest, true, true)?), stream),
        "portForward" => (Route::PortForward(target(rest, false, true)?), stream),
        "run" => (Route::Run(target(rest, true, true)?), method == "POST"),
        _ => return Err(RouteError::NotFound),
    };
    if allowed {
        Ok(route)
    } else {
        Err(RouteError::MethodNotAllowed)
    }
}

/// `<ns>/<pod>[/<uid>]/<container>` (or `<ns>/<pod>[/<uid>]` without a container).
fn target(segs: &[String], container: bool, uid_allowed: bool) -> Result<Target, RouteError> {
    let bad = |why: &str| RouteError::BadRequest(why.to_owned());
    let want = usize::from(container) + 2;
    let (ns, pod, uid, name) = match segs.len() {
        n if n == want => (&segs[0], &segs[1], None, segs.get(2)),
        n if uid_allowed && n == want + 1 => (&segs[0], &segs[1], Some(&segs[2]), segs.get(3)),
        _ if container => return Err(bad("expected /<namespace>/<pod>/<container> in the path")),
        _ => return Err(bad("expected /<namespace>/<pod> in the path")),
    };
    let check = |what: &str, v: &str| {
        if v.is_empty() || v.len() > 253 || v.chars().any(|c| c.is_control() || c == '/') {
            Err(bad(&format!("malformed {what} in the path")))
        } else {
            Ok(v.to_owned())
        }
    };
    Ok(Target {
        namespace: check("namespace", ns)?,
        pod: check("pod name", pod)?,
        uid: uid.map(|u| check("pod uid", u)).transpose()?,
        container: match name {
            Some(c) => check("container name", c)?,
            None => String::new(),
        },
    })
}

/// A short, bounded label for the request metric.
pub fn path_kind(raw_path: &str) -> &'static str {
    let head = raw_path
        .trim_start_matches('/')
        .split('/')
        .next()
        .unwrap_or("");
    match head {
        "healthz" => "healthz",
        "pods" => "pods",
        "runningpods" => "runningpods",
        "metrics" => "metrics",
        "stats" => "stats",
        "configz" => "configz",
        "containerLogs" => "containerLogs",
        "exec" => "exec",
        "attach" => "attach",
        "portForward" => "portForward",
        "run" => "run",
        _ => "other",
    }
}

fn route_error(err: RouteError) -> Reply {
    Reply::Full(match err {
        RouteError::BadRequest(msg) => Response::text(400, msg),
        RouteError::NotFound => Response::text(404, "404 page not found"),
        RouteError::MethodNotAllowed => Response::text(405, "method not allowed"),
    })
}

/// `/configz`: the document the config layer rendered at start.
#[inline(never)]
fn configz(shared: &Shared) -> Response {
    match &shared.config.configz {
        Some(doc) => match serde_json::to_vec(doc.as_ref()) {
            Ok(body) => Response::json(200, body),
            Err(err) => Response::text(500, format!("encode configz: {err}")),
        },
        None => Response::text(404, "404 page not found"),
    }
}

/// The healthz port: `/healthz` only.
pub fn healthz_only(shared: &Shared, req: &Request) -> Reply {
    match parse(&req.method, &req.raw_path) {
        Ok(Route::Healthz) => Reply::Full(healthz::serve(shared, req)),
        Ok(_) => route_error(RouteError::NotFound),
        Err(err) => route_error(err),
    }
}

/// Runs the handler of an authorized request.
pub fn dispatch(
    shared: &Shared,
    req: &Request,
    transport: &mut Transport,
    buf: &mut Vec<u8>,
) -> Reply {
    let route = match parse(&req.method, &req.raw_path) {
        Ok(route) => route,
        Err(err) => return route_error(err),
    };
    match route {
        Route::Healthz => Reply::Full(healthz::serve(shared, req)),
        Route::Pods => Reply::Full(pods::serve(shared)),
        Route::RunningPods => Reply::Full(running_pods::serve(shared)),
        Route::Metrics => Reply::Full(pods::metrics(shared)),
        Route::MetricsResource => Reply::Full(stats::resource_metrics(shared)),
        Route::MetricsCadvisor => Reply::Full(stats::cadvisor_metrics(shared)),
        Route::MetricsSlis => Reply::Full(healthz::slis(shared)),
        Route::StatsSummary => Reply::Full(stats::summary(shared)),
        Route::Configz => Reply::Full(configz(shared)),
        Route::MetricsProbes => Reply::Full(match &shared.ctx.probes {
            Some(m) => Response::new(200, "text/plain; version=0.0.4; charset=utf-8", m.render()),
            None => Response::text(503, "the prober is not running"),
        }),
        Route::ContainerLogs(t) => container_logs::serve(shared, req, &t, transport),
        Route::Exec(t) => stream::exec(shared, req, &t, transport, buf),
        Route::Attach(t) => stream::attach(shared, req, &t, transport, buf),
        Route::PortForward(t) => stream::port_forward(shared, req, &t, transport, buf),
        Route::Run(t) => Reply::Full(stream::run(shared, req, &t)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(ns: &str, pod: &str, uid: Option<&str>, c: &str) -> Target {
        Target {
            namespace: ns.into(),
            pod: pod.into(),
            uid: uid.map(Into::into),
            container: c.into(),
        }
    }

    #[test]
    fn routes_table() {
        let cases: Vec<(&str, &str, Result<Route, RouteError>)> = vec![
            ("GET", "/healthz", Ok(Route::Healthz)),
            ("HEAD", "/pods/", Ok(Route::Pods)),
            ("GET", "/metrics", Ok(Route::Metrics)),
            ("GET", "/metrics/resource", Ok(Route::MetricsResource)),
            ("GET", "/stats/summary", Ok(Route::StatsSummary)),
            ("GET", "/stats/summary/", Ok(Route::StatsSummary)),
            ("GET", "/configz", Ok(Route::Configz)),
            ("GET", "/metrics/probes", Ok(Route::MetricsProbes)),
            ("GET", "/metrics/probes/", Ok(Route::MetricsProbes)),
            ("POST", "/metrics/probes", Err(RouteError::MethodNotAllowed)),
            ("POST", "/configz", Err(RouteError::MethodNotAllowed)),
            ("GET", "/configz/x", Err(RouteError::NotFound)),
            ("POST", "/stats/summary", Err(RouteError::MethodNotAllowed)),
            ("GET", "/stats", Err(RouteError::NotFound)),
            ("GET", "/metrics/cadvisor", Ok(Route::MetricsCadvisor)),
            ("GET", "/metrics/cadvisor/x", Err(RouteError::NotFound)),
            ("GET", "/metrics/slis", Ok(Route::MetricsSlis)),
            ("POST", "/pods", Err(RouteError::MethodNotAllowed)),
            (
                "GET",
                "/containerLogs/ns/p/c",
                Ok(Route::ContainerLogs(t("ns", "p", None, "c"))),
            ),
            (
                "GET",
                "/containerLogs/ns/p",
                Err(RouteError::BadRequest(
                    "expected /<namespace>/<pod>/<container> in the path".into(),
                )),
            ),
            (
                "GET",
                "/containerLogs/ns/p/u/c",
                Err(RouteError::BadRequest(
                    "expected /<namespace>/<pod>/<container> in the path".into(),
                )),
            ),
            (
                "GET",
                "/containerLogs/ns//c",
                Err(RouteError::BadRequest(
                    "malformed pod name in the path".into(),
                )),
            ),
            (
                "GET",
                "/containerLogs/ns/p/%ZZ",
                Err(RouteError::BadRequest(
                    "malformed path \"/containerLogs/ns/p/%ZZ\"".into(),
                )),
            ),
            (
                "GET",
                "/containerLogs/ns/p/a%2Fb",
                Err(RouteError::BadRequest(
                    "malformed container name in the path".into(),
                )),
            ),
            (
                "POST",
                "/exec/ns/p/c",
                Ok(Route::Exec(t("ns", "p", None, "c"))),
            ),
            (
                "GET",
                "/exec/ns/p/uid1/c",
                Ok(Route::Exec(t("ns", "p", Some("uid1"), "c"))),
            ),
            ("DELETE", "/exec/ns/p/c", Err(RouteError::MethodNotAllowed)),
            (
                "POST",
                "/attach/ns/p/c",
                Ok(Route::Attach(t("ns", "p", None, "c"))),
            ),
            (
                "GET",
                "/portForward/ns/p",
                Ok(Route::PortForward(t("ns", "p", None, ""))),
            ),
            (
                "GET",
                "/portForward/ns/p/uid",
                Ok(Route::PortForward(t("ns", "p", Some("uid"), ""))),
            ),
            (
                "POST",
                "/run/ns/p/c",
                Ok(Route::Run(t("ns", "p", None, "c"))),
            ),
            ("GET", "/run/ns/p/c", Err(RouteError::MethodNotAllowed)),
            ("GET", "/", Err(RouteError::NotFound)),
            ("GET", "/nope", Err(RouteError::NotFound)),
            ("GET", "/healthz/extra", Err(RouteError::NotFound)),
        ];
        for (method, path, want) in cases {
            assert_eq!(parse(method, path), want, "{method} {path}");
        }
    }

    #[test]
    fn metric_labels_are_bounded() {
        assert_eq!(path_kind("/containerLogs/a/b/c"), "containerLogs");
        assert_eq!(path_kind("/whatever/x"), "other");
    }
}
