//! The upstream kubelet's flags and KubeletConfiguration v1beta1 fields (v1.36) that
//! litelet does not implement, each with litelet's stance: the value litelet behaves
//! as (accepted, with one warning; any other value refused, saying why), or "changes
//! nothing" (accepted at any value, with one warning). Together with `settings.rs`
//! this is every upstream name; `tests/fakes/upstream_names.rs` holds the list against the
//! upstream kubelet binary.
//!
//! Settings that other work will implement carry their interim stance here: the value
//! litelet has today is accepted, any other refused with "not yet".

use super::catalogue::{Deprecation, Setting, Setting as S, DEAD_CONTAINERS};
use super::value::Kind::{self, Bool, Duration, Int, Map, Object, Str};

/// Upstream's names outside `settings.rs`.
pub fn table() -> Vec<Setting> {
    let mut all = with_fields();
    all.extend(fields_only());
    all.extend(flags_only());
    all.extend(cadvisor());
    all
}

const NO_CPU_MANAGER: &str = "litelet has no CPU manager (policy none)";
const NO_MEMORY_MANAGER: &str = "litelet has no memory manager (policy None)";
const NO_TOPOLOGY_MANAGER: &str = "litelet has no topology manager (policy none)";
const NO_PULL_LIMIT: &str = "litelet does not rate-limit image pulls";
const NO_HTTP_SOURCE: &str = "litelet has no HTTP static pod source";

/// Flags that have a config field.
#[rustfmt::skip]
fn with_fields() -> Vec<Setting> {
    vec![
        S::fixed("authentication-token-webhook", "authentication.webhook.enabled", Bool, &["true"],
            "litelet always checks bearer tokens with a TokenReview (given an API server)"),
        S::fixed("cgroups-per-qos", "cgroupsPerQOS", Bool, &["true"],
            "litelet always makes the QoS cgroups (kubepods/burstable, kubepods/besteffort)"),
        S::fixed("contention-profiling", "enableContentionProfiling", Bool, &["false"],
            "litelet has no profiler"),
        S::fixed("cpu-cfs-quota", "cpuCFSQuota", Bool, &["true"],
            "litelet always enforces CPU limits with a CFS quota"),
        S::fixed("cpu-cfs-quota-period", "cpuCFSQuotaPeriod", Duration, &["\"100ms\""],
            "litelet uses the kernel's CFS period, 100ms"),
        S::fixed("cpu-manager-policy", "cpuManagerPolicy", Str, &["\"none\""], NO_CPU_MANAGER)
            .zero_is_unset(),
        S::fixed("cpu-manager-policy-options", "cpuManagerPolicyOptions", Map('='), &["{}"],
            NO_CPU_MANAGER),
        S::ignored("cpu-manager-reconcile-period", "cpuManagerReconcilePeriod", Duration,
            NO_CPU_MANAGER),
        S::fixed("enable-controller-attach-detach", "enableControllerAttachDetach", Bool, &["true"],
            "volumes are attached by the attach/detach controller; litelet attaches none itself"),
        S::fixed("enable-debugging-handlers", "enableDebuggingHandlers", Bool, &["true"],
            "the node API always serves logs, exec, attach and port-forward"),
        S::fixed("enable-server", "enableServer", Bool, &["true"],
            "litelet always serves the node API"),
        S::fixed("fail-cgroupv1", "failCgroupV1", Bool, &["false"],
            "litelet runs on cgroup v1 as on v2")
            .deprecated(Deprecation::None),
        S::ignored("hairpin-mode", "hairpinMode", Str,
            "hairpin traffic is the CNI plugin's; no CRI runtime takes the kubelet's mode"),
        S::ignored("http-check-frequency", "httpCheckFrequency", Duration, NO_HTTP_SOURCE),
        S::fixed("image-service-endpoint", "imageServiceEndpoint", Str, &["\"\""],
            "litelet reaches the image service at the runtime endpoint"),
        S::fixed("kernel-memcg-notification", "kernelMemcgNotification", Bool, &["false"],
            "litelet reads memory usage every 10 s"),
        S::fixed("kube-api-content-type", "contentType",
            Str, &["\"application/json\"", "\"application/vnd.kubernetes.protobuf\""],
            "litelet speaks JSON to the API server"),
        S::fixed("kubelet-cgroups", "kubeletCgroups", Str, &["\"\""],
            "litelet stays in the cgroup its service manager gave it"),
        S::fixed("local-storage-capacity-isolation", "localStorageCapacityIsolation", Bool,
            &["true"],
            "litelet enforces ephemeral-storage limits and emptyDir sizeLimit"),
        S::ignored("log-flush-frequency", "logging.flushFrequency", Object,
            "litelet writes log lines unbuffered")
            .deprecated(Deprecation::None),
        S::ignored("log-json-info-buffer-size", "logging.options.json.infoBufferSize", Str,
            "litelet writes log lines unbuffered"),
        S::fixed("log-json-split-stream", "logging.options.json.splitStream", Bool, &["false"],
            "litelet writes every log line to stderr"),
        S::ignored("log-text-info-buffer-size", "logging.options.text.infoBufferSize", Str,
            "litelet writes log lines unbuffered"),
        S::fixed("log-text-split-stream", "logging.options.text.splitStream", Bool, &["false"],
            "litelet writes every log line to stderr"),
        S::ignored("make-iptables-util-chains", "makeIPTablesUtilChains", Bool,
            "litelet creates no iptables chain (no KUBE-IPTABLES-HINT: kube-proxy then \
             detects the iptables backend from the rules it finds)"),
        S::fixed("manifest-url", "staticPodURL", Str, &["\"\""], NO_HTTP_SOURCE),
        S::fixed("manifest-url-header", "staticPodURLHeader", Kind::Headers, &["{}"], NO_HTTP_SOURCE),
        S::ignored("max-open-files", "maxOpenFiles",
            Int, "litelet keeps the open-file limit its service manager gives it \
                  (litelet.service: LimitNOFILE=1048576)"),
        S::fixed("memory-manager-policy", "memoryManagerPolicy", Str, &["\"None\""],
            NO_MEMORY_MANAGER)
            .zero_is_unset(),
        S::fixed("node-status-max-images", "nodeStatusMaxImages", Int, &["50"],
            "litelet reports the 50 largest images"),
        S::fixed("pod-cidr", "podCIDR", Str, &["\"\""], "pod addresses are the CNI plugin's"),
        S::fixed("pods-per-core", "podsPerCore", Int, &["0"], "litelet has no per-core pod limit"),
        S::fixed("qos-reserved", "qosReserved", Map('='), &["{}"],
            "litelet reserves nothing for Guaranteed pods in the QoS cgroups"),
        S::fixed("read-only-port", "readOnlyPort", Int, &["0"],
            "litelet never opens the unauthenticated read-only port"),
        S::fixed("register-node", "registerNode", Bool, &["true"],
            "litelet registers its node whenever it has a kubeconfig"),
        S::ignored("registry-burst", "registryBurst", Int, NO_PULL_LIMIT),
        S::ignored("registry-qps", "registryPullQPS", Int, NO_PULL_LIMIT),
        S::fixed("reserved-cpus", "reservedSystemCPUs", Str, &["\"\""], NO_CPU_MANAGER),
        S::fixed("reserved-memory", "reservedMemory", Object, &["[]"], NO_MEMORY_MANAGER),
        S::fixed("runonce", "runOnce", Bool, &["false"], "litelet keeps running"),
        S::fixed("system-cgroups", "systemCgroups", Str, &["\"\""],
            "litelet moves no process into a system cgroup"),
        S::fixed("topology-manager-policy", "topologyManagerPolicy", Str, &["\"none\""],
            NO_TOPOLOGY_MANAGER)
            .zero_is_unset(),
        S::fixed("topology-manager-policy-options", "topologyManagerPolicyOptions", Map('='),
            &["{}"],
            NO_TOPOLOGY_MANAGER),
        S::ignored("topology-manager-scope", "topologyManagerScope", Str, NO_TOPOLOGY_MANAGER),
        S::ignored("volume-plugin-dir", "volumePluginDir", Str,
            "litelet has no FlexVolume plugins (CSI drivers register through plugins_registry)"),
        S::ignored("volume-stats-agg-period", "volumeStatsAggPeriod", Duration,
            "volume usage is sampled with the other stats every 10 s"),
        S::fixed("vmodule", "logging.vmodule", Object, &["[]"],
            "litelet's log filter is RUST_LOG (per module)")
            .deprecated(Deprecation::None),
    ]
}

/// KubeletConfiguration fields with no flag.
#[rustfmt::skip]
fn fields_only() -> Vec<Setting> {
    vec![
        S::ignored("", "singleProcessOOMKill", Bool,
            "the runtime decides how a container's processes are OOM-killed"),
        S::fixed("", "configMapAndSecretChangeDetectionStrategy",
            Str, &["\"Cache\"", "\"Watch\"", "\"Get\""],
            "litelet reads configMaps and secrets through a TTL cache")
            .zero_is_unset(),
        S::ignored("", "iptablesMasqueradeBit", Int, "upstream's kubelet ignores it too"),
        S::ignored("", "iptablesDropBit", Int, "upstream's kubelet ignores it too"),
        S::ignored("", "showHiddenMetricsForVersion", Str, "litelet hides no metric"),
        S::fixed("", "enableSystemLogHandler", Bool, &["false", "true"],
            "litelet has no /logs/ endpoint for the node's own logs"),
        S::fixed("", "enableSystemLogQuery", Bool, &["false"],
            "litelet has no /logs/ endpoint for the node's own logs"),
        S::fixed("", "enableProfilingHandler", Bool, &["false", "true"],
            "litelet has no /debug/pprof endpoint"),
        S::fixed("", "enableDebugFlagsHandler", Bool, &["false", "true"],
            "litelet has no /debug/flags endpoint"),
        S::fixed("", "crashLoopBackOff.maxContainerRestartPeriod", Duration, &["\"5m0s\""],
            "litelet's restart back-off doubles from 10 s up to 5 minutes"),
        S::ignored("", "memoryThrottlingFactor", Kind::Float, "MemoryQoS is off"),
        S::fixed("", "memoryReservationPolicy", Str, &["\"None\""], "MemoryQoS is off")
            .zero_is_unset(),
        S::fixed("", "tracing.endpoint", Str, &["\"\""], "litelet exports no traces"),
        S::ignored("", "tracing.samplingRatePerMillion", Int, "litelet exports no traces"),
        S::fixed("", "userNamespaces.idsPerPod", Int, &["65536"],
            "litelet gives each pod with hostUsers: false 65536 IDs"),
        S::fixed("", "tlsCurvePreferences", Object, &["[]"],
            "not yet: the node API offers rustls's key exchanges"),
    ]
}

/// Flags with no config field (upstream's KubeletFlags).
#[rustfmt::skip]
fn flags_only() -> Vec<Setting> {
    vec![
        S::fixed("exit-on-lock-contention", "", Bool, &["false"], "litelet takes no lock file"),
        S::fixed("lock-file", "", Str, &["\"\""], "litelet takes no lock file"),
        S::fixed("experimental-allocatable-ignore-eviction", "", Bool, &["false"],
            "the allocatable always leaves out the hard eviction thresholds")
            .deprecated(Deprecation::Text("will be removed in 1.25 or later.")),
        S::fixed("experimental-mounter-path", "", Str, &["\"\""],
            "litelet mounts with the mount system call")
            .deprecated(Deprecation::Text(
                "will be removed in 1.25 or later. in favor of using CSI.")),
        S::ignored("housekeeping-interval", "", Duration,
            "a cAdvisor setting; litelet samples stats every 10 s"),
        S::fixed("maximum-dead-containers", "", Int, &["-1"],
            "litelet's container garbage collection keeps any number on the node")
            .deprecated(Deprecation::Text(DEAD_CONTAINERS)),
        S::fixed("maximum-dead-containers-per-container", "", Int, &["1"],
            "litelet's container garbage collection keeps one dead instance per container")
            .deprecated(Deprecation::Text(DEAD_CONTAINERS)),
        S::fixed("runtime-cgroups", "", Str, &["\"\""], "litelet moves no runtime into a cgroup"),
    ]
}

/// Flags cAdvisor registers in upstream's kubelet; litelet has no cAdvisor.
#[rustfmt::skip]
fn cadvisor() -> Vec<Setting> {
    const WHY: &str = "a cAdvisor flag; litelet has no cAdvisor";
    let flag = |name, kind| S::ignored(name, "", kind, WHY).deprecated(Deprecation::Cadvisor);
    vec![
        flag("application-metrics-count-limit", Int),
        flag("boot-id-file", Str),
        flag("container-hints", Str),
        flag("containerd", Str),
        flag("containerd-namespace", Str),
        flag("enable-load-reader", Bool),
        flag("event-storage-age-limit", Str),
        flag("event-storage-event-limit", Str),
        flag("global-housekeeping-interval", Duration),
        flag("log-cadvisor-usage", Bool),
        flag("machine-id-file", Str),
        S::ignored("max-housekeeping-interval", "", Duration, WHY),
        flag("storage-driver-buffer-duration", Duration),
        flag("storage-driver-db", Str),
        flag("storage-driver-host", Str),
        flag("storage-driver-password", Str),
        flag("storage-driver-secure", Bool),
        flag("storage-driver-table", Str),
        flag("storage-driver-user", Str),
    ]
}
