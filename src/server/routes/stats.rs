//! `/stats/summary`, `/metrics/resource` and `/metrics/cadvisor`: the `stats` thread's
//! last sample rendered by `crate::stats::summary` / `resource_metrics` / `cadvisor`.
//! Nothing is measured on the request's thread. Each request keeps the sampler
//! reading pods for the next minutes; the first after a quiet spell waits for the
//! two rounds that give pods' usage and rates (about a second, [`POD_USAGE_WAIT`] at
//! most), later ones cost a lock, a clone of an `Arc` and the encoding. A cAdvisor
//! scrape also keeps the sampler reading the cgroup detail. Authorized as
//! `nodes/stats` and `nodes/metrics` (see `authz.rs`).

use std::time::{Duration, SystemTime};

use crate::server::http::Response;
use crate::server::Shared;
use crate::stats::{cadvisor, resource_metrics as rm, summary as sm};

/// The longest a request waits for the sampler to read pods after a quiet spell.
pub const POD_USAGE_WAIT: Duration = Duration::from_secs(5);

#[inline(never)]
pub fn summary(shared: &Shared) -> Response {
    let Some(store) = &shared.ctx.stats else {
        return Response::text(503, "stats are not collected on this node");
    };
    let Some(sample) = store.latest_with_pods(POD_USAGE_WAIT) else {
        // Upstream answers 500 until its providers have data; say why.
        return Response::text(503, "no usage sample yet, retry shortly");
    };
    let started = SystemTime::now()
        .checked_sub(shared.ctx.started.elapsed())
        .unwrap_or_else(SystemTime::now);
    let summary = sm::summary(&shared.config.node_name, started, &sample);
    match serde_json::to_vec(&summary) {
        Ok(body) => Response::json(200, body),
        Err(err) => Response::text(500, format!("encode stats summary: {err}")),
    }
}

#[inline(never)]
pub fn resource_metrics(shared: &Shared) -> Response {
    let sample = shared
        .ctx
        .stats
        .as_ref()
        .and_then(|s| s.latest_with_pods(POD_USAGE_WAIT));
    Response::new(
        200,
        "text/plain; version=0.0.4; charset=utf-8",
        rm::render(sample.as_deref()),
    )
}

#[inline(never)]
pub fn cadvisor_metrics(shared: &Shared) -> Response {
    let Some(store) = &shared.ctx.stats else {
        return Response::text(503, "stats are not collected on this node");
    };
    store.want_detail();
    Response::new(
        200,
        "text/plain; version=0.0.4; charset=utf-8",
        cadvisor::render(store.latest_with_pods(POD_USAGE_WAIT).as_deref()),
    )
}
