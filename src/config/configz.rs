//! `/configz`: the running configuration as upstream's kubelet serves it,
//! `{"kubeletconfig": {...}}` with KubeletConfiguration field names, rendered once
//! from the effective [`Flags`] (after the config file was applied and flags won).
//!
//! The server does not import `config` (config is the top layer): it gets this
//! pre-rendered value through `ServerConfig::configz`. Only what litelet has is
//! shown; `readOnlyPort` is 0 because litelet never opens the read-only port.

use std::time::Duration;

use serde_json::{json, Map, Value};

use crate::node::config::{default_eviction_hard, Threshold};
use crate::server::authz::AuthorizationMode;

use super::Flags;

impl Flags {
    /// The `/configz` document for these (effective) flags.
    pub fn configz(&self) -> Value {
        let f = self;
        let mode = match f.authorization_mode {
            AuthorizationMode::AlwaysAllow => "AlwaysAllow",
            AuthorizationMode::Webhook => "Webhook",
        };
        let eviction_hard = match &f.eviction_hard {
            Some(text) => pairs(text, '<'),
            None => default_eviction_hard()
                .into_iter()
                .map(|(k, t)| (k, Value::String(threshold(&t))))
                .collect(),
        };
        let mut c = json!({
            "kind": "KubeletConfiguration",
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "address": f.address.to_string(),
            "port": f.port,
            "readOnlyPort": 0,
            "healthzBindAddress": f.healthz_bind_address.to_string(),
            "healthzPort": f.healthz_port,
            "authentication": {
                "x509": {"clientCAFile": path(&f.client_ca_file)},
                "webhook": {
                    "enabled": f.kubeconfig.is_some(),
                    "cacheTTL": go_duration(f.authentication_token_webhook_cache_ttl),
                },
                "anonymous": {"enabled": f.anonymous_auth},
            },
            "authorization": {
                "mode": mode,
                "webhook": {
                    "cacheAuthorizedTTL": go_duration(f.authorization_webhook_cache_authorized_ttl),
                    "cacheUnauthorizedTTL":
                        go_duration(f.authorization_webhook_cache_unauthorized_ttl),
                },
            },
            "tlsCertFile": path(&f.tls_cert_file),
            "tlsPrivateKeyFile": path(&f.tls_private_key_file),
            "streamingConnectionIdleTimeout": go_duration(f.streaming_connection_idle_timeout),
            "staticPodPath": path(&f.pod_manifest_path),
            "syncFrequency": go_duration(f.sync_frequency),
            "fileCheckFrequency": go_duration(f.file_check_frequency),
            "nodeStatusUpdateFrequency": go_duration(f.node_status_update_frequency),
            "nodeStatusReportFrequency": go_duration(f.node_status_report_frequency),
            "cgroupRoot": f.cgroup_root,
            "cgroupDriver": f.cgroup_driver.as_str(),
            "cgroupsPerQOS": true,
            "maxPods": f.max_pods,
            "podPidsLimit": f.pod_max_pids,
            "registerNode": f.kubeconfig.is_some(),
            "serializeImagePulls": true,
            "clusterDomain": f.cluster_domain,
            "clusterDNS": f.cluster_dns,
            "resolvConf": f.resolv_conf.display().to_string(),
            "podLogsDir": f.pod_logs_dir.display().to_string(),
        });
        let more = json!({
            "runtimeRequestTimeout": go_duration(f.runtime.runtime_request_timeout),
            "containerRuntimeEndpoint": f.runtime.container_runtime_endpoint,
            "imageGCHighThresholdPercent": f.image_gc_high_threshold,
            "imageGCLowThresholdPercent": f.image_gc_low_threshold,
            "imageMinimumGCAge": go_duration(f.minimum_image_ttl_duration),
            "kubeAPIQPS": f.kube_api_qps,
            "kubeAPIBurst": f.kube_api_burst,
            "eventRecordQPS": f.event_qps,
            "eventBurst": f.event_burst,
            "evictionHard": eviction_hard,
            "evictionPressureTransitionPeriod": go_duration(f.eviction_pressure_transition_period),
            "evictionMaxPodGracePeriod": f.eviction_max_pod_grace_period,
            "containerLogMaxSize": f.container_log_max_size,
            "containerLogMaxFiles": f.container_log_max_files,
            "containerLogMaxWorkers": f.container_log_max_workers,
            "containerLogMonitorInterval": go_duration(f.container_log_monitor_interval),
            "allowedUnsafeSysctls": f.allowed_unsafe_sysctls,
            "enforceNodeAllocatable": f.enforce_node_allocatable,
            "failSwapOn": f.fail_swap_on,
            "memorySwap": {"swapBehavior": f.memory_swap_behavior.as_str()},
            "shutdownGracePeriod": go_duration(f.shutdown.grace_period),
            "shutdownGracePeriodCriticalPods": go_duration(f.shutdown.grace_period_critical_pods),
        });
        let optional = [
            ("evictionSoft", f.eviction_soft.as_deref(), '<'),
            (
                "evictionSoftGracePeriod",
                f.eviction_soft_grace_period.as_deref(),
                '=',
            ),
            (
                "evictionMinimumReclaim",
                f.eviction_minimum_reclaim.as_deref(),
                '=',
            ),
            ("kubeReserved", f.kube_reserved.as_deref(), '='),
            ("systemReserved", f.system_reserved.as_deref(), '='),
        ];
        if let (Value::Object(map), Value::Object(more)) = (&mut c, more) {
            map.extend(more);
            // Upstream leaves both out when unset (omitempty).
            if !f.tls_cipher_suites.is_empty() {
                map.insert("tlsCipherSuites".into(), json!(f.tls_cipher_suites));
            }
            if !f.tls_min_version.is_empty() {
                map.insert("tlsMinVersion".into(), json!(f.tls_min_version));
            }
            if !f.shutdown.by_pod_priority.is_empty() {
                let rows: Vec<Value> = f
                    .shutdown
                    .by_pod_priority
                    .iter()
                    .map(|r| {
                        json!({
                            "priority": r.priority,
                            "shutdownGracePeriodSeconds": r.shutdown_grace_period_seconds,
                        })
                    })
                    .collect();
                map.insert(
                    "shutdownGracePeriodByPodPriority".into(),
                    Value::Array(rows),
                );
            }
            // Omitted when empty, as upstream's `omitempty`.
            for (name, cgroup) in [
                ("systemReservedCgroup", &f.system_reserved_cgroup),
                ("kubeReservedCgroup", &f.kube_reserved_cgroup),
            ] {
                if let Some(cgroup) = cgroup {
                    map.insert(name.to_owned(), Value::String(cgroup.clone()));
                }
            }
            for (name, text, sep) in optional {
                if let Some(text) = text {
                    map.insert(name.to_owned(), Value::Object(pairs(text, sep)));
                }
            }
        }
        json!({ "kubeletconfig": c })
    }
}

/// `a<b,c<d` (or `a=b,...`) as a JSON map; flags were checked when parsed.
fn pairs(text: &str, sep: char) -> Map<String, Value> {
    text.split(',')
        .map(str::trim)
        .filter_map(|item| item.split_once(sep))
        .map(|(k, v)| (k.trim().to_owned(), Value::String(v.trim().to_owned())))
        .collect()
}

fn threshold(t: &Threshold) -> String {
    match t {
        Threshold::Quantity(q) => q.to_string(),
        Threshold::Percentage(p) => format!("{}%", (p * 100.0).round()),
    }
}

fn path(p: &Option<std::path::PathBuf>) -> String {
    p.as_ref()
        .map(|p| p.display().to_string())
        .unwrap_or_default()
}

/// Go's `time.Duration.String()`, which upstream's `metav1.Duration` marshals to
/// (`10s`, `1m0s`, `1h0m0s`, `500ms`, `0s`).
pub fn go_duration(d: Duration) -> String {
    if d.is_zero() {
        return "0s".into();
    }
    let nanos = d.as_nanos();
    if nanos < 1_000 {
        return format!("{nanos}ns");
    }
    if nanos < 1_000_000 {
        return format!("{}µs", trim(nanos as f64 / 1e3));
    }
    if nanos < 1_000_000_000 {
        return format!("{}ms", trim(nanos as f64 / 1e6));
    }
    let secs = d.as_secs();
    let (h, m, s) = (secs / 3600, secs / 60 % 60, secs % 60);
    let frac = d.subsec_nanos();
    let s = if frac == 0 {
        s.to_string()
    } else {
        let digits = format!("{frac:09}");
        format!("{s}.{}", digits.trim_end_matches('0'))
    };
    match (h, m) {
        (0, 0) => format!("{s}s"),
        (0, m) => format!("{m}m{s}s"),
        (h, m) => format!("{h}h{m}m{s}s"),
    }
}

fn trim(x: f64) -> String {
    let s = format!("{x:.3}");
    s.trim_end_matches('0').trim_end_matches('.').to_owned()
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[test]
    fn go_duration_matches_go() {
        let cases = [
            (Duration::ZERO, "0s"),
            (Duration::from_secs(10), "10s"),
            (Duration::from_secs(60), "1m0s"),
            (Duration::from_secs(300), "5m0s"),
            (Duration::from_secs(3600), "1h0m0s"),
            (Duration::from_secs(3725), "1h2m5s"),
            (Duration::from_millis(500), "500ms"),
            (Duration::from_millis(1500), "1.5s"),
        ];
        for (d, want) in cases {
            assert_eq!(go_duration(d), want, "{d:?}");
        }
    }

    #[test]
    fn configz_shows_effective_flag_values_under_upstream_names() {
        let flags = Flags::try_parse_from([
            "litelet",
            "--max-pods=42",
            "--sync-frequency=30s",
            "--authorization-mode=AlwaysAllow",
            "--cluster-dns=10.0.0.10",
            "--eviction-hard=memory.available<300Mi,nodefs.available<7%",
            "--kube-reserved=cpu=100m,memory=64Mi",
            "--image-gc-high-threshold=90",
        ])
        .unwrap();
        let z = flags.configz();
        let c = &z["kubeletconfig"];
        assert_eq!(c["maxPods"], 42);
        assert_eq!(c["syncFrequency"], "30s");
        assert_eq!(c["authorization"]["mode"], "AlwaysAllow");
        assert_eq!(c["clusterDNS"], json!(["10.0.0.10"]));
        assert_eq!(c["evictionHard"]["memory.available"], "300Mi");
        assert_eq!(c["evictionHard"]["nodefs.available"], "7%");
        assert_eq!(c["kubeReserved"], json!({"cpu": "100m", "memory": "64Mi"}));
        assert_eq!(c["imageGCHighThresholdPercent"], 90);
        assert_eq!(c["port"], 10250);
        assert_eq!(c["cgroupDriver"], "cgroupfs");
        assert!(c.get("evictionSoft").is_none());

        let plain = Flags::try_parse_from(["litelet"]).unwrap().configz();
        let c = &plain["kubeletconfig"];
        assert_eq!(c["evictionHard"]["memory.available"], "100Mi");
        assert_eq!(c["evictionHard"]["nodefs.available"], "10%");
        assert_eq!(c["authorization"]["mode"], "Webhook");
        assert_eq!(c["evictionPressureTransitionPeriod"], "5m0s");
        assert_eq!(c["failSwapOn"], true);
        assert_eq!(c["memorySwap"]["swapBehavior"], "NoSwap");
        assert_eq!(c["shutdownGracePeriod"], "0s");
        assert!(c.get("shutdownGracePeriodByPodPriority").is_none());
    }

    #[test]
    fn configz_shows_the_node_allocatable_enforcement() {
        let plain = Flags::try_parse_from(["litelet"]).unwrap().configz();
        let c = &plain["kubeletconfig"];
        assert_eq!(c["enforceNodeAllocatable"], json!(["pods"]));
        assert!(c.get("systemReservedCgroup").is_none());
        let flags = Flags::try_parse_from([
            "litelet",
            "--enforce-node-allocatable=pods,system-reserved",
            "--system-reserved-cgroup=/system.slice",
            "--kube-reserved-cgroup=/kube.slice",
        ])
        .unwrap();
        let z = flags.configz();
        let c = &z["kubeletconfig"];
        assert_eq!(
            c["enforceNodeAllocatable"],
            json!(["pods", "system-reserved"])
        );
        assert_eq!(c["systemReservedCgroup"], "/system.slice");
        assert_eq!(c["kubeReservedCgroup"], "/kube.slice");
    }

    #[test]
    fn configz_shows_the_shutdown_and_swap_settings() {
        use crate::nodeshutdown::PriorityPeriod;
        let mut flags = Flags::try_parse_from(["litelet", "--fail-swap-on=false"]).unwrap();
        flags.memory_swap_behavior = crate::runtime::swap::SwapBehavior::LimitedSwap;
        flags.shutdown.by_pod_priority = vec![PriorityPeriod {
            priority: 10,
            shutdown_grace_period_seconds: 20,
        }];
        let z = flags.configz();
        let c = &z["kubeletconfig"];
        assert_eq!(c["failSwapOn"], false);
        assert_eq!(c["memorySwap"]["swapBehavior"], "LimitedSwap");
        assert_eq!(
            c["shutdownGracePeriodByPodPriority"],
            json!([{"priority": 10, "shutdownGracePeriodSeconds": 20}])
        );
    }
}
