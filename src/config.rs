//! litelet's configuration: the command line, the `--config` file and the
//! `--config-dir` drop-ins, merged as the upstream kubelet merges them, into [`Flags`].
//!
//! Every setting is defined once, in [`catalogue`] (litelet's own in `settings.rs`,
//! the rest of upstream's in `upstream.rs`): its flag, its KubeletConfiguration field,
//! its kind, default, documentation and litelet's stance. From that one definition come
//! the command-line parser ([`cmdline`], pflag's rules), the config-file reader
//! ([`mod@file`]), the merge and checks ([`decode`], feature gates in [`gates`]),
//! `/configz` ([`configz`]), `--help`,
//! the man page and the compatibility table ([`docs`]).
//!
//! Two steps, as ripgrep's LowArgs → HiArgs: [`Flags::load`] parses and checks on the
//! main thread at start-up (files are read; nothing of the machine is touched), then
//! `agent` resolves the values against the machine. `Flags` stays the one struct the
//! rest of litelet reads; [`components`] splits it into each component's config.
//!
//! Precedence, as upstream: defaults < `--config` < `--config-dir` drop-ins (sorted,
//! later wins, JSON merge patch) < flags. An unknown config field is a warning (upstream
//! decodes leniently); a value litelet cannot honour stops it, naming the setting.

pub mod catalogue;
pub mod cmdline;
pub mod components;
pub mod configz;
pub mod decode;
pub mod docs;
pub mod file;
pub mod gates;
pub mod settings;
pub mod table;
pub mod upstream;
pub mod value;

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use crate::cri::{ConnectOptions, CriError, Endpoint};

/// The default CRI socket, containerd's.
pub const DEFAULT_RUNTIME_ENDPOINT: &str = "unix:///run/containerd/containerd.sock";

/// litelet's effective configuration. Each field is filled by the setting of
/// `settings.rs` that names it (its doc, default and flag live there);
/// `Flags::default()` holds zero values, [`Flags::defaults`] litelet's defaults.
#[derive(Debug, Default)]
pub struct Flags {
    /// An operator subcommand instead of the agent.
    pub command: Option<Command>,
    /// Start-up warnings: deprecated flags, settings that change nothing, unknown
    /// config fields. Logged once.
    pub warnings: Vec<String>,
    pub runtime: RuntimeFlags,
    pub config: Option<PathBuf>,
    pub config_dir: Option<PathBuf>,
    pub kubeconfig: Option<PathBuf>,
    pub bootstrap_kubeconfig: Option<PathBuf>,
    pub cert_dir: Option<PathBuf>,
    pub rotate_certificates: bool,
    pub rotate_server_certificates: bool,
    pub device_plugins_dir: PathBuf,
    pub pod_manifest_path: Option<PathBuf>,
    pub hostname_override: Option<String>,
    /// `--node-ip` as given (checked by `NodeIps::parse`).
    pub node_ip: String,
    /// `--cloud-provider`: "" or "external" (checked).
    pub cloud_provider: String,
    pub provider_id: Option<String>,
    pub node_lease_duration_seconds: i32,
    pub root_dir: PathBuf,
    pub cgroup_root: String,
    pub cgroup_driver: CgroupDriver,
    pub max_pods: u32,
    /// Zero or negative: no limit.
    pub pod_max_pids: i64,
    pub fail_swap_on: bool,
    pub memory_swap_behavior: crate::runtime::swap::SwapBehavior,
    pub shutdown: crate::nodeshutdown::ShutdownConfig,
    pub node_labels: BTreeMap<String, String>,
    pub register_with_taints: Vec<crate::api::node::Taint>,
    pub kube_reserved: BTreeMap<String, String>,
    pub system_reserved: BTreeMap<String, String>,
    pub enforce_node_allocatable: Vec<String>,
    pub system_reserved_cgroup: Option<String>,
    pub kube_reserved_cgroup: Option<String>,
    pub eviction_hard: BTreeMap<String, String>,
    /// Add upstream's default hard thresholds to those set (`mergeDefaultEvictionSettings`).
    pub merge_default_eviction_settings: bool,
    pub eviction_soft: BTreeMap<String, String>,
    pub eviction_soft_grace_period: BTreeMap<String, String>,
    pub eviction_minimum_reclaim: BTreeMap<String, String>,
    pub eviction_pressure_transition_period: Duration,
    pub eviction_max_pod_grace_period: i32,
    pub node_status_update_frequency: Duration,
    pub node_status_report_frequency: Duration,
    pub port: u16,
    pub healthz_port: u16,
    pub address: Address,
    pub healthz_bind_address: Address,
    pub anonymous_auth: bool,
    pub authorization_mode: crate::server::authz::AuthorizationMode,
    pub authentication_token_webhook_cache_ttl: Duration,
    pub authorization_webhook_cache_authorized_ttl: Duration,
    pub authorization_webhook_cache_unauthorized_ttl: Duration,
    pub tls_cert_file: Option<PathBuf>,
    pub tls_private_key_file: Option<PathBuf>,
    pub client_ca_file: Option<PathBuf>,
    pub pod_logs_dir: PathBuf,
    pub container_log_max_size: String,
    pub container_log_max_files: u32,
    pub container_log_max_workers: u32,
    pub container_log_monitor_interval: Duration,
    pub resolv_conf: PathBuf,
    pub cluster_dns: Vec<String>,
    pub allowed_unsafe_sysctls: Vec<String>,
    pub cluster_domain: String,
    pub sync_frequency: Duration,
    pub file_check_frequency: Duration,
    pub minimum_container_ttl_duration: Duration,
    pub image_gc_high_threshold: u8,
    pub image_gc_low_threshold: u8,
    pub minimum_image_ttl_duration: Duration,
    /// Zero: unused images are removed by disk usage only.
    pub image_maximum_gc_age: Duration,
    pub serialize_image_pulls: bool,
    /// None: no limit (with `serialize_image_pulls` false).
    pub max_parallel_image_pulls: Option<i32>,
    pub protect_kernel_defaults: bool,
    pub image_pull_credentials_verification_policy: crate::images::pull_records::VerificationPolicy,
    pub preloaded_images_verification_allowlist: Vec<String>,
    /// As given: each at litelet's value (checked against `gates::UPSTREAM`).
    pub feature_gates: BTreeMap<String, bool>,
    pub kube_api_qps: u32,
    pub kube_api_burst: u32,
    pub event_qps: u32,
    pub event_burst: u32,
    pub checkpoint_api_pods: bool,
    /// Keep the pods' tokens, secrets and configMaps on the node (`src/poddata`).
    pub checkpoint_secrets: bool,
    /// The key that seals what `checkpoint_secrets` keeps.
    pub checkpoint_secrets_key_file: Option<PathBuf>,
    /// None: sized by memory (`server::default_max_connections`).
    pub server_max_connections: Option<usize>,
    pub tls_cipher_suites: Vec<String>,
    pub tls_min_version: String,
    /// Zero: never.
    pub streaming_connection_idle_timeout: Duration,
    pub image_credential_provider_config: Option<PathBuf>,
    pub image_credential_provider_bin_dir: Option<PathBuf>,
    pub server_max_unauthenticated_connections: usize,
    pub server_max_unauthenticated_per_client: usize,
    pub log_format: crate::log_format::LogFormat,
    pub oom_score_adj: i32,
    pub seccomp_default: bool,
    /// Log verbosity like the kubelet's -v: 0-1 info, 2-4 debug, 5+ trace.
    pub verbosity: u8,
}

/// An address setting (`--address`, `--healthz-bind-address`); its `Default`,
/// 0.0.0.0, is only the zero value `Flags::default()` starts from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Address(pub std::net::IpAddr);

impl Default for Address {
    fn default() -> Self {
        Address(std::net::IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED))
    }
}

impl value::SettingValue for Address {
    const KIND: value::Kind = value::Kind::Str;
    fn decode(json: &serde_json::Value) -> Result<Self, value::ValueError> {
        std::net::IpAddr::decode(json).map(Address)
    }
    fn encode(&self) -> serde_json::Value {
        self.0.encode()
    }
}

/// How cgroups are managed on the node (upstream `--cgroup-driver`): by writing
/// cgroupfs directly, or through systemd, which owns the tree on systemd hosts (slices
/// for pods, scopes for containers). The runtime must use the same driver.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CgroupDriver {
    /// Direct writes to cgroupfs (`/kubepods/burstable/pod<uid>`).
    #[default]
    Cgroupfs,
    /// Transient systemd slices (`kubepods-burstable-pod<uid>.slice`).
    Systemd,
}

impl CgroupDriver {
    /// The name the flag, the config file and CRI use.
    pub fn as_str(self) -> &'static str {
        match self {
            CgroupDriver::Cgroupfs => "cgroupfs",
            CgroupDriver::Systemd => "systemd",
        }
    }
}

/// A cgroup driver name other than `cgroupfs` and `systemd`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not a cgroup driver: use \"cgroupfs\" or \"systemd\"")]
pub struct UnknownCgroupDriver(pub String);

impl std::str::FromStr for CgroupDriver {
    type Err = UnknownCgroupDriver;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "cgroupfs" => Ok(CgroupDriver::Cgroupfs),
            "systemd" => Ok(CgroupDriver::Systemd),
            other => Err(UnknownCgroupDriver(other.to_owned())),
        }
    }
}

crate::named_setting!(
    CgroupDriver,
    crate::server::authz::AuthorizationMode,
    crate::runtime::swap::SwapBehavior,
    crate::images::pull_records::VerificationPolicy,
    crate::log_format::LogFormat,
);

/// Operator subcommands.
#[derive(Debug)]
pub enum Command {
    /// Print the container runtime's name, version, API version and conditions.
    RuntimeInfo(RuntimeInfoFlags),
    /// List the pods and containers litelet runs in the runtime (like crictl ps -a).
    Ps(RuntimeInfoFlags),
}

/// Flags of `litelet runtime-info` and `litelet ps`.
#[derive(Debug, Clone)]
pub struct RuntimeInfoFlags {
    pub runtime: RuntimeFlags,
}

/// How to reach the CRI runtime.
#[derive(Debug, Clone, Default)]
pub struct RuntimeFlags {
    pub container_runtime_endpoint: String,
    pub runtime_request_timeout: Duration,
    pub image_pull_timeout: Duration,
}

impl RuntimeFlags {
    /// The runtime endpoint and call deadlines, validated.
    pub fn resolve(&self) -> Result<(Endpoint, ConnectOptions), CriError> {
        let endpoint = Endpoint::parse(&self.container_runtime_endpoint)?;
        let options = ConnectOptions {
            request_timeout: self.runtime_request_timeout,
            pull_timeout: self.image_pull_timeout,
        };
        Ok((endpoint, options))
    }
}

/// Why [`Flags::try_load_from`] did not give flags.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// `--help`: the text to print (exit 0).
    #[error("{0}")]
    Help(String),
    /// `--version`: the text to print (exit 0).
    #[error("{0}")]
    Version(String),
    #[error(transparent)]
    CommandLine(#[from] cmdline::CommandLineError),
    #[error(transparent)]
    File(#[from] file::ConfigFileError),
    /// Settings litelet cannot honour or bad values, each named.
    #[error("{}", decode::problems_text(.0))]
    Invalid(Vec<decode::Problem>),
    /// The merged settings contradict each other.
    #[error("{0}")]
    Inconsistent(String),
    #[error(transparent)]
    Shutdown(#[from] crate::nodeshutdown::config::ShutdownConfigError),
}

impl Flags {
    /// litelet's defaults (the `default` of every setting of `settings.rs`).
    pub fn defaults() -> Flags {
        let mut flags = Flags::default();
        for setting in table::all() {
            // Checked by a test: every default is a good value of its setting.
            let _ = decode::apply_default(setting, &mut flags);
        }
        flags
    }

    /// Parses the process's command line and merges the config files under it.
    /// Prints and exits for `--help` and `--version`.
    pub fn load() -> Result<Flags, LoadError> {
        match Flags::try_load_from(std::env::args_os()) {
            Err(LoadError::Help(text) | LoadError::Version(text)) => {
                println!("{text}");
                std::process::exit(0)
            }
            other => other,
        }
    }

    /// Parses `args` (program name first) and merges the `--config` file and the
    /// `--config-dir` drop-ins under them, as upstream does.
    pub fn try_load_from<I, T>(args: I) -> Result<Flags, LoadError>
    where
        I: IntoIterator<Item = T>,
        T: Into<OsString>,
    {
        decode::load(args_of(args)?, true)
    }

    /// Like [`Flags::try_load_from`] without reading any file: the command line over
    /// the defaults.
    pub fn try_parse_from<I, T>(args: I) -> Result<Flags, LoadError>
    where
        I: IntoIterator<Item = T>,
        T: Into<OsString>,
    {
        decode::load(args_of(args)?, false)
    }

    /// Checks that span several settings (after the merge).
    fn check(&self) -> Result<(), LoadError> {
        self.shutdown.validate()?;
        self.tls_policy()
            .map_err(|e| LoadError::Inconsistent(e.to_string()))?;
        self.node_allocatable_enforcement()
            .map_err(|problems| LoadError::Inconsistent(problems.join("; ")))?;
        self.pull_concurrency()
            .map_err(|e| LoadError::Inconsistent(e.to_string()))?;
        let (min, max) = (self.minimum_image_ttl_duration, self.image_maximum_gc_age);
        if !max.is_zero() && max <= min {
            return Err(LoadError::Inconsistent(format!(
                "imageMaximumGCAge {max:?} must be greater than imageMinimumGCAge \
                 (--minimum-image-ttl-duration) {min:?}"
            )));
        }
        if self.image_gc_low_threshold > self.image_gc_high_threshold {
            return Err(LoadError::Inconsistent(format!(
                "image GC low threshold {}% (--image-gc-low-threshold, imageGCLowThresholdPercent) \
                 must not exceed the high threshold {}% (--image-gc-high-threshold, \
                 imageGCHighThresholdPercent)",
                self.image_gc_low_threshold, self.image_gc_high_threshold
            )));
        }
        Ok(())
    }

    /// How many image pulls may run at once (`serializeImagePulls`,
    /// `maxParallelImagePulls`), checked as upstream does.
    pub fn pull_concurrency(
        &self,
    ) -> Result<
        crate::images::pull_limit::PullConcurrency,
        crate::images::pull_limit::PullConcurrencyError,
    > {
        crate::images::pull_limit::PullConcurrency::from_settings(
            Some(self.serialize_image_pulls),
            self.max_parallel_image_pulls,
        )
    }

    /// --enforce-node-allocatable with the cgroups it names, checked as upstream does.
    pub fn node_allocatable_enforcement(
        &self,
    ) -> Result<crate::cgroups::allocatable::EnforcementConfig, Vec<String>> {
        crate::cgroups::allocatable::EnforcementConfig::new(
            &self.enforce_node_allocatable,
            self.system_reserved_cgroup.as_deref(),
            self.kube_reserved_cgroup.as_deref(),
        )
    }

    /// The log manager's settings; `None` when rotation is off (negative max size).
    pub fn log_manager_config(&self) -> Option<crate::logs::LogManagerConfig> {
        // Checked when decoded.
        let max_size = crate::logs::parse_max_size(&self.container_log_max_size).ok()??;
        Some(crate::logs::LogManagerConfig {
            policy: crate::logs::RotatePolicy {
                max_size,
                max_files: self.container_log_max_files as usize,
            },
            workers: self.container_log_max_workers.max(1) as usize,
            interval: self.container_log_monitor_interval,
            pod_logs_dir: self.pod_logs_dir.clone(),
        })
    }
}

/// The arguments as text; a non-UTF-8 one is refused by position.
fn args_of<I, T>(args: I) -> Result<Vec<String>, LoadError>
where
    I: IntoIterator<Item = T>,
    T: Into<OsString>,
{
    args.into_iter()
        .enumerate()
        .map(|(i, a)| {
            a.into()
                .into_string()
                .map_err(|_| LoadError::CommandLine(cmdline::CommandLineError::NotUtf8(i)))
        })
        .collect()
}

/// The eviction manager's configuration from these flags.
pub fn eviction_config(
    flags: &Flags,
) -> Result<crate::eviction::EvictionConfig, crate::eviction::EvictionConfigError> {
    let text = |map: &BTreeMap<String, String>, sep| {
        (!map.is_empty()).then(|| value::pairs_text(map, sep))
    };
    let hard = Some(value::pairs_text(&flags.eviction_hard, '<'));
    let soft = text(&flags.eviction_soft, '<');
    let grace = text(&flags.eviction_soft_grace_period, '=');
    let reclaim = text(&flags.eviction_minimum_reclaim, '=');
    crate::eviction::EvictionConfig::from_flags(&crate::eviction::EvictionFlags {
        hard: hard.as_deref(),
        soft: soft.as_deref(),
        soft_grace_period: grace.as_deref(),
        minimum_reclaim: reclaim.as_deref(),
        pressure_transition_period: flags.eviction_pressure_transition_period,
        max_pod_grace_period_seconds: i64::from(flags.eviction_max_pod_grace_period),
        duration: parse_duration,
    })
}

/// A Go duration that is not negative (the parser the eviction module is handed).
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    value::parse_duration(text).map_err(|e| e.to_string())
}

/// Log level filter for `-v N`, used when RUST_LOG is unset.
pub fn log_filter(verbosity: u8) -> log::LevelFilter {
    match verbosity {
        0..=1 => log::LevelFilter::Info,
        2..=4 => log::LevelFilter::Debug,
        _ => log::LevelFilter::Trace,
    }
}

#[cfg(test)]
mod tests;
