//! Admission under pressure (upstream eviction manager's `Admit`) and the shared
//! [`Pressure`] the `eviction` thread writes and the sync loop and `node` thread read.
//!
//! No pressure: admit. Critical pods: admit. Memory pressure alone: admit all but
//! BestEffort pods, and BestEffort pods that tolerate the
//! `node.kubernetes.io/memory-pressure:NoSchedule` taint. Any other pressure: reject
//! with reason `Evicted` and `"The node had condition: [DiskPressure]. "`.

use std::collections::BTreeSet;
use std::sync::{Arc, RwLock};

use crate::admission::{tolerates as taint_tolerated, Rejection};
use crate::api::node::{Taint, TaintEffect};
use crate::api::pod::Pod;
use crate::cgroups::qos::{pod_qos, QosClass};

use super::config::Condition;
use super::rank::is_critical;

/// Upstream's reason for evicted and refused pods.
pub const REASON: &str = "Evicted";
pub const MEMORY_PRESSURE_TAINT: &str = "node.kubernetes.io/memory-pressure";

/// The pure admission rule.
pub fn admit(conditions: &BTreeSet<Condition>, pod: &Pod) -> Result<(), Rejection> {
    if conditions.is_empty() || is_critical(pod) {
        return Ok(());
    }
    if conditions.len() == 1 && conditions.contains(&Condition::MemoryPressure) {
        let taint = Taint {
            key: MEMORY_PRESSURE_TAINT.to_owned(),
            value: None,
            effect: TaintEffect::NoSchedule,
            time_added: None,
        };
        if pod_qos(pod) != QosClass::BestEffort || taint_tolerated(pod, &taint) {
            return Ok(());
        }
    }
    let names: Vec<&str> = conditions.iter().map(|c| c.as_str()).collect();
    Err(Rejection {
        reason: REASON.to_owned(),
        message: format!("The node had condition: [{}]. ", names.join(" ")),
    })
}

/// The node conditions the eviction manager reports now. Cheap to clone; the lock is
/// held only to copy or replace the set.
#[derive(Clone, Default)]
pub struct Pressure {
    conditions: Arc<RwLock<BTreeSet<Condition>>>,
}

impl Pressure {
    pub fn new() -> Pressure {
        Pressure::default()
    }

    pub fn get(&self) -> BTreeSet<Condition> {
        self.conditions
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    pub fn set(&self, conditions: BTreeSet<Condition>) {
        *self.conditions.write().unwrap_or_else(|p| p.into_inner()) = conditions;
    }

    pub fn has(&self, c: Condition) -> bool {
        self.conditions
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .contains(&c)
    }

    /// Wraps the node thread's health function so it reports these conditions.
    pub fn wrap_health(
        &self,
        mut inner: crate::node::inputs::HealthFn,
    ) -> crate::node::inputs::HealthFn {
        let me = self.clone();
        Box::new(move || {
            let mut h = inner();
            let now = me.get();
            h.memory_pressure = now.contains(&Condition::MemoryPressure);
            h.disk_pressure = now.contains(&Condition::DiskPressure);
            h.pid_pressure = now.contains(&Condition::PidPressure);
            h
        })
    }
}

impl crate::admission::PodAdmitHandler for Pressure {
    fn admit(&self, pod: &Pod) -> Result<(), Rejection> {
        admit(&self.get(), pod)
    }
}
