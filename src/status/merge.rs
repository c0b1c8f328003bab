//! The kubelet's status laid over the API copy just before a PATCH (upstream
//! `mergePodStatus` in `status_manager.go`).
//!
//! Called by the status manager thread for each pod it syncs; pure (`now` is an
//! argument). Rules:
//! - conditions the kubelet does not own are kept from the API copy; its own are
//!   replaced; the shared DisruptionTarget is sent only with the pod's move to a
//!   terminal phase, once no container can still run;
//! - fields litelet does not model (`resourceClaimStatuses`, newer ones) stay as the
//!   API has them;
//! - a terminal phase is held back (the API's phase, reason and message are kept) while
//!   containers could still be running;
//! - a terminal phase never goes out with Ready or ContainersReady True.

use crate::api::meta::{ConditionStatus, Time};
use crate::api::pod::{PodCondition, PodStatus, POD_CONTAINERS_READY, POD_READY};

use super::conditions::{
    carry_transition_time, is_owned_by_kubelet, is_shared_with_kubelet, replace_or_append,
    terminal_phase_condition, update_condition,
};
use super::has_terminal_phase;

/// The status to send: `kubelet`'s status merged into `api`, the pod's status as the
/// API server has it. `could_have_running_containers` is false only once the kubelet
/// knows every container of the pod has stopped.
pub fn merge_pod_status(
    api: &PodStatus,
    kubelet: &PodStatus,
    could_have_running_containers: bool,
    now: Time,
) -> PodStatus {
    let mut merged = kubelet.clone();
    let to_terminal = !has_terminal_phase(api) && has_terminal_phase(kubelet);

    let mut conditions: Vec<PodCondition> = api
        .conditions
        .iter()
        .filter(|c| !is_owned_by_kubelet(&c.type_))
        .cloned()
        .collect();
    for c in &kubelet.conditions {
        if is_owned_by_kubelet(&c.type_) {
            conditions.push(c.clone());
        } else if is_shared_with_kubelet(&c.type_) && to_terminal && !could_have_running_containers
        {
            // Sent late, so its transition time is measured against the API copy now.
            carry_transition_time(&mut merged, api, &c.type_, now);
            if let Some(updated) = merged.condition(&c.type_) {
                replace_or_append(&mut conditions, updated.clone());
            }
        }
    }
    merged.conditions = conditions;
    merged.extra = api.extra.clone();

    if to_terminal && could_have_running_containers {
        merged.phase = api.phase.clone();
        merged.reason = api.reason.clone();
        merged.message = api.message.clone();
    }

    if has_terminal_phase(&merged) {
        let is_true = |t: &str| {
            merged
                .condition(t)
                .is_some_and(|c| c.status == ConditionStatus::True)
        };
        if is_true(POD_READY) || is_true(POD_CONTAINERS_READY) {
            let generation = merged.observed_generation;
            for t in [POD_CONTAINERS_READY, POD_READY] {
                let c = terminal_phase_condition(t, merged.phase.as_ref(), generation);
                update_condition(&mut merged, c, now);
            }
        }
    }
    merged
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::pod::{PodPhase, POD_DISRUPTION_TARGET, POD_INITIALIZED, POD_SCHEDULED};
    use serde_json::json;

    use ConditionStatus::{False, True};

    const NOW: i64 = 1000;

    fn cond(type_: &str, status: ConditionStatus, ltt: i64) -> PodCondition {
        PodCondition {
            type_: type_.into(),
            status,
            last_transition_time: Some(Time::from_unix_seconds(ltt)),
            ..Default::default()
        }
    }

    /// The API copy: Running, with a foreign gate condition and an old Ready.
    fn api() -> PodStatus {
        PodStatus {
            phase: Some(PodPhase::Running),
            reason: Some("api-reason".into()),
            conditions: vec![
                cond("example.com/gate", True, 1),
                cond(POD_READY, False, 1),
                cond(POD_SCHEDULED, True, 1),
            ],
            ..Default::default()
        }
    }

    /// The kubelet's status: Ready True, Initialized True.
    fn kubelet(phase: PodPhase) -> PodStatus {
        PodStatus {
            phase: Some(phase),
            conditions: vec![
                cond(POD_INITIALIZED, True, 5),
                cond(POD_READY, True, 5),
                cond(POD_CONTAINERS_READY, True, 5),
                cond(POD_SCHEDULED, True, 1),
            ],
            ..Default::default()
        }
    }

    /// (type, status, transition time) of every condition, in order.
    type Conds = Vec<(String, String, i64)>;

    fn check(
        api: &PodStatus,
        kubelet: &PodStatus,
        could_run: bool,
        want_phase: PodPhase,
        want_conds: &[(&str, ConditionStatus, i64)],
    ) -> PodStatus {
        let merged = merge_pod_status(api, kubelet, could_run, Time::from_unix_seconds(NOW));
        assert_eq!(merged.phase, Some(want_phase));
        let got: Conds = merged
            .conditions
            .iter()
            .map(|c| {
                let ltt = c.last_transition_time.map_or(-1, |t| t.unix_seconds());
                (c.type_.clone(), c.status.to_string(), ltt)
            })
            .collect();
        let want: Conds = want_conds
            .iter()
            .map(|(t, s, l)| (t.to_string(), s.to_string(), *l))
            .collect();
        assert_eq!(got, want);
        merged
    }

    #[test]
    fn foreign_conditions_are_kept_and_kubelet_ones_replaced() {
        let merged = check(
            &api(),
            &kubelet(PodPhase::Running),
            true,
            PodPhase::Running,
            &[
                ("example.com/gate", True, 1),
                (POD_INITIALIZED, True, 5),
                (POD_READY, True, 5),
                (POD_CONTAINERS_READY, True, 5),
                (POD_SCHEDULED, True, 1),
            ],
        );
        assert_eq!(merged.reason, None);
    }

    #[test]
    fn terminal_phase_is_held_back_while_containers_may_run() {
        // Failed while containers could still run → the API's Running stays,
        // with its reason; Ready keeps the kubelet's value (phase not terminal).
        let merged = check(
            &api(),
            &kubelet(PodPhase::Failed),
            true,
            PodPhase::Running,
            &[
                ("example.com/gate", True, 1),
                (POD_INITIALIZED, True, 5),
                (POD_READY, True, 5),
                (POD_CONTAINERS_READY, True, 5),
                (POD_SCHEDULED, True, 1),
            ],
        );
        assert_eq!(merged.reason.as_deref(), Some("api-reason"));
        // Once nothing can run, Failed is sent, and Ready and
        // ContainersReady go False / PodFailed with a fresh transition time.
        let merged = check(
            &api(),
            &kubelet(PodPhase::Failed),
            false,
            PodPhase::Failed,
            &[
                ("example.com/gate", True, 1),
                (POD_INITIALIZED, True, 5),
                (POD_READY, False, NOW),
                (POD_CONTAINERS_READY, False, NOW),
                (POD_SCHEDULED, True, 1),
            ],
        );
        assert_eq!(merged.reason, None);
        let reason = |t: &str| merged.condition(t).and_then(|c| c.reason.clone());
        assert_eq!(reason(POD_READY).as_deref(), Some("PodFailed"));
    }

    #[test]
    fn succeeded_never_goes_out_ready() {
        // Phase Succeeded with Ready True → Ready / ContainersReady False,
        // reason PodCompleted.
        let mut k = kubelet(PodPhase::Succeeded);
        k.conditions[2].status = False; // ContainersReady already False.
        let merged = check(
            &api(),
            &k,
            false,
            PodPhase::Succeeded,
            &[
                ("example.com/gate", True, 1),
                (POD_INITIALIZED, True, 5),
                (POD_READY, False, NOW),
                (POD_CONTAINERS_READY, False, 5),
                (POD_SCHEDULED, True, 1),
            ],
        );
        for t in [POD_READY, POD_CONTAINERS_READY] {
            let c = merged.condition(t).cloned().unwrap_or_default();
            assert_eq!(c.reason.as_deref(), Some("PodCompleted"), "{t}");
        }
        // An API copy already terminal: no "transition", phase goes as is.
        let mut done = api();
        done.phase = Some(PodPhase::Succeeded);
        check(
            &done,
            &kubelet(PodPhase::Succeeded),
            true,
            PodPhase::Succeeded,
            &[
                ("example.com/gate", True, 1),
                (POD_INITIALIZED, True, 5),
                (POD_READY, False, NOW),
                (POD_CONTAINERS_READY, False, NOW),
                (POD_SCHEDULED, True, 1),
            ],
        );
    }

    #[test]
    fn disruption_target_waits_for_the_terminal_transition() {
        let mut k = kubelet(PodPhase::Failed);
        k.conditions.truncate(1);
        k.conditions.push(cond(POD_DISRUPTION_TARGET, True, 7));
        // Containers may still run → not sent (and the phase is held back).
        check(
            &api(),
            &k,
            true,
            PodPhase::Running,
            &[("example.com/gate", True, 1), (POD_INITIALIZED, True, 5)],
        );
        // Transition to terminal with nothing running → sent, time measured now
        // against the API copy (which has none).
        check(
            &api(),
            &k,
            false,
            PodPhase::Failed,
            &[
                ("example.com/gate", True, 1),
                (POD_INITIALIZED, True, 5),
                (POD_DISRUPTION_TARGET, True, NOW),
            ],
        );
        // The API copy already has it with the same status: its time is kept, and
        // the kubelet's replaces it in place.
        let mut a = api();
        a.conditions.insert(0, cond(POD_DISRUPTION_TARGET, True, 3));
        check(
            &a,
            &k,
            false,
            PodPhase::Failed,
            &[
                (POD_DISRUPTION_TARGET, True, 3),
                ("example.com/gate", True, 1),
                (POD_INITIALIZED, True, 5),
            ],
        );
        // Not a transition (API already Failed): the API's own copy stays untouched.
        a.phase = Some(PodPhase::Failed);
        a.conditions[0] = cond(POD_DISRUPTION_TARGET, False, 2);
        check(
            &a,
            &k,
            false,
            PodPhase::Failed,
            &[
                (POD_DISRUPTION_TARGET, False, 2),
                ("example.com/gate", True, 1),
                (POD_INITIALIZED, True, 5),
            ],
        );
    }

    #[test]
    fn unmodelled_fields_stay_as_the_api_has_them() {
        let mut a = api();
        a.extra
            .insert("resourceClaimStatuses".into(), json!([{"name": "gpu"}]));
        let mut k = kubelet(PodPhase::Running);
        k.extra.insert("stale".into(), json!(1));
        let merged = merge_pod_status(&a, &k, true, Time::from_unix_seconds(NOW));
        assert_eq!(merged.extra, a.extra);
    }
}
