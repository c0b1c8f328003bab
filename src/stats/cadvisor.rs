//! `/metrics/cadvisor`: the `stats` thread's last sample in cAdvisor's Prometheus
//! names, help texts and labels, as the upstream kubelet serves them, so the
//! dashboards and alerts of kube-prometheus(-stack) work unchanged. Pure.
//!
//! One row per cgroup cAdvisor would report, each labelled `container`, `id` (the
//! cgroup path), `image`, `name` (the runtime's container ID), `namespace` and `pod`:
//! the node (`id="/"`, everything else empty), each pod cgroup (`container=""`,
//! `image=""`), each pod's sandbox (`container=""`, its ID as `name`; it carries the
//! pod's network, as cAdvisor reports network on the pause container) and each
//! container (`container=<name>`, `image=<image>`). Extra labels as cAdvisor's: `cpu`
//! (always `total`: the kubelet turns per-CPU usage off), `device`, `interface`,
//! `failure_type`/`scope`, `major`/`minor`/`operation`. CFS series only for cgroups
//! with a quota, as cAdvisor. Samples carry the sample's time in milliseconds.
//!
//! Only usage (CPU, memory, tasks, filesystems) is in every sample; the rest is
//! sampled while this path is scraped (`StatsStore::want_detail`), so the first
//! scrape after a quiet spell has fewer series. Not reported: per-CPU usage,
//! schedstat, load averages, hugetlb, NUMA, TCP/UDP states, file descriptors and
//! sockets, accelerators (the kubelet does not enable most of these either).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::{SystemTime, UNIX_EPOCH};

use super::cgroup::{CgroupDetail, CgroupUsage};
use super::fs::FsUsage;
use super::net::{MachineInfo, NetDev};
use super::sample::Sample;
use crate::metrics::{escape, fmt};

/// The labels every container series has.
#[derive(Clone, Debug, Default)]
struct Who<'a> {
    container: &'a str,
    id: &'a str,
    image: &'a str,
    name: &'a str,
    namespace: &'a str,
    pod: &'a str,
}

/// One cgroup cAdvisor would report, and what the sample knows of it.
struct Row<'a> {
    who: Who<'a>,
    usage: Option<&'a CgroupUsage>,
    detail: Option<&'a CgroupDetail>,
    network: &'a [NetDev],
    /// Filesystems by device (the node's; a container's writable layer).
    fs: Vec<(&'a str, FsUsage)>,
    start: Option<SystemTime>,
}

/// The families being written: name → (type, help, lines).
struct Out {
    families: BTreeMap<&'static str, (&'static str, &'static str, String)>,
    /// ` <ms>` appended to each sample line.
    stamp: String,
}

impl Out {
    fn put(
        &mut self,
        (name, kind, help): Family,
        who: &Who<'_>,
        extra: &[(&str, &str)],
        value: f64,
    ) {
        let mut labels: Vec<(&str, &str)> = vec![
            ("container", who.container),
            ("id", who.id),
            ("image", who.image),
            ("name", who.name),
            ("namespace", who.namespace),
            ("pod", who.pod),
        ];
        labels.extend_from_slice(extra);
        labels.sort_by_key(|(k, _)| *k);
        self.line(name, kind, help, &labels, value);
    }

    fn line(
        &mut self,
        name: &'static str,
        kind: &'static str,
        help: &'static str,
        labels: &[(&str, &str)],
        value: f64,
    ) {
        let entry = self
            .families
            .entry(name)
            .or_insert_with(|| (kind, help, String::new()));
        let pairs: Vec<String> = labels
            .iter()
            .map(|(k, v)| format!("{k}=\"{}\"", escape(v)))
            .collect();
        let _ = writeln!(
            entry.2,
            "{name}{{{}}} {}{}",
            pairs.join(","),
            fmt(value),
            self.stamp
        );
    }

    fn text(self) -> String {
        let mut out = String::new();
        for (name, (kind, help, lines)) in self.families {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
            out.push_str(&lines);
        }
        out
    }
}

/// A family: name, type, cAdvisor's help text.
type Family = (&'static str, &'static str, &'static str);

const C: &str = "counter";
const G: &str = "gauge";

const CPU_USAGE: Family = (
    "container_cpu_usage_seconds_total",
    C,
    "Cumulative cpu time consumed in seconds.",
);
const CPU_USER: Family = (
    "container_cpu_user_seconds_total",
    C,
    "Cumulative user cpu time consumed in seconds.",
);
const CPU_SYSTEM: Family = (
    "container_cpu_system_seconds_total",
    C,
    "Cumulative system cpu time consumed in seconds.",
);
const CFS_PERIODS: Family = (
    "container_cpu_cfs_periods_total",
    C,
    "Number of elapsed enforcement period intervals.",
);
const CFS_THROTTLED_PERIODS: Family = (
    "container_cpu_cfs_throttled_periods_total",
    C,
    "Number of throttled period intervals.",
);
const CFS_THROTTLED_SECONDS: Family = (
    "container_cpu_cfs_throttled_seconds_total",
    C,
    "Total time duration the container has been throttled.",
);
const MEM_USAGE: Family = (
    "container_memory_usage_bytes",
    G,
    "Current memory usage in bytes, including all memory regardless of when it was accessed",
);
const MEM_WORKING_SET: Family = (
    "container_memory_working_set_bytes",
    G,
    "Current working set in bytes.",
);
const MEM_RSS: Family = ("container_memory_rss", G, "Size of RSS in bytes.");
const MEM_CACHE: Family = (
    "container_memory_cache",
    G,
    "Number of bytes of page cache memory.",
);
const MEM_SWAP: Family = ("container_memory_swap", G, "Container swap usage in bytes.");
const MEM_MAPPED: Family = (
    "container_memory_mapped_file",
    G,
    "Size of memory mapped files in bytes.",
);
const MEM_FAILCNT: Family = (
    "container_memory_failcnt",
    C,
    "Number of memory usage hits limits",
);
const MEM_MAX_USAGE: Family = (
    "container_memory_max_usage_bytes",
    G,
    "Maximum memory usage recorded in bytes",
);
const MEM_FAILURES: Family = (
    "container_memory_failures_total",
    C,
    "Cumulative count of memory allocation failures.",
);
const OOM_EVENTS: Family = (
    "container_oom_events_total",
    C,
    "Count of out of memory events observed for the container",
);
const PROCESSES: Family = (
    "container_processes",
    G,
    "Number of processes running inside the container.",
);
const THREADS: Family = (
    "container_threads",
    G,
    "Number of threads running inside the container",
);
const THREADS_MAX: Family = (
    "container_threads_max",
    G,
    "Maximum number of threads allowed inside the container, infinity if value is zero",
);
const SPEC_CPU_PERIOD: Family = (
    "container_spec_cpu_period",
    G,
    "CPU period of the container.",
);
const SPEC_CPU_QUOTA: Family = ("container_spec_cpu_quota", G, "CPU quota of the container.");
const SPEC_CPU_SHARES: Family = (
    "container_spec_cpu_shares",
    G,
    "CPU share of the container.",
);
const SPEC_MEM_LIMIT: Family = (
    "container_spec_memory_limit_bytes",
    G,
    "Memory limit for the container.",
);
const SPEC_MEM_SWAP: Family = (
    "container_spec_memory_swap_limit_bytes",
    G,
    "Memory swap limit for the container.",
);
const SPEC_MEM_RESERVATION: Family = (
    "container_spec_memory_reservation_limit_bytes",
    G,
    "Memory reservation limit for the container.",
);
const START_TIME: Family = (
    "container_start_time_seconds",
    G,
    "Start time of the container since unix epoch in seconds.",
);
const LAST_SEEN: Family = (
    "container_last_seen",
    G,
    "Last time a container was seen by the exporter",
);
const FS_USAGE: Family = (
    "container_fs_usage_bytes",
    G,
    "Number of bytes that are consumed by the container on this filesystem.",
);
const FS_LIMIT: Family = (
    "container_fs_limit_bytes",
    G,
    "Number of bytes that can be consumed by the container on this filesystem.",
);
const FS_INODES_FREE: Family = ("container_fs_inodes_free", G, "Number of available Inodes");
const FS_INODES_TOTAL: Family = ("container_fs_inodes_total", G, "Number of Inodes");
const FS_READ_BYTES: Family = (
    "container_fs_reads_bytes_total",
    C,
    "Cumulative count of bytes read",
);
const FS_WRITE_BYTES: Family = (
    "container_fs_writes_bytes_total",
    C,
    "Cumulative count of bytes written",
);
const FS_READS: Family = (
    "container_fs_reads_total",
    C,
    "Cumulative count of reads completed",
);
const FS_WRITES: Family = (
    "container_fs_writes_total",
    C,
    "Cumulative count of writes completed",
);
const BLKIO: Family = (
    "container_blkio_device_usage_total",
    C,
    "Blkio Device bytes usage",
);
const NET: [Family; 8] = [
    (
        "container_network_receive_bytes_total",
        C,
        "Cumulative count of bytes received",
    ),
    (
        "container_network_receive_packets_total",
        C,
        "Cumulative count of packets received",
    ),
    (
        "container_network_receive_packets_dropped_total",
        C,
        "Cumulative count of packets dropped while receiving",
    ),
    (
        "container_network_receive_errors_total",
        C,
        "Cumulative count of errors encountered while receiving",
    ),
    (
        "container_network_transmit_bytes_total",
        C,
        "Cumulative count of bytes transmitted",
    ),
    (
        "container_network_transmit_packets_total",
        C,
        "Cumulative count of packets transmitted",
    ),
    (
        "container_network_transmit_packets_dropped_total",
        C,
        "Cumulative count of packets dropped while transmitting",
    ),
    (
        "container_network_transmit_errors_total",
        C,
        "Cumulative count of errors encountered while transmitting",
    ),
];

fn secs(t: SystemTime) -> f64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

fn seconds_of_ns(ns: u64) -> f64 {
    ns as f64 / 1e9
}

/// Renders the sample (none yet: only the scrape error).
pub fn render(sample: Option<&Sample>) -> String {
    let Some(sample) = sample else {
        return "# HELP container_scrape_error 1 if there was an error while getting container \
                metrics, 0 otherwise\n# TYPE container_scrape_error gauge\ncontainer_scrape_error 1\n"
            .to_owned();
    };
    let ms = sample
        .time
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0);
    let mut out = Out {
        families: BTreeMap::new(),
        stamp: format!(" {ms}"),
    };
    for row in rows(sample) {
        usage_series(&mut out, &row, sample.time);
        if let Some(detail) = row.detail {
            detail_series(&mut out, &row.who, detail, row.usage);
        }
        network_series(&mut out, &row.who, row.network);
        fs_series(&mut out, &row.who, &row.fs);
    }
    if let Some(machine) = &sample.node.machine {
        machine_series(&mut out, machine, sample.node.memory_capacity_bytes);
    }
    let mut text = out.text();
    let error = u8::from(!sample.errors.is_empty());
    let _ = writeln!(
        text,
        "# HELP container_scrape_error 1 if there was an error while getting container \
         metrics, 0 otherwise\n# TYPE container_scrape_error gauge\ncontainer_scrape_error {error}"
    );
    text
}

/// Every cgroup the sample has, as cAdvisor would list it.
fn rows(sample: &Sample) -> Vec<Row<'_>> {
    let node = &sample.node;
    let mut rows = vec![Row {
        who: Who {
            id: "/",
            ..Default::default()
        },
        usage: Some(&node.usage),
        detail: node.detail.as_ref(),
        network: &node.network,
        fs: node
            .filesystems
            .iter()
            .map(|f| (f.device.as_str(), f.usage))
            .collect(),
        start: None,
    }];
    for pod in &sample.pods {
        let of_pod = |id, name| Who {
            id,
            name,
            namespace: &pod.namespace,
            pod: &pod.name,
            ..Default::default()
        };
        if !pod.cgroup.is_empty() {
            rows.push(Row {
                who: of_pod(&pod.cgroup, ""),
                usage: pod.usage.as_ref(),
                detail: pod.detail.as_ref(),
                network: &[],
                fs: Vec::new(),
                start: pod.start_time,
            });
        }
        if let Some(sandbox) = &pod.sandbox {
            rows.push(Row {
                who: of_pod(&sandbox.cgroup, &sandbox.id),
                usage: sandbox.usage.as_ref(),
                detail: sandbox.detail.as_ref(),
                network: &sandbox.network,
                fs: Vec::new(),
                start: pod.start_time,
            });
        }
        for c in &pod.containers {
            let id = if c.cgroup.is_empty() {
                &c.id
            } else {
                &c.cgroup
            };
            rows.push(Row {
                who: Who {
                    container: &c.name,
                    image: &c.image,
                    ..of_pod(id, &c.id)
                },
                usage: c.usage.as_ref(),
                detail: c.detail.as_ref(),
                network: &[],
                fs: c
                    .rootfs
                    .map(|r| (node.imagefs_device.as_str(), r))
                    .into_iter()
                    .collect(),
                start: c.start_time,
            });
        }
    }
    rows
}

fn usage_series(out: &mut Out, row: &Row<'_>, at: SystemTime) {
    let who = &row.who;
    if let Some(u) = row.usage {
        if let Some(ns) = u.cpu_usage_ns.filter(|ns| *ns > 0) {
            out.put(CPU_USAGE, who, &[("cpu", "total")], seconds_of_ns(ns));
        }
        let gauges = [
            (MEM_USAGE, u.memory_usage_bytes),
            (MEM_WORKING_SET, u.working_set_bytes),
            (MEM_RSS, u.rss_bytes),
            (THREADS, u.pids),
        ];
        for (family, value) in gauges {
            if let Some(v) = value {
                out.put(family, who, &[], v as f64);
            }
        }
        let faults = [
            ("pgfault", u.page_faults),
            ("pgmajfault", u.major_page_faults),
        ];
        for (kind, value) in faults {
            if let Some(v) = value {
                let labels = [("failure_type", kind), ("scope", "hierarchy")];
                out.put(MEM_FAILURES, who, &labels, v as f64);
            }
        }
    }
    if let Some(start) = row.start {
        out.put(START_TIME, who, &[], secs(start).floor());
    }
    out.put(LAST_SEEN, who, &[], secs(at).floor());
}

fn detail_series(out: &mut Out, who: &Who<'_>, d: &CgroupDetail, usage: Option<&CgroupUsage>) {
    let ns = [(CPU_USER, d.cpu_user_ns), (CPU_SYSTEM, d.cpu_system_ns)];
    for (family, value) in ns {
        if let Some(v) = value {
            out.put(family, who, &[], seconds_of_ns(v));
        }
    }
    if d.spec.cpu_quota_us.is_some() {
        let cfs = [
            (CFS_PERIODS, d.cfs_periods.map(|v| v as f64)),
            (
                CFS_THROTTLED_PERIODS,
                d.cfs_throttled_periods.map(|v| v as f64),
            ),
            (CFS_THROTTLED_SECONDS, d.cfs_throttled_ns.map(seconds_of_ns)),
        ];
        for (family, value) in cfs {
            if let Some(v) = value {
                out.put(family, who, &[], v);
            }
        }
    }
    let plain = [
        (MEM_CACHE, d.memory_cache),
        (MEM_SWAP, d.memory_swap),
        (MEM_MAPPED, d.memory_mapped_file),
        (MEM_FAILCNT, d.memory_failcnt),
        (MEM_MAX_USAGE, d.memory_max_usage),
        (OOM_EVENTS, d.oom_kills),
        (PROCESSES, d.processes),
        (SPEC_CPU_PERIOD, d.spec.cpu_period_us),
        (SPEC_CPU_QUOTA, d.spec.cpu_quota_us),
        (SPEC_CPU_SHARES, d.spec.cpu_shares),
    ];
    for (family, value) in plain {
        if let Some(v) = value {
            out.put(family, who, &[], v as f64);
        }
    }
    let faults = [
        ("pgfault", d.local_pgfault),
        ("pgmajfault", d.local_pgmajfault),
    ];
    for (kind, value) in faults {
        if let Some(v) = value {
            let labels = [("failure_type", kind), ("scope", "container")];
            out.put(MEM_FAILURES, who, &labels, v as f64);
        }
    }
    if usage.is_some_and(|u| u.pids.is_some()) || d.tasks_max.is_some() {
        // Zero is "no limit", as cAdvisor reports it.
        out.put(THREADS_MAX, who, &[], d.tasks_max.unwrap_or(0) as f64);
    }
    if usage.is_some_and(|u| u.memory_usage_bytes.is_some()) {
        let limits = [
            (SPEC_MEM_LIMIT, d.spec.memory_limit),
            (SPEC_MEM_SWAP, d.spec.memory_swap_limit),
            (SPEC_MEM_RESERVATION, d.spec.memory_reservation),
        ];
        for (family, value) in limits {
            out.put(family, who, &[], value.unwrap_or(0) as f64);
        }
    }
    for io in &d.io {
        let device = [("device", io.device.as_str())];
        out.put(FS_READ_BYTES, who, &device, io.read_bytes as f64);
        out.put(FS_WRITE_BYTES, who, &device, io.write_bytes as f64);
        out.put(FS_READS, who, &device, io.reads as f64);
        out.put(FS_WRITES, who, &device, io.writes as f64);
        let (major, minor) = (io.major.to_string(), io.minor.to_string());
        for (op, bytes) in [("Read", io.read_bytes), ("Write", io.write_bytes)] {
            let labels = [
                ("device", io.device.as_str()),
                ("major", major.as_str()),
                ("minor", minor.as_str()),
                ("operation", op),
            ];
            out.put(BLKIO, who, &labels, bytes as f64);
        }
    }
}

fn network_series(out: &mut Out, who: &Who<'_>, network: &[NetDev]) {
    for dev in network {
        let values = [
            dev.rx_bytes,
            dev.rx_packets,
            dev.rx_dropped,
            dev.rx_errors,
            dev.tx_bytes,
            dev.tx_packets,
            dev.tx_dropped,
            dev.tx_errors,
        ];
        for (family, value) in NET.iter().zip(values) {
            out.put(*family, who, &[("interface", &dev.name)], value as f64);
        }
    }
}

fn fs_series(out: &mut Out, who: &Who<'_>, fs: &[(&str, FsUsage)]) {
    for (device, usage) in fs {
        let device = [("device", *device)];
        let values = [
            (FS_USAGE, usage.used_bytes),
            (FS_LIMIT, usage.capacity_bytes),
            (FS_INODES_FREE, usage.inodes_free),
            (FS_INODES_TOTAL, usage.inodes),
        ];
        for (family, value) in values {
            if let Some(v) = value {
                out.put(family, who, &device, v as f64);
            }
        }
    }
}

fn machine_series(out: &mut Out, m: &MachineInfo, memory: Option<u64>) {
    let labels = [
        ("boot_id", m.boot_id.as_str()),
        ("machine_id", m.machine_id.as_str()),
        ("system_uuid", m.system_uuid.as_str()),
    ];
    let values = [
        (
            "machine_cpu_cores",
            "Number of logical CPU cores.",
            Some(m.cores),
        ),
        (
            "machine_cpu_physical_cores",
            "Number of physical CPU cores.",
            Some(m.physical_cores),
        ),
        (
            "machine_cpu_sockets",
            "Number of CPU sockets.",
            Some(m.sockets),
        ),
        (
            "machine_memory_bytes",
            "Amount of memory installed on the machine.",
            memory,
        ),
    ];
    for (name, help, value) in values {
        if let Some(v) = value {
            out.line(name, G, help, &labels, v as f64);
        }
    }
}

#[cfg(test)]
mod tests;
