//! `/pods` (the desired pods as a v1 PodList, with the status manager's fresher
//! statuses) and `/metrics` (the registry in `crate::metrics`, the volume usage of
//! mounted claims from the `stats` thread's last sample, the serving certificate's
//! time left when it rotates, and process metrics read from /proc at scrape time).
//! Go's runtime series (`go_*`) have no equivalent and are not served; threads are
//! `litelet_process_threads`.

use std::fmt::Write as _;

use crate::api::meta::List;
use crate::api::pod::Pod;
use crate::metrics::{self, fmt};
use crate::server::http::Response;
use crate::server::Shared;
use crate::stats::sample::ClaimSample;

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
    if let Some(serving) = &shared.config.serving {
        if let Some(after) = serving.not_after() {
            metrics::SERVER_CERT_TTL.set(&[], (after - unix_now()) as f64);
        }
    }
    let mut out = metrics::render();
    if let Some(sample) = shared.ctx.stats.as_ref().and_then(|s| s.latest()) {
        volume_stats(&mut out, &sample.claims);
    }
    process_metrics(&mut out);
    Response::new(200, "text/plain; version=0.0.4; charset=utf-8", out)
}

fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

/// Upstream's `kubelet_volume_stats_*` for the claims mounted on this node, by
/// `namespace` and `persistentvolumeclaim` (pure).
pub fn volume_stats(out: &mut String, claims: &[ClaimSample]) {
    type Get = fn(&ClaimSample) -> Option<u64>;
    let families: [(&str, &str, Get); 7] = [
        (
            "kubelet_volume_stats_capacity_bytes",
            "Capacity in bytes of the volume",
            |c| c.usage.capacity_bytes,
        ),
        (
            "kubelet_volume_stats_available_bytes",
            "Number of available bytes in the volume",
            |c| c.usage.available_bytes,
        ),
        (
            "kubelet_volume_stats_used_bytes",
            "Number of used bytes in the volume",
            |c| c.usage.used_bytes,
        ),
        (
            "kubelet_volume_stats_inodes",
            "Maximum number of inodes in the volume",
            |c| c.usage.inodes,
        ),
        (
            "kubelet_volume_stats_inodes_free",
            "Number of free inodes in the volume",
            |c| c.usage.inodes_free,
        ),
        (
            "kubelet_volume_stats_inodes_used",
            "Number of used inodes in the volume",
            |c| c.usage.inodes_used,
        ),
        (
            "kubelet_volume_stats_health_status_abnormal",
            "Abnormal volume health status. The count is either 1 or 0. 1 indicates the volume is unhealthy, 0 indicates volume is healthy",
            |_| Some(0),
        ),
    ];
    for (name, help, get) in families {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge");
        for claim in claims {
            if let Some(v) = get(claim) {
                let _ = writeln!(
                    out,
                    "{name}{{namespace=\"{}\",persistentvolumeclaim=\"{}\"}} {}",
                    metrics::escape(&claim.namespace),
                    metrics::escape(&claim.claim),
                    fmt(v as f64)
                );
            }
        }
    }
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
        // starttime (field 22) is in clock ticks after boot.
        if let (Some(start), Some(boot)) = (field(19), boot_time()) {
            gauge(
                "process_start_time_seconds",
                "Start time of the process since unix epoch in seconds.",
                "gauge",
                boot + start / ticks,
            );
        }
    }
    if let Ok((soft, _)) =
        nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
    {
        gauge(
            "process_max_fds",
            "Maximum number of open file descriptors.",
            "gauge",
            soft as f64,
        );
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

/// `btime` of /proc/stat: when the machine booted, in Unix seconds.
fn boot_time() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    stat.lines()
        .find_map(|l| l.strip_prefix("btime "))
        .and_then(|v| v.trim().parse().ok())
}
