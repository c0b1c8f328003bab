//! Node status tests: the Ready condition, capacity and allocatable, and the
//! heartbeat and report frequencies.

use std::time::Duration;

use super::*;
use crate::api::node::NodeAddress;
use crate::node::config::parse_reserved;
use crate::node::machine::HugePages;
use serde_json::json;

fn q(s: &str) -> Quantity {
    Quantity::parse(s).unwrap()
}

fn t(secs: i64) -> Time {
    Time::from_unix_seconds(1_714_550_000 + secs)
}

fn machine() -> MachineInfo {
    MachineInfo {
        num_cpus: Some(4),
        memory_bytes: Some(8 << 30),
        swap_bytes: Some(2 << 30),
        hugepages: vec![HugePages {
            page_size_bytes: 2 << 20,
            count: 16,
        }],
        ephemeral_storage_bytes: Some(100 << 30),
        machine_id: "m1".into(),
        system_uuid: "s1".into(),
        boot_id: "b1".into(),
        kernel_version: "6.6.20".into(),
        os_image: "Debian GNU/Linux 12 (bookworm)".into(),
        architecture: "arm64".into(),
        node_ip: Some("192.168.1.20".parse().unwrap()),
    }
}

fn config() -> NodeConfig {
    let mut c = NodeConfig::new("edge-1", "edge-1");
    c.port = 10250;
    c
}

/// Applies `health` to `status` at `now` with the base machine and config.
fn run(status: &mut NodeStatus, health: &Health, now: Time) -> Vec<&'static str> {
    let (c, m) = (config(), machine());
    let inputs = StatusInputs {
        config: &c,
        machine: &m,
        health,
        runtime_version: Some("containerd://1.7.13"),
        images: None,
        now,
    };
    apply(status, &inputs).iter().map(|e| e.reason).collect()
}

fn cond<'a>(s: &'a NodeStatus, type_: &str) -> &'a NodeCondition {
    s.conditions.iter().find(|c| c.type_ == type_).unwrap()
}

#[test]
fn allocatable_arithmetic() {
    let mut c = config();
    c.kube_reserved = parse_reserved("cpu=100m,memory=256Mi").unwrap();
    c.system_reserved = parse_reserved("cpu=200m,memory=128Mi,ephemeral-storage=1Gi").unwrap();
    let cap = machine_capacity(&machine(), c.max_pods);
    assert_eq!(cap["cpu"].to_string(), "4");
    assert_eq!(cap["memory"].to_string(), "8Gi");
    assert_eq!(cap["pods"].to_string(), "110");
    assert_eq!(cap["ephemeral-storage"].to_string(), "100Gi");
    assert_eq!(cap["hugepages-2Mi"].to_string(), "32Mi");

    let alloc = allocatable(&cap, &reservation(&c, &cap));
    assert_eq!(alloc["cpu"], q("3700m"));
    // 8Gi − 256Mi − 128Mi − 100Mi (eviction) − 32Mi (huge pages)
    assert_eq!(alloc["memory"], q("7676Mi"));
    // 100Gi − 1Gi − 10% of 100Gi
    assert_eq!(alloc["ephemeral-storage"], q("89Gi"));
    assert_eq!(alloc["pods"], q("110"));
    assert_eq!(alloc["hugepages-2Mi"], q("32Mi"));

    // Only the eviction threshold by default.
    let plain = allocatable(&cap, &reservation(&config(), &cap));
    assert_eq!(plain["memory"], q("8060Mi"));
    assert_eq!(plain["cpu"], q("4"));

    // Never negative.
    c.kube_reserved = parse_reserved("cpu=8,memory=16Gi").unwrap();
    let alloc = allocatable(&cap, &reservation(&c, &cap));
    assert_eq!(alloc["cpu"], Quantity::zero());
    assert_eq!(alloc["memory"], Quantity::zero());
}

#[test]
fn ready_condition_table() {
    struct Case {
        name: &'static str,
        change: fn(&mut Health, &mut MachineInfo),
        status: ConditionStatus,
        reason: &'static str,
        message: &'static str,
    }
    let cases = [
        Case {
            name: "all healthy",
            change: |_, _| {},
            status: ConditionStatus::True,
            reason: "KubeletReady",
            message: READY_MESSAGE,
        },
        Case {
            name: "network not ready",
            change: |h, _| {
                h.network_errors = vec!["container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady message:cni plugin not initialized".into()]
            },
            status: ConditionStatus::False,
            reason: "KubeletNotReady",
            message: "container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady message:cni plugin not initialized",
        },
        Case {
            name: "pleg and network, repeats dropped",
            change: |h, _| {
                h.runtime_errors = vec!["PLEG is not healthy: x".into(), "PLEG is not healthy: x".into()];
                h.network_errors = vec!["net down".into()];
            },
            status: ConditionStatus::False,
            reason: "KubeletNotReady",
            message: "[PLEG is not healthy: x, net down]",
        },
        Case {
            name: "missing capacity",
            change: |_, m| {
                m.memory_bytes = None;
                m.ephemeral_storage_bytes = None;
            },
            status: ConditionStatus::False,
            reason: "KubeletNotReady",
            message: "missing node capacity for resources: memory, ephemeral-storage",
        },
    ];
    for case in cases {
        let (mut h, mut m) = (Health::default(), machine());
        (case.change)(&mut h, &mut m);
        let c = config();
        let mut status = NodeStatus::default();
        apply(
            &mut status,
            &StatusInputs {
                config: &c,
                machine: &m,
                health: &h,
                runtime_version: None,
                images: None,
                now: t(0),
            },
        );
        let ready = cond(&status, NODE_READY);
        assert_eq!(ready.status, case.status, "{}", case.name);
        assert_eq!(ready.reason.as_deref(), Some(case.reason), "{}", case.name);
        assert_eq!(
            ready.message.as_deref(),
            Some(case.message),
            "{}",
            case.name
        );
    }
}

#[test]
fn first_status_has_everything() {
    let mut s = NodeStatus::default();
    let events = run(&mut s, &Health::default(), t(0));
    // Pressure conditions are new: events as upstream; Ready's first sight records none.
    assert_eq!(
        events,
        [
            "NodeHasSufficientMemory",
            "NodeHasNoDiskPressure",
            "NodeHasSufficientPID"
        ]
    );
    let types: Vec<&str> = s.conditions.iter().map(|c| c.type_.as_str()).collect();
    assert_eq!(types, OWNED_CONDITIONS);
    let mp = cond(&s, NODE_MEMORY_PRESSURE);
    assert_eq!(mp.status, ConditionStatus::False);
    assert_eq!(mp.reason.as_deref(), Some("KubeletHasSufficientMemory"));
    assert_eq!(
        cond(&s, NODE_DISK_PRESSURE).reason.as_deref(),
        Some("KubeletHasNoDiskPressure")
    );
    assert_eq!(
        cond(&s, NODE_PID_PRESSURE).message.as_deref(),
        Some("kubelet has sufficient PID available")
    );
    for c in &s.conditions {
        assert_eq!(
            (c.last_heartbeat_time, c.last_transition_time),
            (Some(t(0)), Some(t(0)))
        );
    }
    assert_eq!(
        s.addresses,
        [
            NodeAddress {
                type_: "InternalIP".into(),
                address: "192.168.1.20".into()
            },
            NodeAddress {
                type_: "Hostname".into(),
                address: "edge-1".into()
            }
        ]
    );
    let info = s.node_info.as_ref().unwrap();
    assert_eq!(info.container_runtime_version, "containerd://1.7.13");
    assert_eq!(info.kubelet_version, KUBELET_VERSION);
    assert!(KUBELET_VERSION.starts_with(&format!("{}+litelet.", super::KUBERNETES_VERSION)));
    assert_eq!(
        (info.operating_system.as_str(), info.architecture.as_str()),
        ("linux", "arm64")
    );
    assert_eq!(
        (info.machine_id.as_str(), info.boot_id.as_str()),
        ("m1", "b1")
    );
    assert_eq!(info.system_uuid, "s1");
    assert_eq!(info.os_image, "Debian GNU/Linux 12 (bookworm)");
    assert_eq!(info.kernel_version, "6.6.20");
    assert_eq!(
        info.swap_capacity(),
        Some(2 << 30),
        "nodeInfo.swap.capacity"
    );
    assert_eq!(
        s.daemon_endpoints
            .as_ref()
            .and_then(|d| d.kubelet_endpoint.as_ref())
            .map(|e| e.port),
        Some(10250)
    );
    assert!(s.allocatable.contains_key("memory"));
}

#[test]
fn transitions_only_on_status_change() {
    let healthy = Health::default();
    let mut s = NodeStatus::default();
    run(&mut s, &healthy, t(0));
    let before = s.clone();

    // Same inputs later: only heartbeats move.
    let events = run(&mut s, &healthy, t(10));
    assert!(events.is_empty());
    assert!(!status_changed(&before, &s));
    assert_ne!(before, s);
    let ready = cond(&s, NODE_READY);
    assert_eq!(ready.last_heartbeat_time, Some(t(10)));
    assert_eq!(ready.last_transition_time, Some(t(0)));

    // The runtime goes away: Ready flips, its transition time moves, the others' do not.
    let sick = Health {
        runtime_errors: vec!["container runtime is down".into()],
        ..Health::default()
    };
    let events = run(&mut s, &sick, t(20));
    assert_eq!(events, ["NodeNotReady"]);
    assert!(status_changed(&before, &s));
    let ready = cond(&s, NODE_READY);
    assert_eq!(ready.status, ConditionStatus::False);
    assert_eq!(ready.last_transition_time, Some(t(20)));
    assert_eq!(
        cond(&s, NODE_MEMORY_PRESSURE).last_transition_time,
        Some(t(0))
    );

    // A different message with the same status is a change, but no transition.
    let sicker = Health {
        runtime_errors: vec!["container runtime not ready: x".into()],
        ..Health::default()
    };
    let mid = s.clone();
    assert!(run(&mut s, &sicker, t(30)).is_empty());
    assert!(status_changed(&mid, &s));
    assert_eq!(cond(&s, NODE_READY).last_transition_time, Some(t(20)));

    // Back to ready, and memory pressure appears.
    let pressed = Health {
        memory_pressure: true,
        ..Health::default()
    };
    let events = run(&mut s, &pressed, t(40));
    assert_eq!(events, ["NodeHasInsufficientMemory", "NodeReady"]);
    let mp = cond(&s, NODE_MEMORY_PRESSURE);
    assert_eq!(mp.status, ConditionStatus::True);
    assert_eq!(mp.reason.as_deref(), Some("KubeletHasInsufficientMemory"));
    assert_eq!(mp.last_transition_time, Some(t(40)));
}

#[test]
fn a_node_shutting_down_is_not_ready_as_upstream_says() {
    let mut s = NodeStatus::default();
    run(&mut s, &Health::default(), t(0));
    let down = Health {
        shutting_down: true,
        ..Health::default()
    };
    assert_eq!(run(&mut s, &down, t(10)), ["NodeNotReady"]);
    let ready = cond(&s, NODE_READY);
    assert_eq!(ready.status, ConditionStatus::False);
    assert_eq!(ready.reason.as_deref(), Some("KubeletNotReady"));
    assert_eq!(ready.message.as_deref(), Some("node is shutting down"));
    // After the runtime's problems, as upstream aggregates them.
    let both = Health {
        runtime_errors: vec!["container runtime is down".into()],
        shutting_down: true,
        ..Health::default()
    };
    run(&mut s, &both, t(20));
    assert_eq!(
        cond(&s, NODE_READY).message.as_deref(),
        Some("[container runtime is down, node is shutting down]")
    );
}

#[test]
fn node_controller_unknown_is_a_change() {
    // The node lifecycle controller marked the node Unknown while we were away.
    let mut s = NodeStatus::default();
    run(&mut s, &Health::default(), t(0));
    for c in &mut s.conditions {
        c.status = ConditionStatus::Unknown;
        c.reason = Some("NodeStatusUnknown".into());
        c.message = Some("Kubelet stopped posting node status.".into());
    }
    let server = s.clone();
    let events = run(&mut s, &Health::default(), t(100));
    assert!(status_changed(&server, &s));
    assert_eq!(events.len(), 4, "{events:?}");
    assert_eq!(cond(&s, NODE_READY).last_transition_time, Some(t(100)));
    assert_eq!(cond(&s, NODE_READY).reason.as_deref(), Some("KubeletReady"));
}

#[test]
fn keeps_what_others_own() {
    let mut s = NodeStatus::default();
    s.conditions.push(NodeCondition {
        type_: "NetworkUnavailable".into(),
        status: ConditionStatus::False,
        reason: Some("RouteCreated".into()),
        ..NodeCondition::default()
    });
    s.capacity.insert("example.com/dongle".into(), q("2"));
    s.capacity.insert("hugepages-1Gi".into(), q("0"));
    s.allocatable.insert("hugepages-1Gi".into(), q("0"));
    let old = s.clone();
    run(&mut s, &Health::default(), t(0));
    assert_eq!(s.conditions[0].type_, "NetworkUnavailable");
    assert_eq!(s.capacity["example.com/dongle"], q("2"));
    assert_eq!(s.allocatable["example.com/dongle"], q("2"));
    // A huge page size the machine no longer has is dropped, and the patch says so.
    assert!(!s.capacity.contains_key("hugepages-1Gi"));
    let patch = status_patch(&old, &s);
    assert_eq!(patch["status"]["capacity"]["hugepages-1Gi"], Value::Null);
    assert_eq!(patch["status"]["allocatable"]["hugepages-1Gi"], Value::Null);
    assert_eq!(patch["status"]["capacity"]["example.com/dongle"], "2");
}

#[test]
fn patch_body() {
    let old = NodeStatus::default();
    let mut s = old.clone();
    s.conditions.push(NodeCondition {
        type_: "NetworkUnavailable".into(),
        ..NodeCondition::default()
    });
    run(&mut s, &Health::default(), t(0));
    let p = status_patch(&old, &s);
    let st = &p["status"];
    assert_eq!(st["capacity"]["memory"], "8Gi");
    assert_eq!(st["allocatable"]["memory"], "8060Mi");
    let types: Vec<&str> = st["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["type"].as_str().unwrap())
        .collect();
    assert_eq!(types, OWNED_CONDITIONS, "others' conditions are not sent");
    assert_eq!(st["conditions"][3]["lastTransitionTime"], t(0).to_string());
    assert_eq!(
        st["addresses"],
        json!([{"$patch": "replace"}, {"type": "InternalIP", "address": "192.168.1.20"},
               {"type": "Hostname", "address": "edge-1"}])
    );
    assert_eq!(
        st["daemonEndpoints"],
        json!({"kubeletEndpoint": {"Port": 10250}})
    );
    assert_eq!(st["nodeInfo"]["bootID"], "b1");
    // Unchanged addresses are left out: a cloud controller manager may own them now.
    let again = status_patch(&s, &s);
    assert_eq!(again["status"].get("addresses"), None);
    assert_eq!(
        p.as_object().unwrap().keys().collect::<Vec<_>>(),
        ["status"],
        "a status patch touches nothing else"
    );
}

#[test]
fn addresses_survive_a_failed_ip_lookup() {
    let (c, mut m, h) = (config(), machine(), Health::default());
    let mut s = NodeStatus::default();
    let step = |s: &mut NodeStatus, m: &MachineInfo| {
        let inputs = StatusInputs {
            config: &c,
            machine: m,
            health: &h,
            runtime_version: None,
            images: None,
            now: t(0),
        };
        apply(s, &inputs);
    };
    step(&mut s, &m);
    let published = s.addresses.clone();
    assert_eq!(published.len(), 2);
    m.node_ip = None;
    step(&mut s, &m);
    assert_eq!(s.addresses, published);
    // With nothing published yet, the hostname alone.
    let mut fresh = NodeStatus::default();
    step(&mut fresh, &m);
    assert_eq!(fresh.addresses.len(), 1);
    assert_eq!(fresh.addresses[0].type_, "Hostname");
    m.node_ip = Some("10.1.2.3".parse().unwrap());
    step(&mut s, &m);
    assert_eq!(s.addresses[0].address, "10.1.2.3");
}

#[test]
fn report_decision() {
    let five_min = Duration::from_secs(300);
    assert!(should_report(false, None, five_min));
    assert!(should_report(true, Some(Duration::from_secs(1)), five_min));
    assert!(!should_report(
        false,
        Some(Duration::from_secs(299)),
        five_min
    ));
    assert!(should_report(false, Some(five_min), five_min));
    assert_eq!(hugepage_resource(1 << 30), "hugepages-1Gi");
    assert_eq!(hugepage_resource(64 << 10), "hugepages-64Ki");
}

#[test]
fn images_largest_first_capped_at_fifty_with_five_names_each() {
    let image = |i: u64, names: usize| RuntimeImage {
        repo_digests: vec![format!("repo/img{i}@sha256:{i:04}")],
        repo_tags: (0..names).map(|n| format!("repo/img{i}:t{n}")).collect(),
        size_bytes: i * 1000,
    };
    let listed: Vec<RuntimeImage> = (1..=60)
        .map(|i| image(i, 1))
        .chain([image(61, 9)])
        .collect();
    let images = node_images(&listed);
    assert_eq!(images.len(), MAX_IMAGES);
    assert_eq!(images[0].size_bytes, Some(61_000));
    // The digest first, then tags, five names at most.
    assert_eq!(images[0].names.len(), MAX_NAMES_PER_IMAGE);
    assert_eq!(images[0].names[0], "repo/img61@sha256:0061");
    assert_eq!(images[0].names[1], "repo/img61:t0");
    assert_eq!(
        images[1].names,
        vec!["repo/img60@sha256:0060", "repo/img60:t0"]
    );
    // The smallest eleven are left out.
    assert_eq!(images[49].size_bytes, Some(12_000));

    // apply() takes a fresh list, keeps the last one on None, and the patch sends it.
    let (c, m, h) = (config(), machine(), Health::default());
    let mut status = NodeStatus::default();
    let inputs = |images| StatusInputs {
        config: &c,
        machine: &m,
        health: &h,
        runtime_version: None,
        images,
        now: t(0),
    };
    apply(&mut status, &inputs(Some(&images[..2])));
    assert_eq!(status.images.len(), 2);
    let old = status.clone();
    apply(&mut status, &inputs(None));
    assert_eq!(status.images, old.images);
    let patch = status_patch(&NodeStatus::default(), &status);
    assert_eq!(patch["status"]["images"][0]["sizeBytes"], 61_000);
}

#[test]
fn device_plugin_resources_count_every_device_in_capacity_and_healthy_ones_in_allocatable() {
    let mut status = NodeStatus::default();
    let devices = [
        ("example.com/resource".to_owned(), (2, 1)),
        ("vendor.com/gone".to_owned(), (0, 0)),
    ]
    .into();
    apply_devices(&mut status, &devices);
    assert_eq!(status.capacity["example.com/resource"].to_string(), "2");
    assert_eq!(status.allocatable["example.com/resource"].to_string(), "1");
    assert_eq!(status.capacity["vendor.com/gone"].to_string(), "0");
    assert_eq!(status.allocatable["vendor.com/gone"].to_string(), "0");
}

/// The real apiserver refuses `nodeInfo.swap.capacity: 0` (the node never registered
/// on a swapless host, found by the VM tier): without swap the field is left out.
#[test]
fn a_node_without_swap_reports_no_swap_capacity() {
    let c = config();
    let mut m = machine();
    m.swap_bytes = Some(0);
    let mut s = NodeStatus::default();
    let inputs = StatusInputs {
        config: &c,
        machine: &m,
        health: &Health::default(),
        runtime_version: None,
        images: None,
        now: t(0),
    };
    apply(&mut s, &inputs);
    let info = s.node_info.as_ref().unwrap();
    assert_eq!(info.swap_capacity(), None);
    assert!(!info.extra.contains_key("swap"), "{:?}", info.extra);
}

#[test]
fn a_dual_stack_node_publishes_both_internal_ips_and_an_external_provider_keeps_its_own() {
    let (mut c, m, h) = (config(), machine(), Health::default());
    c.node_ips = crate::node::addresses::NodeIps::parse("192.168.1.20,2001:db8::20").unwrap();
    let step = |s: &mut NodeStatus, c: &NodeConfig| {
        let inputs = StatusInputs {
            config: c,
            machine: &m,
            health: &h,
            runtime_version: None,
            images: None,
            now: t(0),
        };
        apply(s, &inputs);
    };
    let mut s = NodeStatus::default();
    step(&mut s, &c);
    let published: Vec<(&str, &str)> = s
        .addresses
        .iter()
        .map(|a| (a.type_.as_str(), a.address.as_str()))
        .collect();
    assert_eq!(
        published,
        [
            ("InternalIP", "192.168.1.20"),
            ("InternalIP", "2001:db8::20"),
            ("Hostname", "edge-1")
        ]
    );
    c.cloud_provider = crate::node::addresses::CloudProvider::External;
    let managers = vec![NodeAddress {
        type_: "ExternalIP".into(),
        address: "203.0.113.7".into(),
    }];
    s.addresses = managers.clone();
    step(&mut s, &c);
    assert_eq!(
        s.addresses, managers,
        "the cloud controller manager's addresses stay"
    );
}
