//! Which persistent volume claims are mounted where, for `kubelet_volume_stats_*`
//! (upstream measures the volumes of every pod with a claim and reports them by
//! namespace and claim).
//!
//! [`ClaimMounts`] is filled by whoever sets up pod volumes (the agent wraps the
//! volume manager's setup and teardown: [`claim_mounts`] says which of a pod's
//! volumes are claims, a persistentVolumeClaim or a generic ephemeral volume's
//! `<pod>-<volume>` claim) and read by the `stats` thread, which measures each mount
//! with statvfs once per round. One small mutex, never held across I/O.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};

use crate::api::pod::Pod;

/// A claim mounted for a pod at `path`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClaimMount {
    pub namespace: String,
    pub claim: String,
    pub path: PathBuf,
}

/// The claims of `pod` among the volumes set up at `paths` (by volume name; pure).
pub fn claim_mounts(pod: &Pod, paths: &BTreeMap<String, PathBuf>) -> Vec<ClaimMount> {
    pod.spec
        .volumes
        .iter()
        .filter_map(|v| {
            let claim = match &v.persistent_volume_claim {
                Some(c) => c.claim_name.clone(),
                None if v.extra.contains_key("ephemeral") => format!("{}-{}", pod.name(), v.name),
                None => return None,
            };
            Some(ClaimMount {
                namespace: pod.namespace().to_owned(),
                claim,
                path: paths.get(&v.name)?.clone(),
            })
        })
        .collect()
}

/// The claims mounted now, by pod UID; clones share it.
#[derive(Clone, Debug, Default)]
pub struct ClaimMounts {
    inner: Arc<Mutex<BTreeMap<String, Vec<ClaimMount>>>>,
}

impl ClaimMounts {
    fn lock(&self) -> MutexGuard<'_, BTreeMap<String, Vec<ClaimMount>>> {
        // Whole entries are replaced: a poisoned map is still consistent.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The pod's claims after its volumes were set up (none: forgotten).
    pub fn set_pod(&self, uid: &str, mounts: Vec<ClaimMount>) {
        let mut map = self.lock();
        if mounts.is_empty() {
            map.remove(uid);
        } else {
            map.insert(uid.to_owned(), mounts);
        }
    }

    /// The pod's volumes were torn down.
    pub fn forget_pod(&self, uid: &str) {
        self.lock().remove(uid);
    }

    /// Every mounted claim once (pods sharing a claim report it once, as upstream).
    pub fn mounted(&self) -> Vec<ClaimMount> {
        let map = self.lock();
        let mut seen = std::collections::BTreeSet::new();
        map.values()
            .flatten()
            .filter(|m| seen.insert((m.namespace.clone(), m.claim.clone())))
            .cloned()
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(volumes: serde_json::Value) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web", "namespace": "shop", "uid": "u1"},
            "spec": {"volumes": volumes, "containers": []},
        }))
        .unwrap()
    }

    #[test]
    fn claims_and_ephemeral_claims_are_found_with_their_paths() {
        let pod = pod(serde_json::json!([
            {"name": "data", "persistentVolumeClaim": {"claimName": "data-claim"}},
            {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {}}},
            {"name": "cache", "emptyDir": {}},
            {"name": "unmounted", "persistentVolumeClaim": {"claimName": "other"}},
        ]));
        let paths: BTreeMap<String, PathBuf> = [
            ("data", "/var/lib/pv/data"),
            ("scratch", "/var/lib/pv/scratch"),
            ("cache", "/var/lib/pods/u1/cache"),
        ]
        .iter()
        .map(|(k, v)| ((*k).to_owned(), PathBuf::from(v)))
        .collect();
        let found = claim_mounts(&pod, &paths);
        let names: Vec<(&str, &str)> = found
            .iter()
            .map(|m| (m.claim.as_str(), m.path.to_str().unwrap()))
            .collect();
        assert_eq!(
            names,
            [
                ("data-claim", "/var/lib/pv/data"),
                ("web-scratch", "/var/lib/pv/scratch")
            ]
        );
        let mounts = ClaimMounts::default();
        mounts.set_pod("u1", found.clone());
        mounts.set_pod("u2", found);
        assert_eq!(mounts.mounted().len(), 2, "a shared claim is reported once");
        mounts.forget_pod("u1");
        mounts.forget_pod("u2");
        assert!(mounts.mounted().is_empty());
    }
}
