//! Pure conversions between Kubernetes CPU/memory amounts and cgroup settings
//! (upstream `cm/helpers_linux.go` and runc's shares → weight mapping), and
//! [`resource_config_for_pod`], the settings of a pod's cgroup, and
//! [`qos_cpu_shares`], those of the QoS cgroups (upstream `qos_container_manager_linux.go`).
//!
//! No I/O, no clock, no globals: the CFS period and whether CPU limits are enforced are
//! arguments ([`PodCgroupOptions`]), read once from the configuration by the caller.
//! Arithmetic is done wide and clamped, so absurd quantities cannot overflow.

use crate::api::pod::Pod;

use super::pod_resources::{
    container_limits, cpu_milli, memory_bytes, pod_level_limits, pod_limits, pod_requests,
};
use super::qos::{pod_qos, QosClass};
use super::resources::{CgroupResources, Limit};

/// Smallest `cpu.shares` the kernel accepts; also what a zero request gets.
pub const MIN_SHARES: u64 = 2;
/// Largest `cpu.shares` the kernel accepts.
pub const MAX_SHARES: u64 = 262_144;
/// Shares for one whole CPU.
pub const SHARES_PER_CPU: u64 = 1024;
/// Milli-CPU per CPU.
pub const MILLI_CPU_TO_CPU: u64 = 1000;
/// Default CFS period: 100 ms.
pub const DEFAULT_QUOTA_PERIOD_US: u64 = 100_000;
/// Smallest CFS quota the kernel accepts: 1 ms.
pub const MIN_QUOTA_US: u64 = 1000;
/// Largest CFS quota the kernel accepts (`max_cfs_runtime`: 2^44 − 1 µs, over 200
/// days per period); a larger one fails with EINVAL. CPU limits beyond it (1e400,
/// 2^63 − 1 CPUs) are clamped to it, which is no limit in practice, rather than fail
/// at the cgroup write.
pub const MAX_QUOTA_US: u64 = (1 << 44) - 1;
/// CFS period bounds the kernel accepts: 1 ms to 1 s.
pub const MIN_PERIOD_US: u64 = 1000;
pub const MAX_PERIOD_US: u64 = 1_000_000;
/// `cpu.weight` bounds (cgroup v2).
pub const MIN_WEIGHT: u64 = 1;
pub const MAX_WEIGHT: u64 = 10_000;

/// Settings that come from the kubelet configuration, not from the pod.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PodCgroupOptions {
    /// Enforce CPU limits with a CFS quota (upstream `cpuCFSQuota`; litelet always
    /// does, see `runtime::manager::RuntimeSettings`).
    pub enforce_cpu_limits: bool,
    /// `cpuCFSQuotaPeriod` in microseconds (default 100 ms).
    pub cpu_period_us: u64,
}

impl Default for PodCgroupOptions {
    fn default() -> Self {
        PodCgroupOptions {
            enforce_cpu_limits: true,
            cpu_period_us: DEFAULT_QUOTA_PERIOD_US,
        }
    }
}

/// Milli-CPU (a request) → `cpu.shares`: 1024 per CPU, rounded down, within
/// [2, 262144]; a zero (or negative) request gets the minimum.
pub fn milli_cpu_to_shares(milli_cpu: i64) -> u64 {
    if milli_cpu <= 0 {
        return MIN_SHARES;
    }
    let shares = i128::from(milli_cpu) * i128::from(SHARES_PER_CPU) / i128::from(MILLI_CPU_TO_CPU);
    let clamped = shares.clamp(i128::from(MIN_SHARES), i128::from(MAX_SHARES));
    u64::try_from(clamped).unwrap_or(MAX_SHARES)
}

/// `cpu.shares` → milli-CPU, rounding up (upstream `sharesToMilliCPU`); below the
/// minimum means "no request".
pub fn shares_to_milli_cpu(shares: u64) -> i64 {
    if shares < MIN_SHARES {
        return 0;
    }
    let milli =
        (u128::from(shares) * u128::from(MILLI_CPU_TO_CPU)).div_ceil(u128::from(SHARES_PER_CPU));
    i64::try_from(milli).unwrap_or(i64::MAX)
}

/// v1 shares → v2 `cpu.weight`: the linear map of [2, 262144] onto [1, 10000]. Shares
/// outside the kernel's range are clamped first.
pub fn shares_to_weight(shares: u64) -> u64 {
    let shares = shares.clamp(MIN_SHARES, MAX_SHARES);
    1 + ((shares - MIN_SHARES) * (MAX_WEIGHT - MIN_WEIGHT)) / (MAX_SHARES - MIN_SHARES)
}

/// v2 `cpu.weight` → shares: the smallest shares that map to `weight`, so that
/// `shares_to_weight(weight_to_shares(w)) == w` (weights are 38× coarser, so the other
/// way round is lossy; resize compares weights through this round trip).
pub fn weight_to_shares(weight: u64) -> u64 {
    let weight = weight.clamp(MIN_WEIGHT, MAX_WEIGHT);
    MIN_SHARES
        + ((weight - MIN_WEIGHT) * (MAX_SHARES - MIN_SHARES)).div_ceil(MAX_WEIGHT - MIN_WEIGHT)
}

/// Milli-CPU (a limit) → CFS quota for `period_us`: `milli * period / 1000`, within
/// [1 ms, [`MAX_QUOTA_US`]]. No limit (zero or negative) is an unlimited quota.
pub fn milli_cpu_to_quota(milli_cpu: i64, period_us: u64) -> Limit {
    if milli_cpu <= 0 {
        return Limit::Unlimited;
    }
    let quota = i128::from(milli_cpu) * i128::from(period_us) / i128::from(MILLI_CPU_TO_CPU);
    let clamped = quota.clamp(i128::from(MIN_QUOTA_US), i128::from(MAX_QUOTA_US));
    Limit::Value(u64::try_from(clamped).unwrap_or(u64::MAX))
}

/// CFS quota and period → milli-CPU (upstream `quotaToMilliCPU`); unlimited is 0.
pub fn quota_to_milli_cpu(quota: Limit, period_us: u64) -> i64 {
    match quota {
        Limit::Unlimited => 0,
        Limit::Value(_) if period_us == 0 => 0,
        Limit::Value(q) => {
            let milli = u128::from(q) * u128::from(MILLI_CPU_TO_CPU) / u128::from(period_us);
            i64::try_from(milli).unwrap_or(i64::MAX)
        }
    }
}

/// A memory limit in bytes → the cgroup limit; zero or negative means none.
pub fn memory_limit(bytes: i64) -> Limit {
    match u64::try_from(bytes) {
        Ok(b) if b > 0 => Limit::Value(b),
        _ => Limit::Unlimited,
    }
}

/// The settings of a pod's cgroup (upstream `ResourceConfigForPod`, memory QoS off).
/// Pass the pod with its *allocated* resources.
///
/// - Guaranteed: shares from the requests, quota and period from the limits, memory
///   limit.
/// - Burstable: shares; quota and period only if every container (init containers
///   included) or the pod level limits cpu; the memory limit only if every container
///   or the pod level limits memory. Otherwise one unlimited container would be capped
///   by its neighbours' limits.
/// - BestEffort: the minimum shares only.
///
/// With `enforce_cpu_limits` off the quota is written as unlimited. Pids are not the
/// pod's business; the manager adds its configured pod pids limit.
pub fn resource_config_for_pod(pod: &Pod, options: &PodCgroupOptions) -> CgroupResources {
    let requests = pod_requests(pod);
    let limits = pod_limits(pod);

    let containers = pod.spec.containers.iter().chain(&pod.spec.init_containers);
    let (mut cpu_declared, mut memory_declared) = (true, true);
    for container in containers {
        let own = container_limits(container);
        cpu_declared &= cpu_milli(&own) > 0;
        memory_declared &= memory_bytes(&own) > 0;
    }
    let pod_level = pod_level_limits(pod);
    cpu_declared |= cpu_milli(&pod_level) > 0;
    memory_declared |= memory_bytes(&pod_level) > 0;

    let shares = milli_cpu_to_shares(cpu_milli(&requests));
    let quota = if options.enforce_cpu_limits {
        milli_cpu_to_quota(cpu_milli(&limits), options.cpu_period_us)
    } else {
        Limit::Unlimited
    };
    let memory = memory_limit(memory_bytes(&limits));

    let mut config = CgroupResources::default();
    match pod_qos(pod) {
        QosClass::Guaranteed => {
            config.cpu_shares = Some(shares);
            config.cpu_quota = Some(quota);
            config.cpu_period = Some(options.cpu_period_us);
            config.memory_limit = Some(memory);
        }
        QosClass::Burstable => {
            config.cpu_shares = Some(shares);
            if cpu_declared {
                config.cpu_quota = Some(quota);
                config.cpu_period = Some(options.cpu_period_us);
            }
            if memory_declared {
                config.memory_limit = Some(memory);
            }
        }
        QosClass::BestEffort => config.cpu_shares = Some(MIN_SHARES),
    }
    config
}

/// CPU shares of the QoS cgroups.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QosCpuShares {
    /// Sum of the Burstable pods' cpu requests, as shares (2 with no such pod).
    pub burstable: u64,
    /// Always the minimum: BestEffort pods get only what nobody else uses.
    pub best_effort: u64,
}

/// The pod's cpu request in milli-CPU if it counts toward the Burstable QoS cgroup's
/// shares (a Burstable pod; pass it at its allocated resources), else `None`.
pub fn burstable_cpu_request(pod: &Pod) -> Option<i64> {
    (pod_qos(pod) == QosClass::Burstable).then(|| cpu_milli(&pod_requests(pod)))
}

/// Shares of the QoS cgroups when the Burstable pods request `burstable_milli` in all.
pub fn qos_cpu_shares_for(burstable_milli: i64) -> QosCpuShares {
    QosCpuShares {
        burstable: milli_cpu_to_shares(burstable_milli),
        best_effort: MIN_SHARES,
    }
}

/// Shares for `kubepods/burstable` and `kubepods/besteffort` given the active pods.
pub fn qos_cpu_shares(pods: &[Pod]) -> QosCpuShares {
    let burstable_milli = pods
        .iter()
        .filter_map(burstable_cpu_request)
        .fold(0i64, i64::saturating_add);
    qos_cpu_shares_for(burstable_milli)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cgroups::pod_resources::tests::{container, pod, sidecar};
    use proptest::prelude::*;

    #[test]
    fn shares_table() {
        let cases = [
            (0, 2),
            (-5, 2),
            (1, 2),
            (2, 2),
            (3, 3),
            (250, 256),
            (1000, 1024),
            (1500, 1536),
            (256_000, 262_144),
            (300_000, 262_144),
            (i64::MAX, 262_144),
        ];
        for (milli, want) in cases {
            assert_eq!(milli_cpu_to_shares(milli), want, "{milli}m");
        }
    }

    #[test]
    fn shares_back_to_milli_cpu() {
        for (shares, want) in [
            (0, 0),
            (1, 0),
            (2, 2),
            (256, 250),
            (1024, 1000),
            (262_144, 256_000),
        ] {
            assert_eq!(shares_to_milli_cpu(shares), want, "{shares}");
        }
    }

    #[test]
    fn weight_table() {
        let cases = [
            (0, 1),
            (2, 1),
            (1024, 39),
            (262_144, 10_000),
            (u64::MAX, 10_000),
        ];
        for (shares, want) in cases {
            assert_eq!(shares_to_weight(shares), want, "{shares}");
        }
        assert_eq!(weight_to_shares(1), 2);
        assert_eq!(weight_to_shares(10_000), 262_144);
        assert_eq!(weight_to_shares(39), 999);
        for w in [1, 2, 3, 39, 100, 5000, 9999, 10_000] {
            assert_eq!(shares_to_weight(weight_to_shares(w)), w, "weight {w}");
        }
    }

    #[test]
    fn quota_table() {
        let period = DEFAULT_QUOTA_PERIOD_US;
        let cases = [
            (0, Limit::Unlimited),
            (-1, Limit::Unlimited),
            (1, Limit::Value(1000)),
            (5, Limit::Value(1000)),
            (10, Limit::Value(1000)),
            (11, Limit::Value(1100)),
            (500, Limit::Value(50_000)),
            (2000, Limit::Value(200_000)),
            (i64::MAX, Limit::Value(MAX_QUOTA_US)),
            // About 175.9 million CPUs and more: the kernel's largest quota.
            (175_921_860_444, Limit::Value(17_592_186_044_400)),
            (175_921_860_445, Limit::Value(MAX_QUOTA_US)),
        ];
        for (milli, want) in cases {
            assert_eq!(milli_cpu_to_quota(milli, period), want, "{milli}m");
        }
        assert_eq!(milli_cpu_to_quota(500, 10_000), Limit::Value(5000));
        assert_eq!(quota_to_milli_cpu(Limit::Value(50_000), period), 500);
        assert_eq!(quota_to_milli_cpu(Limit::Unlimited, period), 0);
        assert_eq!(quota_to_milli_cpu(Limit::Value(50_000), 0), 0);
        assert_eq!(memory_limit(0), Limit::Unlimited);
        assert_eq!(memory_limit(-3), Limit::Unlimited);
        assert_eq!(memory_limit(4096), Limit::Value(4096));
    }

    struct Case {
        name: &'static str,
        pod: Pod,
        options: PodCgroupOptions,
        want: CgroupResources,
    }

    fn check(case: Case) {
        assert_eq!(
            resource_config_for_pod(&case.pod, &case.options),
            case.want,
            "{}",
            case.name
        );
    }

    #[test]
    fn pod_config_by_qos() {
        let c = container;
        let on = PodCgroupOptions::default();
        let off = PodCgroupOptions {
            enforce_cpu_limits: false,
            ..on
        };
        let guaranteed = pod(
            vec![
                c("a", &[], &[("cpu", "500m"), ("memory", "100Mi")]),
                c("b", &[], &[("cpu", "250m"), ("memory", "28Mi")]),
            ],
            vec![],
        );
        let full = CgroupResources {
            cpu_shares: Some(768),
            cpu_quota: Some(Limit::Value(75_000)),
            cpu_period: Some(100_000),
            memory_limit: Some(Limit::Value(128 << 20)),
            ..Default::default()
        };
        let cases = [
            Case {
                name: "guaranteed",
                pod: guaranteed.clone(),
                options: on,
                want: full.clone(),
            },
            Case {
                name: "guaranteed without cfs quota",
                pod: guaranteed.clone(),
                options: off,
                want: CgroupResources {
                    cpu_quota: Some(Limit::Unlimited),
                    ..full.clone()
                },
            },
            Case {
                name: "guaranteed with a shorter period",
                pod: guaranteed,
                options: PodCgroupOptions {
                    cpu_period_us: 10_000,
                    ..on
                },
                want: CgroupResources {
                    cpu_quota: Some(Limit::Value(7_500)),
                    cpu_period: Some(10_000),
                    ..full
                },
            },
            Case {
                name: "burstable, all limits declared",
                pod: pod(
                    vec![
                        c(
                            "a",
                            &[("cpu", "100m"), ("memory", "10Mi")],
                            &[("cpu", "1"), ("memory", "1Gi")],
                        ),
                        c("b", &[("cpu", "100m")], &[("cpu", "1"), ("memory", "1Gi")]),
                    ],
                    vec![],
                ),
                options: on,
                want: CgroupResources {
                    cpu_shares: Some(204),
                    cpu_quota: Some(Limit::Value(200_000)),
                    cpu_period: Some(100_000),
                    memory_limit: Some(Limit::Value(2 << 30)),
                    ..Default::default()
                },
            },
            Case {
                name: "burstable, one container without a cpu limit",
                pod: pod(
                    vec![
                        c("a", &[("cpu", "100m")], &[("cpu", "1"), ("memory", "1Gi")]),
                        c("b", &[("cpu", "100m")], &[("memory", "1Gi")]),
                    ],
                    vec![],
                ),
                options: on,
                want: CgroupResources {
                    cpu_shares: Some(204),
                    memory_limit: Some(Limit::Value(2 << 30)),
                    ..Default::default()
                },
            },
            Case {
                name: "burstable, an init container without limits",
                pod: pod(
                    vec![c(
                        "a",
                        &[("cpu", "100m")],
                        &[("cpu", "1"), ("memory", "1Gi")],
                    )],
                    vec![c("init", &[("cpu", "50m")], &[])],
                ),
                options: on,
                want: CgroupResources {
                    cpu_shares: Some(102),
                    ..Default::default()
                },
            },
            Case {
                name: "burstable with a sidecar: limits add up",
                pod: pod(
                    vec![c(
                        "a",
                        &[("cpu", "100m")],
                        &[("cpu", "1"), ("memory", "1Gi")],
                    )],
                    vec![sidecar(c(
                        "s",
                        &[("cpu", "100m")],
                        &[("cpu", "500m"), ("memory", "512Mi")],
                    ))],
                ),
                options: on,
                want: CgroupResources {
                    cpu_shares: Some(204),
                    cpu_quota: Some(Limit::Value(150_000)),
                    cpu_period: Some(100_000),
                    memory_limit: Some(Limit::Value(1536 << 20)),
                    ..Default::default()
                },
            },
            Case {
                name: "best effort",
                pod: pod(vec![c("a", &[], &[])], vec![]),
                options: on,
                want: CgroupResources {
                    cpu_shares: Some(2),
                    ..Default::default()
                },
            },
        ];
        for case in cases {
            check(case);
        }
    }

    proptest! {
        #[test]
        fn shares_bounded_and_monotonic(a in -10i64..2_000_000, b in -10i64..2_000_000) {
            let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
            let (s_lo, s_hi) = (milli_cpu_to_shares(lo), milli_cpu_to_shares(hi));
            prop_assert!((MIN_SHARES..=MAX_SHARES).contains(&s_lo));
            prop_assert!(s_lo <= s_hi);
        }

        #[test]
        fn weight_bounded_and_monotonic(a in 0u64..400_000, b in 0u64..400_000) {
            let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
            let (w_lo, w_hi) = (shares_to_weight(lo), shares_to_weight(hi));
            prop_assert!((MIN_WEIGHT..=MAX_WEIGHT).contains(&w_lo));
            prop_assert!(w_lo <= w_hi);
        }

        #[test]
        fn weight_round_trip_is_close(shares in MIN_SHARES..=MAX_SHARES) {
            let back = weight_to_shares(shares_to_weight(shares));
            prop_assert!(back <= shares);
            // One weight step is 262142 / 9999 ≈ 26.2 shares.
            prop_assert!(shares - back <= 27, "{} -> {}", shares, back);
        }

        #[test]
        fn quota_at_least_minimum_when_limited(milli in 1i64..10_000_000, period in 1000u64..=1_000_000) {
            match milli_cpu_to_quota(milli, period) {
                Limit::Value(q) => {
                    prop_assert!(q >= MIN_QUOTA_US);
                    prop_assert!(q >= (milli as u64) * period / 1000);
                }
                Limit::Unlimited => prop_assert!(false, "limited cpu gave no quota"),
            }
        }

        #[test]
        fn quota_round_trip_is_exact_from_10m(milli in 10i64..1_000_000) {
            let quota = milli_cpu_to_quota(milli, DEFAULT_QUOTA_PERIOD_US);
            prop_assert_eq!(quota_to_milli_cpu(quota, DEFAULT_QUOTA_PERIOD_US), milli);
        }
    }

    #[test]
    fn qos_shares_sum_burstable_requests() {
        let c = container;
        let pods = vec![
            pod(vec![c("a", &[("cpu", "250m")], &[])], vec![]),
            pod(
                vec![c("a", &[("cpu", "750m")], &[("memory", "1Gi")])],
                vec![],
            ),
            pod(
                vec![c("a", &[], &[("cpu", "2"), ("memory", "1Gi")])],
                vec![],
            ),
            pod(vec![c("a", &[], &[])], vec![]),
        ];
        assert_eq!(
            qos_cpu_shares(&pods),
            QosCpuShares {
                burstable: 1024,
                best_effort: 2
            }
        );
        assert_eq!(
            qos_cpu_shares(&[]),
            QosCpuShares {
                burstable: 2,
                best_effort: 2
            }
        );
    }
}
