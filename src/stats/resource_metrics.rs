//! `/metrics/resource`: the Prometheus text metrics-server scrapes, with upstream's
//! names, help texts, label names (`container`, `namespace`, `pod`, in that order) and
//! millisecond sample timestamps (metrics-server uses them as the window end). Pure:
//! a [`Sample`] in, text out.
//!
//! `scrape_error` (deprecated upstream since 1.29, still served) and
//! `resource_scrape_error` are 1 when there is no sample yet or the last round had an
//! error, as upstream sets them when its summary provider fails.

use std::fmt::Write as _;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::metrics::{escape, fmt};

use super::sample::Sample;

fn millis(t: SystemTime) -> u128 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0)
}

fn head(out: &mut String, name: &str, help: &str, kind: &str) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

fn labels(pairs: &[(&str, &str)]) -> String {
    if pairs.is_empty() {
        return String::new();
    }
    let inner: Vec<String> = pairs
        .iter()
        .map(|(k, v)| format!("{k}=\"{}\"", escape(v)))
        .collect();
    format!("{{{}}}", inner.join(","))
}

/// One family: its header and its samples, skipped entirely when it has none.
fn family(
    out: &mut String,
    name: &str,
    help: &str,
    kind: &str,
    rows: &[(String, f64, Option<u128>)],
) {
    if rows.is_empty() {
        return;
    }
    head(out, name, help, kind);
    for (labels, value, ts) in rows {
        match ts {
            Some(ts) => {
                let _ = writeln!(out, "{name}{labels} {} {ts}", fmt(*value));
            }
            None => {
                let _ = writeln!(out, "{name}{labels} {}", fmt(*value));
            }
        }
    }
}

const NS_PER_S: f64 = 1e9;

/// The text for `sample` (`None`: no round has finished yet).
pub fn render(sample: Option<&Sample>) -> String {
    let mut out = String::new();
    let error = match sample {
        Some(s) if s.errors.is_empty() => 0.0,
        _ => 1.0,
    };
    if let Some(s) = sample {
        let ts = Some(millis(s.time));
        let node = &s.node.usage;
        family(
            &mut out,
            "container_cpu_usage_seconds_total",
            "[STABLE] Cumulative cpu time consumed by the container in core-seconds",
            "counter",
            &rows(
                s,
                |c| {
                    c.usage
                        .and_then(|u| u.cpu_usage_ns)
                        .map(|n| n as f64 / NS_PER_S)
                },
                ts,
            ),
        );
        family(
            &mut out,
            "container_memory_working_set_bytes",
            "[STABLE] Current working set of the container in bytes",
            "gauge",
            &rows(
                s,
                |c| c.usage.and_then(|u| u.working_set_bytes).map(|b| b as f64),
                ts,
            ),
        );
        family(
            &mut out,
            "container_start_time_seconds",
            "[STABLE] Start time of the container since unix epoch in seconds",
            "gauge",
            &rows(
                s,
                |c| {
                    c.start_time
                        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
                        .map(|d| d.as_secs_f64())
                },
                None,
            ),
        );
        let node_row = |v: Option<u64>, scale: f64| {
            v.map(|v| vec![(String::new(), v as f64 / scale, ts)])
                .unwrap_or_default()
        };
        family(
            &mut out,
            "node_cpu_usage_seconds_total",
            "[STABLE] Cumulative cpu time consumed by the node in core-seconds",
            "counter",
            &node_row(node.cpu_usage_ns, NS_PER_S),
        );
        family(
            &mut out,
            "node_memory_working_set_bytes",
            "[STABLE] Current working set of the node in bytes",
            "gauge",
            &node_row(node.working_set_bytes, 1.0),
        );
        let pod_rows = |f: &dyn Fn(&super::cgroup::CgroupUsage) -> Option<f64>| {
            s.pods
                .iter()
                .filter_map(|p| {
                    let v = f(p.usage.as_ref()?)?;
                    Some((
                        labels(&[("namespace", &p.namespace), ("pod", &p.name)]),
                        v,
                        ts,
                    ))
                })
                .collect::<Vec<_>>()
        };
        family(
            &mut out,
            "pod_cpu_usage_seconds_total",
            "[STABLE] Cumulative cpu time consumed by the pod in core-seconds",
            "counter",
            &pod_rows(&|u| u.cpu_usage_ns.map(|n| n as f64 / NS_PER_S)),
        );
        family(
            &mut out,
            "pod_memory_working_set_bytes",
            "[STABLE] Current working set of the pod in bytes",
            "gauge",
            &pod_rows(&|u| u.working_set_bytes.map(|b| b as f64)),
        );
    }
    family(
        &mut out,
        "resource_scrape_error",
        "[STABLE] 1 if there was an error while getting container metrics, 0 otherwise",
        "gauge",
        &[(String::new(), error, None)],
    );
    family(
        &mut out,
        "scrape_error",
        "[ALPHA] (Deprecated since 1.29.0) 1 if there was an error while getting container metrics, 0 otherwise",
        "gauge",
        &[(String::new(), error, None)],
    );
    out
}

/// One row per container with a value.
fn rows(
    s: &Sample,
    value: impl Fn(&super::sample::ContainerSample) -> Option<f64>,
    ts: Option<u128>,
) -> Vec<(String, f64, Option<u128>)> {
    s.pods
        .iter()
        .flat_map(|p| p.containers.iter().map(move |c| (p, c)))
        .filter_map(|(p, c)| {
            let v = value(c)?;
            Some((
                labels(&[
                    ("container", &c.name),
                    ("namespace", &p.namespace),
                    ("pod", &p.name),
                ]),
                v,
                ts,
            ))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::cgroup::CgroupUsage;
    use crate::stats::sample::{ContainerSample, NodeSample, PodSample};
    use std::time::Duration;

    fn sample() -> Sample {
        let usage = |cpu, ws| {
            Some(CgroupUsage {
                cpu_usage_ns: Some(cpu),
                working_set_bytes: Some(ws),
                memory_usage_bytes: Some(ws),
                ..Default::default()
            })
        };
        Sample {
            time: UNIX_EPOCH + Duration::from_millis(1_700_000_000_123),
            node: NodeSample {
                usage: usage(357_354_910_000, 1_073_741_824).unwrap(),
                ..Default::default()
            },
            pods: vec![PodSample {
                name: "web".into(),
                namespace: "default".into(),
                uid: "u1".into(),
                usage: usage(2_500_000_000, 4096),
                containers: vec![ContainerSample {
                    name: "main".into(),
                    id: "c1".into(),
                    start_time: Some(UNIX_EPOCH + Duration::from_secs(1_699_999_000)),
                    usage: usage(2_000_000_000, 2048),
                    ..Default::default()
                }],
                ..Default::default()
            }],
            claims: vec![],
            errors: vec![],
            pods_skipped: false,
        }
    }

    #[test]
    fn upstream_names_labels_and_timestamps() {
        let text = render(Some(&sample()));
        for line in [
            "# TYPE node_cpu_usage_seconds_total counter",
            "node_cpu_usage_seconds_total 357.35491 1700000000123",
            "node_memory_working_set_bytes 1073741824 1700000000123",
            "container_cpu_usage_seconds_total{container=\"main\",namespace=\"default\",pod=\"web\"} 2 1700000000123",
            "container_memory_working_set_bytes{container=\"main\",namespace=\"default\",pod=\"web\"} 2048 1700000000123",
            "container_start_time_seconds{container=\"main\",namespace=\"default\",pod=\"web\"} 1699999000",
            "pod_cpu_usage_seconds_total{namespace=\"default\",pod=\"web\"} 2.5 1700000000123",
            "pod_memory_working_set_bytes{namespace=\"default\",pod=\"web\"} 4096 1700000000123",
            "resource_scrape_error 0",
            "scrape_error 0",
        ] {
            assert!(text.lines().any(|l| l == line), "missing {line:?} in:\n{text}");
        }
    }

    #[test]
    fn no_sample_or_a_failed_round_is_a_scrape_error() {
        let text = render(None);
        assert!(text.contains("\nresource_scrape_error 1\n"), "{text}");
        assert!(!text.contains("node_cpu_usage_seconds_total"));
        let mut s = sample();
        s.errors.push("ListContainers: unavailable".into());
        assert!(render(Some(&s)).contains("\nscrape_error 1\n"));
    }
}
