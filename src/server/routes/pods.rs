//! `/pods` (the desired pods as a v1 PodList, with the status manager's fresher
//! statuses) and `/metrics` (the registry in `crate::metrics`, API request counts and
//! process metrics read from /proc at scrape time).

use std::fmt::Write as _;

use crate::api::meta::List;
use crate::api::pod::Pod;
use crate::api::Verb;
use crate::metrics::{self, fmt};
use crate::server::http::Response;
use crate::server::Shared;

#[inline(never)]
pub fn serve(shared: &Shared) -> Response {
    let pods = shared.ctx.pods.pods();
    let items: Vec<Pod> = pods
        .iter()
        .map(|pod| {
            let mut pod = Pod::clone(pod);
            if let Some(status) = shared
                .ctx
                .status
                .as_ref()
                .and_then(|s| s.get_pod_status(pod.uid()))
            {
                pod.status = status;
            }
            pod
        })
        .collect();
    pod_list(items)
}

/// A v1 PodList answer.
pub fn pod_list(items: Vec<Pod>) -> Response {
    let list = List {
        api_version: "v1".into(),
        kind: "PodList".into(),
        metadata: Default::default(),
        items,
    };
    match serde_json::to_vec(&list) {
        Ok(body) => Response::json(200, body),
        Err(err) => Response::text(500, format!("encode pod list: {err}")),
    }
}

#[inline(never)]
pub fn metrics(shared: &Shared) -> Response {
    let mut out = metrics::render();
    if let Some(api) = &shared.ctx.api {
        let stats = api.stats();
        out.push_str(
            "# HELP rest_client_requests_total Requests litelet sent to the API server, by verb.\n",
        );
        out.push_str("# TYPE rest_client_requests_total counter\n");
        for verb in Verb::ALL {
            let _ = writeln!(
                out,
                "rest_client_requests_total{{verb=\"{}\"}} {}",
                verb.as_str(),
                stats.count(verb)
            );
        }
    }
    process_metrics(&mut out);
    Response::new(200, "text/plain; version=0.0.4; charset=utf-8", out)
}

/// Prometheus' standard process metrics from /proc/self.
fn process_metrics(out: &mut String) {
    let page = nix::unistd::sysconf(nix::unistd::SysconfVar::PAGE_SIZE)
        .ok()
        .flatten()
        .unwrap_or(4096) as f64;
    let ticks = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .unwrap_or(100) as f64;
    let mut gauge = |name: &str, help: &str, kind: &str, v: f64| {
        let _ = writeln!(
            out,
            "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {}",
            fmt(v)
        );
    };
    if let Ok(stat) = std::fs::read_to_string("/proc/self/stat") {
        // Fields after the command name, which is in parentheses and may hold spaces.
        let fields: Vec<&str> = stat
            .rsplit_once(')')
            .map(|(_, rest)| rest.split_whitespace().collect())
            .unwrap_or_default();
        let field = |i: usize| fields.get(i).and_then(|f| f.parse::<f64>().ok());
        // utime and stime are fields 14 and 15 of stat; the slice starts at field 3.
        if let (Some(utime), Some(stime)) = (field(11), field(12)) {
            gauge(
                "process_cpu_seconds_total",
                "Total user and system CPU time spent in seconds.",
                "counter",
                (utime + stime) / ticks,
            );
        }
        if let Some(rss) = field(21) {
            gauge(
                "process_resident_memory_bytes",
                "Resident memory size in bytes.",
                "gauge",
                rss * page,
            );
        }
        if let Some(vsize) = field(20) {
            gauge(
                "process_virtual_memory_bytes",
                "Virtual memory size in bytes.",
                "gauge",
                vsize,
            );
        }
        if let Some(threads) = field(17) {
            gauge(
                "litelet_process_threads",
                "Threads of the litelet process.",
                "gauge",
                threads,
            );
        }
    }
    if let Ok(dir) = std::fs::read_dir("/proc/self/fd") {
        gauge(
            "process_open_fds",
            "Number of open file descriptors.",
            "gauge",
            dir.count() as f64,
        );
    }
}
