//! The merge (defaults < --config < drop-ins < flags) and the stances, as tables.

use std::io::Write;
use std::time::Duration;

use super::*;

const HEADER: &str = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n";

/// A temp folder with a config file and drop-ins.
struct Files {
    dir: tempfile::TempDir,
}

impl Files {
    fn new() -> Files {
        Files {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    /// Writes `name` (relative) with the type meta header and `body`.
    fn write(&self, name: &str, body: &str) -> String {
        let path = self.dir.path().join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        let mut f = std::fs::File::create(&path).unwrap();
        write!(f, "{HEADER}{body}").unwrap();
        path.display().to_string()
    }

    fn path(&self, name: &str) -> String {
        self.dir.path().join(name).display().to_string()
    }
}

fn run(args: &[&str]) -> Result<Flags, LoadError> {
    let mut all = vec!["litelet".to_owned()];
    all.extend(args.iter().map(|a| a.to_string()));
    load(all, true)
}

fn config(body: &str, extra: &[&str]) -> Result<Flags, LoadError> {
    let files = Files::new();
    let path = files.write("config.yaml", body);
    let mut args = vec!["--config", &path];
    args.extend_from_slice(extra);
    run(&args)
}

fn problems(result: Result<Flags, LoadError>) -> Vec<Problem> {
    match result {
        Err(LoadError::Invalid(problems)) => problems,
        other => panic!("expected problems, got {other:?}"),
    }
}

/// Each step overrides the one before it; what no step sets keeps litelet's default.
#[test]
fn flags_over_dropins_over_the_config_file_over_defaults() {
    let files = Files::new();
    let config = files.write(
        "config.yaml",
        "maxPods: 10\nsyncFrequency: 5s\nclusterDomain: file.local\nport: 11000\n",
    );
    files.write("d/10-a.conf", "maxPods: 20\nclusterDomain: a.local\n");
    files.write("d/20-b.conf", "maxPods: 30\n");
    files.write("d/30-c.txt", "maxPods: 99\n");
    let dir = files.path("d");
    let cases: Vec<(Vec<&str>, u32, &str, Duration, u16)> = vec![
        (vec![], 110, "cluster.local", Duration::from_secs(60), 10250),
        (
            vec!["--config", &config],
            10,
            "file.local",
            Duration::from_secs(5),
            11000,
        ),
        (
            vec!["--config", &config, "--config-dir", &dir],
            30,
            "a.local",
            Duration::from_secs(5),
            11000,
        ),
        (
            vec!["--config-dir", &dir],
            30,
            "a.local",
            Duration::from_secs(60),
            10250,
        ),
        (
            vec![
                "--config",
                &config,
                "--config-dir",
                &dir,
                "--max-pods=40",
                "--sync-frequency=1m0s",
            ],
            40,
            "a.local",
            Duration::from_secs(60),
            11000,
        ),
    ];
    for (args, max_pods, domain, sync, port) in cases {
        let flags = run(&args).unwrap_or_else(|e| panic!("{args:?}: {e}"));
        assert_eq!(
            (
                flags.max_pods,
                flags.cluster_domain.as_str(),
                flags.sync_frequency,
                flags.port
            ),
            (max_pods, domain, sync, port),
            "{args:?}"
        );
    }
}

/// Upstream merges drop-ins over the defaulted configuration: a drop-in's
/// evictionHard adds to the default thresholds, where the main file's replaces them;
/// a null puts a field back to its default.
#[test]
fn dropins_merge_maps_and_null_resets() {
    let files = Files::new();
    files.write(
        "d/10.conf",
        "evictionHard: {memory.available: 1Gi}\nmaxPods: null\n",
    );
    let main = files.write("config.yaml", "maxPods: 5\n");
    let dir = files.path("d");
    let flags = run(&["--config", &main, "--config-dir", &dir]).unwrap();
    assert_eq!(flags.eviction_hard["memory.available"], "1Gi");
    assert_eq!(flags.eviction_hard["nodefs.available"], "10%");
    assert_eq!(
        flags.max_pods, 110,
        "null in a drop-in is the default again"
    );
    let flags = config("evictionHard: {memory.available: 1Gi}\n", &[]).unwrap();
    assert_eq!(flags.eviction_hard.len(), 1, "{:?}", flags.eviction_hard);
    let merged = config(
        "evictionHard: {memory.available: 1Gi}\nmergeDefaultEvictionSettings: true\n",
        &[],
    )
    .unwrap();
    assert_eq!(merged.eviction_hard.len(), 4, "{:?}", merged.eviction_hard);
    assert_eq!(merged.eviction_hard["memory.available"], "1Gi");
}

#[test]
fn a_dropin_must_be_a_kubelet_configuration() {
    let files = Files::new();
    std::fs::create_dir_all(files.path("d")).unwrap();
    std::fs::write(files.path("d/10.conf"), "maxPods: 3\n").unwrap();
    let err = run(&["--config-dir", &files.path("d")])
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("10.conf") && err.contains("apiVersion is missing"),
        "{err}"
    );
    let err = run(&["--config-dir", &files.path("none")]).unwrap_err();
    assert!(
        matches!(err, LoadError::File(file::ConfigFileError::Folder { .. })),
        "{err}"
    );
}

/// Upstream decodes leniently: an unknown field is logged and skipped.
#[test]
fn unknown_fields_are_warnings() {
    let flags = config(
        "maxPod: 10\nauthentication: {x509: {extra: 1}}\nmaxPods: 7\n",
        &[],
    )
    .unwrap();
    assert_eq!(flags.max_pods, 7);
    let unknown: Vec<&String> = flags
        .warnings
        .iter()
        .filter(|w| w.contains("unknown field"))
        .collect();
    assert_eq!(unknown.len(), 2, "{:?}", flags.warnings);
    assert!(
        unknown[0].contains("\"authentication.x509.extra\"")
            || unknown[1].contains("\"authentication.x509.extra\"")
    );
}

/// litelet's stance on each kind of setting, from the file and from flags.
#[test]
fn stances_accept_warn_or_refuse() {
    /// (config body, flags, refused field or flag, warning containing)
    type Case<'a> = (&'a str, Vec<&'a str>, Option<&'a str>, Option<&'a str>);
    let cases: Vec<Case> = vec![
        ("readOnlyPort: 0\n", vec![], None, Some("readOnlyPort")),
        ("readOnlyPort: 10255\n", vec![], Some("readOnlyPort"), None),
        (
            "",
            vec!["--read-only-port=0"],
            None,
            Some("--read-only-port"),
        ),
        (
            "",
            vec!["--read-only-port=10255"],
            Some("--read-only-port"),
            None,
        ),
        (
            "cgroupsPerQOS: true\nregisterNode: true\nenableServer: true\n",
            vec![],
            None,
            Some("registerNode"),
        ),
        ("registerNode: false\n", vec![], Some("registerNode"), None),
        ("runOnce: false\n", vec![], None, Some("runOnce")),
        ("runOnce: true\n", vec![], Some("runOnce"), None),
        (
            "hairpinMode: hairpin-veth\n",
            vec![],
            None,
            Some("hairpinMode"),
        ),
        (
            "",
            vec!["--housekeeping-interval=20s"],
            None,
            Some("--housekeeping-interval"),
        ),
        (
            "cpuManagerPolicy: static\n",
            vec![],
            Some("cpuManagerPolicy"),
            None,
        ),
        (
            "contentType: application/vnd.kubernetes.protobuf\n",
            vec![],
            None,
            Some("contentType"),
        ),
        (
            "authentication: {webhook: {enabled: false}}\n",
            vec![],
            Some("authentication.webhook.enabled"),
            None,
        ),
        (
            "",
            vec!["--authentication-token-webhook"],
            None,
            Some("--authentication-token-webhook"),
        ),
        (
            "crashLoopBackOff: {maxContainerRestartPeriod: 300s}\n",
            vec![],
            None,
            Some("crashLoopBackOff"),
        ),
    ];
    for (body, extra, refused, warned) in cases {
        let result = config(body, &extra);
        match refused {
            Some(name) => {
                let found = problems(result);
                assert_eq!(found.len(), 1, "{body:?} {extra:?}: {found:?}");
                assert_eq!(found[0].name, name);
                assert!(found[0].why.contains("not supported"), "{}", found[0]);
            }
            None => {
                let flags = result.unwrap_or_else(|e| panic!("{body:?} {extra:?}: {e}"));
                let warning = warned.unwrap_or_default();
                assert!(
                    flags
                        .warnings
                        .iter()
                        .any(|w| w.contains("no effect") && w.contains(warning)),
                    "{body:?} {extra:?}: {:?}",
                    flags.warnings
                );
            }
        }
    }
}

#[test]
fn every_problem_is_named_with_its_source() {
    let found = problems(config(
        "syncFrequency: 10 minutes\nmaxPods: \"3\"\nimageGCHighThresholdPercent: 120\n\
         clusterDNS: [not-an-ip]\nkubeAPIQPS: -1\ncgroupDriver: openrc\nauthentication: 5\n",
        &["--container-log-max-files=1"],
    ));
    let mut names: Vec<&str> = found.iter().map(|p| p.name.as_str()).collect();
    names.sort();
    assert_eq!(
        names,
        [
            "--container-log-max-files",
            "authentication",
            "cgroupDriver",
            "clusterDNS",
            "imageGCHighThresholdPercent",
            "kubeAPIQPS",
            "maxPods",
            "syncFrequency",
        ],
        "{found:?}"
    );
    let text = problems_text(&found);
    assert!(
        text.contains("command line: --container-log-max-files: 1 must be at least 2"),
        "{text}"
    );
    assert!(
        text.contains("cgroupDriver: \"openrc\" is not a cgroup driver"),
        "{text}"
    );
    assert!(text.contains("maxPods: \"3\" is not an integer"), "{text}");
}

/// kubeadm writes `0s` (and `""`) for fields it leaves alone; upstream's defaulting
/// reads them as unset. On the command line a zero is a value.
#[test]
fn zero_values_in_files_keep_the_defaults() {
    let flags = config(
        "syncFrequency: 0s\nruntimeRequestTimeout: 0s\ncontainerRuntimeEndpoint: \"\"\n\
         authorization: {webhook: {cacheAuthorizedTTL: 0s}}\nport: 0\n",
        &[],
    )
    .unwrap();
    assert_eq!(flags.sync_frequency, Duration::from_secs(60));
    assert_eq!(
        flags.runtime.runtime_request_timeout,
        Duration::from_secs(120)
    );
    assert_eq!(
        flags.runtime.container_runtime_endpoint,
        crate::config::DEFAULT_RUNTIME_ENDPOINT
    );
    assert_eq!(
        flags.authorization_webhook_cache_authorized_ttl,
        Duration::from_secs(300)
    );
    assert_eq!(flags.port, 10250);
    let flags = run(&["--healthz-port=0", "--minimum-container-ttl-duration=0s"]).unwrap();
    assert_eq!(flags.healthz_port, 0);
}

#[test]
fn an_explicit_update_frequency_is_the_report_frequency_default() {
    let flags = config("nodeStatusUpdateFrequency: 20s\n", &[]).unwrap();
    assert_eq!(flags.node_status_report_frequency, Duration::from_secs(20));
    let flags = config(
        "nodeStatusUpdateFrequency: 20s\nnodeStatusReportFrequency: 1m\n",
        &[],
    )
    .unwrap();
    assert_eq!(flags.node_status_report_frequency, Duration::from_secs(60));
    let flags = run(&["--node-status-update-frequency=20s"]).unwrap();
    assert_eq!(
        flags.node_status_report_frequency,
        Duration::from_secs(300),
        "flags do not"
    );
}

/// Upstream warns once for each deprecated flag used (pflag's words).
#[test]
fn deprecated_flags_warn_as_upstream() {
    let flags = run(&[
        "--max-pods=3",
        "--max-pods=4",
        "--hostname-override=n",
        "--containerd=/x",
    ])
    .unwrap();
    let deprecated: Vec<&String> = flags
        .warnings
        .iter()
        .filter(|w| w.contains("has been deprecated"))
        .collect();
    assert_eq!(deprecated.len(), 2, "{deprecated:?}");
    assert!(deprecated[0].starts_with(
        "Flag --max-pods has been deprecated, This parameter should be set via the config file"
    ));
    assert!(deprecated[1].contains("cadvisor flag"));
}

/// pflag: bare booleans are true; `--flag false` leaves an argument, which the
/// kubelet refuses as a command; repeated lists append; the last scalar wins.
#[test]
fn command_line_values() {
    let flags = run(&[
        "--rotate-certificates",
        "--fail-swap-on=false",
        "--anonymous-auth",
    ])
    .unwrap();
    assert!(flags.rotate_certificates && !flags.fail_swap_on && flags.anonymous_auth);
    let err = run(&["--rotate-certificates", "false"]).unwrap_err();
    assert_eq!(err.to_string(), "unknown command \"false\"");
    let flags = run(&[
        "--cluster-dns=10.0.0.10",
        "--cluster-dns",
        "10.0.0.11,10.0.0.12",
        "--max-pods=3",
        "--max-pods=4",
        "--node-labels=a=1",
        "--node-labels=b=2",
        "-v",
        "3",
    ])
    .unwrap();
    assert_eq!(flags.cluster_dns, ["10.0.0.10", "10.0.0.11", "10.0.0.12"]);
    assert_eq!(flags.max_pods, 4);
    assert_eq!(flags.node_labels.len(), 2);
    assert_eq!(flags.verbosity, 3);
    let err = run(&["--fail-swap-on=maybe"]).unwrap_err().to_string();
    assert!(
        err.contains("invalid argument \"maybe\" for \"--fail-swap-on\" flag"),
        "{err}"
    );
}

/// The flags of the kubeadm drop-in and a kubeadm v1.36 config file (as
/// `kubeadm init phase kubelet-start` writes it) load, with warnings only.
#[test]
fn kubeadms_config_file_loads() {
    let body = r#"authentication:
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
containerRuntimeEndpoint: unix:///run/containerd/containerd.sock
cpuManagerReconcilePeriod: 0s
crashLoopBackOff: {}
evictionPressureTransitionPeriod: 0s
fileCheckFrequency: 0s
healthzBindAddress: 127.0.0.1
healthzPort: 10248
httpCheckFrequency: 0s
imageMaximumGCAge: 0s
imageMinimumGCAge: 0s
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
    let flags = config(
        body,
        &[
            "--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf",
            "--kubeconfig=/etc/kubernetes/kubelet.conf",
            "--hostname-override=edge-1",
            "--node-ip=10.0.0.5",
        ],
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(flags.cgroup_driver, crate::config::CgroupDriver::Systemd);
    assert!(flags.rotate_certificates);
    assert_eq!(flags.cluster_dns, ["10.96.0.10"]);
    assert_eq!(flags.sync_frequency, Duration::from_secs(60));
    assert!(
        flags.warnings.iter().all(|w| !w.contains("unknown field")),
        "{:?}",
        flags.warnings
    );
}

#[test]
fn subcommands_take_their_own_flags() {
    let flags = run(&[
        "runtime-info",
        "--container-runtime-endpoint",
        "unix:///run/crio/crio.sock",
        "-v",
        "2",
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
    assert!(matches!(
        run(&["ps"]).unwrap().command,
        Some(Command::Ps(_))
    ));
    let err = run(&["ps", "--max-pods=3"]).unwrap_err().to_string();
    assert_eq!(err, "flag --max-pods is not a flag of `litelet ps`");
}

#[test]
fn help_and_version() {
    assert!(matches!(run(&["--help"]), Err(LoadError::Help(text)) if text.contains("--max-pods")));
    assert!(matches!(run(&["-h"]), Err(LoadError::Help(_))));
    match load(vec!["/usr/bin/kubelet".into(), "--version".into()], true) {
        Err(LoadError::Version(text)) => {
            assert_eq!(text, format!("Kubernetes {}", crate::node::KUBELET_VERSION))
        }
        other => panic!("{other:?}"),
    }
    match run(&["--version"]) {
        Err(LoadError::Version(text)) => assert_eq!(
            text,
            format!("Kubernetes v1.36.3+litelet.{}", env!("CARGO_PKG_VERSION"))
        ),
        other => panic!("{other:?}"),
    }
    assert!(run(&["--version=false"]).is_ok());
}

/// Feature gates from the command line and the config file merge by name; one at
/// upstream's default is accepted, another value or an unknown name is refused by name.
#[test]
fn feature_gates_at_litelets_values_only() {
    let flags = config(
        "featureGates:\n  AllAlpha: false\n",
        &["--feature-gates=AllBeta=false"],
    )
    .unwrap();
    let want: Vec<(&str, bool)> = vec![("AllAlpha", false), ("AllBeta", false)];
    let got: Vec<(&str, bool)> = flags
        .feature_gates
        .iter()
        .map(|(k, v)| (k.as_str(), *v))
        .collect();
    assert_eq!(got, want);
    let refused = problems(config("featureGates:\n  AllAlpha: true\n", &[]));
    assert_eq!(refused.len(), 1);
    assert_eq!(refused[0].name, "featureGates");
    assert!(
        refused[0].why.contains("AllAlpha=true is not supported"),
        "{refused:?}"
    );
    let err = run(&["--feature-gates=NoSuchGate=true"])
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("unrecognized feature gate: NoSuchGate"),
        "{err}"
    );
}

#[test]
fn checkpoint_secrets_is_on_by_default_and_the_file_can_turn_it_off_or_seal_it() {
    let plain = run(&[]).unwrap();
    assert!(plain.checkpoint_secrets);
    assert_eq!(plain.checkpoint_secrets_key_file, None);
    assert!(
        !run(&["--checkpoint-secrets=false"])
            .unwrap()
            .checkpoint_secrets
    );
    let file = config(
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
         checkpointSecrets: false\ncheckpointSecretsKeyFile: /media/key\n",
        &[],
    )
    .unwrap();
    assert!(!file.checkpoint_secrets);
    assert_eq!(
        file.checkpoint_secrets_key_file.as_deref(),
        Some(std::path::Path::new("/media/key"))
    );
}

#[test]
fn image_pull_concurrency_and_maximum_age_are_honoured_and_checked() {
    use crate::images::pull_limit::PullConcurrency;
    let header = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n";
    let plain = run(&[]).unwrap();
    assert_eq!(
        plain.pull_concurrency().unwrap(),
        PullConcurrency::Parallel(None)
    );
    assert_eq!(plain.image_maximum_gc_age, std::time::Duration::ZERO);
    let serial = run(&["--serialize-image-pulls"]).unwrap();
    assert_eq!(serial.pull_concurrency().unwrap(), PullConcurrency::Serial);
    let limited = config(
        &format!(
            "{header}serializeImagePulls: false\nmaxParallelImagePulls: 3\nimageMaximumGCAge: 1h\n"
        ),
        &[],
    )
    .unwrap();
    assert_eq!(limited.pull_concurrency().unwrap().limit(), Some(3));
    assert_eq!(
        limited.image_maximum_gc_age,
        std::time::Duration::from_secs(3600)
    );
    for (body, why) in [
        (
            "serializeImagePulls: true\nmaxParallelImagePulls: 2\n",
            "maxParallelImagePulls cannot be larger than 1",
        ),
        ("maxParallelImagePulls: 0\n", "must be a positive number"),
        (
            "imageMinimumGCAge: 2m\nimageMaximumGCAge: 1m\n",
            "must be greater than imageMinimumGCAge",
        ),
    ] {
        match config(&format!("{header}{body}"), &[]) {
            Err(LoadError::Inconsistent(message)) => assert!(message.contains(why), "{message}"),
            other => panic!("{body}: expected a refusal, got {other:?}"),
        }
    }
}
