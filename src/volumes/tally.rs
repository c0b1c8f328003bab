//! The volume manager's counts for `volume_manager_total_volumes`: each pod's
//! volumes by plugin, as it wants them (`desired_state_of_world`) and as they are set
//! up (`actual_state_of_world`), kept from the last set-up of each pod until its
//! volumes are torn down. Pod workers update it after each set-up and tear-down; the
//! totals are written to the metrics registry at once. One small mutex, never held
//! across I/O.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;

use crate::metrics::VOLUMES_TOTAL;

const DESIRED: &str = "desired_state_of_world";
const ACTUAL: &str = "actual_state_of_world";

/// One pod's volumes by plugin.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodPlugins {
    pub desired: Vec<&'static str>,
    pub actual: Vec<&'static str>,
}

#[derive(Default)]
struct State {
    pods: BTreeMap<String, PodPlugins>,
    /// Every plugin reported so far, so a plugin whose volumes are all gone reads 0.
    seen: BTreeSet<&'static str>,
}

#[derive(Default)]
pub struct Tally {
    state: Mutex<State>,
}

/// Volumes by (plugin, state) over all pods (pure).
pub fn totals<'a>(
    pods: impl Iterator<Item = &'a PodPlugins>,
) -> BTreeMap<(&'static str, &'static str), usize> {
    let mut out = BTreeMap::new();
    for pod in pods {
        for (state, plugins) in [(DESIRED, &pod.desired), (ACTUAL, &pod.actual)] {
            for plugin in plugins {
                *out.entry((*plugin, state)).or_insert(0) += 1;
            }
        }
    }
    out
}

impl Tally {
    /// Records pod `uid`'s volumes after a set-up.
    pub fn set_pod(&self, uid: &str, plugins: PodPlugins) {
        let mut state = super::lock(&self.state);
        state
            .seen
            .extend(plugins.desired.iter().chain(&plugins.actual));
        state.pods.insert(uid.to_owned(), plugins);
        publish(&state);
    }

    /// Forgets pod `uid` once its volumes are torn down.
    pub fn forget_pod(&self, uid: &str) {
        let mut state = super::lock(&self.state);
        if state.pods.remove(uid).is_some() {
            publish(&state);
        }
    }
}

fn publish(state: &State) {
    let totals = totals(state.pods.values());
    for plugin in &state.seen {
        for kind in [DESIRED, ACTUAL] {
            let n = totals.get(&(*plugin, kind)).copied().unwrap_or(0);
            VOLUMES_TOTAL.set(&[plugin, kind], n as f64);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn totals_count_each_pods_volumes_by_plugin_and_state() {
        let a = PodPlugins {
            desired: vec!["kubernetes.io/configmap", "kubernetes.io/csi"],
            actual: vec!["kubernetes.io/configmap"],
        };
        let b = PodPlugins {
            desired: vec!["kubernetes.io/configmap"],
            actual: vec!["kubernetes.io/configmap"],
        };
        let got = totals([a, b].iter());
        assert_eq!(got[&("kubernetes.io/configmap", DESIRED)], 2);
        assert_eq!(got[&("kubernetes.io/configmap", ACTUAL)], 2);
        assert_eq!(got[&("kubernetes.io/csi", DESIRED)], 1);
        assert!(!got.contains_key(&("kubernetes.io/csi", ACTUAL)));
    }
}
