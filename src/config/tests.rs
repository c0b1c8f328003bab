//! The command line and config file into `Flags`, setting by setting.

use std::time::Duration;

use super::*;

fn parse(args: &[&str]) -> Flags {
    let mut all = vec!["litelet"];
    all.extend_from_slice(args);
    Flags::try_parse_from(all).unwrap_or_else(|e| panic!("{args:?}: {e}"))
}

#[test]
fn upstream_flag_names_parse() {
    let flags = parse(&[
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
    ]);
    assert!(flags.command.is_none());
    assert_eq!(flags.max_pods, 30);
    assert_eq!(flags.hostname_override.as_deref(), Some("edge-1"));
    assert_eq!(log_filter(flags.verbosity), log::LevelFilter::Debug);
    let (endpoint, options) = flags.runtime.resolve().unwrap();
    assert_eq!(endpoint.to_string(), "unix:///tmp/x.sock");
    assert_eq!(options.request_timeout, Duration::from_secs(30));
    assert_eq!(options.pull_timeout, Duration::from_secs(600));
}

#[test]
fn enforce_node_allocatable_is_validated() {
    let flags = parse(&[]);
    assert_eq!(flags.enforce_node_allocatable, ["pods"]);
    let c = flags.node_allocatable_enforcement().unwrap();
    assert!(c.has(crate::cgroups::allocatable::Enforcement::Pods));
    let flags = parse(&[
        "--enforce-node-allocatable=pods,system-reserved-compressible",
        "--system-reserved-cgroup=/system.slice",
    ]);
    assert_eq!(
        flags.enforce_node_allocatable,
        ["pods", "system-reserved-compressible"]
    );
    let none = parse(&["--enforce-node-allocatable=none"]);
    assert!(none.node_allocatable_enforcement().unwrap().keys.is_empty());
    let empty = parse(&["--enforce-node-allocatable="]);
    assert!(empty
        .node_allocatable_enforcement()
        .unwrap()
        .keys
        .is_empty());

    let unknown = Flags::try_parse_from(["litelet", "--enforce-node-allocatable=pods,cpu"]);
    assert!(
        matches!(&unknown, Err(LoadError::Invalid(p)) if p[0].why.contains("\"cpu\" is not a node allocatable enforcement")),
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
        match Flags::try_parse_from(all.clone()) {
            Err(LoadError::Inconsistent(message)) => assert!(message.contains(why), "{message}"),
            other => panic!("{all:?}: expected a refusal, got {other:?}"),
        }
    }
}

#[test]
fn checkpoint_api_pods_is_on_by_default_and_can_be_turned_off() {
    assert!(parse(&[]).checkpoint_api_pods);
    assert!(!parse(&["--checkpoint-api-pods=false"]).checkpoint_api_pods);
}

#[test]
fn node_server_settings() {
    let flags = parse(&[]);
    assert_eq!((flags.port, flags.healthz_port), (10250, 10248));
    assert!(!flags.anonymous_auth);
    assert_eq!(flags.healthz_bind_address.0.to_string(), "127.0.0.1");
    assert_eq!(
        flags.authorization_mode,
        crate::server::authz::AuthorizationMode::Webhook
    );
    let flags = parse(&[
        "--anonymous-auth",
        "--authorization-mode",
        "AlwaysAllow",
        "--address",
        "127.0.0.1",
    ]);
    assert!(flags.anonymous_auth);
    assert_eq!(
        flags.authorization_mode,
        crate::server::authz::AuthorizationMode::AlwaysAllow
    );
    assert!(Flags::try_parse_from(["litelet", "--authorization-mode=Node"]).is_err());
}

#[test]
fn server_connection_limits() {
    let flags = parse(&[]);
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
        (crate::server::MIN_MAX_CONNECTIONS..=crate::server::MAX_MAX_CONNECTIONS).contains(&sized),
        "sized by memory: {sized}"
    );
    let flags = parse(&[
        "--server-max-connections=200",
        "--server-max-unauthenticated-connections=10",
        "--server-max-unauthenticated-per-client=2",
    ]);
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
fn container_log_settings() {
    let config = parse(&[]).log_manager_config().unwrap();
    assert_eq!(config.policy.max_size, 10 * 1024 * 1024);
    assert_eq!((config.policy.max_files, config.workers), (5, 1));
    assert_eq!(config.interval, Duration::from_secs(10));
    let config = parse(&[
        "--container-log-max-size=1Mi",
        "--container-log-max-files=3",
    ])
    .log_manager_config()
    .unwrap();
    assert_eq!(
        (config.policy.max_size, config.policy.max_files),
        (1 << 20, 3)
    );
    assert!(parse(&["--container-log-max-size=-1"])
        .log_manager_config()
        .is_none());
    for bad in [
        "--container-log-max-files=1",
        "--container-log-max-size=lots",
    ] {
        assert!(Flags::try_parse_from(["litelet", bad]).is_err(), "{bad}");
    }
}

#[test]
fn merged_gc_thresholds_are_checked() {
    let err = Flags::try_parse_from([
        "litelet",
        "--image-gc-high-threshold=50",
        "--image-gc-low-threshold=60",
    ])
    .unwrap_err();
    assert!(matches!(err, LoadError::Inconsistent(_)), "{err}");
}

#[test]
fn cgroup_drivers() {
    assert_eq!(
        parse(&["--cgroup-driver=systemd"]).cgroup_driver,
        CgroupDriver::Systemd
    );
    let err = Flags::try_parse_from(["litelet", "--cgroup-driver=openrc"]).unwrap_err();
    assert!(
        err.to_string()
            .contains("\"openrc\" is not a cgroup driver: use \"cgroupfs\" or \"systemd\""),
        "{err}"
    );
}

#[test]
fn a_missing_config_file_stops_loading() {
    let missing = Flags::try_load_from(["litelet", "--config", "/nonexistent/litelet.yaml"]);
    assert!(matches!(
        missing,
        Err(LoadError::File(file::ConfigFileError::Read { .. }))
    ));
}

#[test]
fn the_packaged_config_file_is_valid() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("packaging/config.yaml");
    let flags = decode::from_file(&path).unwrap();
    assert_eq!(
        flags.pod_manifest_path.as_deref(),
        Some(std::path::Path::new("/etc/kubernetes/manifests"))
    );
}

#[test]
fn tls_and_streaming_settings_from_flags_and_the_config_file() {
    let flags = parse(&[
        "--tls-cipher-suites=TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,TLS_RSA_WITH_AES_128_GCM_SHA256",
        "--tls-min-version=VersionTLS12",
        "--streaming-connection-idle-timeout=5m",
    ]);
    let config = flags.server_config("n");
    assert_eq!(
        config.tls.policy.dropped,
        ["TLS_RSA_WITH_AES_128_GCM_SHA256"]
    );
    assert_eq!(config.limits.stream_idle_timeout, Duration::from_secs(300));
    let none = parse(&["--streaming-connection-idle-timeout=0"]).server_config("n");
    assert!(none.limits.stream_idle_timeout.is_zero(), "0 means never");

    let refused = |args: &[&str]| match Flags::try_load_from(args) {
        Err(e @ (LoadError::Invalid(_) | LoadError::Inconsistent(_))) => e.to_string(),
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
fn node_address_and_cloud_settings_reach_the_node_config() {
    use crate::node::addresses::{CloudProvider, NodeIps};
    let c = parse(&[
        "--node-ip=10.1.2.3,fd00::3",
        "--cloud-provider=external",
        "--provider-id=aws:///zone/i-1",
        "--hostname-override=n",
    ])
    .node_config(None)
    .unwrap();
    assert_eq!(
        c.node_ips(),
        NodeIps::DualStack("10.1.2.3".parse().unwrap(), "fd00::3".parse().unwrap())
    );
    assert_eq!(c.cloud_provider, CloudProvider::External);
    assert_eq!(c.provider_id.as_deref(), Some("aws:///zone/i-1"));
    for bad in ["--cloud-provider=aws", "--node-ip=10.1.2.3,10.1.2.4"] {
        assert!(Flags::try_parse_from(["litelet", bad]).is_err(), "{bad}");
    }
}
