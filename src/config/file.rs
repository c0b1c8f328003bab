//! The `--config` file: a `KubeletConfiguration` (`kubelet.config.k8s.io/v1beta1`) in
//! YAML or JSON, read once at start-up on the main thread before any other thread runs.
//!
//! [`parse`] turns the text into a [`KubeletConfiguration`] of optional values, one per
//! upstream field litelet implements, under the upstream field names. It is strict: a
//! field that upstream's KubeletConfiguration has but litelet does not implement, a
//! field that is no KubeletConfiguration field at all (a typo), a value of the wrong
//! type and a bad value are all reported together in one [`ConfigFileError::Invalid`],
//! each problem naming its field, and nothing starts. A null value counts as absent.
//!
//! [`KubeletConfiguration::apply`] writes the values into [`Flags`] for every flag the
//! command line did not set explicitly, so flags override the file and the rest of
//! litelet reads only `Flags`. Invariant: every `Flags` id named here is a real clap
//! argument id (checked by a test).

use std::collections::BTreeMap;
use std::fmt;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_yaml_ng::{Mapping, Value};

use super::{parse_duration, Flags};
use crate::node::config as node;
use crate::server::authz::AuthorizationMode;

/// The only `apiVersion` litelet reads.
pub const API_VERSION: &str = "kubelet.config.k8s.io/v1beta1";
/// The only `kind` litelet reads.
pub const KIND: &str = "KubeletConfiguration";

/// Why the config file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigFileError {
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("config file {path} is not valid YAML: {source}")]
    Syntax {
        path: PathBuf,
        source: serde_yaml_ng::Error,
    },
    #[error("config file {path}: {}", problems_text(problems))]
    Invalid {
        path: PathBuf,
        problems: Vec<Problem>,
    },
}

/// One thing wrong with one field of the config file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The field's path with upstream names, e.g. `authentication.webhook.enabled`.
    pub field: String,
    pub kind: ProblemKind,
}

/// The kinds of [`Problem`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProblemKind {
    /// An upstream KubeletConfiguration field that litelet does not implement.
    Unsupported,
    /// Not a KubeletConfiguration field (a typo, or another kind's field).
    Unknown,
    /// A supported field with a value of the wrong type or out of range.
    BadValue(String),
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            ProblemKind::Unsupported => write!(f, "{}: not supported by litelet", self.field),
            ProblemKind::Unknown => write!(
                f,
                "{}: unknown field (not in KubeletConfiguration {API_VERSION})",
                self.field
            ),
            ProblemKind::BadValue(why) => write!(f, "{}: {why}", self.field),
        }
    }
}

fn problems_text(problems: &[Problem]) -> String {
    let list: Vec<String> = problems.iter().map(Problem::to_string).collect();
    list.join("; ")
}

/// The supported fields of a KubeletConfiguration; `None` = absent from the file.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct KubeletConfiguration {
    pub static_pod_path: Option<PathBuf>,
    pub sync_frequency: Option<Duration>,
    pub file_check_frequency: Option<Duration>,
    pub address: Option<IpAddr>,
    pub port: Option<u16>,
    pub healthz_port: Option<u16>,
    pub healthz_bind_address: Option<IpAddr>,
    pub tls_cert_file: Option<PathBuf>,
    pub tls_private_key_file: Option<PathBuf>,
    pub tls_cipher_suites: Option<Vec<String>>,
    pub tls_min_version: Option<String>,
    /// Zero is upstream's "not set" (4h), as for the other defaulted durations.
    pub streaming_connection_idle_timeout: Option<Duration>,
    /// `authentication.x509.clientCAFile`.
    pub client_ca_file: Option<PathBuf>,
    /// `authentication.anonymous.enabled`.
    pub anonymous_auth: Option<bool>,
    /// `authorization.mode`.
    pub authorization_mode: Option<AuthorizationMode>,
    pub cluster_dns: Option<Vec<IpAddr>>,
    pub cluster_domain: Option<String>,
    pub resolv_conf: Option<PathBuf>,
    pub max_pods: Option<u32>,
    /// Zero or negative: no limit (upstream's -1).
    pub pod_pids_limit: Option<i64>,
    pub pod_logs_dir: Option<PathBuf>,
    pub runtime_request_timeout: Option<Duration>,
    pub image_gc_high_threshold_percent: Option<u8>,
    pub image_gc_low_threshold_percent: Option<u8>,
    pub image_minimum_gc_age: Option<Duration>,
    pub kube_api_qps: Option<f32>,
    pub kube_api_burst: Option<u32>,
    /// `checkpointAPIPods` (a litelet extension, like `nodeLabels`).
    pub checkpoint_api_pods: Option<bool>,
    /// `checkpointSecrets` and `checkpointSecretsKeyFile` (litelet extensions).
    pub checkpoint_secrets: Option<bool>,
    pub checkpoint_secrets_key_file: Option<PathBuf>,
    pub event_record_qps: Option<f32>,
    pub event_burst: Option<u32>,
    pub cgroup_root: Option<String>,
    /// `cgroupfs` or `systemd` (anything else is a problem of [`parse`]).
    pub cgroup_driver: Option<crate::config::CgroupDriver>,
    pub container_runtime_endpoint: Option<String>,
    /// `logging.verbosity`.
    pub verbosity: Option<u8>,
    pub node_status_update_frequency: Option<Duration>,
    pub node_status_report_frequency: Option<Duration>,
    /// The node flags' text forms (`--kube-reserved` etc.), already checked by the
    /// node module's parsers.
    pub kube_reserved: Option<String>,
    pub system_reserved: Option<String>,
    /// Each key known (cross checks with the cgroups are `Flags`', after the merge).
    pub enforce_node_allocatable: Option<Vec<String>>,
    pub system_reserved_cgroup: Option<String>,
    pub kube_reserved_cgroup: Option<String>,
    pub eviction_hard: Option<String>,
    pub eviction_soft: Option<String>,
    pub eviction_soft_grace_period: Option<String>,
    pub eviction_minimum_reclaim: Option<String>,
    pub eviction_pressure_transition_period: Option<Duration>,
    pub eviction_max_pod_grace_period: Option<i32>,
    pub register_with_taints: Option<String>,
    /// litelet's extension: upstream has `--node-labels` only as a flag.
    pub node_labels: Option<String>,
    pub image_pull_credentials_verification_policy:
        Option<crate::runtime::pull_records::VerificationPolicy>,
    /// Each entry checked by `pull_records::check_allowlist_entry`.
    pub preloaded_images_verification_allowlist: Option<Vec<String>>,
    /// Each entry checked like `--allowed-unsafe-sysctls`.
    pub allowed_unsafe_sysctls: Option<Vec<String>>,
    /// A quantity, checked like `--container-log-max-size`.
    pub container_log_max_size: Option<String>,
    /// At least 2.
    pub container_log_max_files: Option<u32>,
    /// At least 1.
    pub container_log_max_workers: Option<u32>,
    /// Within 3 s and 300 s.
    pub container_log_monitor_interval: Option<Duration>,
    pub rotate_certificates: Option<bool>,
    pub server_tls_bootstrap: Option<bool>,
    /// `authentication.webhook.cacheTTL` (0s means the default, as upstream).
    pub token_webhook_cache_ttl: Option<Duration>,
    /// `authorization.webhook.cacheAuthorizedTTL` (0s means the default).
    pub authz_webhook_cache_authorized_ttl: Option<Duration>,
    /// `authorization.webhook.cacheUnauthorizedTTL` (0s means the default).
    pub authz_webhook_cache_unauthorized_ttl: Option<Duration>,
    pub fail_swap_on: Option<bool>,
    /// `memorySwap.swapBehavior`.
    pub memory_swap_behavior: Option<crate::runtime::swap::SwapBehavior>,
    pub shutdown_grace_period: Option<Duration>,
    pub shutdown_grace_period_critical_pods: Option<Duration>,
    pub shutdown_grace_period_by_pod_priority: Option<Vec<crate::nodeshutdown::PriorityPeriod>>,
    /// Fields accepted although they change nothing in litelet, each with why, for one
    /// warning at start-up (kubeadm writes most of them into every node's file).
    pub no_effect: Vec<String>,
}

/// A taint of `registerWithTaints` (upstream's core/v1 Taint).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct TaintField {
    key: String,
    #[serde(default)]
    value: Option<String>,
    effect: String,
    /// Accepted and ignored: the node sets it.
    #[serde(default)]
    #[allow(dead_code)]
    time_added: Option<Value>,
}

/// Reads and checks the file at `path`.
pub fn load(path: &Path) -> Result<KubeletConfiguration, ConfigFileError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigFileError::Read {
        path: path.to_owned(),
        source,
    })?;
    parse(&text, path)
}

/// Checks `text` (YAML or JSON); `path` only names the file in errors.
pub fn parse(text: &str, path: &Path) -> Result<KubeletConfiguration, ConfigFileError> {
    let value: Value = serde_yaml_ng::from_str(text).map_err(|source| ConfigFileError::Syntax {
        path: path.to_owned(),
        source,
    })?;
    let mut reader = Reader::default();
    let config = match value {
        Value::Mapping(map) => reader.top(&map),
        Value::Null => {
            reader.bad("apiVersion", format!("missing (expected {API_VERSION:?})"));
            KubeletConfiguration::default()
        }
        _ => {
            reader.bad("(document)", "expected a mapping of fields".into());
            KubeletConfiguration::default()
        }
    };
    if reader.problems.is_empty() {
        Ok(KubeletConfiguration {
            no_effect: reader.no_effect,
            ..config
        })
    } else {
        Err(ConfigFileError::Invalid {
            path: path.to_owned(),
            problems: reader.problems,
        })
    }
}

/// Collects problems while it reads fields.
#[derive(Default)]
struct Reader {
    problems: Vec<Problem>,
    no_effect: Vec<String>,
}

impl Reader {
    /// Accepts `field` with no effect on litelet, saying why in the start-up warning.
    fn no_effect(&mut self, field: &str, why: &str) {
        self.no_effect.push(format!("{field} ({why})"));
    }

    /// A duration field litelet lacks the feature for: 0s (off, upstream's default)
    /// is accepted; any other value is refused with `why`.
    fn zero_duration_only(&mut self, field: &str, value: &Value, why: &str) {
        if let Some(d) = self.duration(field, value) {
            if !d.is_zero() {
                self.bad(field, format!("{why}; leave it 0s (off)"));
            }
        }
    }

    /// A string field with one accepted value (the behaviour litelet has); any other
    /// value is refused with `why`.
    fn only_value(&mut self, field: &str, value: &Value, accepted: &str, why: &str) {
        if let Some(text) = self.get::<String>(field, value) {
            if text != accepted {
                self.bad(field, format!("{text:?} is not supported: {why}"));
            }
        }
    }

    /// A mapping that must be empty (every field at upstream's default).
    fn empty_only(&mut self, field: &str, value: &Value) {
        for (inner, _) in self.fields(field, value) {
            self.push(&format!("{field}.{inner}"), ProblemKind::Unsupported);
        }
    }

    fn bad(&mut self, field: &str, why: String) {
        self.push(field, ProblemKind::BadValue(why));
    }

    fn push(&mut self, field: &str, kind: ProblemKind) {
        self.problems.push(Problem {
            field: field.to_owned(),
            kind,
        });
    }

    /// Deserializes one field's value; null is absent.
    fn get<T: DeserializeOwned>(&mut self, field: &str, value: &Value) -> Option<T> {
        if value.is_null() {
            return None;
        }
        match serde_yaml_ng::from_value(value.clone()) {
            Ok(v) => Some(v),
            Err(err) => {
                self.bad(field, err.to_string());
                None
            }
        }
    }

    fn duration(&mut self, field: &str, value: &Value) -> Option<Duration> {
        let text: String = self.get(field, value)?;
        match parse_duration(&text) {
            Ok(d) => Some(d),
            Err(why) => {
                self.bad(field, why);
                None
            }
        }
    }

    /// A duration where upstream's defaulting reads zero as "not set" (kubeadm writes
    /// `0s` for every such field it leaves alone): zero gives None, so the flag's
    /// default applies, as in the upstream kubelet.
    fn duration_or_default(&mut self, field: &str, value: &Value) -> Option<Duration> {
        self.duration(field, value).filter(|d| !d.is_zero())
    }

    fn percent(&mut self, field: &str, value: &Value) -> Option<u8> {
        let n: i64 = self.get(field, value)?;
        match u8::try_from(n) {
            Ok(p) if p <= 100 => Some(p),
            _ => {
                self.bad(field, format!("{n} is not a percentage within 0 and 100"));
                None
            }
        }
    }

    /// The fields of a nested object, as `(name, value)` with string names.
    fn fields<'a>(&mut self, prefix: &str, value: &'a Value) -> Vec<(String, &'a Value)> {
        match value {
            Value::Mapping(map) => self.keys(prefix, map),
            Value::Null => Vec::new(),
            _ => {
                self.bad(prefix, "expected a mapping of fields".into());
                Vec::new()
            }
        }
    }

    fn keys<'a>(&mut self, prefix: &str, map: &'a Mapping) -> Vec<(String, &'a Value)> {
        let mut out = Vec::new();
        for (key, value) in map {
            match key.as_str() {
                Some(name) => out.push((name.to_owned(), value)),
                None => self.bad(prefix, format!("field name {key:?} is not a string")),
            }
        }
        out
    }

    fn top(&mut self, map: &Mapping) -> KubeletConfiguration {
        let mut c = KubeletConfiguration::default();
        self.type_meta(map);
        for (name, v) in self.keys("(document)", map) {
            let f = name.as_str();
            match f {
                "apiVersion" | "kind" => {}
                "staticPodPath" => c.static_pod_path = self.get(f, v),
                "syncFrequency" => c.sync_frequency = self.duration_or_default(f, v),
                "fileCheckFrequency" => c.file_check_frequency = self.duration_or_default(f, v),
                "address" => c.address = self.get(f, v),
                "port" => c.port = self.get(f, v),
                "healthzPort" => c.healthz_port = self.get(f, v),
                "healthzBindAddress" => c.healthz_bind_address = self.get(f, v),
                "tlsCertFile" => c.tls_cert_file = self.get(f, v),
                "tlsPrivateKeyFile" => c.tls_private_key_file = self.get(f, v),
                "tlsCipherSuites" => c.tls_cipher_suites = self.get(f, v),
                "tlsMinVersion" => c.tls_min_version = self.get(f, v),
                "streamingConnectionIdleTimeout" => {
                    c.streaming_connection_idle_timeout = self.duration_or_default(f, v)
                }
                "authentication" => self.authentication(v, &mut c),
                "authorization" => self.authorization(v, &mut c),
                "clusterDNS" => c.cluster_dns = self.get(f, v),
                "clusterDomain" => c.cluster_domain = self.get(f, v),
                "resolvConf" => c.resolv_conf = self.get(f, v),
                "maxPods" => c.max_pods = self.get(f, v),
                "podPidsLimit" => c.pod_pids_limit = self.get(f, v),
                "podLogsDir" => c.pod_logs_dir = self.get(f, v),
                "runtimeRequestTimeout" => {
                    c.runtime_request_timeout = self.duration_or_default(f, v)
                }
                "imageGCHighThresholdPercent" => {
                    c.image_gc_high_threshold_percent = self.percent(f, v)
                }
                "imageGCLowThresholdPercent" => {
                    c.image_gc_low_threshold_percent = self.percent(f, v)
                }
                "imageMinimumGCAge" => c.image_minimum_gc_age = self.duration_or_default(f, v),
                "kubeAPIQPS" => c.kube_api_qps = self.get(f, v),
                "kubeAPIBurst" => c.kube_api_burst = self.get(f, v),
                "checkpointAPIPods" => c.checkpoint_api_pods = self.get(f, v),
                "checkpointSecrets" => c.checkpoint_secrets = self.get(f, v),
                "checkpointSecretsKeyFile" => c.checkpoint_secrets_key_file = self.get(f, v),
                "eventRecordQPS" => c.event_record_qps = self.get(f, v),
                "eventBurst" => c.event_burst = self.get(f, v),
                "cgroupRoot" => c.cgroup_root = self.get(f, v),
                "cgroupDriver" => c.cgroup_driver = self.cgroup_driver(v),
                "containerRuntimeEndpoint" => {
                    // kubeadm writes "" when its flags file carries the endpoint.
                    c.container_runtime_endpoint =
                        self.get::<String>(f, v).filter(|e| !e.is_empty())
                }
                "logging" => c.verbosity = self.logging(v),
                "nodeStatusUpdateFrequency" => {
                    c.node_status_update_frequency = self.duration_or_default(f, v)
                }
                "nodeStatusReportFrequency" => {
                    c.node_status_report_frequency = self.duration_or_default(f, v)
                }
                "kubeReserved" => c.kube_reserved = self.pairs(f, v, "=", node::parse_reserved),
                "systemReserved" => c.system_reserved = self.pairs(f, v, "=", node::parse_reserved),
                "enforceNodeAllocatable" => c.enforce_node_allocatable = self.enforcements(f, v),
                "systemReservedCgroup" => c.system_reserved_cgroup = self.get(f, v),
                "kubeReservedCgroup" => c.kube_reserved_cgroup = self.get(f, v),
                "evictionHard" => {
                    c.eviction_hard = self.pairs(f, v, "<", node::parse_eviction_hard)
                }
                "evictionSoft" => {
                    c.eviction_soft = self.pairs(f, v, "<", node::parse_eviction_hard)
                }
                "evictionSoftGracePeriod" => {
                    c.eviction_soft_grace_period =
                        self.pairs(f, v, "=", super::eviction_grace_periods)
                }
                "evictionMinimumReclaim" => {
                    c.eviction_minimum_reclaim =
                        self.pairs(f, v, "=", crate::eviction::config::parse_minimum_reclaim)
                }
                "evictionPressureTransitionPeriod" => {
                    c.eviction_pressure_transition_period = self.duration_or_default(f, v)
                }
                "evictionMaxPodGracePeriod" => c.eviction_max_pod_grace_period = self.get(f, v),
                "nodeLabels" => c.node_labels = self.pairs(f, v, "=", node::parse_node_labels),
                "registerWithTaints" => c.register_with_taints = self.taints(v),
                "allowedUnsafeSysctls" => c.allowed_unsafe_sysctls = self.sysctls(f, v),
                "imagePullCredentialsVerificationPolicy" => {
                    c.image_pull_credentials_verification_policy = self.parsed(f, v)
                }
                "preloadedImagesVerificationAllowlist" => {
                    c.preloaded_images_verification_allowlist = self.allowlist(f, v)
                }
                "containerLogMaxSize" => c.container_log_max_size = self.log_max_size(f, v),
                "containerLogMaxFiles" => c.container_log_max_files = self.at_least(f, v, 2),
                "containerLogMaxWorkers" => c.container_log_max_workers = self.at_least(f, v, 1),
                "rotateCertificates" => c.rotate_certificates = self.get(f, v),
                "serverTLSBootstrap" => c.server_tls_bootstrap = self.get(f, v),
                "containerLogMonitorInterval" => {
                    c.container_log_monitor_interval = self.monitor_interval(f, v)
                }
                "failSwapOn" => c.fail_swap_on = self.get(f, v),
                "memorySwap" => c.memory_swap_behavior = self.memory_swap(f, v),
                "shutdownGracePeriod" => c.shutdown_grace_period = self.duration(f, v),
                "shutdownGracePeriodCriticalPods" => {
                    c.shutdown_grace_period_critical_pods = self.duration(f, v)
                }
                "shutdownGracePeriodByPodPriority" => {
                    c.shutdown_grace_period_by_pod_priority = self.by_pod_priority(f, v)
                }
                _ if self.kubeadm_field(f, v) => {}
                _ if UPSTREAM_FIELDS.contains(&f) => self.push(f, ProblemKind::Unsupported),
                _ => self.push(f, ProblemKind::Unknown),
            }
        }
        self.cross_checks(&c);
        c
    }

    /// The fields `kubeadm join` writes into every node's file that litelet has no
    /// feature behind: accepted where the value asks for nothing litelet lacks (off,
    /// or upstream's default), refused where it would. False for any other field.
    fn kubeadm_field(&mut self, f: &str, v: &Value) -> bool {
        match f {
            "httpCheckFrequency" => {
                if self.duration(f, v).is_some() {
                    self.no_effect(f, "litelet has no HTTP static pod source");
                }
            }
            "cpuManagerReconcilePeriod" => {
                if self.duration(f, v).is_some() {
                    self.no_effect(f, "litelet has no CPU manager: policy none");
                }
            }
            "volumeStatsAggPeriod" => {
                if self.duration(f, v).is_some() {
                    self.no_effect(f, "volume usage is sampled with the other stats every 10 s");
                }
            }
            "cpuManagerPolicy" => {
                self.only_value(f, v, "none", "litelet has no CPU manager (only none)")
            }
            "memoryManagerPolicy" => {
                self.only_value(f, v, "None", "litelet has no memory manager (only None)")
            }
            "topologyManagerPolicy" => {
                self.only_value(f, v, "none", "litelet has no topology manager (only none)")
            }
            "imageMaximumGCAge" => self.zero_duration_only(
                f,
                v,
                "litelet removes unused images by disk usage only, not by age",
            ),
            "crashLoopBackOff" => self.empty_only(f, v),
            _ => return false,
        }
        true
    }

    /// `memorySwap: {swapBehavior: ...}`.
    fn memory_swap(
        &mut self,
        field: &str,
        value: &Value,
    ) -> Option<crate::runtime::swap::SwapBehavior> {
        let mut behavior = None;
        for (inner, value) in self.fields(field, value) {
            let name = format!("{field}.{inner}");
            match inner.as_str() {
                "swapBehavior" => behavior = self.parsed(&name, value),
                _ => self.push(&name, ProblemKind::Unknown),
            }
        }
        behavior
    }

    /// `shutdownGracePeriodByPodPriority: [{priority, shutdownGracePeriodSeconds}]`.
    fn by_pod_priority(
        &mut self,
        field: &str,
        value: &Value,
    ) -> Option<Vec<crate::nodeshutdown::PriorityPeriod>> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields, rename_all = "camelCase")]
        struct Row {
            #[serde(default)]
            priority: i32,
            #[serde(default)]
            shutdown_grace_period_seconds: i64,
        }
        let rows: Vec<Row> = self.get(field, value)?;
        Some(
            rows.into_iter()
                .map(|r| crate::nodeshutdown::PriorityPeriod {
                    priority: r.priority,
                    shutdown_grace_period_seconds: r.shutdown_grace_period_seconds,
                })
                .collect(),
        )
    }

    fn type_meta(&mut self, map: &Mapping) {
        let text = |key: &str| map.get(key).and_then(Value::as_str).map(str::to_owned);
        match text("apiVersion") {
            Some(v) if v == API_VERSION => {}
            Some(v) => self.bad("apiVersion", format!("{v:?} is not {API_VERSION:?}")),
            None => self.bad("apiVersion", format!("missing (expected {API_VERSION:?})")),
        }
        match text("kind") {
            Some(v) if v == KIND => {}
            Some(v) => self.bad("kind", format!("{v:?} is not {KIND:?}")),
            None => self.bad("kind", format!("missing (expected {KIND:?})")),
        }
    }

    fn authentication(&mut self, value: &Value, c: &mut KubeletConfiguration) {
        for (name, v) in self.fields("authentication", value) {
            let field = format!("authentication.{name}");
            match name.as_str() {
                "x509" => {
                    for (inner, v) in self.fields(&field, v) {
                        let field = format!("{field}.{inner}");
                        match inner.as_str() {
                            "clientCAFile" => c.client_ca_file = self.get(&field, v),
                            _ => self.push(&field, ProblemKind::Unknown),
                        }
                    }
                }
                "anonymous" => {
                    for (inner, v) in self.fields(&field, v) {
                        let field = format!("{field}.{inner}");
                        match inner.as_str() {
                            "enabled" => c.anonymous_auth = self.get(&field, v),
                            _ => self.push(&field, ProblemKind::Unknown),
                        }
                    }
                }
                "webhook" => self.token_webhook(&field, v, c),
                _ => self.push(&field, ProblemKind::Unknown),
            }
        }
    }

    /// litelet always checks bearer tokens with a TokenReview (given an API server), as
    /// upstream does by default: `enabled: true` is accepted, nothing else is settable.
    fn token_webhook(&mut self, prefix: &str, value: &Value, c: &mut KubeletConfiguration) {
        for (inner, v) in self.fields(prefix, value) {
            let field = format!("{prefix}.{inner}");
            match inner.as_str() {
                "enabled" => {
                    if self.get::<bool>(&field, v) == Some(false) {
                        self.bad(
                            &field,
                            "false is not supported: litelet always authenticates bearer \
                             tokens with a TokenReview"
                                .into(),
                        );
                    }
                }
                "cacheTTL" => c.token_webhook_cache_ttl = self.duration(&field, v),
                _ => self.push(&field, ProblemKind::Unknown),
            }
        }
    }

    fn authorization(&mut self, value: &Value, c: &mut KubeletConfiguration) {
        for (name, v) in self.fields("authorization", value) {
            let field = format!("authorization.{name}");
            match name.as_str() {
                "mode" => {
                    let Some(text) = self.get::<String>(&field, v) else {
                        continue;
                    };
                    match <AuthorizationMode as clap::ValueEnum>::from_str(&text, false) {
                        Ok(m) => c.authorization_mode = Some(m),
                        Err(_) => self.bad(
                            &field,
                            format!("{text:?} is not one of \"Webhook\", \"AlwaysAllow\""),
                        ),
                    }
                }
                "webhook" => {
                    for (inner, v) in self.fields(&field, v) {
                        let field = format!("{field}.{inner}");
                        match inner.as_str() {
                            "cacheAuthorizedTTL" => {
                                c.authz_webhook_cache_authorized_ttl = self.duration(&field, v)
                            }
                            "cacheUnauthorizedTTL" => {
                                c.authz_webhook_cache_unauthorized_ttl = self.duration(&field, v)
                            }
                            _ => self.push(&field, ProblemKind::Unknown),
                        }
                    }
                }
                _ => self.push(&field, ProblemKind::Unknown),
            }
        }
    }

    fn logging(&mut self, value: &Value) -> Option<u8> {
        let mut verbosity = None;
        for (name, v) in self.fields("logging", value) {
            let field = format!("logging.{name}");
            match name.as_str() {
                "verbosity" => verbosity = self.get(&field, v),
                "format" => self.only_value(&field, v, "text", "litelet writes text logs only"),
                "flushFrequency" => self.no_effect(&field, "litelet writes log lines unbuffered"),
                "options" => self.no_effect(&field, "litelet's text logs have no buffer options"),
                "vmodule" => self.push(&field, ProblemKind::Unsupported),
                _ => self.push(&field, ProblemKind::Unknown),
            }
        }
        verbosity
    }

    /// A map field as the matching flag's `key<sep>value,...` text, checked by `check`.
    fn pairs<T, E: fmt::Display>(
        &mut self,
        field: &str,
        value: &Value,
        sep: &str,
        check: fn(&str) -> Result<T, E>,
    ) -> Option<String> {
        let map: BTreeMap<String, String> = self.get(field, value)?;
        let items: Vec<String> = map.iter().map(|(k, v)| format!("{k}{sep}{v}")).collect();
        self.checked(field, items.join(","), check)
    }

    fn taints(&mut self, value: &Value) -> Option<String> {
        let field = "registerWithTaints";
        let taints: Vec<TaintField> = self.get(field, value)?;
        let items: Vec<String> = taints
            .iter()
            .map(|t| match &t.value {
                Some(v) => format!("{}={v}:{}", t.key, t.effect),
                None => format!("{}:{}", t.key, t.effect),
            })
            .collect();
        self.checked(field, items.join(","), node::parse_taints)
    }

    fn checked<T, E: fmt::Display>(
        &mut self,
        field: &str,
        text: String,
        check: fn(&str) -> Result<T, E>,
    ) -> Option<String> {
        match check(&text) {
            Ok(_) => Some(text),
            Err(err) => {
                self.bad(field, err.to_string());
                None
            }
        }
    }

    fn cgroup_driver(&mut self, value: &Value) -> Option<crate::config::CgroupDriver> {
        let driver: String = self.get("cgroupDriver", value)?;
        match super::cgroup_driver(&driver) {
            Ok(d) => Some(d),
            Err(why) => {
                self.bad("cgroupDriver", why.to_string());
                None
            }
        }
    }

    /// A string parsed with `T::from_str`, whose error names what is wrong.
    fn parsed<T: std::str::FromStr<Err: fmt::Display>>(
        &mut self,
        field: &str,
        value: &Value,
    ) -> Option<T> {
        let text: String = self.get(field, value)?;
        match text.parse::<T>() {
            Ok(parsed) => Some(parsed),
            Err(why) => {
                self.bad(field, why.to_string());
                None
            }
        }
    }

    /// A list of strings each passing `check`; every refusal is named.
    fn checked_list<E: std::fmt::Display>(
        &mut self,
        field: &str,
        value: &Value,
        check: impl Fn(&str) -> Result<(), E>,
    ) -> Option<Vec<String>> {
        let list: Vec<String> = self.get(field, value)?;
        let bad: Vec<String> = list
            .iter()
            .filter_map(|e| check(e).err())
            .map(|e| e.to_string())
            .collect();
        if bad.is_empty() {
            return Some(list);
        }
        self.bad(field, bad.join("; "));
        None
    }

    /// Image repositories, each checked as upstream validates the allowlist.
    fn allowlist(&mut self, field: &str, value: &Value) -> Option<Vec<String>> {
        self.checked_list(field, value, |e| {
            crate::runtime::pull_records::check_allowlist_entry(e).map(|_| ())
        })
    }

    /// `enforceNodeAllocatable`: a list of known keys (an empty list enforces nothing).
    fn enforcements(&mut self, field: &str, value: &Value) -> Option<Vec<String>> {
        self.checked_list(field, value, |k| {
            k.parse::<crate::cgroups::allocatable::Enforcement>()
                .map(|_| ())
        })
    }

    /// A list of sysctl names or prefixes, each namespaced (as the flag).
    fn sysctls(&mut self, field: &str, value: &Value) -> Option<Vec<String>> {
        let list: Vec<String> = self.get(field, value)?;
        match crate::admission::sysctls::SysctlAllowlist::new(None, &list) {
            Ok(_) => Some(list),
            Err(e) => {
                self.bad(field, e.to_string());
                None
            }
        }
    }

    fn log_max_size(&mut self, field: &str, value: &Value) -> Option<String> {
        // A YAML number (`containerLogMaxSize: 1000`) is a quantity too.
        let text = match value {
            Value::Number(n) => n.to_string(),
            _ => self.get::<String>(field, value)?,
        };
        match crate::logs::parse_max_size(&text) {
            Ok(_) => Some(text),
            Err(e) => {
                self.bad(field, e.to_string());
                None
            }
        }
    }

    fn at_least(&mut self, field: &str, value: &Value, min: u32) -> Option<u32> {
        let n: i64 = self.get(field, value)?;
        match u32::try_from(n) {
            Ok(v) if v >= min => Some(v),
            _ => {
                self.bad(field, format!("{n} must be at least {min}"));
                None
            }
        }
    }

    fn monitor_interval(&mut self, field: &str, value: &Value) -> Option<Duration> {
        let d = self.duration(field, value)?;
        if d < crate::logs::MIN_MONITOR_INTERVAL || d > Duration::from_secs(300) {
            self.bad(field, format!("{d:?} must be within 3s and 300s"));
            return None;
        }
        Some(d)
    }

    fn cross_checks(&mut self, c: &KubeletConfiguration) {
        if c.kube_api_qps.is_some_and(|q| !q.is_finite() || q < 0.0) {
            self.bad("kubeAPIQPS", "must be a non-negative number".into());
        }
        if c.event_record_qps
            .is_some_and(|q| !q.is_finite() || q < 0.0)
        {
            self.bad("eventRecordQPS", "must be a non-negative number".into());
        }
    }
}

impl KubeletConfiguration {
    /// Writes every value of the file into `flags` unless `explicit(id)` says the
    /// command line set that flag (`id` is the clap argument id).
    pub fn apply(self, flags: &mut Flags, explicit: impl Fn(&str) -> bool) {
        macro_rules! set {
            ($id:literal, $value:expr => $($target:tt)+) => {
                if let Some(value) = $value {
                    if !explicit($id) {
                        $($target)+ = value;
                    }
                }
            };
        }
        set!("pod_manifest_path", self.static_pod_path.map(Some) => flags.pod_manifest_path);
        set!("sync_frequency", self.sync_frequency => flags.sync_frequency);
        set!("file_check_frequency", self.file_check_frequency => flags.file_check_frequency);
        set!("address", self.address => flags.address);
        set!("port", self.port => flags.port);
        set!("healthz_port", self.healthz_port => flags.healthz_port);
        set!("healthz_bind_address", self.healthz_bind_address => flags.healthz_bind_address);
        set!("tls_cert_file", self.tls_cert_file.map(Some) => flags.tls_cert_file);
        set!("tls_private_key_file", self.tls_private_key_file.map(Some) => flags.tls_private_key_file);
        set!("tls_cipher_suites", self.tls_cipher_suites => flags.tls_cipher_suites);
        set!("tls_min_version", self.tls_min_version => flags.tls_min_version);
        set!("streaming_connection_idle_timeout", self.streaming_connection_idle_timeout
            => flags.streaming_connection_idle_timeout);
        set!("client_ca_file", self.client_ca_file.map(Some) => flags.client_ca_file);
        set!("anonymous_auth", self.anonymous_auth => flags.anonymous_auth);
        set!("authorization_mode", self.authorization_mode => flags.authorization_mode);
        let dns = self
            .cluster_dns
            .map(|ips| ips.iter().map(IpAddr::to_string).collect::<Vec<_>>());
        set!("cluster_dns", dns => flags.cluster_dns);
        set!("cluster_domain", self.cluster_domain => flags.cluster_domain);
        set!("resolv_conf", self.resolv_conf => flags.resolv_conf);
        set!("max_pods", self.max_pods => flags.max_pods);
        set!("pod_max_pids", self.pod_pids_limit => flags.pod_max_pids);
        set!("pod_logs_dir", self.pod_logs_dir => flags.pod_logs_dir);
        set!("runtime_request_timeout", self.runtime_request_timeout
            => flags.runtime.runtime_request_timeout);
        set!("image_gc_high_threshold", self.image_gc_high_threshold_percent
            => flags.image_gc_high_threshold);
        set!("image_gc_low_threshold", self.image_gc_low_threshold_percent
            => flags.image_gc_low_threshold);
        set!("minimum_image_ttl_duration", self.image_minimum_gc_age
            => flags.minimum_image_ttl_duration);
        set!("kube_api_qps", self.kube_api_qps => flags.kube_api_qps);
        set!("kube_api_burst", self.kube_api_burst => flags.kube_api_burst);
        set!("checkpoint_api_pods", self.checkpoint_api_pods => flags.checkpoint_api_pods);
        set!("checkpoint_secrets", self.checkpoint_secrets => flags.checkpoint_secrets);
        set!("checkpoint_secrets_key_file", self.checkpoint_secrets_key_file.map(Some)
            => flags.checkpoint_secrets_key_file);
        set!("event_qps", self.event_record_qps => flags.event_qps);
        set!("event_burst", self.event_burst => flags.event_burst);
        set!("cgroup_root", self.cgroup_root => flags.cgroup_root);
        set!("cgroup_driver", self.cgroup_driver => flags.cgroup_driver);
        set!("container_runtime_endpoint", self.container_runtime_endpoint
            => flags.runtime.container_runtime_endpoint);
        set!("verbosity", self.verbosity => flags.verbosity);
        set!("node_status_update_frequency", self.node_status_update_frequency
            => flags.node_status_update_frequency);
        // No flag; upstream defaults it to an explicitly set update frequency.
        let update_set = self.node_status_update_frequency.is_some();
        if let Some(report) = self
            .node_status_report_frequency
            .or(update_set.then_some(flags.node_status_update_frequency))
        {
            flags.node_status_report_frequency = report;
        }
        // No flag, as upstream.
        if let Some(policy) = self.image_pull_credentials_verification_policy {
            flags.image_pull_credentials_verification_policy = policy;
        }
        if let Some(list) = self.preloaded_images_verification_allowlist {
            flags.preloaded_images_verification_allowlist = list;
        }
        set!("kube_reserved", self.kube_reserved.map(Some) => flags.kube_reserved);
        set!("system_reserved", self.system_reserved.map(Some) => flags.system_reserved);
        set!("enforce_node_allocatable", self.enforce_node_allocatable
            => flags.enforce_node_allocatable);
        set!("system_reserved_cgroup", self.system_reserved_cgroup.map(Some)
            => flags.system_reserved_cgroup);
        set!("kube_reserved_cgroup", self.kube_reserved_cgroup.map(Some)
            => flags.kube_reserved_cgroup);
        set!("eviction_hard", self.eviction_hard.map(Some) => flags.eviction_hard);
        set!("eviction_soft", self.eviction_soft.map(Some) => flags.eviction_soft);
        set!("eviction_soft_grace_period", self.eviction_soft_grace_period.map(Some)
            => flags.eviction_soft_grace_period);
        set!("eviction_minimum_reclaim", self.eviction_minimum_reclaim.map(Some)
            => flags.eviction_minimum_reclaim);
        set!("eviction_pressure_transition_period", self.eviction_pressure_transition_period
            => flags.eviction_pressure_transition_period);
        set!("eviction_max_pod_grace_period", self.eviction_max_pod_grace_period
            => flags.eviction_max_pod_grace_period);
        set!("register_with_taints", self.register_with_taints.map(Some)
            => flags.register_with_taints);
        set!("node_labels", self.node_labels.map(Some) => flags.node_labels);
        set!("allowed_unsafe_sysctls", self.allowed_unsafe_sysctls
            => flags.allowed_unsafe_sysctls);
        set!("container_log_max_size", self.container_log_max_size
            => flags.container_log_max_size);
        set!("container_log_max_files", self.container_log_max_files
            => flags.container_log_max_files);
        // No flags upstream: the file is the only source.
        if let Some(workers) = self.container_log_max_workers {
            flags.container_log_max_workers = workers;
        }
        if let Some(interval) = self.container_log_monitor_interval {
            flags.container_log_monitor_interval = interval;
        }
        set!("fail_swap_on", self.fail_swap_on => flags.fail_swap_on);
        // No flags upstream: the file is the only source.
        if let Some(behavior) = self.memory_swap_behavior {
            flags.memory_swap_behavior = behavior;
        }
        if let Some(d) = self.shutdown_grace_period {
            flags.shutdown.grace_period = d;
        }
        if let Some(d) = self.shutdown_grace_period_critical_pods {
            flags.shutdown.grace_period_critical_pods = d;
        }
        if let Some(rows) = self.shutdown_grace_period_by_pod_priority {
            flags.shutdown.by_pod_priority = rows;
        }
        set!("rotate_certificates", self.rotate_certificates => flags.rotate_certificates);
        set!("rotate_server_certificates", self.server_tls_bootstrap
            => flags.rotate_server_certificates);
        // In the file, 0s stands for the default (upstream's defaulting).
        let ttl = |d: Option<Duration>| d.filter(|d| !d.is_zero());
        set!("authentication_token_webhook_cache_ttl", ttl(self.token_webhook_cache_ttl)
            => flags.authentication_token_webhook_cache_ttl);
        set!("authorization_webhook_cache_authorized_ttl",
            ttl(self.authz_webhook_cache_authorized_ttl)
            => flags.authorization_webhook_cache_authorized_ttl);
        set!("authorization_webhook_cache_unauthorized_ttl",
            ttl(self.authz_webhook_cache_unauthorized_ttl)
            => flags.authorization_webhook_cache_unauthorized_ttl);
        flags.config_no_effect = self.no_effect;
    }
}

/// The clap ids [`KubeletConfiguration::apply`] consults (checked against `Flags`).
pub const APPLIED_IDS: &[&str] = &[
    "fail_swap_on",
    "pod_max_pids",
    "rotate_certificates",
    "rotate_server_certificates",
    "authentication_token_webhook_cache_ttl",
    "authorization_webhook_cache_authorized_ttl",
    "authorization_webhook_cache_unauthorized_ttl",
    "pod_manifest_path",
    "sync_frequency",
    "file_check_frequency",
    "address",
    "port",
    "healthz_port",
    "healthz_bind_address",
    "tls_cert_file",
    "tls_private_key_file",
    "tls_cipher_suites",
    "tls_min_version",
    "streaming_connection_idle_timeout",
    "client_ca_file",
    "anonymous_auth",
    "authorization_mode",
    "cluster_dns",
    "cluster_domain",
    "resolv_conf",
    "max_pods",
    "pod_logs_dir",
    "runtime_request_timeout",
    "image_gc_high_threshold",
    "image_gc_low_threshold",
    "minimum_image_ttl_duration",
    "kube_api_qps",
    "kube_api_burst",
    "checkpoint_api_pods",
    "checkpoint_secrets",
    "checkpoint_secrets_key_file",
    "event_qps",
    "event_burst",
    "cgroup_root",
    "cgroup_driver",
    "container_runtime_endpoint",
    "verbosity",
    "node_status_update_frequency",
    "kube_reserved",
    "system_reserved",
    "enforce_node_allocatable",
    "system_reserved_cgroup",
    "kube_reserved_cgroup",
    "eviction_hard",
    "eviction_soft",
    "eviction_soft_grace_period",
    "eviction_minimum_reclaim",
    "eviction_pressure_transition_period",
    "eviction_max_pod_grace_period",
    "register_with_taints",
    "node_labels",
    "allowed_unsafe_sysctls",
    "container_log_max_size",
    "container_log_max_files",
];

/// Top-level fields of upstream's KubeletConfiguration v1beta1 (Kubernetes 1.36), used
/// to tell "not supported by litelet" from "unknown field".
const UPSTREAM_FIELDS: &[&str] = &[
    "enableServer",
    "staticPodPath",
    "podLogsDir",
    "syncFrequency",
    "fileCheckFrequency",
    "httpCheckFrequency",
    "staticPodURL",
    "staticPodURLHeader",
    "address",
    "port",
    "readOnlyPort",
    "tlsCertFile",
    "tlsPrivateKeyFile",
    "tlsCipherSuites",
    "tlsCurvePreferences",
    "tlsMinVersion",
    "rotateCertificates",
    "serverTLSBootstrap",
    "authentication",
    "authorization",
    "registryPullQPS",
    "registryBurst",
    "imagePullCredentialsVerificationPolicy",
    "preloadedImagesVerificationAllowlist",
    "eventRecordQPS",
    "eventBurst",
    "enableDebuggingHandlers",
    "enableContentionProfiling",
    "healthzPort",
    "healthzBindAddress",
    "oomScoreAdj",
    "clusterDomain",
    "clusterDNS",
    "streamingConnectionIdleTimeout",
    "nodeStatusUpdateFrequency",
    "nodeStatusReportFrequency",
    "nodeLeaseDurationSeconds",
    "imageMinimumGCAge",
    "imageMaximumGCAge",
    "imageGCHighThresholdPercent",
    "imageGCLowThresholdPercent",
    "volumeStatsAggPeriod",
    "kubeletCgroups",
    "systemCgroups",
    "cgroupRoot",
    "cgroupsPerQOS",
    "cgroupDriver",
    "cpuManagerPolicy",
    "singleProcessOOMKill",
    "cpuManagerPolicyOptions",
    "cpuManagerReconcilePeriod",
    "draManagerReconcilePeriod",
    "memoryManagerPolicy",
    "topologyManagerPolicy",
    "topologyManagerScope",
    "topologyManagerPolicyOptions",
    "qosReserved",
    "runtimeRequestTimeout",
    "hairpinMode",
    "maxPods",
    "podCIDR",
    "podPidsLimit",
    "resolvConf",
    "runOnce",
    "cpuCFSQuota",
    "cpuCFSQuotaPeriod",
    "nodeStatusMaxImages",
    "maxOpenFiles",
    "contentType",
    "kubeAPIQPS",
    "kubeAPIBurst",
    "serializeImagePulls",
    "maxParallelImagePulls",
    "evictionHard",
    "evictionSoft",
    "evictionSoftGracePeriod",
    "evictionPressureTransitionPeriod",
    "evictionMaxPodGracePeriod",
    "evictionMinimumReclaim",
    "mergeDefaultEvictionSettings",
    "podsPerCore",
    "enableControllerAttachDetach",
    "protectKernelDefaults",
    "makeIPTablesUtilChains",
    "iptablesMasqueradeBit",
    "iptablesDropBit",
    "featureGates",
    "failSwapOn",
    "memorySwap",
    "containerLogMaxSize",
    "containerLogMaxFiles",
    "containerLogMaxWorkers",
    "containerLogMonitorInterval",
    "configMapAndSecretChangeDetectionStrategy",
    "systemReserved",
    "kubeReserved",
    "reservedSystemCPUs",
    "showHiddenMetricsForVersion",
    "systemReservedCgroup",
    "kubeReservedCgroup",
    "enforceNodeAllocatable",
    "allowedUnsafeSysctls",
    "volumePluginDir",
    "providerID",
    "kernelMemcgNotification",
    "logging",
    "enableSystemLogHandler",
    "enableSystemLogQuery",
    "shutdownGracePeriod",
    "shutdownGracePeriodCriticalPods",
    "shutdownGracePeriodByPodPriority",
    "crashLoopBackOff",
    "reservedMemory",
    "enableProfilingHandler",
    "enableDebugFlagsHandler",
    "seccompDefault",
    "memoryThrottlingFactor",
    "memoryReservationPolicy",
    "registerWithTaints",
    "registerNode",
    "tracing",
    "localStorageCapacityIsolation",
    "containerRuntimeEndpoint",
    "imageServiceEndpoint",
    "failCgroupV1",
    "userNamespaces",
];

#[cfg(test)]
mod tests;
