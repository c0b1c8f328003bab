//! Command-line flags and the config file merged under them.
//!
//! [`Flags`] is what clap parses, with the upstream kubelet's flag names where the
//! meaning is the same; [`RuntimeFlags::resolve`] turns the runtime flags into checked
//! values without touching the machine.
//!
//! [`Flags::load`] parses the command line on the main thread at start-up and merges
//! the `--config` file (see [`mod@file`]) under it: a value from the file fills every flag
//! the command line did not set. `Flags` stays the one struct the rest of litelet reads.

pub mod components;
pub mod configz;
pub mod file;

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use clap::parser::ValueSource;
use clap::{ArgMatches, Args, CommandFactory, FromArgMatches, Parser, Subcommand};

use crate::cri::{ConnectOptions, CriError, Endpoint};
use crate::node;

/// The default CRI socket, containerd's.
pub const DEFAULT_RUNTIME_ENDPOINT: &str = "unix:///run/containerd/containerd.sock";

/// litelet's command line.
#[derive(Debug, Parser)]
#[command(
    name = "litelet",
    version,
    about = "A small Kubernetes node agent (kubelet) for edge machines",
    args_conflicts_with_subcommands = true
)]
pub struct Flags {
    #[command(subcommand)]
    pub command: Option<Command>,

    #[command(flatten)]
    pub runtime: RuntimeFlags,

    /// kubeconfig for the API server; without it litelet runs in standalone mode
    /// (static pods from --pod-manifest-path only).
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,

    /// kubeconfig with bootstrap credentials (a bootstrap token): when --kubeconfig is
    /// missing or its client certificate is not valid, litelet asks the cluster for a
    /// certificate with these and writes --kubeconfig for it (TLS bootstrap).
    #[arg(long, value_name = "FILE", requires = "kubeconfig")]
    pub bootstrap_kubeconfig: Option<PathBuf>,

    /// Where issued client certificates are kept (kubelet-client-current.pem);
    /// default `<root-dir>/pki`.
    #[arg(long, value_name = "DIR")]
    pub cert_dir: Option<PathBuf>,

    /// Renew the client certificate through the CSR API before it expires and use
    /// the new one without a restart.
    #[arg(long, value_name = "BOOL", default_value_t = false, action = clap::ArgAction::Set)]
    pub rotate_certificates: bool,

    /// Ask the cluster for the node server's certificate (signer
    /// kubernetes.io/kubelet-serving) and renew it; until one is issued the node
    /// server keeps its own.
    #[arg(long, value_name = "BOOL", default_value_t = false, action = clap::ArgAction::Set)]
    pub rotate_server_certificates: bool,

    /// Where device plugins find the registration socket (`kubelet.sock`) and serve
    /// their own. Plugins hard-code upstream's path, so only tests move it; litelet's
    /// device allocations are kept under --root-dir whatever this says.
    #[arg(long, value_name = "DIR", default_value = crate::devicemanager::DEFAULT_DIR)]
    pub device_plugins_dir: PathBuf,

    /// Directory of static pod manifests (YAML or JSON).
    #[arg(long, value_name = "DIR")]
    pub pod_manifest_path: Option<PathBuf>,

    /// The node's name (defaults to the machine's hostname).
    #[arg(long, value_name = "NAME")]
    pub hostname_override: Option<String>,

    /// The IP address the node reports as InternalIP.
    #[arg(long, value_name = "IP")]
    pub node_ip: Option<std::net::IpAddr>,

    /// Where litelet keeps its state (allocation checkpoint, pod directories). The
    /// upstream kubelet's default, because CSI drivers' and device plugins'
    /// DaemonSets hard-code `/var/lib/kubelet/{plugins,plugins_registry,pods}`.
    #[arg(long, value_name = "DIR", default_value = "/var/lib/kubelet")]
    pub root_dir: PathBuf,

    /// Parent cgroup of the `kubepods` hierarchy.
    #[arg(long, value_name = "/NAME", default_value = "/")]
    pub cgroup_root: String,

    /// How pod cgroups are made: `cgroupfs` (litelet writes cgroupfs itself) or
    /// `systemd` (a transient slice per pod through systemd's D-Bus API). It must match
    /// the runtime's driver; litelet refuses to start when the runtime says otherwise.
    #[arg(long, value_name = "DRIVER", default_value = "cgroupfs", value_parser = cgroup_driver)]
    pub cgroup_driver: CgroupDriver,

    /// KubeletConfiguration file (YAML); flags override it.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,

    /// Most pods this node runs.
    #[arg(long, value_name = "N", default_value_t = 110)]
    pub max_pods: u32,

    /// Most processes (pids.max) of each pod's cgroup; zero or negative: no limit.
    #[arg(long, value_name = "N", default_value_t = -1, allow_negative_numbers = true)]
    pub pod_max_pids: i64,

    /// Refuse to start while the host has swap on (/proc/swaps lists a swap area).
    #[arg(long, value_name = "BOOL", default_value_t = true, action = clap::ArgAction::Set)]
    pub fail_swap_on: bool,

    /// How containers may use the host's swap (`memorySwap.swapBehavior`: NoSwap or
    /// LimitedSwap). Config file only, as upstream.
    #[arg(skip)]
    pub memory_swap_behavior: crate::runtime::swap::SwapBehavior,

    /// Graceful node shutdown (`shutdownGracePeriod`, `shutdownGracePeriodCriticalPods`,
    /// `shutdownGracePeriodByPodPriority`). Config file only, as upstream.
    #[arg(skip)]
    pub shutdown: crate::nodeshutdown::ShutdownConfig,

    /// Labels to add when registering the node (`key=value,...`); only labels a node
    /// may set on itself (no `node-role.kubernetes.io/...`).
    #[arg(long, value_name = "KEY=VALUE,...", value_parser = node_flag(node::config::parse_node_labels))]
    pub node_labels: Option<String>,

    /// Taints the node is created with (`key=value:Effect,...`); never changed later.
    #[arg(long, value_name = "KEY=VALUE:EFFECT,...", value_parser = node_flag(node::config::parse_taints))]
    pub register_with_taints: Option<String>,

    /// Resources held back for Kubernetes daemons (`cpu=100m,memory=100Mi,...`).
    #[arg(long, value_name = "RESOURCE=QUANTITY,...", value_parser = node_flag(node::config::parse_reserved))]
    pub kube_reserved: Option<String>,

    /// Resources held back for the operating system (`cpu=100m,memory=100Mi,...`).
    #[arg(long, value_name = "RESOURCE=QUANTITY,...", value_parser = node_flag(node::config::parse_reserved))]
    pub system_reserved: Option<String>,

    /// What the reservations are enforced on (`KEY,...`): `pods` limits the `kubepods`
    /// cgroup to the capacity minus the system and kube reservations,
    /// `system-reserved` / `kube-reserved` limit the cgroups named below to their
    /// reservation (`-compressible`: CPU only), `none` (alone) enforces nothing.
    #[arg(long, value_name = "KEY,...", value_delimiter = ',', default_value = "pods", value_parser = enforcement_key)]
    pub enforce_node_allocatable: Vec<String>,

    /// Existing cgroup of the operating system's daemons (e.g. `/system.slice`), limited
    /// to --system-reserved when --enforce-node-allocatable has `system-reserved`.
    #[arg(long, value_name = "/CGROUP")]
    pub system_reserved_cgroup: Option<String>,

    /// Existing cgroup of the Kubernetes daemons (e.g. `/kube.slice`), limited to
    /// --kube-reserved when --enforce-node-allocatable has `kube-reserved`.
    #[arg(long, value_name = "/CGROUP")]
    pub kube_reserved_cgroup: Option<String>,

    /// Hard eviction thresholds (`memory.available<100Mi,nodefs.available<10%`); replaces the defaults.
    #[arg(long, value_name = "SIGNAL<VALUE,...", value_parser = node_flag(node::config::parse_eviction_hard))]
    pub eviction_hard: Option<String>,

    /// Soft eviction thresholds (`memory.available<1.5Gi`); each needs a grace period.
    #[arg(long, value_name = "SIGNAL<VALUE,...", value_parser = node_flag(node::config::parse_eviction_hard))]
    pub eviction_soft: Option<String>,

    /// How long each soft threshold must be met before pods are evicted (`memory.available=1m30s`).
    #[arg(long, value_name = "SIGNAL=DURATION,...", value_parser = eviction_grace_periods)]
    pub eviction_soft_grace_period: Option<String>,

    /// How much more than a threshold must be available before its pressure ends (`nodefs.available=500Mi`).
    #[arg(long, value_name = "SIGNAL=QUANTITY,...", value_parser = node_flag(crate::eviction::config::parse_minimum_reclaim))]
    pub eviction_minimum_reclaim: Option<String>,

    /// How long a pressure condition stays true after it was last seen, as a Go duration.
    #[arg(long, value_name = "DURATION", default_value = "5m0s", value_parser = parse_duration)]
    pub eviction_pressure_transition_period: Duration,

    /// Longest grace period (s) a soft eviction gives a pod; 0 keeps the pod's own.
    #[arg(long, value_name = "SECONDS", default_value_t = 0)]
    pub eviction_max_pod_grace_period: i32,

    /// How often the node status is computed (and sent when it changed), as a Go duration.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_duration)]
    pub node_status_update_frequency: Duration,

    /// Port of the authenticated node API (HTTPS).
    #[arg(long, value_name = "PORT", default_value_t = 10250)]
    pub port: u16,

    /// Port of the loopback health endpoint.
    #[arg(long, value_name = "PORT", default_value_t = 10248)]
    pub healthz_port: u16,

    /// Address the node API listens on.
    #[arg(long, value_name = "IP", default_value = "0.0.0.0")]
    pub address: std::net::IpAddr,

    /// Address of the health endpoint (keep it on loopback).
    #[arg(long, value_name = "IP", default_value = "127.0.0.1")]
    pub healthz_bind_address: std::net::IpAddr,

    /// Let requests without credentials in as system:anonymous.
    #[arg(long, value_name = "BOOL", default_value_t = false, action = clap::ArgAction::Set)]
    pub anonymous_auth: bool,

    /// How node API requests are authorized: Webhook (SubjectAccessReview) or AlwaysAllow.
    #[arg(long, value_name = "MODE", value_enum, default_value = "Webhook")]
    pub authorization_mode: crate::server::authz::AuthorizationMode,

    /// How long a TokenReview's acceptance of a bearer token is trusted.
    #[arg(long, value_name = "DURATION", default_value = "2m0s", value_parser = parse_duration)]
    pub authentication_token_webhook_cache_ttl: Duration,

    /// How long a SubjectAccessReview's "allowed" is trusted.
    #[arg(long, value_name = "DURATION", default_value = "5m0s", value_parser = parse_duration)]
    pub authorization_webhook_cache_authorized_ttl: Duration,

    /// How long a SubjectAccessReview's "denied" is trusted.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = parse_duration)]
    pub authorization_webhook_cache_unauthorized_ttl: Duration,

    /// Config file fields accepted with no effect (each with why), warned about once at
    /// start-up.
    #[arg(skip)]
    pub config_no_effect: Vec<String>,

    /// Serving certificate of the node API.
    #[arg(long, value_name = "FILE")]
    pub tls_cert_file: Option<PathBuf>,

    /// Serving key of the node API.
    #[arg(long, value_name = "FILE")]
    pub tls_private_key_file: Option<PathBuf>,

    /// CA bundle that client certificates of the node API must chain to.
    #[arg(long, value_name = "FILE")]
    pub client_ca_file: Option<PathBuf>,

    /// Root of the pod log directories (the config file's podLogsDir).
    #[arg(long, value_name = "DIR", default_value = "/var/log/pods")]
    pub pod_logs_dir: PathBuf,

    /// Rotate a container's log once it reaches this size (a quantity such as 10Mi);
    /// a negative value turns rotation off.
    #[arg(long, value_name = "QUANTITY", default_value = crate::logs::DEFAULT_MAX_SIZE, value_parser = log_max_size)]
    pub container_log_max_size: String,

    /// Log files kept per container, the live one included (at least 2).
    #[arg(long, value_name = "N", default_value_t = crate::logs::DEFAULT_MAX_FILES, value_parser = clap::value_parser!(u32).range(2..))]
    pub container_log_max_files: u32,

    /// Threads rotating container logs. Config file only (`containerLogMaxWorkers`),
    /// as upstream.
    #[arg(skip = crate::logs::DEFAULT_MAX_WORKERS)]
    pub container_log_max_workers: u32,

    /// How often container log sizes are checked. Config file only
    /// (`containerLogMonitorInterval`), as upstream.
    #[arg(skip = crate::logs::DEFAULT_MONITOR_INTERVAL)]
    pub container_log_monitor_interval: Duration,

    /// The host resolver configuration pods with dnsPolicy Default inherit.
    #[arg(long, value_name = "FILE", default_value = "/etc/resolv.conf")]
    pub resolv_conf: PathBuf,

    /// Cluster DNS server IPs for dnsPolicy ClusterFirst (comma separated).
    #[arg(long, value_name = "IP,...", value_delimiter = ',')]
    pub cluster_dns: Vec<String>,

    /// Unsafe sysctls (or prefixes ending in `*`) pods may set, comma separated;
    /// each must be namespaced (`kernel.shm*`, `kernel.msg*`, `kernel.sem`,
    /// `fs.mqueue.*`, `net.*`). The safe sysctls are always allowed.
    #[arg(long, value_name = "SYSCTL,...", value_delimiter = ',', value_parser = unsafe_sysctl)]
    pub allowed_unsafe_sysctls: Vec<String>,

    /// The cluster's DNS domain.
    #[arg(long, value_name = "DOMAIN", default_value = "cluster.local")]
    pub cluster_domain: String,

    /// How often a running pod is synced without any event, as a Go duration.
    #[arg(long, value_name = "DURATION", default_value = "1m0s", value_parser = parse_duration)]
    pub sync_frequency: Duration,

    /// Dead containers younger than this are kept, as a Go duration.
    #[arg(long, value_name = "DURATION", default_value = "0s", value_parser = parse_duration)]
    pub minimum_container_ttl_duration: Duration,

    /// Image disk usage (percent) at which image garbage collection starts.
    #[arg(long, value_name = "PERCENT", default_value_t = 85, value_parser = clap::value_parser!(u8).range(0..=100))]
    pub image_gc_high_threshold: u8,

    /// Image disk usage (percent) image garbage collection frees down to.
    #[arg(long, value_name = "PERCENT", default_value_t = 80, value_parser = clap::value_parser!(u8).range(0..=100))]
    pub image_gc_low_threshold: u8,

    /// Sustained requests per second to the API server (client-side rate limit).
    #[arg(long, value_name = "QPS", default_value_t = 50.0)]
    pub kube_api_qps: f32,

    /// Requests the API client may burst above the QPS.
    #[arg(long, value_name = "N", default_value_t = 100)]
    pub kube_api_burst: u32,

    /// Keep a node-local checkpoint of the API server's pods (and Services) under
    /// the root dir, and run the pods from it when litelet starts while the API
    /// server is unreachable (edge autonomy). Secrets are never written to it.
    #[arg(long, value_name = "BOOL", default_value_t = true, action = clap::ArgAction::Set)]
    pub checkpoint_api_pods: bool,

    /// Keep on the node what its pods need to start (the service-account tokens and
    /// the secrets and configMaps they reference, under the root dir, 0600) so they
    /// run again after a reboot while the API server is unreachable (edge autonomy,
    /// docs/security.md). false keeps no secret on disk and removes what was kept.
    #[arg(long, value_name = "BOOL", default_value_t = true, action = clap::ArgAction::Set)]
    pub checkpoint_secrets: bool,

    /// Seal what --checkpoint-secrets keeps with this key (32 bytes, raw or as 64
    /// hex digits; ChaCha20-Poly1305), e.g. a file on separate media. Without it the
    /// copies are only checksummed. An unreadable key keeps nothing and reads nothing.
    #[arg(long, value_name = "FILE")]
    pub checkpoint_secrets_key_file: Option<PathBuf>,

    /// Sustained Event writes per second, with a rate limit of their own so a burst
    /// of events does not delay pod statuses.
    #[arg(long, value_name = "QPS", default_value_t = 50.0)]
    pub event_qps: f32,

    /// Event writes that may burst above the event QPS.
    #[arg(long, value_name = "N", default_value_t = 100)]
    pub event_burst: u32,

    /// Authorized connections the node API keeps open at once, every class together
    /// (a litelet flag; upstream has no limit). Default: one per 2 MiB of memory,
    /// 256 to 8192. Bearer-token and anonymous users share a quarter of it; one that
    /// is authorized beyond its class's share gets a 503.
    #[arg(long, value_name = "N", value_parser = at_least_one)]
    pub server_max_connections: Option<usize>,

    /// Node API connections still in the TLS handshake, first request or its
    /// authentication and authorization (a litelet flag). When full, the oldest one
    /// of the client address holding the most is closed for a newcomer.
    #[arg(long, value_name = "N", default_value_t = crate::server::DEFAULT_MAX_UNAUTHENTICATED_CONNECTIONS, value_parser = at_least_one)]
    pub server_max_unauthenticated_connections: usize,

    /// Node API connections from one client address still in their handshake and
    /// first request (a litelet flag); more wait their turn, up to 5 s.
    #[arg(long, value_name = "N", default_value_t = crate::server::DEFAULT_MAX_UNAUTHENTICATED_PER_CLIENT, value_parser = at_least_one)]
    pub server_max_unauthenticated_per_client: usize,

    /// TLS 1.2 cipher suites the node API offers, by Go's names (comma-separated);
    /// TLS 1.3 suites are always on, as in Go. Suites rustls has no implementation of
    /// (RSA key exchange, CBC) are left out with a warning; a list of only those is
    /// refused. Default: rustls's (ECDHE with AES-GCM or ChaCha20-Poly1305).
    #[arg(long, value_name = "NAMES", value_delimiter = ',')]
    pub tls_cipher_suites: Vec<String>,

    /// Lowest TLS version of the node API: VersionTLS12 (default) or VersionTLS13;
    /// VersionTLS10/11 are accepted and mean VersionTLS12 (litelet never speaks lower).
    #[arg(long, value_name = "VERSION", default_value = "")]
    pub tls_min_version: String,

    /// An exec, attach or port-forward stream idle this long is closed, as a Go
    /// duration; 0 means never.
    #[arg(long, value_name = "DURATION", default_value = "4h0m0s", value_parser = parse_duration)]
    pub streaming_connection_idle_timeout: Duration,

    /// How often the static pod folder is rescanned besides inotify, as a Go duration.
    #[arg(long, value_name = "DURATION", default_value = "20s", value_parser = parse_duration)]
    pub file_check_frequency: Duration,

    /// Minimum age of an unused image before GC may remove it, as a Go duration.
    #[arg(long, value_name = "DURATION", default_value = "2m0s", value_parser = parse_duration)]
    pub minimum_image_ttl_duration: Duration,

    /// How often the node status is sent even when unchanged. Config file only
    /// (`nodeStatusReportFrequency`), as upstream.
    #[arg(skip = crate::node::config::DEFAULT_NODE_STATUS_REPORT_FREQUENCY)]
    pub node_status_report_frequency: Duration,

    /// Whether a pod may use an image already on the node that was pulled with
    /// credentials it does not offer. Config file only
    /// (`imagePullCredentialsVerificationPolicy`), as upstream.
    #[arg(skip)]
    pub image_pull_credentials_verification_policy:
        crate::runtime::pull_records::VerificationPolicy,

    /// Images `NeverVerifyAllowlistedImages` does not check. Config file only
    /// (`preloadedImagesVerificationAllowlist`), as upstream.
    #[arg(skip)]
    pub preloaded_images_verification_allowlist: Vec<String>,

    /// Credential provider plugins (a CredentialProviderConfig, YAML or JSON, or a
    /// directory of them merged in name order): executables that give registry
    /// credentials for the images they match. Flag only, as upstream.
    #[arg(long, value_name = "PATH")]
    pub image_credential_provider_config: Option<PathBuf>,

    /// Where the credential provider plugins' executables are. Flag only, as upstream.
    #[arg(long, value_name = "DIR")]
    pub image_credential_provider_bin_dir: Option<PathBuf>,

    /// Log verbosity like the kubelet's -v: 0-1 info, 2-4 debug, 5+ trace. RUST_LOG wins.
    #[arg(
        short = 'v',
        long = "v",
        value_name = "N",
        default_value_t = 0,
        global = true
    )]
    pub verbosity: u8,
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

/// Why a cgroup driver name is refused; the config file says the same.
pub fn unsupported_cgroup_driver(driver: &str) -> String {
    UnknownCgroupDriver(driver.to_owned()).to_string()
}

/// A cgroup driver name other than `cgroupfs` and `systemd`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not a cgroup driver: use \"cgroupfs\" or \"systemd\"")]
pub struct UnknownCgroupDriver(pub String);

/// Parses a cgroup driver name as the flag and the config file take it.
pub fn cgroup_driver(text: &str) -> Result<CgroupDriver, UnknownCgroupDriver> {
    match text {
        "cgroupfs" => Ok(CgroupDriver::Cgroupfs),
        "systemd" => Ok(CgroupDriver::Systemd),
        other => Err(UnknownCgroupDriver(other.to_owned())),
    }
}

/// Why [`Flags::try_load_from`] failed.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// A bad command line, or `--help`/`--version` (clap prints and exits for these).
    #[error(transparent)]
    Args(#[from] clap::Error),
    #[error(transparent)]
    File(#[from] file::ConfigFileError),
    /// The merged flags and file contradict each other.
    #[error("{0}")]
    Invalid(String),
    #[error(transparent)]
    Shutdown(#[from] crate::nodeshutdown::config::ShutdownConfigError),
}

impl Flags {
    /// Parses the process's command line and merges the `--config` file under it.
    /// Exits as clap does on a bad command line, `--help` and `--version`.
    pub fn load() -> Result<Flags, LoadError> {
        match Flags::try_load_from(std::env::args_os()) {
            Err(LoadError::Args(err)) => err.exit(),
            other => other,
        }
    }

    /// Parses `args` (program name first). For the agent (no subcommand) with
    /// `--config FILE`, every value of the file fills the flag of the same meaning
    /// unless the command line set that flag.
    pub fn try_load_from<I, T>(args: I) -> Result<Flags, LoadError>
    where
        I: IntoIterator<Item = T>,
        T: Into<OsString> + Clone,
    {
        let matches = Flags::command().try_get_matches_from(args)?;
        let mut flags = Flags::from_arg_matches(&matches)?;
        if flags.command.is_none() {
            if let Some(path) = flags.config.clone() {
                file::load(&path)?.apply(&mut flags, |id| set_on_command_line(&matches, id));
            }
        }
        flags.check()?;
        Ok(flags)
    }

    /// Checks that span several flags (after the file merge).
    fn check(&self) -> Result<(), LoadError> {
        self.shutdown.validate()?;
        self.tls_policy()
            .map_err(|e| LoadError::Invalid(e.to_string()))?;
        self.node_allocatable_enforcement()
            .map_err(|problems| LoadError::Invalid(problems.join("; ")))?;
        if self.image_gc_low_threshold > self.image_gc_high_threshold {
            return Err(LoadError::Invalid(format!(
                "image GC low threshold {}% (--image-gc-low-threshold, imageGCLowThresholdPercent) \
                 must not exceed the high threshold {}% (--image-gc-high-threshold, \
                 imageGCHighThresholdPercent)",
                self.image_gc_low_threshold, self.image_gc_high_threshold
            )));
        }
        Ok(())
    }
}

impl Flags {
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
}

/// One `--enforce-node-allocatable` key (an empty one is no key).
fn enforcement_key(text: &str) -> Result<String, crate::cgroups::allocatable::UnknownEnforcement> {
    if !text.trim().is_empty() {
        text.trim()
            .parse::<crate::cgroups::allocatable::Enforcement>()?;
    }
    Ok(text.trim().to_owned())
}

/// Whether the user gave argument `id` (on the command line or through its environment
/// variable) rather than leaving its default.
fn set_on_command_line(matches: &ArgMatches, id: &str) -> bool {
    matches!(
        matches.value_source(id),
        Some(ValueSource::CommandLine | ValueSource::EnvVariable)
    )
}

/// Operator subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Print the container runtime's name, version, API version and conditions.
    RuntimeInfo(RuntimeInfoFlags),
    /// List the pods and containers litelet runs in the runtime (like crictl ps -a).
    Ps(RuntimeInfoFlags),
}

/// Flags of `litelet runtime-info`.
#[derive(Debug, Args)]
pub struct RuntimeInfoFlags {
    #[command(flatten)]
    pub runtime: RuntimeFlags,
}

/// How to reach the CRI runtime.
#[derive(Debug, Args, Clone)]
pub struct RuntimeFlags {
    /// The CRI runtime's socket.
    #[arg(long, value_name = "unix:///PATH", default_value = DEFAULT_RUNTIME_ENDPOINT)]
    pub container_runtime_endpoint: String,

    /// Deadline of each runtime call, as a Go duration (e.g. 2m0s, 30s).
    #[arg(long, value_name = "DURATION", default_value = "2m0s", value_parser = parse_duration)]
    pub runtime_request_timeout: Duration,

    /// Deadline of an image pull, as a Go duration.
    #[arg(long, value_name = "DURATION", default_value = "10m0s", value_parser = parse_duration)]
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

/// A clap value parser that checks a node flag with `parse` and keeps its text
/// (`Flags::node_config` parses it again into values).
fn node_flag<T: 'static, E: 'static>(
    parse: fn(&str) -> Result<T, E>,
) -> impl Fn(&str) -> Result<String, E> + Clone + Send + Sync + 'static {
    move |text| parse(text).map(|_| text.to_owned())
}

/// `--eviction-soft-grace-period`, checked with litelet's duration syntax.
fn eviction_grace_periods(text: &str) -> Result<String, crate::eviction::EvictionConfigError> {
    crate::eviction::config::parse_grace_periods(text, parse_duration).map(|_| text.to_owned())
}

/// The eviction manager's configuration from these flags.
pub fn eviction_config(
    flags: &Flags,
) -> Result<crate::eviction::EvictionConfig, crate::eviction::EvictionConfigError> {
    crate::eviction::EvictionConfig::from_flags(&crate::eviction::EvictionFlags {
        hard: flags.eviction_hard.as_deref(),
        soft: flags.eviction_soft.as_deref(),
        soft_grace_period: flags.eviction_soft_grace_period.as_deref(),
        minimum_reclaim: flags.eviction_minimum_reclaim.as_deref(),
        pressure_transition_period: flags.eviction_pressure_transition_period,
        max_pod_grace_period_seconds: i64::from(flags.eviction_max_pod_grace_period),
        duration: parse_duration,
    })
}

/// One `--allowed-unsafe-sysctls` entry, checked as upstream does at start-up.
fn unsafe_sysctl(text: &str) -> Result<String, crate::admission::sysctls::SysctlError> {
    crate::admission::sysctls::SysctlAllowlist::new(None, &[text.to_owned()])
        .map(|_| text.to_owned())
}

/// `--container-log-max-size`, checked as upstream does at start-up.
fn log_max_size(text: &str) -> Result<String, crate::logs::LogManagerError> {
    crate::logs::parse_max_size(text).map(|_| text.to_owned())
}

impl Flags {
    /// The log manager's settings; `None` when rotation is off (negative max size).
    pub fn log_manager_config(&self) -> Option<crate::logs::LogManagerConfig> {
        // Checked by the value parser and the config file reader.
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

/// A count that is not a number of at least 1.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CountError {
    #[error("must be at least 1")]
    Zero,
    #[error(transparent)]
    NotANumber(#[from] std::num::ParseIntError),
}

/// A count that must be at least 1 (a connection limit of 0 would lock everyone out).
fn at_least_one(text: &str) -> Result<usize, CountError> {
    match text.parse::<usize>()? {
        0 => Err(CountError::Zero),
        n => Ok(n),
    }
}

/// Log level filter for `-v N`, used when RUST_LOG is unset.
pub fn log_filter(verbosity: u8) -> log::LevelFilter {
    match verbosity {
        0..=1 => log::LevelFilter::Info,
        2..=4 => log::LevelFilter::Debug,
        _ => log::LevelFilter::Trace,
    }
}

/// Parses a Go-style duration such as `2m0s`, `1h30m`, `500ms`, `10s` or `0`.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let bad = |why: &str| format!("invalid duration {text:?}: {why}");
    if text == "0" {
        return Ok(Duration::ZERO);
    }
    if text.is_empty() {
        return Err(bad("empty"));
    }
    let mut total = Duration::ZERO;
    let mut rest = text;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(|| bad("missing unit"))?;
        if digits == 0 {
            return Err(bad("expected a number"));
        }
        let number: f64 = rest[..digits].parse().map_err(|_| bad("bad number"))?;
        let unit_len = rest[digits..]
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len() - digits);
        let unit = &rest[digits..digits + unit_len];
        let seconds = match unit {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            other => return Err(bad(&format!("unknown unit {other:?}"))),
        };
        total += Duration::from_secs_f64(number * seconds);
        rest = &rest[digits + unit_len..];
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations() {
        let cases = [
            ("2m0s", 120_000),
            ("10s", 10_000),
            ("1h30m", 5_400_000),
            ("500ms", 500),
            ("1.5s", 1_500),
            ("0", 0),
        ];
        for (text, millis) in cases {
            assert_eq!(
                parse_duration(text).unwrap(),
                Duration::from_millis(millis),
                "{text}"
            );
        }
        for bad in ["", "10", "s", "1x", "1m-2s", "m1"] {
            assert!(parse_duration(bad).is_err(), "{bad} should fail");
        }
    }

    #[test]
    fn upstream_flag_names_parse() {
        let flags = Flags::try_parse_from([
            "litelet",
            "--container-runtime-endpoint",
            "unix:///tmp/x.sock",
            "--pod-manifest-path",
            "/etc/kubernetes/manifests",
            "--hostname-override",
            "edge-1",
            "--max-pods",
            "30",
            "-v",
            "4",
            "--runtime-request-timeout",
            "30s",
        ])
        .unwrap();
        assert!(flags.command.is_none());
        assert_eq!(flags.max_pods, 30);
        assert_eq!(flags.hostname_override.as_deref(), Some("edge-1"));
        assert_eq!(log_filter(flags.verbosity), log::LevelFilter::Debug);
        let (endpoint, options) = flags.runtime.resolve().unwrap();
        assert_eq!(endpoint.to_string(), "unix:///tmp/x.sock");
        assert_eq!(options.request_timeout, Duration::from_secs(30));
    }

    #[test]
    fn enforce_node_allocatable_flags_parse_and_are_validated() {
        let flags = Flags::try_load_from(["litelet"]).unwrap();
        assert_eq!(flags.enforce_node_allocatable, ["pods"]);
        let c = flags.node_allocatable_enforcement().unwrap();
        assert!(c.has(crate::cgroups::allocatable::Enforcement::Pods));
        let flags = Flags::try_load_from([
            "litelet",
            "--enforce-node-allocatable=pods,system-reserved-compressible",
            "--system-reserved-cgroup=/system.slice",
        ])
        .unwrap();
        assert_eq!(
            flags.enforce_node_allocatable,
            ["pods", "system-reserved-compressible"]
        );
        let none = Flags::try_load_from(["litelet", "--enforce-node-allocatable=none"]).unwrap();
        assert!(none.node_allocatable_enforcement().unwrap().keys.is_empty());
        let empty = Flags::try_load_from(["litelet", "--enforce-node-allocatable="]).unwrap();
        assert!(empty
            .node_allocatable_enforcement()
            .unwrap()
            .keys
            .is_empty());

        let unknown = Flags::try_load_from(["litelet", "--enforce-node-allocatable=pods,cpu"]);
        assert!(
            matches!(&unknown, Err(LoadError::Args(e)) if e.to_string().contains("\"cpu\" is not a node allocatable enforcement")),
            "{unknown:?}"
        );
        for (args, why) in [
            (
                vec!["--enforce-node-allocatable=none,pods"],
                "\"none\" must be the only value",
            ),
            (
                vec!["--enforce-node-allocatable=system-reserved"],
                "systemReservedCgroup (--system-reserved-cgroup) must be given when \
                 enforceNodeAllocatable (--enforce-node-allocatable) contains \"system-reserved\"",
            ),
            (
                vec![
                    "--enforce-node-allocatable=kube-reserved-compressible",
                    "--system-reserved-cgroup=/system.slice",
                ],
                "kubeReservedCgroup (--kube-reserved-cgroup) must be given",
            ),
        ] {
            let mut all = vec!["litelet"];
            all.extend(args);
            match Flags::try_load_from(all.clone()) {
                Err(LoadError::Invalid(message)) => assert!(message.contains(why), "{message}"),
                other => panic!("{all:?}: expected a refusal, got {other:?}"),
            }
        }
    }

    #[test]
    fn checkpoint_secrets_is_on_by_default_and_the_file_can_turn_it_off_or_seal_it() {
        let plain = Flags::try_parse_from(["litelet"]).unwrap();
        assert!(plain.checkpoint_secrets);
        assert_eq!(plain.checkpoint_secrets_key_file, None);
        let off = Flags::try_parse_from(["litelet", "--checkpoint-secrets=false"]).unwrap();
        assert!(!off.checkpoint_secrets);
        let file = crate::config::file::parse(
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
             checkpointSecrets: false\ncheckpointSecretsKeyFile: /media/key\n",
            std::path::Path::new("c.yaml"),
        )
        .unwrap();
        let mut flags = Flags::try_parse_from(["litelet"]).unwrap();
        file.apply(&mut flags, |_| false);
        assert!(!flags.checkpoint_secrets);
        assert_eq!(
            flags.checkpoint_secrets_key_file.as_deref(),
            Some(std::path::Path::new("/media/key"))
        );
    }

    #[test]
    fn checkpoint_api_pods_is_on_by_default_and_can_be_turned_off() {
        assert!(
            Flags::try_parse_from(["litelet"])
                .unwrap()
                .checkpoint_api_pods
        );
        let off = Flags::try_parse_from(["litelet", "--checkpoint-api-pods=false"]).unwrap();
        assert!(!off.checkpoint_api_pods);
        let file = crate::config::file::parse(
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\ncheckpointAPIPods: false\n",
            std::path::Path::new("c.yaml"),
        )
        .unwrap();
        let mut flags = Flags::try_parse_from(["litelet"]).unwrap();
        file.apply(&mut flags, |_| false);
        assert!(!flags.checkpoint_api_pods);
    }

    #[test]
    fn node_server_flags() {
        let flags = Flags::try_parse_from(["litelet"]).unwrap();
        assert_eq!(flags.port, 10250);
        assert_eq!(flags.healthz_port, 10248);
        assert!(!flags.anonymous_auth);
        assert_eq!(flags.healthz_bind_address.to_string(), "127.0.0.1");
        assert_eq!(
            flags.authorization_mode,
            crate::server::authz::AuthorizationMode::Webhook
        );
        let flags = Flags::try_parse_from([
            "litelet",
            "--anonymous-auth=true",
            "--authorization-mode",
            "AlwaysAllow",
            "--address",
            "127.0.0.1",
        ])
        .unwrap();
        assert!(flags.anonymous_auth);
        assert_eq!(
            flags.authorization_mode,
            crate::server::authz::AuthorizationMode::AlwaysAllow
        );
    }

    #[test]
    fn server_connection_flags() {
        let flags = Flags::try_parse_from(["litelet"]).unwrap();
        assert_eq!(
            (
                flags.server_max_connections,
                flags.server_max_unauthenticated_connections,
                flags.server_max_unauthenticated_per_client
            ),
            (None, 32, 8)
        );
        let sized = flags.server_config("n").limits.max_connections;
        assert!(
            (crate::server::MIN_MAX_CONNECTIONS..=crate::server::MAX_MAX_CONNECTIONS)
                .contains(&sized),
            "sized by memory: {sized}"
        );
        let flags = Flags::try_parse_from([
            "litelet",
            "--server-max-connections=200",
            "--server-max-unauthenticated-connections=10",
            "--server-max-unauthenticated-per-client=2",
        ])
        .unwrap();
        let limits = flags.server_config("n").limits;
        assert_eq!(
            (
                limits.max_connections,
                limits.max_unauthenticated_connections,
                limits.max_unauthenticated_per_client
            ),
            (200, 10, 2)
        );
        assert!(Flags::try_parse_from(["litelet", "--server-max-connections=0"]).is_err());
    }

    #[test]
    fn tls_and_streaming_settings_from_flags_and_the_config_file() {
        let flags = Flags::try_parse_from([
            "litelet",
            "--tls-cipher-suites=TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,TLS_RSA_WITH_AES_128_GCM_SHA256",
            "--tls-min-version=VersionTLS12",
            "--streaming-connection-idle-timeout=5m",
        ])
        .unwrap();
        let config = flags.server_config("n");
        assert_eq!(
            config.tls.policy.dropped,
            ["TLS_RSA_WITH_AES_128_GCM_SHA256"]
        );
        assert_eq!(config.limits.stream_idle_timeout, Duration::from_secs(300));
        let none = Flags::try_parse_from(["litelet", "--streaming-connection-idle-timeout=0"])
            .unwrap()
            .server_config("n");
        assert!(none.limits.stream_idle_timeout.is_zero(), "0 means never");

        let refused = |args: &[&str]| match Flags::try_load_from(args) {
            Err(LoadError::Invalid(msg)) => msg,
            other => panic!("{args:?}: {other:?}"),
        };
        let msg = refused(&["litelet", "--tls-cipher-suites=TLS_RSA_WITH_RC4_128_SHA"]);
        assert!(msg.contains("TLS_RSA_WITH_RC4_128_SHA"), "{msg}");
        let msg = refused(&["litelet", "--tls-cipher-suites=TLS_MADE_UP"]);
        assert!(msg.contains("TLS_MADE_UP"), "{msg}");
        let msg = refused(&["litelet", "--tls-min-version=VersionTLS9"]);
        assert!(msg.contains("VersionTLS9"), "{msg}");

        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("config.yaml");
        std::fs::write(
            &file,
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
             tlsCipherSuites: [TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384]\n\
             tlsMinVersion: VersionTLS13\nstreamingConnectionIdleTimeout: 30m\n",
        )
        .unwrap();
        let flags = Flags::try_load_from(["litelet", "--config", file.to_str().unwrap()]).unwrap();
        let config = flags.server_config("n");
        assert_eq!(
            config.tls.policy.min_version,
            crate::server::tls::ciphers::MinVersion::Tls13
        );
        assert_eq!(config.limits.stream_idle_timeout, Duration::from_secs(1800));
        let configz = &flags.configz()["kubeletconfig"];
        assert_eq!(configz["tlsMinVersion"], "VersionTLS13");
        assert_eq!(configz["streamingConnectionIdleTimeout"], "30m0s");
        assert_eq!(
            configz["tlsCipherSuites"],
            serde_json::json!(["TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384"])
        );
    }

    #[test]
    fn container_log_flags() {
        let flags = Flags::try_parse_from(["litelet"]).unwrap();
        let config = flags.log_manager_config().unwrap();
        assert_eq!(config.policy.max_size, 10 * 1024 * 1024);
        assert_eq!(config.policy.max_files, 5);
        assert_eq!(config.workers, 1);
        assert_eq!(config.interval, Duration::from_secs(10));
        let flags = Flags::try_parse_from([
            "litelet",
            "--container-log-max-size=1Mi",
            "--container-log-max-files=3",
        ])
        .unwrap();
        let config = flags.log_manager_config().unwrap();
        assert_eq!(
            (config.policy.max_size, config.policy.max_files),
            (1 << 20, 3)
        );
        let off = Flags::try_parse_from(["litelet", "--container-log-max-size=-1"]).unwrap();
        assert!(off.log_manager_config().is_none());
        for bad in [
            ["litelet", "--container-log-max-files=1"],
            ["litelet", "--container-log-max-size=lots"],
        ] {
            assert!(Flags::try_parse_from(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn runtime_info_subcommand() {
        let flags = Flags::try_parse_from([
            "litelet",
            "runtime-info",
            "--container-runtime-endpoint",
            "unix:///run/crio/crio.sock",
        ])
        .unwrap();
        match flags.command {
            Some(Command::RuntimeInfo(info)) => {
                assert_eq!(
                    info.runtime.container_runtime_endpoint,
                    "unix:///run/crio/crio.sock"
                )
            }
            other => panic!("unexpected {other:?}"),
        }
    }
}
