//! The prober's metrics, served on the node's `/metrics/probes` as upstream's
//! kubelet does: `prober_probe_total{probe_type, result, container, pod, namespace,
//! pod_uid}` counts every attempt by its own outcome (`successful`, `failed`,
//! `unknown`; a warning counts as successful), before thresholds are applied, and
//! `prober_probe_duration_seconds{probe_type, container, pod, namespace}` times them.
//!
//! One [`ProbeMetrics`] per prober (not process-wide), shared by the `probe-timer`
//! thread, which records, and the node server, which renders. A pod's series are
//! dropped when the prober forgets the pod.

use std::sync::Arc;
use std::time::Duration;

use crate::metrics::Family;

use super::{Attempt, ProbeKind};

/// Probe latency buckets (seconds): probes time out after a few seconds at most.
const PROBE_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];
const TOTAL_LABELS: &[&str] = &[
    "probe_type",
    "result",
    "container",
    "pod",
    "namespace",
    "pod_uid",
];
const DURATION_LABELS: &[&str] = &["probe_type", "container", "pod", "namespace"];

struct Inner {
    total: Family,
    duration: Family,
}

/// The shared handle; cheap to clone.
#[derive(Clone)]
pub struct ProbeMetrics(Arc<Inner>);

impl Default for ProbeMetrics {
    fn default() -> Self {
        ProbeMetrics(Arc::new(Inner {
            total: Family::counter(
                "prober_probe_total",
                "Cumulative number of a liveness, readiness or startup probe for a container by result.",
                TOTAL_LABELS,
            ),
            duration: Family::histogram(
                "prober_probe_duration_seconds",
                "Duration in seconds for a probe response.",
                DURATION_LABELS,
                PROBE_BUCKETS,
            ),
        }))
    }
}

/// Which pod and container an attempt probed.
pub struct Probed<'a> {
    pub kind: ProbeKind,
    pub container: &'a str,
    pub pod: &'a str,
    pub namespace: &'a str,
    pub uid: &'a str,
}

/// Upstream's `result` label of one attempt.
pub fn result_label(attempt: &Attempt) -> &'static str {
    match attempt {
        Attempt::Success(_) | Attempt::Warning(_) => "successful",
        Attempt::Failure(_) => "failed",
        Attempt::Unknown(_) => "unknown",
    }
}

impl ProbeMetrics {
    /// Counts one attempt and its duration.
    pub fn record(&self, p: &Probed<'_>, attempt: &Attempt, took: Duration) {
        let kind = p.kind.as_str();
        self.0.total.inc(&[
            kind,
            result_label(attempt),
            p.container,
            p.pod,
            p.namespace,
            p.uid,
        ]);
        self.0
            .duration
            .observe_duration(&[kind, p.container, p.pod, p.namespace], took);
    }

    /// Drops the series of a pod the prober forgot.
    pub fn forget_pod(&self, pod: &str, namespace: &str, uid: &str) {
        self.0.total.forget(|v| v.get(5).is_some_and(|u| u == uid));
        self.0.duration.forget(|v| {
            v.get(2).is_some_and(|p| p == pod) && v.get(3).is_some_and(|n| n == namespace)
        });
    }

    /// The attempts counted for these labels (tests).
    pub fn total(&self, p: &Probed<'_>, result: &str) -> f64 {
        self.0.total.value(&[
            p.kind.as_str(),
            result,
            p.container,
            p.pod,
            p.namespace,
            p.uid,
        ])
    }

    /// Both families in the Prometheus text format.
    pub fn render(&self) -> String {
        let mut out = String::new();
        self.0.total.render(&mut out);
        self.0.duration.render(&mut out);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn probed<'a>(kind: ProbeKind, uid: &'a str) -> Probed<'a> {
        Probed {
            kind,
            container: "web",
            pod: "p",
            namespace: "ns",
            uid,
        }
    }

    #[test]
    fn attempts_count_by_their_own_outcome_and_forgotten_pods_disappear() {
        let m = ProbeMetrics::default();
        let r = probed(ProbeKind::Readiness, "u1");
        let ms = Duration::from_millis(3);
        m.record(&r, &Attempt::Failure("503".into()), ms);
        m.record(&r, &Attempt::Failure("503".into()), ms);
        m.record(&r, &Attempt::Success(String::new()), ms);
        m.record(&r, &Attempt::Warning("redirect".into()), ms);
        m.record(&r, &Attempt::Unknown("gone".into()), ms);
        let l = probed(ProbeKind::Liveness, "u2");
        m.record(&l, &Attempt::Success(String::new()), ms);
        assert_eq!(m.total(&r, "failed"), 2.0);
        assert_eq!(m.total(&r, "successful"), 2.0);
        assert_eq!(m.total(&r, "unknown"), 1.0);
        assert_eq!(m.total(&l, "successful"), 1.0);
        let text = m.render();
        assert!(text.contains("# TYPE prober_probe_total counter"), "{text}");
        assert!(
            text.contains(
                "prober_probe_total{probe_type=\"Readiness\",result=\"failed\",container=\"web\",pod=\"p\",namespace=\"ns\",pod_uid=\"u1\"} 2"
            ),
            "{text}"
        );
        assert!(text.contains(
            "prober_probe_duration_seconds_count{probe_type=\"Readiness\",container=\"web\",pod=\"p\",namespace=\"ns\"} 5"
        ), "{text}");

        m.forget_pod("p", "ns", "u1");
        assert_eq!(m.total(&r, "failed"), 0.0);
        assert_eq!(m.total(&l, "successful"), 1.0, "other pods stay");
    }
}
