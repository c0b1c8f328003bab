//! Local storage limits (upstream eviction manager `localStorageEviction`): a pod
//! whose emptyDir outgrows its `sizeLimit`, whose ephemeral storage outgrows the sum
//! of its containers' `ephemeral-storage` limits, or one of whose containers
//! (writable layer + logs) outgrows its own limit, is evicted at once, whatever the
//! node's free space. Pure: the pod and its stats sample in, upstream's message out.
//!
//! Measured from the `stats` thread's sample: disk emptyDirs (a `Memory` emptyDir is a
//! tmpfs of at most its sizeLimit, so the kernel holds it), writable layers (CRI
//! ListContainerStats) and log directories.

use crate::api::pod::{Pod, RESOURCE_EPHEMERAL_STORAGE};
use crate::api::quantity::Quantity;
use crate::cgroups::pod_resources::pod_limits;
use crate::stats::sample::PodSample;

use super::signals::{container_usage, pod_usage};

fn over(used: i64, limit: &Quantity) -> bool {
    limit.value() > 0 && used > limit.value()
}

/// A local storage eviction: upstream's signal name (the evictions metric's label)
/// and the message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    pub signal: &'static str,
    pub message: String,
}

/// Why `pod` must be evicted for its local storage, or `None`; checked in upstream's
/// order: emptyDir size limits, the pod's total, each regular container's.
/// Whether `pod` has any limit [`violation`] judges: an emptyDir `sizeLimit`, or an
/// `ephemeral-storage` limit on the pod or a container.
pub fn has_limits(pod: &Pod) -> bool {
    let size_limit =
        |v: &crate::api::pod::Volume| v.empty_dir.as_ref().is_some_and(|e| e.size_limit.is_some());
    pod.spec.volumes.iter().any(size_limit)
        || pod_limits(pod).contains_key(RESOURCE_EPHEMERAL_STORAGE)
        || pod.spec.containers.iter().any(|c| {
            c.resources
                .as_ref()
                .is_some_and(|r| r.limits.contains_key(RESOURCE_EPHEMERAL_STORAGE))
        })
}

pub fn violation(pod: &Pod, sample: &PodSample) -> Option<Violation> {
    for volume in &pod.spec.volumes {
        let Some(limit) = volume
            .empty_dir
            .as_ref()
            .and_then(|e| e.size_limit.as_ref())
        else {
            continue;
        };
        let used = sample
            .volumes
            .iter()
            .find(|(name, _)| *name == volume.name)
            .and_then(|(_, fs)| fs.used_bytes);
        if used.is_some_and(|u| over(i64::try_from(u).unwrap_or(i64::MAX), limit)) {
            return Some(Violation {
                signal: "emptydirfs.limit",
                message: format!(
                    "Usage of EmptyDir volume {:?} exceeds the limit {:?}. ",
                    volume.name,
                    limit.to_string()
                ),
            });
        }
    }
    if let Some(limit) = pod_limits(pod).get(RESOURCE_EPHEMERAL_STORAGE) {
        if over(pod_usage(sample).disk_bytes, limit) {
            return Some(Violation {
                signal: "ephemeralpodfs.limit",
                message: format!(
                    "Pod ephemeral local storage usage exceeds the total limit of containers {limit}. "
                ),
            });
        }
    }
    let usage = container_usage(sample);
    for container in &pod.spec.containers {
        let Some(limit) = container
            .resources
            .as_ref()
            .and_then(|r| r.limits.get(RESOURCE_EPHEMERAL_STORAGE))
        else {
            continue;
        };
        let used = usage
            .iter()
            .filter(|u| u.name == container.name)
            .map(|u| u.disk_bytes)
            .max();
        if used.is_some_and(|u| over(u, limit)) {
            return Some(Violation {
                signal: "ephemeralcontainerfs.limit",
                message: format!(
                    "Container {} exceeded its local ephemeral storage limit {:?}. ",
                    container.name,
                    limit.to_string()
                ),
            });
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::fs::FsUsage;
    use crate::stats::sample::ContainerSample;

    fn fs(bytes: u64) -> Option<FsUsage> {
        Some(FsUsage {
            used_bytes: Some(bytes),
            ..Default::default()
        })
    }

    fn pod(spec: serde_json::Value) -> Pod {
        serde_json::from_value(serde_json::json!({"metadata": {"name": "p"}, "spec": spec}))
            .unwrap()
    }

    fn sample(rootfs: u64, logs: u64, volume: u64) -> PodSample {
        PodSample {
            containers: vec![ContainerSample {
                name: "app".into(),
                rootfs: fs(rootfs),
                logs: fs(logs),
                ..Default::default()
            }],
            volumes: vec![("scratch".into(), fs(volume).unwrap_or_default())],
            ..Default::default()
        }
    }

    const MI: u64 = 1 << 20;

    #[test]
    fn only_pods_with_a_storage_limit_need_their_usage_read() {
        let cases = [
            (serde_json::json!({"containers": [{"name": "app"}]}), false),
            (
                serde_json::json!({"containers": [{"name": "app", "resources": {"limits": {"memory": "1Gi"}}}]}),
                false,
            ),
            (
                serde_json::json!({"containers": [{"name": "app"}], "volumes": [{"name": "v", "emptyDir": {}}]}),
                false,
            ),
            (
                serde_json::json!({"containers": [{"name": "app"}],
                       "volumes": [{"name": "v", "emptyDir": {"sizeLimit": "1Mi"}}]}),
                true,
            ),
            (
                serde_json::json!({"containers": [{"name": "a"},
                    {"name": "b", "resources": {"limits": {"ephemeral-storage": "1Mi"}}}]}),
                true,
            ),
        ];
        for (spec, want) in cases {
            assert_eq!(has_limits(&pod(spec.clone())), want, "{spec}");
        }
    }

    #[test]
    fn local_storage_limits_evict_with_upstreams_messages() {
        let spec = |container_limit: Option<&str>, size_limit: Option<&str>| {
            let mut limits = serde_json::Map::new();
            if let Some(l) = container_limit {
                limits.insert("ephemeral-storage".into(), l.into());
            }
            serde_json::json!({
                "containers": [{"name": "app", "resources": {"limits": limits}}],
                "volumes": [{"name": "scratch", "emptyDir": {"sizeLimit": size_limit}}],
            })
        };
        // (case, container limit, emptyDir sizeLimit, rootfs, logs, emptyDir use, message)
        type Case = (
            &'static str,
            Option<&'static str>,
            Option<&'static str>,
            u64,
            u64,
            u64,
            Option<&'static str>,
        );
        let cases: &[Case] = &[
            ("no limits", None, None, 900 * MI, 0, 900 * MI, None),
            (
                "emptyDir over its sizeLimit",
                None,
                Some("10Mi"),
                0,
                0,
                11 * MI,
                Some(r#"Usage of EmptyDir volume "scratch" exceeds the limit "10Mi". "#),
            ),
            ("emptyDir at its sizeLimit", None, Some("10Mi"), 0, 0, 10 * MI, None),
            (
                "the pod's total over the containers' limits",
                Some("20Mi"),
                None,
                5 * MI,
                MI,
                15 * MI,
                Some("Pod ephemeral local storage usage exceeds the total limit of containers 20Mi. "),
            ),
            (
                "writable layer and logs over the container's limit",
                Some("20Mi"),
                Some("100Mi"),
                18 * MI,
                3 * MI,
                0,
                // The pod total (21Mi) is checked first, as upstream.
                Some("Pod ephemeral local storage usage exceeds the total limit of containers 20Mi. "),
            ),
            ("within every limit", Some("20Mi"), Some("10Mi"), 5 * MI, MI, 5 * MI, None),
        ];
        for (name, limit, size, rootfs, logs, volume, want) in cases {
            let got = violation(&pod(spec(*limit, *size)), &sample(*rootfs, *logs, *volume));
            assert_eq!(got.map(|v| v.message).as_deref(), *want, "{name}");
        }
    }

    #[test]
    fn a_container_over_its_own_limit_is_named() {
        // Two containers: the pod total (sum of limits) holds, one container does not.
        let p = pod(serde_json::json!({"containers": [
            {"name": "app", "resources": {"limits": {"ephemeral-storage": "10Mi"}}},
            {"name": "side", "resources": {"limits": {"ephemeral-storage": "100Mi"}}},
        ]}));
        let mut s = sample(11 * MI, 0, 0);
        s.volumes.clear();
        s.containers.push(ContainerSample {
            name: "side".into(),
            rootfs: fs(MI),
            ..Default::default()
        });
        let v = violation(&p, &s).expect("container over its limit");
        assert_eq!(
            v.message,
            r#"Container app exceeded its local ephemeral storage limit "10Mi". "#
        );
        assert_eq!(v.signal, "ephemeralcontainerfs.limit");
    }
}
