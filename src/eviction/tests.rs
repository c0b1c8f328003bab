//! Table tests for the eviction decisions: configuration, signals, rounds (grace
//! periods, minimum reclaim, transition period), ranking, messages and admission.

use std::collections::BTreeSet;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::api::pod::{Pod, PodPhase, PodStatus, Toleration, TolerationOperator};
use crate::cgroups::pod_resources::tests::container;
use crate::node::config::Threshold as Value;
use crate::stats::cgroup::CgroupUsage;
use crate::stats::fs::FsUsage;
use crate::stats::sample::{ContainerSample, NodeSample, PodSample, Sample};

use super::admit::admit;
use super::config::{Condition, EvictionConfig, EvictionFlags, Signal, Threshold};
use super::decide::State;
use super::manager::evicted_status;
use super::rank::{message, rank, Candidate};
use super::signals::{observe, pod_usage, Observation, Observations, PodUsage};

const MI: i64 = 1024 * 1024;

fn at(s: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(1_000 + s)
}

/// The few Go durations these tests use (`30s`, `1m`, `1m30s`); the real parser is
/// the flag layer's, above this module.
fn duration(text: &str) -> Result<Duration, String> {
    let (m, rest) = text.split_once('m').unwrap_or(("0", text));
    let s = rest
        .strip_suffix('s')
        .unwrap_or(if rest.is_empty() { "0" } else { "x" });
    match (m.parse::<u64>(), s.parse::<u64>()) {
        (Ok(m), Ok(s)) => Ok(Duration::from_secs(m * 60 + s)),
        _ => Err(format!("invalid duration {text:?}")),
    }
}

fn flags<'a>() -> EvictionFlags<'a> {
    EvictionFlags {
        hard: None,
        soft: None,
        soft_grace_period: None,
        minimum_reclaim: None,
        pressure_transition_period: Duration::from_secs(300),
        max_pod_grace_period_seconds: 0,
        duration,
    }
}

#[test]
fn config_defaults_are_upstreams_hard_thresholds() {
    let c = EvictionConfig::from_flags(&flags()).unwrap();
    let signals: BTreeSet<Signal> = c.thresholds.iter().map(|t| t.signal).collect();
    assert_eq!(
        signals,
        BTreeSet::from([
            Signal::MemoryAvailable,
            Signal::NodeFsAvailable,
            Signal::NodeFsInodesFree,
            Signal::ImageFsAvailable
        ])
    );
    assert!(c
        .thresholds
        .iter()
        .all(|t| t.hard && t.grace_period.is_zero()));
}

#[test]
fn config_table() {
    // (name, hard, soft, grace, min reclaim, Ok(thresholds) or the error's start)
    type Case = (
        &'static str,
        Option<&'static str>,
        Option<&'static str>,
        Option<&'static str>,
        Option<&'static str>,
        Result<usize, &'static str>,
    );
    let cases: &[Case] = &[
        (
            "hard replaces the defaults",
            Some("memory.available<1Gi"),
            None,
            None,
            None,
            Ok(1),
        ),
        (
            "soft with its grace period",
            Some("pid.available<100"),
            Some("memory.available<2Gi"),
            Some("memory.available=1m30s"),
            None,
            Ok(2),
        ),
        (
            "soft without a grace period",
            Some(""),
            Some("memory.available<2Gi"),
            None,
            None,
            Err("eviction-soft: no grace period"),
        ),
        (
            "grace period of an unknown signal",
            None,
            None,
            Some("memory.free=1m"),
            None,
            Err("eviction-soft-grace-period: \"memory.free=1m\": unknown signal"),
        ),
        (
            "bad grace period",
            None,
            Some("memory.available<2Gi"),
            Some("memory.available=soon"),
            None,
            Err("eviction-soft-grace-period"),
        ),
        (
            "negative minimum reclaim",
            None,
            None,
            None,
            Some("nodefs.available=-1Gi"),
            Err("eviction-minimum-reclaim"),
        ),
        (
            "bad hard threshold",
            Some("nodefs.available>1Gi"),
            None,
            None,
            None,
            Err("eviction-hard"),
        ),
    ];
    for (name, hard, soft, grace, reclaim, want) in cases {
        let f = EvictionFlags {
            hard: *hard,
            soft: *soft,
            soft_grace_period: *grace,
            minimum_reclaim: *reclaim,
            ..flags()
        };
        match (EvictionConfig::from_flags(&f), want) {
            (Ok(c), Ok(n)) => assert_eq!(c.thresholds.len(), *n, "{name}"),
            (Err(e), Err(start)) => {
                assert!(e.to_string().starts_with(start), "{name}: {e}")
            }
            (got, _) => panic!("{name}: got {got:?}"),
        }
    }
}

#[test]
fn minimum_reclaim_attaches_to_hard_and_soft_thresholds() {
    let f = EvictionFlags {
        hard: Some("nodefs.available<1Gi"),
        soft: Some("nodefs.available<2Gi"),
        soft_grace_period: Some("nodefs.available=30s"),
        minimum_reclaim: Some("nodefs.available=500Mi,memory.available=5%"),
        ..flags()
    };
    let c = EvictionConfig::from_flags(&f).unwrap();
    assert_eq!(c.thresholds.len(), 2);
    for t in &c.thresholds {
        assert_eq!(
            t.min_reclaim,
            Some(Value::Quantity("500Mi".parse().unwrap()))
        );
    }
    assert_eq!(c.thresholds[1].grace_period, Duration::from_secs(30));
    assert!(!c.thresholds[1].hard);
}

fn fs(capacity: u64, available: u64, inodes: u64, inodes_free: u64) -> FsUsage {
    FsUsage {
        capacity_bytes: Some(capacity),
        available_bytes: Some(available),
        used_bytes: Some(capacity - available),
        inodes: Some(inodes),
        inodes_free: Some(inodes_free),
        inodes_used: Some(inodes - inodes_free),
    }
}

#[test]
fn signals_from_a_sample() {
    let sample = Sample {
        time: at(0),
        node: NodeSample {
            usage: CgroupUsage {
                working_set_bytes: Some(3_000),
                ..Default::default()
            },
            memory_capacity_bytes: Some(10_000),
            nodefs: Some(fs(1_000, 100, 50, 5)),
            imagefs: None,
            max_pid: Some(4_194_304),
            processes: Some(304),
            ..Default::default()
        },
        pods: vec![],
        claims: vec![],
        errors: vec![],
        pods_skipped: false,
    };
    let obs = observe(&sample);
    let o = |available, capacity| {
        Some(Observation {
            available,
            capacity,
        })
    };
    assert_eq!(obs.get(&Signal::MemoryAvailable).copied(), o(7_000, 10_000));
    assert_eq!(obs.get(&Signal::NodeFsAvailable).copied(), o(100, 1_000));
    assert_eq!(obs.get(&Signal::NodeFsInodesFree).copied(), o(5, 50));
    // No dedicated image filesystem: imagefs is nodefs.
    assert_eq!(obs.get(&Signal::ImageFsAvailable).copied(), o(100, 1_000));
    assert_eq!(
        obs.get(&Signal::PidAvailable).copied(),
        o(4_194_000, 4_194_304)
    );
    assert_eq!(obs.get(&Signal::AllocatableMemoryAvailable), None);

    // A number the sampler could not read leaves its signal out.
    let mut partial = sample.clone();
    partial.node.usage.working_set_bytes = None;
    partial.node.nodefs = None;
    let obs = observe(&partial);
    assert!(!obs.contains_key(&Signal::MemoryAvailable));
    assert!(!obs.contains_key(&Signal::NodeFsAvailable));
    assert!(!obs.contains_key(&Signal::ImageFsAvailable));
}

#[test]
fn pod_usage_adds_layers_logs_and_volumes() {
    let used = |b: u64, i: u64| FsUsage {
        used_bytes: Some(b),
        inodes_used: Some(i),
        ..Default::default()
    };
    let pod = PodSample {
        usage: Some(CgroupUsage {
            working_set_bytes: Some(7),
            pids: Some(3),
            ..Default::default()
        }),
        containers: vec![ContainerSample {
            rootfs: Some(used(100, 1)),
            logs: Some(used(10, 2)),
            ..Default::default()
        }],
        volumes: vec![("scratch".into(), used(1_000, 4))],
        ..Default::default()
    };
    assert_eq!(
        pod_usage(&pod),
        PodUsage {
            memory_working_set: Some(7),
            disk_bytes: 1_110,
            disk_inodes: 7,
            rootfs_bytes: 100,
            rootfs_inodes: 1,
            processes: Some(3),
        }
    );
}

fn threshold(signal: Signal, value: &str, grace: u64, reclaim: Option<&str>) -> Threshold {
    let v = |s: &str| match s.strip_suffix('%') {
        Some(p) => Value::Percentage(p.parse::<f64>().unwrap() / 100.0),
        None => Value::Quantity(s.parse().unwrap()),
    };
    Threshold {
        signal,
        value: v(value),
        grace_period: Duration::from_secs(grace),
        min_reclaim: reclaim.map(v),
        hard: grace == 0,
    }
}

fn obs(items: &[(Signal, i64)]) -> Observations {
    items
        .iter()
        .map(|(s, a)| {
            (
                *s,
                Observation {
                    available: *a,
                    capacity: 1_000 * MI,
                },
            )
        })
        .collect()
}

/// Runs rounds and checks each: (seconds, observations, conditions, thresholds acted on).
fn check_rounds(
    name: &str,
    thresholds: &[Threshold],
    transition: u64,
    rounds: &[(u64, Observations, &[Condition], &[usize])],
) {
    let mut state = State::default();
    for (i, (t, o, conds, act)) in rounds.iter().enumerate() {
        let r = state.step(thresholds, o, Duration::from_secs(transition), at(*t));
        let want: BTreeSet<Condition> = conds.iter().copied().collect();
        assert_eq!(r.conditions, want, "{name}: round {i} conditions");
        assert_eq!(r.act_on, act.to_vec(), "{name}: round {i} act on");
    }
}

#[test]
fn rounds_table() {
    use Condition::*;
    use Signal::*;
    let mem = |a| obs(&[(MemoryAvailable, a * MI)]);
    let disk = |a| obs(&[(NodeFsAvailable, a * MI)]);

    check_rounds(
        "hard threshold acts at once; condition holds for the transition period",
        &[threshold(MemoryAvailable, "100Mi", 0, None)],
        30,
        &[
            (0, mem(500), &[], &[]),
            (10, mem(50), &[MemoryPressure], &[0]),
            (20, mem(500), &[MemoryPressure], &[]),
            (39, mem(500), &[MemoryPressure], &[]),
            (40, mem(500), &[], &[]),
        ],
    );
    check_rounds(
        "the available amount equal to the threshold is not below it",
        &[threshold(MemoryAvailable, "100Mi", 0, None)],
        30,
        &[(0, mem(100), &[], &[])],
    );
    check_rounds(
        "soft threshold: condition at once, eviction after the grace period",
        &[threshold(MemoryAvailable, "200Mi", 30, None)],
        60,
        &[
            (0, mem(150), &[MemoryPressure], &[]),
            (20, mem(150), &[MemoryPressure], &[]),
            (30, mem(150), &[MemoryPressure], &[0]),
        ],
    );
    check_rounds(
        "soft threshold that clears before its grace period restarts the count",
        &[threshold(MemoryAvailable, "200Mi", 30, None)],
        0,
        &[
            (0, mem(150), &[MemoryPressure], &[]),
            (20, mem(500), &[], &[]),
            (40, mem(150), &[MemoryPressure], &[]),
            (69, mem(150), &[MemoryPressure], &[]),
            (70, mem(150), &[MemoryPressure], &[0]),
        ],
    );
    check_rounds(
        "minimum reclaim keeps a met threshold met until value + reclaim is free",
        &[threshold(NodeFsAvailable, "100Mi", 0, Some("200Mi"))],
        0,
        &[
            (0, disk(50), &[DiskPressure], &[0]),
            (10, disk(250), &[DiskPressure], &[0]),
            (20, disk(301), &[], &[]),
            // Once resolved, only the threshold itself counts again.
            (30, disk(250), &[], &[]),
        ],
    );
    check_rounds(
        "memory is acted on first, others in configuration order",
        &[
            threshold(NodeFsAvailable, "100Mi", 0, None),
            threshold(PidAvailable, "100", 0, None),
            threshold(MemoryAvailable, "100Mi", 0, None),
        ],
        10,
        &[(
            0,
            obs(&[
                (NodeFsAvailable, 1),
                (PidAvailable, 1),
                (MemoryAvailable, 1),
            ]),
            &[MemoryPressure, DiskPressure, PidPressure],
            &[2, 0, 1],
        )],
    );
    check_rounds(
        "percentages are of the capacity",
        &[threshold(NodeFsAvailable, "10%", 0, None)],
        0,
        &[
            (0, disk(99), &[DiskPressure], &[0]),
            (10, disk(101), &[], &[]),
        ],
    );
    check_rounds(
        "a signal without an observation never meets its threshold",
        &[threshold(PidAvailable, "100", 0, None)],
        0,
        &[(0, mem(1), &[], &[])],
    );
}

fn pod(name: &str, priority: i32, requests: &[(&str, &str)]) -> Pod {
    let mut p = Pod::default();
    p.metadata.name = Some(name.into());
    p.metadata.namespace = Some("default".into());
    p.metadata.uid = Some(format!("uid-{name}"));
    p.spec.priority = Some(priority);
    p.spec.containers = vec![container("c", requests, &[])];
    p
}

fn usage(memory_mi: i64, disk_mi: i64, processes: i64) -> Option<PodUsage> {
    Some(PodUsage {
        memory_working_set: Some(memory_mi * MI),
        disk_bytes: disk_mi * MI,
        rootfs_bytes: disk_mi * MI,
        processes: Some(processes),
        ..Default::default()
    })
}

/// Ranks `(pod, usage)` for `signal` and checks the order of names.
fn check_rank(name: &str, signal: Signal, pods: &[(Pod, Option<PodUsage>)], want: &[&str]) {
    let mut c: Vec<Candidate<'_>> = pods
        .iter()
        .map(|(pod, usage)| Candidate { pod, usage: *usage })
        .collect();
    rank(signal, &mut c);
    let got: Vec<&str> = c.iter().map(|c| c.pod.name()).collect();
    assert_eq!(got, want, "{name}");
}

#[test]
fn ranking_table() {
    use Signal::*;
    check_rank(
        "memory: usage above request first, even at higher priority",
        MemoryAvailable,
        &[
            (pod("within", 0, &[("memory", "100Mi")]), usage(50, 0, 1)),
            (pod("above", 1000, &[("memory", "10Mi")]), usage(20, 0, 1)),
        ],
        &["above", "within"],
    );
    check_rank(
        "memory: then lower priority first",
        MemoryAvailable,
        &[
            (pod("high", 100, &[]), usage(500, 0, 1)),
            (pod("low", -5, &[]), usage(10, 0, 1)),
        ],
        &["low", "high"],
    );
    check_rank(
        "memory: then the most usage above request",
        MemoryAvailable,
        &[
            (pod("small", 0, &[("memory", "10Mi")]), usage(30, 0, 1)),
            (pod("big", 0, &[("memory", "100Mi")]), usage(200, 0, 1)),
            (pod("besteffort", 0, &[]), usage(50, 0, 1)),
        ],
        &["big", "besteffort", "small"],
    );
    check_rank(
        "a pod without stats (newer than the sample) goes last",
        MemoryAvailable,
        &[
            (pod("unknown", -100, &[]), None),
            (pod("measured", 0, &[]), usage(1, 0, 1)),
        ],
        &["measured", "unknown"],
    );
    check_rank(
        "disk: ephemeral-storage requests count",
        NodeFsAvailable,
        &[
            (
                pod("requested", 0, &[("ephemeral-storage", "1Gi")]),
                usage(0, 500, 1),
            ),
            (pod("writer", 0, &[]), usage(0, 100, 1)),
        ],
        &["writer", "requested"],
    );
    check_rank(
        "pids: priority, then the most processes",
        PidAvailable,
        &[
            (pod("few", 0, &[]), usage(0, 0, 3)),
            (pod("many", 0, &[]), usage(0, 0, 300)),
            (pod("important", 10, &[]), usage(0, 0, 9_000)),
        ],
        &["many", "few", "important"],
    );
}

#[test]
fn eviction_message_names_resource_threshold_and_containers() {
    let p = pod("hog", 0, &[("memory", "10Mi")]);
    let containers = vec![super::signals::ContainerUsage {
        name: "c".into(),
        memory_working_set: Some(64 * MI),
        disk_bytes: 0,
    }];
    let o = Observation {
        available: 50 * MI,
        capacity: 1_000 * MI,
    };
    assert_eq!(
        message(Signal::MemoryAvailable, 100 * MI, Some(&o), &p, &containers),
        "The node was low on resource: memory. Threshold quantity: 100Mi, available: 50Mi. \
         Container c was using 64Mi, request is 10Mi, has larger consumption of memory. "
    );
    // A container within its request is not named.
    let p = pod("fine", 0, &[("memory", "100Mi")]);
    assert_eq!(
        message(Signal::MemoryAvailable, 100 * MI, Some(&o), &p, &containers),
        "The node was low on resource: memory. Threshold quantity: 100Mi, available: 50Mi. "
    );
    let p = pod("disk", 0, &[]);
    let o = Observation {
        available: 3 * MI,
        capacity: 64 * MI,
    };
    assert!(message(Signal::NodeFsAvailable, 8 * MI, Some(&o), &p, &[])
        .starts_with("The node was low on resource: ephemeral-storage. Threshold quantity: 8Mi, available: 3Mi. "));
}

#[test]
fn admission_table() {
    use Condition::*;
    let best_effort = pod("be", 0, &[]);
    let burstable = pod("bu", 0, &[("memory", "10Mi")]);
    let mut tolerating = best_effort.clone();
    tolerating.spec.tolerations = vec![Toleration {
        key: Some("node.kubernetes.io/memory-pressure".into()),
        operator: Some(TolerationOperator::Exists),
        ..Default::default()
    }];
    let mut critical = best_effort.clone();
    critical.spec.priority = Some(2_000_001_000);
    let mut static_pod = best_effort.clone();
    static_pod
        .metadata
        .annotations
        .insert("kubernetes.io/config.source".into(), "file".into());
    // (name, conditions, pod, rejection message or None)
    let cases: &[(&str, &[Condition], &Pod, Option<&str>)] = &[
        ("no pressure", &[], &best_effort, None),
        (
            "memory pressure refuses BestEffort",
            &[MemoryPressure],
            &best_effort,
            Some("The node had condition: [MemoryPressure]. "),
        ),
        (
            "memory pressure admits Burstable",
            &[MemoryPressure],
            &burstable,
            None,
        ),
        (
            "memory pressure admits a tolerating BestEffort",
            &[MemoryPressure],
            &tolerating,
            None,
        ),
        (
            "disk pressure refuses all",
            &[DiskPressure],
            &burstable,
            Some("The node had condition: [DiskPressure]. "),
        ),
        (
            "PID pressure refuses all",
            &[PidPressure],
            &tolerating,
            Some("The node had condition: [PIDPressure]. "),
        ),
        (
            "memory and disk pressure refuse Burstable",
            &[MemoryPressure, DiskPressure],
            &burstable,
            Some("The node had condition: [MemoryPressure DiskPressure]. "),
        ),
        (
            "critical priority is admitted",
            &[DiskPressure],
            &critical,
            None,
        ),
        (
            "a static pod is admitted",
            &[DiskPressure, PidPressure],
            &static_pod,
            None,
        ),
    ];
    for (name, conds, pod, want) in cases {
        let conds: BTreeSet<Condition> = conds.iter().copied().collect();
        match (admit(&conds, pod), want) {
            (Ok(()), None) => {}
            (Err(r), Some(m)) => {
                assert_eq!(r.reason, "Evicted", "{name}");
                assert_eq!(r.message, *m, "{name}");
            }
            (got, _) => panic!("{name}: {got:?}"),
        }
    }
}

#[test]
fn evicted_status_is_failed_with_reason_and_disruption_target() {
    let mut s = PodStatus {
        phase: Some(PodPhase::Running),
        ..Default::default()
    };
    evicted_status(&mut s, "The node was low on resource: memory. ");
    assert_eq!(s.phase, Some(PodPhase::Failed));
    assert_eq!(s.reason.as_deref(), Some("Evicted"));
    assert_eq!(
        s.message.as_deref(),
        Some("The node was low on resource: memory. ")
    );
    let c = s.condition("DisruptionTarget").unwrap();
    assert_eq!(c.reason.as_deref(), Some("TerminationByKubelet"));
    // Idempotent: a second edit keeps one condition.
    evicted_status(&mut s, "again");
    assert_eq!(
        s.conditions
            .iter()
            .filter(|c| c.type_ == "DisruptionTarget")
            .count(),
        1
    );
}
