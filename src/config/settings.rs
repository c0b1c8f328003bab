//! The settings litelet implements: one line each, naming its flag, its
//! KubeletConfiguration field, its default (as flag text), the [`super::Flags`] field it
//! fills and what it does. Upstream's names litelet does not implement are in
//! `upstream.rs`. A new setting is one line here plus its `Flags` field.
//!
//! The checks here are the per-value ones (a range, a parser of the owning module);
//! checks across settings are `Flags::check`'s.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::Value;

use super::catalogue::{at, Deprecation, Setting};
use super::value::{pairs_text, Kind, SettingValue, ValueError};
use crate::nodeshutdown::PriorityPeriod;

/// litelet's settings.
#[rustfmt::skip]
pub fn table() -> Vec<Setting> {
    let s = Setting::implemented;
    vec![
        // Where things are.
        s("config", "", "", at!(config),
            "KubeletConfiguration file (YAML or JSON); flags override it."),
        s("config-dir", "", "", at!(config_dir),
            "Folder of KubeletConfiguration drop-ins (*.conf, subfolders too), merged over \
             --config in lexical order, later files winning; flags override them."),
        s("kubeconfig", "", "", at!(kubeconfig),
            "kubeconfig for the API server; without it litelet runs in standalone mode \
             (static pods only)."),
        s("bootstrap-kubeconfig", "", "", at!(bootstrap_kubeconfig),
            "kubeconfig with bootstrap credentials (a bootstrap token): when --kubeconfig is \
             missing or its client certificate is not valid, litelet asks the cluster for a \
             certificate with these and writes --kubeconfig for it (TLS bootstrap)."),
        s("cert-dir", "", "", at!(cert_dir),
            "Where issued certificates are kept (kubelet-client-current.pem, \
             kubelet-server-current.pem); default <root-dir>/pki."),
        s("root-dir", "", "/var/lib/kubelet", at!(root_dir),
            "Where litelet keeps its state (pod directories, checkpoints); upstream's \
             default, which CSI drivers' and device plugins' DaemonSets hard-code."),
        s("device-plugins-dir", "", crate::devicemanager::DEFAULT_DIR, at!(device_plugins_dir),
            "Where device plugins find the registration socket (kubelet.sock) and serve their \
             own. Plugins hard-code upstream's path, so only tests move it.").litelet_flag(),
        s("pod-manifest-path", "staticPodPath", "", at!(pod_manifest_path),
            "Folder of static pod manifests (YAML or JSON)."),
        s("pod-logs-dir", "podLogsDir", "/var/log/pods", at!(pod_logs_dir),
            "Root of the pod log directories.").litelet_flag().zero_is_unset(),
        s("resolv-conf", "resolvConf", "/etc/resolv.conf", at!(resolv_conf),
            "The host resolver file that pods with dnsPolicy Default inherit."),
        // The runtime.
        s("container-runtime-endpoint", "containerRuntimeEndpoint", super::DEFAULT_RUNTIME_ENDPOINT,
            at!(runtime.container_runtime_endpoint), "The CRI runtime's socket (unix:///PATH).")
            .zero_is_unset(),
        s("runtime-request-timeout", "runtimeRequestTimeout", "2m0s",
            at!(runtime.runtime_request_timeout), "Deadline of each runtime call.").zero_is_unset(),
        s("image-pull-timeout", "", "10m0s", at!(runtime.image_pull_timeout),
            "Deadline of an image pull.").litelet_flag(),
        s("cgroup-driver", "cgroupDriver", "cgroupfs", at!(cgroup_driver),
            "How pod cgroups are made: cgroupfs (litelet writes cgroupfs) or systemd (a \
             transient slice per pod through systemd's D-Bus API). It must match the \
             runtime's driver; litelet refuses to start when the runtime says otherwise.")
            .zero_is_unset(),
        s("cgroup-root", "cgroupRoot", "/", at!(cgroup_root),
            "Parent cgroup of the kubepods hierarchy."),
        // The node.
        s("hostname-override", "", "", at!(hostname_override),
            "The node's name (default: the machine's hostname, lowercased)."),
        s("node-ip", "", "", at!(node_ip, check = |v: &String| node_ips(v)),
            "The node's InternalIP: one address, or a dual-stack pair (IPv4,IPv6 or the \
             reverse; the first is primary); 0.0.0.0 or :: detects an address of that family \
             first."),
        s("cloud-provider", "", "", at!(cloud_provider, check = |v: &String| cloud_provider(v)),
            "\"\" (none) or \"external\": a cloud controller manager initialises the node; \
             it registers with the node.cloudprovider.kubernetes.io/uninitialized taint and \
             the alpha.kubernetes.io/provided-node-ip annotation, and its addresses are the \
             manager's."),
        s("provider-id", "providerID", "", at!(provider_id),
            "spec.providerID of the Node litelet creates (the cloud's ID of the machine).")
            .deprecated(Deprecation::None),
        s("", "nodeLeaseDurationSeconds", "40", at!(node_lease_duration_seconds,
            check = lease_duration),
            "The node Lease's duration in seconds; litelet renews it every quarter of it.")
            .zero_is_unset(),
        s("node-labels", "nodeLabels", "", at!(node_labels, check = node_labels),
            "Labels to add when registering the node (key=value,...); only labels a node may \
             set on itself (no node-role.kubernetes.io/...).").litelet_field(),
        s("register-with-taints", "registerWithTaints", "", at!(register_with_taints),
            "Taints the node is created with (key=value:Effect,...); never changed later."),
        s("max-pods", "maxPods", "110", at!(max_pods), "Most pods this node runs.")
            .zero_is_unset(),
        s("pod-max-pids", "podPidsLimit", "-1", at!(pod_max_pids),
            "Most processes (pids.max) of each pod's cgroup; zero or negative: no limit."),
        s("node-status-update-frequency", "nodeStatusUpdateFrequency", "10s",
            at!(node_status_update_frequency),
            "How often the node status is computed, and sent when it changed.").zero_is_unset(),
        s("", "nodeStatusReportFrequency", "5m0s", at!(node_status_report_frequency),
            "How often the node status is sent even when unchanged (default: an explicitly \
             set nodeStatusUpdateFrequency, else 5m0s).").zero_is_unset(),
        s("fail-swap-on", "failSwapOn", "true", at!(fail_swap_on),
            "Refuse to start while the host has swap on (/proc/swaps lists a swap area)."),
        s("", "memorySwap.swapBehavior", "NoSwap", at!(memory_swap_behavior),
            "How containers may use the host's swap: NoSwap or LimitedSwap (Burstable \
             containers a share in proportion to their memory request, cgroup v2 only).")
            .zero_is_unset(),
        // Node allocatable.
        s("kube-reserved", "kubeReserved", "", at!(kube_reserved, check = reserved),
            "Resources held back for Kubernetes daemons (cpu=100m,memory=100Mi,...)."),
        s("system-reserved", "systemReserved", "", at!(system_reserved, check = reserved),
            "Resources held back for the operating system (cpu=100m,memory=100Mi,...)."),
        s("enforce-node-allocatable", "enforceNodeAllocatable", "pods",
            at!(enforce_node_allocatable, check = |v: &Vec<String>| enforcements(v)),
            "What the reservations are enforced on: pods limits the kubepods cgroup to the \
             capacity minus the reservations, system-reserved and kube-reserved limit the \
             cgroups named below (-compressible: CPU only), none (alone) enforces nothing."),
        s("system-reserved-cgroup", "systemReservedCgroup", "", at!(system_reserved_cgroup),
            "Existing cgroup of the operating system's daemons (e.g. /system.slice)."),
        s("kube-reserved-cgroup", "kubeReservedCgroup", "", at!(kube_reserved_cgroup),
            "Existing cgroup of the Kubernetes daemons (e.g. /kube.slice)."),
        // Eviction.
        s("eviction-hard", "evictionHard",
            "imagefs.available<15%,memory.available<100Mi,nodefs.available<10%,nodefs.inodesFree<5%",
            at!(eviction_hard, check = thresholds),
            "Hard eviction thresholds (memory.available<100Mi,...); setting them replaces the \
             defaults (unless mergeDefaultEvictionSettings).")
            .kind(Kind::Map('<')),
        s("", "mergeDefaultEvictionSettings", "false", at!(merge_default_eviction_settings),
            "Keep upstream's default hard thresholds for the signals evictionHard does not \
             name."),
        s("eviction-soft", "evictionSoft", "", at!(eviction_soft, check = thresholds),
            "Soft eviction thresholds (memory.available<1.5Gi,...); each needs a grace period.")
            .kind(Kind::Map('<')),
        s("eviction-soft-grace-period", "evictionSoftGracePeriod", "",
            at!(eviction_soft_grace_period, check = grace_periods),
            "How long each soft threshold must be met before pods are evicted \
             (memory.available=1m30s,...)."),
        s("eviction-minimum-reclaim", "evictionMinimumReclaim", "",
            at!(eviction_minimum_reclaim, check = minimum_reclaim),
            "How much more than a threshold must be available before its pressure ends \
             (nodefs.available=500Mi,...)."),
        s("eviction-pressure-transition-period", "evictionPressureTransitionPeriod", "5m0s",
            at!(eviction_pressure_transition_period),
            "How long a pressure condition stays true after it was last seen.").zero_is_unset(),
        s("eviction-max-pod-grace-period", "evictionMaxPodGracePeriod", "0",
            at!(eviction_max_pod_grace_period),
            "Longest grace period (s) a soft eviction gives a pod; 0 keeps the pod's own."),
        // The node server.
        s("port", "port", "10250", at!(port), "Port of the authenticated node API (HTTPS).")
            .zero_is_unset(),
        s("healthz-port", "healthzPort", "10248", at!(healthz_port),
            "Port of the loopback health endpoint (0: none)."),
        s("address", "address", "0.0.0.0", at!(address), "Address the node API listens on.")
            .zero_is_unset(),
        s("healthz-bind-address", "healthzBindAddress", "127.0.0.1", at!(healthz_bind_address),
            "Address of the health endpoint (keep it on loopback).").zero_is_unset(),
        s("tls-cert-file", "tlsCertFile", "", at!(tls_cert_file),
            "Serving certificate of the node API (default: a self-signed one)."),
        s("tls-private-key-file", "tlsPrivateKeyFile", "", at!(tls_private_key_file),
            "Serving key of the node API."),
        s("client-ca-file", "authentication.x509.clientCAFile", "", at!(client_ca_file),
            "CA bundle that client certificates of the node API must chain to."),
        s("anonymous-auth", "authentication.anonymous.enabled", "false", at!(anonymous_auth),
            "Let requests without credentials in as system:anonymous (upstream's flag \
             default is true, its config file's false: litelet's is false)."),
        s("authentication-token-webhook-cache-ttl", "authentication.webhook.cacheTTL", "2m0s",
            at!(authentication_token_webhook_cache_ttl),
            "How long a TokenReview's acceptance of a bearer token is trusted.").zero_is_unset(),
        s("authorization-mode", "authorization.mode", "Webhook", at!(authorization_mode),
            "How node API requests are authorized: Webhook (a SubjectAccessReview) or \
             AlwaysAllow (upstream's flag default is AlwaysAllow, its config file's Webhook: \
             litelet's is Webhook).").zero_is_unset(),
        s("authorization-webhook-cache-authorized-ttl", "authorization.webhook.cacheAuthorizedTTL",
            "5m0s", at!(authorization_webhook_cache_authorized_ttl),
            "How long a SubjectAccessReview's \"allowed\" is trusted.").zero_is_unset(),
        s("authorization-webhook-cache-unauthorized-ttl",
            "authorization.webhook.cacheUnauthorizedTTL", "30s",
            at!(authorization_webhook_cache_unauthorized_ttl),
            "How long a SubjectAccessReview's \"denied\" is trusted.").zero_is_unset(),
        s("tls-cipher-suites", "tlsCipherSuites", "", at!(tls_cipher_suites),
            "TLS 1.2 cipher suites the node API offers, by Go's names; TLS 1.3 suites are \
             always on, as in Go. Suites rustls has no implementation of (RSA key exchange, \
             CBC) are left out with a warning; a list of only those is refused. Default: \
             rustls's (ECDHE with AES-GCM or ChaCha20-Poly1305)."),
        s("tls-min-version", "tlsMinVersion", "", at!(tls_min_version, check = |v: &String| tls_min_version(v)),
            "Lowest TLS version of the node API: VersionTLS12 (default) or VersionTLS13; \
             VersionTLS10/11 are accepted and mean VersionTLS12 (litelet never speaks lower)."),
        s("streaming-connection-idle-timeout", "streamingConnectionIdleTimeout", "4h0m0s",
            at!(streaming_connection_idle_timeout),
            "An exec, attach or port-forward stream idle this long is closed; 0 on the \
             command line means never (in the file, upstream's zero is its default).")
            .zero_is_unset(),
        s("server-max-connections", "", "", at!(server_max_connections, check = some_at_least_one),
            "Authorized connections the node API keeps open at once, every class together. \
             Default: one per 2 MiB of memory, 256 to 8192. Bearer-token and anonymous users \
             share a quarter of it; one authorized beyond its class's share gets a 503.")
            .litelet_flag(),
        s("server-max-unauthenticated-connections", "", "32",
            at!(server_max_unauthenticated_connections, check = at_least_one),
            "Node API connections still in the TLS handshake, first request or its \
             authentication and authorization; when full, the oldest one of the client \
             address holding the most is closed for a newcomer.").litelet_flag(),
        s("server-max-unauthenticated-per-client", "", "8",
            at!(server_max_unauthenticated_per_client, check = at_least_one),
            "Node API connections from one client address still in their handshake and \
             first request; more wait their turn, up to 5 s.").litelet_flag(),
        s("image-credential-provider-config", "", "", at!(image_credential_provider_config),
            "Credential provider plugins (a CredentialProviderConfig, YAML or JSON, or a \
             folder of them merged in name order): executables that give registry \
             credentials for the images they match. Flag only, as upstream."),
        s("image-credential-provider-bin-dir", "", "", at!(image_credential_provider_bin_dir),
            "Where the credential provider plugins' executables are. Flag only, as upstream."),
        // Certificates.
        s("rotate-certificates", "rotateCertificates", "false", at!(rotate_certificates),
            "Renew the client certificate through the CSR API before it expires and use the \
             new one without a restart."),
        s("rotate-server-certificates", "serverTLSBootstrap", "false",
            at!(rotate_server_certificates),
            "Ask the cluster for the node server's certificate (signer \
             kubernetes.io/kubelet-serving) and renew it; until one is issued the node server \
             keeps its own."),
        // Pods.
        s("cluster-dns", "clusterDNS", "", at!(cluster_dns, check = |v: &Vec<String>| ip_list(v)),
            "Cluster DNS server IPs for pods with dnsPolicy ClusterFirst."),
        s("cluster-domain", "clusterDomain", "cluster.local", at!(cluster_domain),
            "The cluster's DNS domain."),
        s("allowed-unsafe-sysctls", "allowedUnsafeSysctls", "",
            at!(allowed_unsafe_sysctls, check = |v: &Vec<String>| sysctls(v)),
            "Unsafe sysctls (or prefixes ending in *) pods may set; each must be namespaced \
             (kernel.shm*, kernel.msg*, kernel.sem, fs.mqueue.*, net.*). The safe sysctls are \
             always allowed."),
        s("sync-frequency", "syncFrequency", "1m0s", at!(sync_frequency),
            "How often a running pod is synced without any event.").zero_is_unset(),
        s("file-check-frequency", "fileCheckFrequency", "20s", at!(file_check_frequency),
            "How often the static pod folder is rescanned besides inotify.").zero_is_unset(),
        s("minimum-container-ttl-duration", "", "0s", at!(minimum_container_ttl_duration),
            "Dead containers younger than this are kept.")
            .deprecated(Deprecation::Text(super::catalogue::DEAD_CONTAINERS)),
        // Images.
        s("image-gc-high-threshold", "imageGCHighThresholdPercent", "85",
            at!(image_gc_high_threshold, check = percent),
            "Image disk usage (percent) at which image garbage collection starts."),
        s("image-gc-low-threshold", "imageGCLowThresholdPercent", "80",
            at!(image_gc_low_threshold, check = percent),
            "Image disk usage (percent) image garbage collection frees down to."),
        s("minimum-image-ttl-duration", "imageMinimumGCAge", "2m0s",
            at!(minimum_image_ttl_duration),
            "Minimum age of an unused image before garbage collection may remove it.")
            .zero_is_unset(),
        s("", "imageMaximumGCAge", "0s", at!(image_maximum_gc_age),
            "An image unused for longer than this is removed whatever the disk usage (once \
             litelet has watched the images that long); 0s: never."),
        s("serialize-image-pulls", "serializeImagePulls", "false", at!(serialize_image_pulls),
            "Pull images one at a time. litelet's default is false (pulls in parallel, up to \
             maxParallelImagePulls), where upstream's is true: a slow registry then holds up \
             no other pod's start."),
        s("", "maxParallelImagePulls", "", at!(max_parallel_image_pulls),
            "With serializeImagePulls false, the most image pulls at once (at least 1); \
             unset: no limit."),
        s("protect-kernel-defaults", "protectKernelDefaults", "false",
            at!(protect_kernel_defaults),
            "Check the kernel tunables the kubelet depends on (vm.overcommit_memory=1, \
             vm.panic_on_oom=0, kernel.panic=10, kernel.panic_on_oops=1, \
             kernel.keys.root_maxkeys=1000000, kernel.keys.root_maxbytes=25000000) at start \
             and refuse to start, naming each that differs. litelet never changes them \
             itself (upstream sets them when this is false)."),
        s("", "imagePullCredentialsVerificationPolicy", "NeverVerifyPreloadedImages",
            at!(image_pull_credentials_verification_policy),
            "May a pod use an image on the node pulled with credentials it does not offer: \
             NeverVerifyPreloadedImages, NeverVerify, NeverVerifyAllowlistedImages or \
             AlwaysVerify.").zero_is_unset(),
        s("", "preloadedImagesVerificationAllowlist", "",
            at!(preloaded_images_verification_allowlist, check = |v: &Vec<String>| allowlist(v)),
            "Images NeverVerifyAllowlistedImages does not check (registry.example.com/base/*)."),
        // Container logs.
        s("container-log-max-size", "containerLogMaxSize", crate::logs::DEFAULT_MAX_SIZE,
            at!(container_log_max_size, check = |v: &String| log_max_size(v)),
            "Rotate a container's log once it reaches this size (a quantity); a negative \
             value turns rotation off.").zero_is_unset(),
        s("container-log-max-files", "containerLogMaxFiles", "5",
            at!(container_log_max_files, check = |n| at_least(i64::from(*n), 2)),
            "Log files kept per container, the live one included (at least 2)."),
        s("", "containerLogMaxWorkers", "1",
            at!(container_log_max_workers, check = |n| at_least(i64::from(*n), 1)),
            "Threads rotating container logs."),
        s("", "containerLogMonitorInterval", "10s",
            at!(container_log_monitor_interval, check = monitor_interval),
            "How often container log sizes are checked (3s to 300s)."),
        // The API server.
        s("kube-api-qps", "kubeAPIQPS", "50", at!(kube_api_qps),
            "Sustained requests per second to the API server (client-side rate limit)."),
        s("kube-api-burst", "kubeAPIBurst", "100", at!(kube_api_burst),
            "Requests the API client may burst above the QPS.").zero_is_unset(),
        s("event-qps", "eventRecordQPS", "50", at!(event_qps),
            "Sustained Event writes per second, with a rate limit of their own so a burst of \
             events does not delay pod statuses."),
        s("event-burst", "eventBurst", "100", at!(event_burst),
            "Event writes that may burst above the event QPS.").zero_is_unset(),
        s("checkpoint-api-pods", "checkpointAPIPods", "true", at!(checkpoint_api_pods),
            "Keep a checkpoint of the API server's pods and Services under the root dir (no \
             secrets) and run the pods from it when litelet starts while the API server is \
             unreachable (edge autonomy).").litelet_flag().litelet_field(),
        s("checkpoint-secrets", "checkpointSecrets", "true", at!(checkpoint_secrets),
            "Keep on the node what its pods need to start (their service-account tokens and \
             the secrets and configMaps they reference, under the root dir, 0600) so they run \
             again after a reboot while the API server is unreachable (edge autonomy, \
             docs/security.md). false keeps no secret on disk and removes what was kept.")
            .litelet_flag().litelet_field(),
        s("checkpoint-secrets-key-file", "checkpointSecretsKeyFile", "",
            at!(checkpoint_secrets_key_file),
            "Seal what --checkpoint-secrets keeps with this key (32 bytes, raw or as 64 hex \
             digits; ChaCha20-Poly1305), e.g. a file on separate media. Without it the copies \
             are only checksummed. An unreadable key keeps nothing and reads nothing.")
            .litelet_flag().litelet_field(),
        // Graceful node shutdown.
        s("", "shutdownGracePeriod", "0s", at!(shutdown.grace_period),
            "How long a node shutdown is delayed for pods to stop (0s: off)."),
        s("", "shutdownGracePeriodCriticalPods", "0s", at!(shutdown.grace_period_critical_pods),
            "Of shutdownGracePeriod, the time kept for critical pods."),
        s("", "shutdownGracePeriodByPodPriority", "", at!(shutdown.by_pod_priority),
            "Shutdown grace periods by pod priority ([{priority, \
             shutdownGracePeriodSeconds}]), instead of the two above."),
        s("feature-gates", "featureGates", "", at!(feature_gates, check = super::gates::check),
            "Feature gates (NAME=BOOL,...), upstream v1.36's names: at upstream's default, \
             accepted; another value or an unknown name stops litelet, naming the gate. But \
             EventedPLEG is switched, default true (CRI container events where served)."),
        s("oom-score-adj", "oomScoreAdj", "-999", at!(oom_score_adj, check = oom_score_adj),
            "litelet's own oom_score_adj (-1000 to 1000), best effort: a refused write is \
             logged."),
        s("seccomp-default", "seccompDefault", "false", at!(seccomp_default),
            "Containers without a seccomp profile run with the runtime's default \
             (RuntimeDefault) instead of Unconfined.")
            .deprecated(Deprecation::None),
        // Logging and the command line itself.
        s("logging-format", "logging.format", "text", at!(log_format),
            "Log format: text, or json (one JSON object per line: ts, v, msg, as upstream's \
             JSON logs).").zero_is_unset(),
        s("v", "logging.verbosity", "0", at!(verbosity),
            "Log verbosity: 0-1 info, 2-4 debug, 5 and more trace (RUST_LOG wins).")
            .short('v')
            .deprecated(Deprecation::None),
        Setting::command_line("help", "Print the flags and exit.").short('h'),
        Setting::command_line("version",
            "Print the version and exit; run as kubelet, in upstream's form (Kubernetes \
             v1.36.3+litelet.VERSION, which kubeadm's preflight reads)."),
    ]
}

fn at_least_one(n: &usize) -> Result<(), ValueError> {
    at_least(i64::try_from(*n).unwrap_or(i64::MAX), 1)
}

fn node_ips(text: &str) -> Result<(), ValueError> {
    crate::node::addresses::NodeIps::parse(text)
        .map(|_| ())
        .map_err(ValueError::refused)
}

fn cloud_provider(text: &str) -> Result<(), ValueError> {
    crate::node::addresses::CloudProvider::parse(text)
        .map(|_| ())
        .map_err(ValueError::refused)
}

fn lease_duration(seconds: &i32) -> Result<(), ValueError> {
    at_least(i64::from(*seconds), 1)
}

fn oom_score_adj(score: &i32) -> Result<(), ValueError> {
    let score = i64::from(*score);
    if (-1000..=1000).contains(&score) {
        Ok(())
    } else {
        Err(ValueError::Range {
            value: score,
            min: "-1000".into(),
            max: "1000".into(),
        })
    }
}

fn tls_min_version(text: &str) -> Result<(), ValueError> {
    crate::server::tls::ciphers::parse(&[], text)
        .map(|_| ())
        .map_err(ValueError::refused)
}

fn some_at_least_one(n: &Option<usize>) -> Result<(), ValueError> {
    n.as_ref().map_or(Ok(()), at_least_one)
}

fn at_least(n: i64, min: i64) -> Result<(), ValueError> {
    if n < min {
        return Err(ValueError::AtLeast { value: n, min });
    }
    Ok(())
}

fn percent(p: &u8) -> Result<(), ValueError> {
    if *p > 100 {
        return Err(ValueError::Percent(*p));
    }
    Ok(())
}

/// Checks a map with the parser of its flag's text (`key<sep>value,...`).
fn pairs_with<T, E: std::fmt::Display>(
    map: &BTreeMap<String, String>,
    sep: char,
    parse: impl Fn(&str) -> Result<T, E>,
) -> Result<(), ValueError> {
    parse(&pairs_text(map, sep))
        .map(|_| ())
        .map_err(ValueError::refused)
}

/// Checks each entry of a list; every refusal is named.
fn each<E: std::fmt::Display>(
    list: &[String],
    check: impl Fn(&str) -> Result<(), E>,
) -> Result<(), ValueError> {
    let bad: Vec<String> = list
        .iter()
        .filter_map(|e| check(e).err().map(|e| e.to_string()))
        .collect();
    if bad.is_empty() {
        Ok(())
    } else {
        Err(ValueError::Refused(bad.join("; ")))
    }
}

fn node_labels(labels: &BTreeMap<String, String>) -> Result<(), ValueError> {
    pairs_with(labels, '=', crate::node::config::parse_node_labels)
}

fn reserved(map: &BTreeMap<String, String>) -> Result<(), ValueError> {
    pairs_with(map, '=', crate::node::config::parse_reserved)
}

fn thresholds(map: &BTreeMap<String, String>) -> Result<(), ValueError> {
    pairs_with(map, '<', crate::node::config::parse_eviction_hard)
}

fn grace_periods(map: &BTreeMap<String, String>) -> Result<(), ValueError> {
    pairs_with(map, '=', |text| {
        crate::eviction::config::parse_grace_periods(text, super::parse_duration)
    })
}

fn minimum_reclaim(map: &BTreeMap<String, String>) -> Result<(), ValueError> {
    pairs_with(map, '=', crate::eviction::config::parse_minimum_reclaim)
}

fn enforcements(keys: &[String]) -> Result<(), ValueError> {
    each(keys, |k| {
        k.parse::<crate::cgroups::allocatable::Enforcement>()
            .map(|_| ())
    })
}

fn ip_list(ips: &[String]) -> Result<(), ValueError> {
    match ips
        .iter()
        .find(|ip| ip.parse::<std::net::IpAddr>().is_err())
    {
        Some(bad) => Err(ValueError::Ip(bad.clone())),
        None => Ok(()),
    }
}

fn sysctls(list: &[String]) -> Result<(), ValueError> {
    crate::admission::sysctls::SysctlAllowlist::new(None, list)
        .map(|_| ())
        .map_err(ValueError::refused)
}

fn allowlist(list: &[String]) -> Result<(), ValueError> {
    each(list, |e| {
        crate::images::pull_records::check_allowlist_entry(e).map(|_| ())
    })
}

fn log_max_size(text: &str) -> Result<(), ValueError> {
    crate::logs::parse_max_size(text)
        .map(|_| ())
        .map_err(ValueError::refused)
}

fn monitor_interval(d: &Duration) -> Result<(), ValueError> {
    if *d < crate::logs::MIN_MONITOR_INTERVAL || *d > Duration::from_secs(300) {
        return Err(ValueError::Interval(*d));
    }
    Ok(())
}

/// `shutdownGracePeriodByPodPriority`: `[{priority, shutdownGracePeriodSeconds}]`.
impl SettingValue for Vec<PriorityPeriod> {
    const KIND: Kind = Kind::Object;
    fn decode(json: &Value) -> Result<Self, ValueError> {
        #[derive(serde::Deserialize)]
        #[serde(deny_unknown_fields, rename_all = "camelCase")]
        struct Row {
            #[serde(default)]
            priority: i32,
            #[serde(default)]
            shutdown_grace_period_seconds: i64,
        }
        let rows: Vec<Row> = serde_json::from_value(json.clone()).map_err(ValueError::refused)?;
        Ok(rows
            .into_iter()
            .map(|r| PriorityPeriod {
                priority: r.priority,
                shutdown_grace_period_seconds: r.shutdown_grace_period_seconds,
            })
            .collect())
    }
    fn encode(&self) -> Value {
        Value::Array(
            self.iter()
                .map(|r| {
                    let mut row = serde_json::Map::new();
                    row.insert("priority".into(), r.priority.into());
                    row.insert(
                        "shutdownGracePeriodSeconds".into(),
                        r.shutdown_grace_period_seconds.into(),
                    );
                    Value::Object(row)
                })
                .collect(),
        )
    }
}
