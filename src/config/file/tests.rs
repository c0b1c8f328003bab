//! The KubeletConfiguration file: parsing, refusals with field names, and merging
//! under the command line.

use std::io::Write;

use clap::CommandFactory;

use super::*;
use crate::config::LoadError;
use crate::runtime::pull_records::VerificationPolicy;

const HEADER: &str = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n";

fn parse_text(body: &str) -> Result<KubeletConfiguration, ConfigFileError> {
    parse(&format!("{HEADER}{body}"), Path::new("test.yaml"))
}

fn problems(body: &str) -> Vec<Problem> {
    match parse_text(body) {
        Err(ConfigFileError::Invalid { problems, .. }) => problems,
        other => panic!("expected problems, got {other:?}"),
    }
}

fn problem(field: &str, kind: ProblemKind) -> Problem {
    Problem {
        field: field.into(),
        kind,
    }
}

fn temp_config(body: &str) -> tempfile::NamedTempFile {
    let mut file = tempfile::NamedTempFile::new().unwrap();
    write!(file, "{HEADER}{body}").unwrap();
    file
}

fn load_with(file: &tempfile::NamedTempFile, extra: &[&str]) -> Result<Flags, LoadError> {
    let path = file.path().to_str().unwrap().to_owned();
    let mut args = vec!["litelet", "--config", &path];
    args.extend_from_slice(extra);
    Flags::try_load_from(args)
}

#[test]
fn good_file_reads_every_supported_field() {
    let config = parse_text(
        r#"
staticPodPath: /etc/kubernetes/manifests
syncFrequency: 30s
fileCheckFrequency: 10s
address: 192.0.2.10
port: 10260
healthzPort: 10258
healthzBindAddress: 0.0.0.0
tlsCertFile: /etc/litelet/tls.crt
tlsPrivateKeyFile: /etc/litelet/tls.key
authentication:
  x509:
    clientCAFile: /etc/kubernetes/pki/ca.crt
clusterDNS: [10.96.0.10, "fd00::a"]
clusterDomain: edge.local
resolvConf: /run/systemd/resolve/resolv.conf
maxPods: 30
podLogsDir: /srv/pod-logs
runtimeRequestTimeout: 1m30s
imageGCHighThresholdPercent: 90
imageGCLowThresholdPercent: 70
imageMinimumGCAge: 5m
kubeAPIQPS: 20
kubeAPIBurst: 40
cgroupRoot: /edge
cgroupDriver: cgroupfs
containerRuntimeEndpoint: unix:///run/crio/crio.sock
logging:
  verbosity: 3
"#,
    )
    .unwrap();
    assert_eq!(
        config.static_pod_path.as_deref(),
        Some(Path::new("/etc/kubernetes/manifests"))
    );
    assert_eq!(config.sync_frequency, Some(Duration::from_secs(30)));
    assert_eq!(config.file_check_frequency, Some(Duration::from_secs(10)));
    assert_eq!(config.address, Some("192.0.2.10".parse().unwrap()));
    assert_eq!(config.port, Some(10260));
    assert_eq!(config.healthz_port, Some(10258));
    assert_eq!(
        config.healthz_bind_address,
        Some("0.0.0.0".parse().unwrap())
    );
    assert_eq!(
        config.client_ca_file.as_deref(),
        Some(Path::new("/etc/kubernetes/pki/ca.crt"))
    );
    assert_eq!(
        config.cluster_dns,
        Some(vec![
            "10.96.0.10".parse().unwrap(),
            "fd00::a".parse().unwrap()
        ])
    );
    assert_eq!(config.max_pods, Some(30));
    assert_eq!(
        config.runtime_request_timeout,
        Some(Duration::from_secs(90))
    );
    assert_eq!(config.image_gc_high_threshold_percent, Some(90));
    assert_eq!(config.image_gc_low_threshold_percent, Some(70));
    assert_eq!(config.image_minimum_gc_age, Some(Duration::from_secs(300)));
    assert_eq!(config.kube_api_qps, Some(20.0));
    assert_eq!(config.kube_api_burst, Some(40));
    assert_eq!(
        config.cgroup_driver,
        Some(crate::config::CgroupDriver::Cgroupfs)
    );
    assert_eq!(config.verbosity, Some(3));
}

#[test]
fn json_and_nulls_are_read() {
    let text = r#"{"apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
                   "maxPods": 12, "staticPodPath": null}"#;
    let config = parse(text, Path::new("c.json")).unwrap();
    assert_eq!(config.max_pods, Some(12));
    assert_eq!(config.static_pod_path, None);
}

#[test]
fn unknown_and_unsupported_fields_are_all_named() {
    let found = problems(
        r#"
maxPod: 10
serializeImagePulls: false
featureGates: {InPlacePodVerticalScaling: true}
authentication:
  webhook: {enabled: true, cacheTTL: 0s}
  x509: {clientCAFile: /ca.crt, extra: 1}
authorization: {mode: Webhook, webhook: {cacheAuthorizedTTL: 0s}}
logging: {format: json}
"#,
    );
    assert_eq!(
        found,
        vec![
            problem("maxPod", ProblemKind::Unknown),
            problem("serializeImagePulls", ProblemKind::Unsupported),
            problem("featureGates", ProblemKind::Unsupported),
            problem("authentication.x509.extra", ProblemKind::Unknown),
            problem(
                "logging.format",
                ProblemKind::BadValue(
                    "\"json\" is not supported: litelet writes text logs only".into()
                )
            ),
        ]
    );
    let err = parse_text("maxPod: 10\nserializeImagePulls: false\n").unwrap_err();
    assert_eq!(
        err.to_string(),
        "config file test.yaml: maxPod: unknown field (not in KubeletConfiguration \
         kubelet.config.k8s.io/v1beta1); serializeImagePulls: not supported by litelet"
    );
}

#[test]
fn bad_values_name_their_fields() {
    let found = problems(
        "syncFrequency: 10 minutes\nmaxPods: many\nimageGCHighThresholdPercent: 120\n\
         clusterDNS: [not-an-ip]\nkubeAPIQPS: -1\n",
    );
    let fields: Vec<&str> = found.iter().map(|p| p.field.as_str()).collect();
    assert_eq!(
        fields,
        [
            "syncFrequency",
            "maxPods",
            "imageGCHighThresholdPercent",
            "clusterDNS",
            "kubeAPIQPS"
        ]
    );
    assert!(
        found[0].to_string().contains("invalid duration"),
        "{}",
        found[0]
    );
    assert!(found[2].to_string().contains("120"), "{}", found[2]);
}

#[test]
fn only_the_cgroupfs_and_systemd_drivers_are_accepted() {
    let found = problems("cgroupDriver: openrc\n");
    assert_eq!(found.len(), 1);
    let text = found[0].to_string();
    assert!(
        text.starts_with("cgroupDriver: \"openrc\" is not a cgroup driver"),
        "{text}"
    );
    assert!(parse_text("cgroupDriver: cgroupfs\n").is_ok());
    assert!(parse_text("cgroupDriver: systemd\n").is_ok());
}

#[test]
fn type_meta_is_required() {
    let err = parse("maxPods: 3\n", Path::new("c.yaml")).unwrap_err();
    let text = err.to_string();
    assert!(text.contains("apiVersion: missing"), "{text}");
    assert!(text.contains("kind: missing"), "{text}");
    let err = parse(
        "apiVersion: kubelet.config.k8s.io/v1\nkind: KubeletConfiguration\n",
        Path::new("c.yaml"),
    )
    .unwrap_err();
    assert!(err
        .to_string()
        .contains("is not \"kubelet.config.k8s.io/v1beta1\""));
    assert!(matches!(
        parse("[1, 2]", Path::new("c.yaml")),
        Err(ConfigFileError::Invalid { .. })
    ));
    assert!(matches!(
        parse("a: [", Path::new("c.yaml")),
        Err(ConfigFileError::Syntax { .. })
    ));
}

#[test]
fn file_values_fill_unset_flags() {
    let file = temp_config(
        "maxPods: 17\nsyncFrequency: 5s\nclusterDNS: [10.0.0.10]\n\
         containerRuntimeEndpoint: unix:///run/crio/crio.sock\nlogging: {verbosity: 4}\n\
         staticPodPath: /manifests\n",
    );
    let flags = load_with(&file, &[]).unwrap();
    assert_eq!(flags.max_pods, 17);
    assert_eq!(flags.sync_frequency, Duration::from_secs(5));
    assert_eq!(flags.cluster_dns, ["10.0.0.10"]);
    assert_eq!(
        flags.runtime.container_runtime_endpoint,
        "unix:///run/crio/crio.sock"
    );
    assert_eq!(flags.verbosity, 4);
    assert_eq!(
        flags.pod_manifest_path.as_deref(),
        Some(Path::new("/manifests"))
    );
    // Untouched by the file: the flag defaults.
    assert_eq!(flags.port, 10250);
    assert_eq!(flags.cluster_domain, "cluster.local");
}

#[test]
fn flags_override_the_file() {
    let file = temp_config(
        "maxPods: 17\nsyncFrequency: 5s\nclusterDNS: [10.0.0.10]\nport: 11000\n\
         runtimeRequestTimeout: 10s\n",
    );
    let flags = load_with(
        &file,
        &[
            "--max-pods",
            "5",
            "--cluster-dns",
            "10.9.9.9,10.9.9.8",
            "--runtime-request-timeout",
            "45s",
            // Given explicitly with the default's value: still wins over the file.
            "--sync-frequency",
            "1m0s",
        ],
    )
    .unwrap();
    assert_eq!(flags.max_pods, 5);
    assert_eq!(flags.cluster_dns, ["10.9.9.9", "10.9.9.8"]);
    assert_eq!(
        flags.runtime.runtime_request_timeout,
        Duration::from_secs(45)
    );
    assert_eq!(flags.sync_frequency, Duration::from_secs(60));
    assert_eq!(flags.port, 11000, "not given on the command line");
}

#[test]
fn merged_gc_thresholds_are_checked() {
    let file = temp_config("imageGCLowThresholdPercent: 60\n");
    let err = load_with(&file, &["--image-gc-high-threshold", "50"]).unwrap_err();
    assert!(matches!(err, LoadError::Invalid(_)), "{err}");
    assert!(load_with(&file, &[]).is_ok());
}

/// The flag and the file agree: `systemd` and `cgroupfs` are accepted by both, and
/// any other name is refused by both with the same words.
#[test]
fn cgroup_driver_systemd_is_accepted_and_unknown_refused_by_flag_and_file_alike() {
    use crate::config::CgroupDriver;
    use clap::Parser;
    for (name, driver) in [
        ("systemd", CgroupDriver::Systemd),
        ("cgroupfs", CgroupDriver::Cgroupfs),
    ] {
        let flags = Flags::try_parse_from(["litelet", "--cgroup-driver", name]).unwrap();
        assert_eq!(flags.cgroup_driver, driver);
        let file = temp_config(&format!("cgroupDriver: {name}\n"));
        assert_eq!(load_with(&file, &[]).unwrap().cgroup_driver, driver);
    }
    // The flag overrides the file.
    let file = temp_config("cgroupDriver: systemd\n");
    let flags = load_with(&file, &["--cgroup-driver", "cgroupfs"]).unwrap();
    assert_eq!(flags.cgroup_driver, CgroupDriver::Cgroupfs);

    let err = Flags::try_parse_from(["litelet", "--cgroup-driver", "openrc"]).unwrap_err();
    let expected = super::super::unsupported_cgroup_driver("openrc");
    assert!(err.to_string().contains(&expected), "{err}");
    let found = problems("cgroupDriver: openrc\n");
    assert!(
        found.iter().any(|p| p.to_string().contains(&expected)),
        "{found:?}"
    );
}

#[test]
fn a_bad_file_stops_loading() {
    let file = temp_config("cgroupDriver: openrc\n");
    assert!(matches!(load_with(&file, &[]), Err(LoadError::File(_))));
    let missing = Flags::try_load_from(["litelet", "--config", "/nonexistent/litelet.yaml"]);
    assert!(matches!(
        missing,
        Err(LoadError::File(ConfigFileError::Read { .. }))
    ));
}

#[test]
fn applied_ids_are_flag_ids() {
    let command = Flags::command();
    let ids: Vec<&str> = command
        .get_arguments()
        .map(|a| a.get_id().as_str())
        .collect();
    for id in APPLIED_IDS {
        assert!(ids.contains(id), "{id} is not an argument of Flags");
    }
}

#[test]
fn supported_fields_are_upstream_fields() {
    for field in [
        "staticPodPath",
        "authentication",
        "logging",
        "cgroupDriver",
        "containerRuntimeEndpoint",
    ] {
        assert!(UPSTREAM_FIELDS.contains(&field), "{field}");
    }
}

#[test]
fn the_packaged_config_file_is_valid() {
    let text = include_str!("../../../packaging/config.yaml");
    parse(text, Path::new("packaging/config.yaml")).unwrap();
}

#[test]
fn node_fields_become_node_flags() {
    let file = temp_config(
        r#"
nodeStatusUpdateFrequency: 20s
kubeReserved: {cpu: 100m, memory: 200Mi}
systemReserved: {memory: 100Mi}
evictionHard: {memory.available: 150Mi}
nodeLabels: {edge.example.com/site: north}
registerWithTaints:
  - {key: dedicated, value: edge, effect: NoSchedule}
  - {key: gpu, effect: NoExecute}
"#,
    );
    let flags = load_with(&file, &["--system-reserved", "cpu=50m"]).unwrap();
    assert_eq!(flags.node_status_update_frequency, Duration::from_secs(20));
    // Upstream: an explicit update frequency is also the report frequency's default.
    assert_eq!(flags.node_status_report_frequency, Duration::from_secs(20));
    assert_eq!(
        flags.kube_reserved.as_deref(),
        Some("cpu=100m,memory=200Mi")
    );
    assert_eq!(
        flags.system_reserved.as_deref(),
        Some("cpu=50m"),
        "flag wins"
    );
    assert_eq!(
        flags.eviction_hard.as_deref(),
        Some("memory.available<150Mi")
    );
    assert_eq!(
        flags.node_labels.as_deref(),
        Some("edge.example.com/site=north")
    );
    assert_eq!(
        flags.register_with_taints.as_deref(),
        Some("dedicated=edge:NoSchedule,gpu:NoExecute")
    );
    let node = flags.node_config(Some("edge-1")).unwrap();
    assert_eq!(node.register_with_taints.len(), 2);
    assert_eq!(node.node_status_report_frequency, Duration::from_secs(20));
}

#[test]
fn eviction_fields_become_eviction_flags() {
    let file = temp_config(
        r#"
evictionSoft: {memory.available: 1Gi}
evictionSoftGracePeriod: {memory.available: 1m30s}
evictionMinimumReclaim: {nodefs.available: 500Mi}
evictionPressureTransitionPeriod: 30s
evictionMaxPodGracePeriod: 20
"#,
    );
    let flags = load_with(&file, &["--eviction-max-pod-grace-period", "10"]).unwrap();
    assert_eq!(flags.eviction_soft.as_deref(), Some("memory.available<1Gi"));
    assert_eq!(
        flags.eviction_soft_grace_period.as_deref(),
        Some("memory.available=1m30s")
    );
    assert_eq!(
        flags.eviction_minimum_reclaim.as_deref(),
        Some("nodefs.available=500Mi")
    );
    assert_eq!(
        flags.eviction_pressure_transition_period,
        Duration::from_secs(30)
    );
    assert_eq!(flags.eviction_max_pod_grace_period, 10, "flag wins");
    let config = crate::config::eviction_config(&flags).unwrap();
    assert_eq!(config.thresholds.iter().filter(|t| !t.hard).count(), 1);
    assert_eq!(config.max_pod_grace_period_seconds, 10);

    let found = problems(
        "evictionSoftGracePeriod: {memory.available: soon}\nevictionMinimumReclaim: {pid.available: -1}\n",
    );
    let fields: Vec<&str> = found.iter().map(|p| p.field.as_str()).collect();
    assert_eq!(
        fields,
        ["evictionSoftGracePeriod", "evictionMinimumReclaim"]
    );
}

#[test]
fn report_frequency_defaults_to_five_minutes() {
    let file = temp_config("nodeStatusReportFrequency: 1m\n");
    let flags = load_with(&file, &[]).unwrap();
    assert_eq!(flags.node_status_report_frequency, Duration::from_secs(60));
    let flags = Flags::try_load_from(["litelet"]).unwrap();
    assert_eq!(flags.node_status_report_frequency, Duration::from_secs(300));
}

#[test]
fn bad_node_fields_name_their_fields() {
    let found = problems(
        "evictionHard: {memory.free: 1Gi}\nkubeReserved: {cpu: lots}\n\
         registerWithTaints: [{key: a, effect: Sometimes}]\n\
         nodeLabels: {node-role.kubernetes.io/master: \"\"}\n",
    );
    let fields: Vec<&str> = found.iter().map(|p| p.field.as_str()).collect();
    assert_eq!(
        fields,
        [
            "evictionHard",
            "kubeReserved",
            "registerWithTaints",
            "nodeLabels"
        ]
    );
}

#[test]
fn the_packaged_examples_are_valid_when_uncommented() {
    let text = include_str!("../../../packaging/config.yaml");
    // Examples are `#key: value` or `#  nested`; prose comments are `# text`.
    let uncommented: Vec<&str> = text
        .lines()
        .map(|line| match line.strip_prefix('#') {
            Some(rest)
                if rest.starts_with("  ") || rest.starts_with(|c: char| !c.is_whitespace()) =>
            {
                rest
            }
            _ => line,
        })
        .collect();
    let config = parse(&uncommented.join("\n"), Path::new("config.yaml")).unwrap();
    assert_eq!(config.max_pods, Some(110));
    assert_eq!(config.cluster_dns.map(|d| d.len()), Some(1));
    assert!(config.register_with_taints.is_some());
    assert!(config.client_ca_file.is_some());
    assert_eq!(config.verbosity, Some(0));
}

#[test]
fn node_server_auth_fields() {
    let file = temp_config(
        "authentication:\n  anonymous: {enabled: true}\n  webhook: {enabled: true}\n\
         authorization: {mode: AlwaysAllow}\n",
    );
    let flags = load_with(&file, &[]).unwrap();
    assert!(flags.anonymous_auth);
    assert_eq!(flags.authorization_mode, AuthorizationMode::AlwaysAllow);
    let flags = load_with(&file, &["--anonymous-auth=false"]).unwrap();
    assert!(!flags.anonymous_auth, "an explicit false flag wins");
    let found =
        problems("authentication: {webhook: {enabled: false}}\nauthorization: {mode: RBAC}\n");
    let fields: Vec<&str> = found.iter().map(|p| p.field.as_str()).collect();
    assert_eq!(
        fields,
        ["authentication.webhook.enabled", "authorization.mode"]
    );
}

#[test]
fn image_pull_credentials_verification_policy_is_read_and_checked() {
    let flags = Flags::try_load_from(["litelet"]).unwrap();
    assert_eq!(
        flags.image_pull_credentials_verification_policy,
        VerificationPolicy::NeverVerifyPreloadedImages
    );
    let file = temp_config("imagePullCredentialsVerificationPolicy: AlwaysVerify\n");
    let flags = load_with(&file, &[]).unwrap();
    assert_eq!(
        flags.image_pull_credentials_verification_policy,
        VerificationPolicy::AlwaysVerify
    );
    let field = "imagePullCredentialsVerificationPolicy";
    let file = temp_config(
        "imagePullCredentialsVerificationPolicy: NeverVerifyAllowlistedImages\n\
         preloadedImagesVerificationAllowlist: [registry.k8s.io/pause, reg.io/team/*]\n",
    );
    let flags = load_with(&file, &[]).unwrap();
    assert_eq!(
        flags.image_pull_credentials_verification_policy,
        VerificationPolicy::NeverVerifyAllowlistedImages
    );
    assert_eq!(
        flags.preloaded_images_verification_allowlist,
        ["registry.k8s.io/pause", "reg.io/team/*"]
    );
    let found = problems("preloadedImagesVerificationAllowlist: [reg.io/app:1]\n");
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].field, "preloadedImagesVerificationAllowlist");
    assert!(
        matches!(&found[0].kind, ProblemKind::BadValue(why) if why.contains("tag or digest")),
        "{found:?}"
    );
    let found = problems(&format!("{field}: Sometimes\n"));
    assert!(
        matches!(&found[0].kind, ProblemKind::BadValue(why) if why.contains("unknown")),
        "{found:?}"
    );
}

#[test]
fn container_log_fields_reach_the_log_manager() {
    let file = temp_config(
        "containerLogMaxSize: 1Mi\ncontainerLogMaxFiles: 3\ncontainerLogMaxWorkers: 2\n\
         containerLogMonitorInterval: 5s\n",
    );
    let config = load_with(&file, &[]).unwrap().log_manager_config().unwrap();
    assert_eq!(config.policy.max_size, 1024 * 1024);
    assert_eq!(config.policy.max_files, 3);
    assert_eq!(config.workers, 2);
    assert_eq!(config.interval, Duration::from_secs(5));
    // The flag wins over the file.
    let flags = load_with(&file, &["--container-log-max-files", "4"]).unwrap();
    assert_eq!(flags.container_log_max_files, 4);
    let found = problems(
        "containerLogMaxSize: big\ncontainerLogMaxFiles: 1\ncontainerLogMaxWorkers: 0\n\
         containerLogMonitorInterval: 1s\n",
    );
    let fields: Vec<&str> = found.iter().map(|p| p.field.as_str()).collect();
    assert_eq!(
        fields,
        [
            "containerLogMaxSize",
            "containerLogMaxFiles",
            "containerLogMaxWorkers",
            "containerLogMonitorInterval"
        ]
    );
}

/// What `kubeadm config print init-defaults --component-configs KubeletConfiguration`
/// (v1.36.3) prints, which is what `kubeadm join` writes to
/// `/var/lib/kubelet/config.yaml` on every node (the cluster's values aside).
const KUBEADM_CONFIG: &str = r#"apiVersion: kubelet.config.k8s.io/v1beta1
authentication:
  anonymous:
    enabled: false
  webhook:
    cacheTTL: 0s
    enabled: true
  x509:
    clientCAFile: /etc/kubernetes/pki/ca.crt
authorization:
  mode: Webhook
  webhook:
    cacheAuthorizedTTL: 0s
    cacheUnauthorizedTTL: 0s
cgroupDriver: systemd
clusterDNS:
- 10.96.0.10
clusterDomain: cluster.local
containerRuntimeEndpoint: ""
cpuManagerReconcilePeriod: 0s
crashLoopBackOff: {}
evictionPressureTransitionPeriod: 0s
fileCheckFrequency: 0s
healthzBindAddress: 127.0.0.1
healthzPort: 10248
httpCheckFrequency: 0s
imageMaximumGCAge: 0s
imageMinimumGCAge: 0s
kind: KubeletConfiguration
logging:
  flushFrequency: 0
  options:
    json:
      infoBufferSize: "0"
    text:
      infoBufferSize: "0"
  verbosity: 0
memorySwap: {}
nodeStatusReportFrequency: 0s
nodeStatusUpdateFrequency: 0s
rotateCertificates: true
runtimeRequestTimeout: 0s
shutdownGracePeriod: 0s
shutdownGracePeriodCriticalPods: 0s
staticPodPath: /etc/kubernetes/manifests
streamingConnectionIdleTimeout: 0s
syncFrequency: 0s
volumeStatsAggPeriod: 0s
"#;

#[test]
fn kubeadms_file_is_accepted_with_its_systemd_cgroup_driver() {
    let config = parse(KUBEADM_CONFIG, Path::new("config.yaml")).unwrap();
    assert_eq!(
        config.cgroup_driver,
        Some(crate::config::CgroupDriver::Systemd)
    );
}

#[test]
fn kubeadms_file_is_accepted_and_names_what_has_no_effect() {
    let text = KUBEADM_CONFIG.to_owned();
    let config = parse(&text, Path::new("config.yaml")).unwrap();
    assert_eq!(config.container_runtime_endpoint, None, "\"\" is unset");
    let unused: Vec<&str> = config
        .no_effect
        .iter()
        .map(|n| n.split(' ').next().unwrap_or(""))
        .collect();
    assert_eq!(
        unused,
        [
            "cpuManagerReconcilePeriod",
            "httpCheckFrequency",
            "logging.flushFrequency",
            "logging.options",
            "volumeStatsAggPeriod",
        ]
    );
    // Zero cache TTLs mean upstream's defaults.
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), &text).unwrap();
    let flags = load_with(&file, &[]).unwrap();
    assert_eq!(
        flags.authentication_token_webhook_cache_ttl,
        Duration::from_secs(120)
    );
    assert_eq!(
        flags.authorization_webhook_cache_authorized_ttl,
        Duration::from_secs(300)
    );
    assert_eq!(
        flags.authorization_webhook_cache_unauthorized_ttl,
        Duration::from_secs(30)
    );
    assert_eq!(flags.config_no_effect.len(), 5);
    // kubeadm's `0s` idle timeout is upstream's "not set": the 4h default.
    assert_eq!(
        flags.streaming_connection_idle_timeout,
        Duration::from_secs(4 * 3600)
    );
    // kubeadm's zero shutdown periods leave the feature off, `memorySwap: {}` NoSwap.
    assert!(!flags.shutdown.enabled());
    assert_eq!(
        flags.memory_swap_behavior,
        crate::runtime::swap::SwapBehavior::NoSwap
    );
    assert!(flags.rotate_certificates, "kubeadm asks for rotation");
}

/// kubeadm writes `0s` for every duration it leaves alone; upstream's defaulting reads
/// zero as unset. Taken literally, `runtimeRequestTimeout: 0s` made every CRI call
/// fail at once with DeadlineExceeded on the first kubeadm-joined node (VM tier).
#[test]
fn kubeadms_zero_durations_mean_upstreams_defaults() {
    let text = KUBEADM_CONFIG.replace("cgroupDriver: systemd", "cgroupDriver: cgroupfs");
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), &text).unwrap();
    let defaults = load_with(&temp_config(""), &[]).unwrap();
    let flags = load_with(&file, &[]).unwrap();
    assert_eq!(
        flags.runtime.runtime_request_timeout,
        Duration::from_secs(120)
    );
    assert_eq!(flags.sync_frequency, defaults.sync_frequency);
    assert_eq!(flags.file_check_frequency, defaults.file_check_frequency);
    assert_eq!(
        flags.node_status_update_frequency,
        defaults.node_status_update_frequency
    );
    assert_eq!(
        flags.node_status_report_frequency,
        defaults.node_status_report_frequency
    );
    assert_eq!(
        flags.minimum_image_ttl_duration,
        defaults.minimum_image_ttl_duration
    );
    assert_eq!(
        flags.eviction_pressure_transition_period,
        defaults.eviction_pressure_transition_period
    );
    assert!(!flags.sync_frequency.is_zero() && !flags.node_status_update_frequency.is_zero());
}

#[test]
fn webhook_cache_ttls_reach_the_server_config() {
    let file = temp_config(
        "authentication: {webhook: {cacheTTL: 1m}}\n\
         authorization: {webhook: {cacheAuthorizedTTL: 10m, cacheUnauthorizedTTL: 5s}}\n",
    );
    let flags = load_with(&file, &[]).unwrap();
    let server = flags.server_config("n");
    assert_eq!(server.token_cache.authenticated, Duration::from_secs(60));
    assert_eq!(server.authz_cache.allowed, Duration::from_secs(600));
    assert_eq!(server.authz_cache.denied, Duration::from_secs(5));
}

#[test]
fn kubeadm_fields_asking_for_what_litelet_lacks_are_refused() {
    let found = problems(
        r#"
imageMaximumGCAge: 1h
crashLoopBackOff: {maxContainerRestartPeriod: 10s}
cpuManagerPolicy: static
"#,
    );
    let fields: Vec<&str> = found.iter().map(|p| p.field.as_str()).collect();
    assert_eq!(
        fields,
        [
            "imageMaximumGCAge",
            "crashLoopBackOff.maxContainerRestartPeriod",
            "cpuManagerPolicy",
        ]
    );
    // Off or default values of the same fields are fine.
    let config = parse_text(
        "shutdownGracePeriod: 0s\nimageMaximumGCAge: 0s\ncpuManagerPolicy: none\n\
         memoryManagerPolicy: None\ntopologyManagerPolicy: none\nserverTLSBootstrap: false\n\
         rotateCertificates: false\nmemorySwap: {swapBehavior: NoSwap}\nlogging: {format: text}\n",
    )
    .unwrap();
    assert!(config.no_effect.is_empty(), "{:?}", config.no_effect);
}

#[test]
fn shutdown_grace_periods_reach_the_flags() {
    let file = temp_config("shutdownGracePeriod: 30s\nshutdownGracePeriodCriticalPods: 10s\n");
    let flags = load_with(&file, &[]).unwrap();
    assert_eq!(flags.shutdown.grace_period, Duration::from_secs(30));
    assert_eq!(
        flags.shutdown.grace_period_critical_pods,
        Duration::from_secs(10)
    );
    assert_eq!(flags.shutdown.period_requested(), Duration::from_secs(30));

    let file = temp_config(
        "shutdownGracePeriodByPodPriority:\n\
         - {priority: 100000, shutdownGracePeriodSeconds: 10}\n\
         - {priority: 0, shutdownGracePeriodSeconds: 20}\n",
    );
    let flags = load_with(&file, &[]).unwrap();
    let groups = flags.shutdown.groups();
    assert_eq!(
        groups.iter().map(|g| g.priority).collect::<Vec<_>>(),
        [0, 100000]
    );
    assert_eq!(flags.shutdown.period_requested(), Duration::from_secs(30));
}

#[test]
fn shutdown_settings_are_validated_as_upstream() {
    let file = temp_config("shutdownGracePeriod: 10s\nshutdownGracePeriodCriticalPods: 20s\n");
    let err = load_with(&file, &[]).unwrap_err().to_string();
    assert!(err.contains("shutdownGracePeriodCriticalPods"), "{err}");
    let file = temp_config(
        "shutdownGracePeriod: 10s\n\
         shutdownGracePeriodByPodPriority: [{priority: 0, shutdownGracePeriodSeconds: 5}]\n",
    );
    let err = load_with(&file, &[]).unwrap_err().to_string();
    assert!(err.contains("cannot specify both"), "{err}");
    let found = problems("shutdownGracePeriodByPodPriority: [{priority: 0, seconds: 5}]\n");
    assert_eq!(found[0].field, "shutdownGracePeriodByPodPriority");
}

#[test]
fn swap_fields_reach_the_flags_and_the_command_line_wins() {
    use crate::runtime::swap::SwapBehavior;
    let file = temp_config("failSwapOn: false\nmemorySwap: {swapBehavior: LimitedSwap}\n");
    let flags = load_with(&file, &[]).unwrap();
    assert!(!flags.fail_swap_on);
    assert_eq!(flags.memory_swap_behavior, SwapBehavior::LimitedSwap);
    let flags = load_with(&file, &["--fail-swap-on=true"]).unwrap();
    assert!(flags.fail_swap_on);
    let defaults = load_with(&temp_config(""), &[]).unwrap();
    assert!(defaults.fail_swap_on, "upstream's default");
    assert_eq!(defaults.memory_swap_behavior, SwapBehavior::NoSwap);
    let found = problems("memorySwap: {swapBehavior: UnlimitedSwap, other: 1}\n");
    let fields: Vec<&str> = found.iter().map(|p| p.field.as_str()).collect();
    assert_eq!(fields, ["memorySwap.swapBehavior", "memorySwap.other"]);
}

#[test]
fn enforce_node_allocatable_fields_become_flags_and_are_checked() {
    let file = temp_config(
        "enforceNodeAllocatable: [pods, system-reserved, kube-reserved-compressible]\n\
         systemReservedCgroup: /system.slice\nkubeReservedCgroup: /kube.slice\n",
    );
    let flags = load_with(&file, &[]).unwrap();
    assert_eq!(
        flags.enforce_node_allocatable,
        ["pods", "system-reserved", "kube-reserved-compressible"]
    );
    assert_eq!(
        flags.system_reserved_cgroup.as_deref(),
        Some("/system.slice")
    );
    assert_eq!(flags.kube_reserved_cgroup.as_deref(), Some("/kube.slice"));
    // The flag wins over the file.
    let flags = load_with(&file, &["--enforce-node-allocatable=none"]).unwrap();
    assert_eq!(flags.enforce_node_allocatable, ["none"]);
    // An empty list enforces nothing.
    let file = temp_config("enforceNodeAllocatable: []\n");
    let flags = load_with(&file, &[]).unwrap();
    assert!(flags
        .node_allocatable_enforcement()
        .unwrap()
        .keys
        .is_empty());

    // Unknown keys are refused with the field's name.
    let p = problems("enforceNodeAllocatable: [pods, memory]\n");
    assert_eq!(p.len(), 1);
    assert_eq!(p[0].field, "enforceNodeAllocatable");
    assert!(p[0]
        .to_string()
        .contains("\"memory\" is not a node allocatable enforcement"));
    // A reserved key without its cgroup, after the merge.
    let file = temp_config("enforceNodeAllocatable: [pods, kube-reserved]\n");
    match load_with(&file, &[]) {
        Err(LoadError::Invalid(why)) => assert!(
            why.contains("kubeReservedCgroup (--kube-reserved-cgroup) must be given"),
            "{why}"
        ),
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert!(load_with(&file, &["--kube-reserved-cgroup=/kube.slice"]).is_ok());
}
