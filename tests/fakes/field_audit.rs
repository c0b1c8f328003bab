//! The pod field audit: every field of the v1.36 PodSpec, Container,
//! EphemeralContainer, PodSecurityContext, SecurityContext and Volume (as the real
//! kube-apiserver v1.36.3 publishes them in its OpenAPI, `field_audit/fields-v1.36.txt`)
//! is either honoured — and the test that proves it is named here and must exist as a
//! `fn` in `tests/` or `src/` — or refused at admission with a message naming the field
//! (this test sets the field on a pod and runs litelet's admission). There is no third
//! category: a field missing from the table, or listed twice, fails the test.
//!
//! Scheduler and API-server fields (schedulerName, topologySpreadConstraints,
//! schedulingGates, preemptionPolicy, priorityClassName, automountServiceAccountToken,
//! the deprecated serviceAccount alias) have no kubelet part upstream either: honoured
//! means admitted and left to them, which
//! `scheduler_and_api_server_fields_are_admitted_and_left_to_them` below checks.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use litelet::admission::fields::NodeSupport;
use litelet::admission::{admit, NodeView};
use litelet::api::pod::Pod;
use serde_json::{json, Value};

/// What litelet does with a field.
#[derive(Clone, Copy, Debug)]
enum Audit {
    /// Carried out; the named test proves it.
    Honoured(&'static str),
    /// Refused at admission when set to this JSON value.
    Refused(&'static str),
}
use Audit::{Honoured, Refused};

const SCHEDULER: &str = "scheduler_and_api_server_fields_are_admitted_and_left_to_them";
const CRI_SECURITY: &str = "container_security_stdio_and_working_dir_reach_the_cri_config";
const NAMESPACES: &str = "namespace_modes_follow_host_network_pid_ipc_and_share_process_namespace";

/// Container fields (shared by EphemeralContainer, which goes through the same code).
const CONTAINER: &[(&str, Audit)] = &[
    ("args", Honoured("command_env_log_path_and_identity")),
    ("command", Honoured("command_env_log_path_and_identity")),
    ("env", Honoured("command_env_log_path_and_identity")),
    (
        "envFrom",
        Honoured("env_from_fields_resources_and_config_maps"),
    ),
    ("image", Honoured("untagged_image_is_asked_for_as_latest")),
    (
        "imagePullPolicy",
        Honoured("if_not_present_with_the_image_present_does_not_pull"),
    ),
    (
        "lifecycle",
        Honoured("post_start_failure_kills_the_container"),
    ),
    (
        "livenessProbe",
        Honoured("a_failing_liveness_probe_restarts_the_container_once"),
    ),
    (
        "name",
        Honoured("container_labels_and_annotations_round_trip"),
    ),
    ("ports", Honoured("node_name_os_selector_taints_ports")),
    (
        "readinessProbe",
        Honoured("readiness_drives_container_ready_and_the_pod_ready_condition"),
    ),
    (
        "resizePolicy",
        Honoured("resize_with_restart_policy_restarts_under_the_new_pod_limits"),
    ),
    ("resources", Honoured("resources_convert_to_cgroup_values")),
    (
        "restartPolicy",
        Honoured("sidecar_start_failure_continues_with_the_next_init_container"),
    ),
    (
        "restartPolicyRules",
        Refused(r#"[{"action": "Restart", "exitCodes": {"operator": "In", "values": [42]}}]"#),
    ),
    ("securityContext", Honoured(CRI_SECURITY)),
    (
        "startupProbe",
        Honoured("startup_gates_liveness_and_readiness"),
    ),
    ("stdin", Honoured(CRI_SECURITY)),
    ("stdinOnce", Honoured(CRI_SECURITY)),
    ("tty", Honoured(CRI_SECURITY)),
    (
        "terminationMessagePath",
        Honoured("termination_messages_on_real_containerd"),
    ),
    (
        "terminationMessagePolicy",
        Honoured("termination_messages_come_from_the_file_or_the_log_tail_on_failure"),
    ),
    (
        "volumeDevices",
        Refused(r#"[{"name": "disk", "devicePath": "/dev/xvdb"}]"#),
    ),
    (
        "volumeMounts",
        Honoured("sub_path_mounts_name_the_prepared_bind_mount_never_the_joined_path"),
    ),
    ("workingDir", Honoured(CRI_SECURITY)),
];

fn table() -> Vec<(&'static str, &'static str, Audit)> {
    let mut rows: Vec<(&str, &str, Audit)> = vec![
        // PodSpec
        (
            "PodSpec",
            "activeDeadlineSeconds",
            Honoured("active_deadline_seconds_fails_the_pod_once_it_ran_that_long"),
        ),
        ("PodSpec", "affinity", Honoured("required_node_affinity_table")),
        ("PodSpec", "automountServiceAccountToken", Honoured(SCHEDULER)),
        (
            "PodSpec",
            "containers",
            Honoured("bound_pod_runs_with_its_status_and_events_and_deletion_completes"),
        ),
        ("PodSpec", "dnsConfig", Honoured("none_policy_takes_only_the_pod_config")),
        ("PodSpec", "dnsPolicy", Honoured("policies")),
        (
            "PodSpec",
            "enableServiceLinks",
            Honoured("api_pods_wait_for_the_first_list_and_static_pods_do_not"),
        ),
        (
            "PodSpec",
            "ephemeralContainers",
            Honoured("ephemeral_container_starts_before_init_containers"),
        ),
        (
            "PodSpec",
            "hostAliases",
            Honoured("kubelet_manages_etc_hosts_with_the_fqdn_and_host_aliases"),
        ),
        ("PodSpec", "hostIPC", Honoured(NAMESPACES)),
        ("PodSpec", "hostNetwork", Honoured(NAMESPACES)),
        ("PodSpec", "hostPID", Honoured(NAMESPACES)),
        ("PodSpec", "hostUsers", Refused("false")),
        ("PodSpec", "hostname", Honoured("hostname_and_domain_follow_upstream_rules")),
        (
            "PodSpec",
            "hostnameOverride",
            Honoured("hostname_override_names_the_sandbox_and_bad_names_fail_it"),
        ),
        (
            "PodSpec",
            "imagePullSecrets",
            Honoured("pods_pull_private_images_with_their_pull_secrets_or_service_account_and_fail_without"),
        ),
        (
            "PodSpec",
            "initContainers",
            Honoured("regular_init_start_failure_ends_the_sync"),
        ),
        ("PodSpec", "nodeName", Honoured("node_name_os_selector_taints_ports")),
        ("PodSpec", "nodeSelector", Honoured("node_selector_must_match_every_label")),
        ("PodSpec", "os", Honoured("a_pod_for_another_os_is_rejected_for_good")),
        (
            "PodSpec",
            "overhead",
            Honoured("runtime_class_runs_the_sandbox_with_its_handler_and_overhead_in_the_pod_cgroup"),
        ),
        ("PodSpec", "preemptionPolicy", Honoured(SCHEDULER)),
        ("PodSpec", "priority", Honoured("ranking_table")),
        ("PodSpec", "priorityClassName", Honoured(SCHEDULER)),
        (
            "PodSpec",
            "readinessGates",
            Honoured("ready_cases_with_readiness_gates"),
        ),
        (
            "PodSpec",
            "resourceClaims",
            Refused(r#"[{"name": "gpu", "resourceClaimName": "gpu-claim"}]"#),
        ),
        ("PodSpec", "resources", Honoured("pod_level_resources_decide_the_class")),
        ("PodSpec", "restartPolicy", Honoured("regular_containers_by_restart_policy")),
        (
            "PodSpec",
            "runtimeClassName",
            Honoured("runtime_class_runs_the_sandbox_with_its_handler_and_overhead_in_the_pod_cgroup"),
        ),
        ("PodSpec", "schedulerName", Honoured(SCHEDULER)),
        ("PodSpec", "schedulingGates", Honoured(SCHEDULER)),
        ("PodSpec", "schedulingGroup", Refused(r#"{"podGroupName": "gang-1"}"#)),
        ("PodSpec", "securityContext", Honoured(CRI_SECURITY)),
        ("PodSpec", "serviceAccount", Honoured(SCHEDULER)),
        (
            "PodSpec",
            "serviceAccountName",
            Honoured("volumes_come_from_token_request_configmaps_secrets_and_the_downward_api"),
        ),
        (
            "PodSpec",
            "setHostnameAsFQDN",
            Honoured("hostname_and_domain_follow_upstream_rules"),
        ),
        ("PodSpec", "shareProcessNamespace", Honoured(NAMESPACES)),
        ("PodSpec", "subdomain", Honoured("hostname_and_domain_follow_upstream_rules")),
        (
            "PodSpec",
            "terminationGracePeriodSeconds",
            Honoured("kill_uses_spec_grace_and_the_thread_exits"),
        ),
        ("PodSpec", "tolerations", Honoured("node_name_os_selector_taints_ports")),
        ("PodSpec", "topologySpreadConstraints", Honoured(SCHEDULER)),
        (
            "PodSpec",
            "volumes",
            Honoured("volumes_come_from_token_request_configmaps_secrets_and_the_downward_api"),
        ),
        // PodSecurityContext
        (
            "PodSecurityContext",
            "appArmorProfile",
            Honoured("apparmor_container_field_then_annotation_then_pod"),
        ),
        (
            "PodSecurityContext",
            "fsGroup",
            Honoured("empty_dir_on_disk_is_world_writable_and_shared_with_the_fs_group"),
        ),
        (
            "PodSecurityContext",
            "fsGroupChangePolicy",
            Honoured("csi_volume_ownership_follows_the_fs_group_change_policy"),
        ),
        ("PodSecurityContext", "runAsGroup", Honoured(CRI_SECURITY)),
        ("PodSecurityContext", "runAsNonRoot", Honoured("verify_run_as_non_root_table")),
        ("PodSecurityContext", "runAsUser", Honoured(CRI_SECURITY)),
        ("PodSecurityContext", "seLinuxChangePolicy", Refused(r#""MountOption""#)),
        (
            "PodSecurityContext",
            "seLinuxOptions",
            Honoured("selinux_options_container_over_pod_reach_the_cri"),
        ),
        (
            "PodSecurityContext",
            "seccompProfile",
            Honoured("seccomp_container_over_pod_over_unconfined"),
        ),
        ("PodSecurityContext", "supplementalGroups", Honoured(CRI_SECURITY)),
        ("PodSecurityContext", "supplementalGroupsPolicy", Refused(r#""Strict""#)),
        ("PodSecurityContext", "sysctls", Honoured("sysctl_admission_table")),
        (
            "PodSecurityContext",
            "windowsOptions",
            Refused(r#"{"runAsUserName": "ContainerUser"}"#),
        ),
        // SecurityContext
        ("SecurityContext", "allowPrivilegeEscalation", Honoured(CRI_SECURITY)),
        (
            "SecurityContext",
            "appArmorProfile",
            Honoured("apparmor_container_field_then_annotation_then_pod"),
        ),
        ("SecurityContext", "capabilities", Honoured(CRI_SECURITY)),
        ("SecurityContext", "privileged", Honoured(CRI_SECURITY)),
        ("SecurityContext", "procMount", Honoured(CRI_SECURITY)),
        ("SecurityContext", "readOnlyRootFilesystem", Honoured(CRI_SECURITY)),
        ("SecurityContext", "runAsGroup", Honoured(CRI_SECURITY)),
        ("SecurityContext", "runAsNonRoot", Honoured("verify_run_as_non_root_table")),
        ("SecurityContext", "runAsUser", Honoured(CRI_SECURITY)),
        (
            "SecurityContext",
            "seLinuxOptions",
            Honoured("selinux_options_container_over_pod_reach_the_cri"),
        ),
        (
            "SecurityContext",
            "seccompProfile",
            Honoured("seccomp_container_over_pod_over_unconfined"),
        ),
        (
            "SecurityContext",
            "windowsOptions",
            Refused(r#"{"runAsUserName": "ContainerUser"}"#),
        ),
        // Volume
        ("Volume", "name", Honoured("kubelet_written_volumes_mount_read_only")),
        ("Volume", "configMap", Honoured("config_map_update_swaps_the_whole_set_at_once")),
        (
            "Volume",
            "csi",
            Honoured("csi_driver_registers_and_serves_claims_and_inline_volumes_across_a_restart"),
        ),
        ("Volume", "downwardAPI", Honoured("downward_api_volume_follows_label_changes")),
        (
            "Volume",
            "emptyDir",
            Honoured("empty_dir_on_disk_is_world_writable_and_shared_with_the_fs_group"),
        ),
        (
            "Volume",
            "ephemeral",
            Honoured("a_generic_ephemeral_claim_must_be_controlled_by_its_pod"),
        ),
        ("Volume", "hostPath", Honoured("host_path_types_are_checked_and_created")),
        (
            "Volume",
            "persistentVolumeClaim",
            Honoured("a_claim_is_usable_only_when_bound_both_ways"),
        ),
        (
            "Volume",
            "projected",
            Honoured("container_reads_projected_token_and_sees_atomic_config_updates"),
        ),
        ("Volume", "secret", Honoured("secret_volume_and_environment_share_one_read")),
    ];
    for source in [
        "awsElasticBlockStore",
        "azureDisk",
        "azureFile",
        "cephfs",
        "cinder",
        "fc",
        "flexVolume",
        "flocker",
        "gcePersistentDisk",
        "gitRepo",
        "glusterfs",
        "image",
        "iscsi",
        "nfs",
        "photonPersistentDisk",
        "portworxVolume",
        "quobyte",
        "rbd",
        "scaleIO",
        "storageos",
        "vsphereVolume",
    ] {
        rows.push(("Volume", source, Refused(r#"{"anything": "set"}"#)));
    }
    for (field, audit) in CONTAINER {
        rows.push(("Container", field, *audit));
        rows.push(("EphemeralContainer", field, *audit));
    }
    rows.push((
        "EphemeralContainer",
        "targetContainerName",
        Honoured("target_container_name_joins_the_targets_pid_namespace"),
    ));
    rows
}

/// A node with an API server and a runtime that reports no extra features, as
/// containerd 1.6 does.
fn node() -> NodeView {
    NodeView {
        name: "audit-node".into(),
        support: NodeSupport {
            runtime_classes: true,
            ..Default::default()
        },
        ..Default::default()
    }
}

fn base_pod() -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "audit", "namespace": "default", "uid": "audit-uid"},
        "spec": {
            "containers": [{"name": "app", "image": "busybox", "securityContext": {}}],
            "ephemeralContainers": [{"name": "debug", "image": "busybox", "targetContainerName": "app"}],
            "securityContext": {},
            "volumes": [],
        }
    })
}

/// `base_pod()` with `field` of `kind` set to `value`.
fn pod_with(kind: &str, field: &str, value: Value) -> Pod {
    let mut pod = base_pod();
    let spec = &mut pod["spec"];
    match kind {
        "PodSpec" => spec[field] = value,
        "Container" => spec["containers"][0][field] = value,
        "EphemeralContainer" => spec["ephemeralContainers"][0][field] = value,
        "PodSecurityContext" => spec["securityContext"][field] = value,
        "SecurityContext" => spec["containers"][0]["securityContext"][field] = value,
        "Volume" => spec["volumes"] = json!([{"name": "v", field: value}]),
        other => panic!("unknown kind {other}"),
    }
    serde_json::from_value(pod).expect("the audit pod decodes")
}

/// Every `fn name` in the Rust files below `dir`.
fn functions_below(dir: &Path, out: &mut BTreeSet<String>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            functions_below(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            for line in text.lines() {
                if let Some(rest) = line.trim_start().split("fn ").nth(1) {
                    let name: String = rest
                        .chars()
                        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                        .collect();
                    out.insert(name);
                }
            }
        }
    }
}

#[test]
fn every_v1_36_pod_field_is_honoured_by_a_named_test_or_refused_at_admission() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let listed = std::fs::read_to_string(root.join("tests/field_audit/fields-v1.36.txt"))
        .expect("the v1.36 field list");
    let upstream: BTreeSet<(String, String)> = listed
        .lines()
        .filter_map(|l| l.split_once(' '))
        .map(|(k, f)| (k.to_owned(), f.to_owned()))
        .collect();
    assert_eq!(
        upstream.len(),
        149,
        "PodSpec 42, Container 25, Ephemeral 26, PSC 13, SC 12, Volume 31"
    );

    let rows = table();
    let mut seen = BTreeMap::new();
    for (kind, field, audit) in &rows {
        assert!(
            seen.insert((kind.to_string(), field.to_string()), *audit)
                .is_none(),
            "{kind}.{field} is listed twice"
        );
    }
    let audited: BTreeSet<_> = seen.keys().cloned().collect();
    let missing: Vec<_> = upstream.difference(&audited).collect();
    let extra: Vec<_> = audited.difference(&upstream).collect();
    assert!(
        missing.is_empty(),
        "fields of v1.36 not in the audit: {missing:?}"
    );
    assert!(
        extra.is_empty(),
        "audited fields v1.36 does not have: {extra:?}"
    );

    let mut functions = BTreeSet::new();
    functions_below(&root.join("src"), &mut functions);
    functions_below(&root.join("tests"), &mut functions);

    let (mut honoured, mut refused) = (0, 0);
    for ((kind, field), audit) in &seen {
        match audit {
            Honoured(test) => {
                assert!(
                    functions.contains(*test),
                    "{kind}.{field}: the test {test} that proves it does not exist"
                );
                honoured += 1;
            }
            Refused(value) => {
                let value: Value = serde_json::from_str(value).expect("sample value is JSON");
                let pod = pod_with(kind, field, value);
                let refusal = admit(&pod, &[], &node())
                    .expect_err(&format!("{kind}.{field} set must be refused at admission"));
                assert!(
                    refusal
                        .message
                        .to_lowercase()
                        .contains(&field.to_lowercase()),
                    "{kind}.{field}: the message must name the field: {refusal:?}"
                );
                assert!(!refusal.reason.is_empty());
                refused += 1;
            }
        }
    }
    eprintln!("pod field audit (v1.36): {honoured} honoured, {refused} refused");
    assert_eq!(honoured + refused, 149);
}

/// The base pod of the audit is admitted: a refusal above is the field's own.
#[test]
fn the_audit_base_pod_is_admitted() {
    let pod: Pod = serde_json::from_value(base_pod()).unwrap();
    assert_eq!(admit(&pod, &[], &node()), Ok(()));
}

/// Fields the scheduler or the API server carries out: the kubelet admits the pod
/// and has nothing to do with them, as upstream.
#[test]
fn scheduler_and_api_server_fields_are_admitted_and_left_to_them() {
    for (field, value) in [
        ("schedulerName", json!("my-scheduler")),
        (
            "topologySpreadConstraints",
            json!([{"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"}]),
        ),
        ("schedulingGates", json!([{"name": "example.com/gate"}])),
        ("preemptionPolicy", json!("Never")),
        ("priorityClassName", json!("high")),
        ("automountServiceAccountToken", json!(false)),
        ("serviceAccount", json!("builder")),
    ] {
        let pod = pod_with("PodSpec", field, value);
        assert_eq!(admit(&pod, &[], &node()), Ok(()), "{field}");
    }
}
