//! The canonical form of a pod status and the equality the status manager uses
//! (upstream `normalizeStatus` and `isPodStatusByKubeletEqual` in `status_manager.go`).
//!
//! Called by the status manager before caching a status and before comparing it with
//! the API copy; pure. Normalising makes two statuses that say the same thing compare
//! equal: termination messages are capped (12 KiB shared by all containers), empty
//! strings are unset (the API drops them), regular and ephemeral statuses are sorted by
//! name and init statuses follow the spec. Timestamps need no step here: [`Time`]
//! holds whole seconds, as the API does, so sub-second runtime times never survive
//! conversion.
//!
//! [`Time`]: crate::api::meta::Time

use crate::api::pod::{ContainerState, ContainerStatus, Pod, PodStatus};

use super::conditions::{is_owned_by_kubelet, is_shared_with_kubelet};

/// Bytes of termination message the whole pod may report, split evenly over its
/// containers (init, regular and ephemeral).
pub const MAX_POD_TERMINATION_MESSAGE_LOG_LENGTH: usize = 12288;

/// The termination-message budget of each container of `pod`.
pub fn termination_message_cap(pod: &Pod) -> usize {
    let spec = &pod.spec;
    let n = spec.containers.len() + spec.init_containers.len() + spec.ephemeral_containers.len();
    MAX_POD_TERMINATION_MESSAGE_LOG_LENGTH
        .checked_div(n)
        .unwrap_or(MAX_POD_TERMINATION_MESSAGE_LOG_LENGTH)
}

/// Cuts `s` to at most `max` bytes, backing off to a character boundary so the result
/// stays valid UTF-8 (upstream cuts bytes blindly and can split a character).
fn truncate_utf8(s: &mut String, max: usize) {
    if s.len() <= max {
        return;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s.truncate(end);
}

fn unset_if_empty(s: &mut Option<String>) {
    if s.as_deref() == Some("") {
        *s = None;
    }
}

fn normalize_state(state: &mut Option<ContainerState>, cap: usize) {
    let Some(state) = state else {
        return;
    };
    if let Some(w) = &mut state.waiting {
        unset_if_empty(&mut w.reason);
        unset_if_empty(&mut w.message);
    }
    if let Some(t) = &mut state.terminated {
        unset_if_empty(&mut t.reason);
        if let Some(m) = &mut t.message {
            truncate_utf8(m, cap);
        }
        unset_if_empty(&mut t.message);
    }
}

fn normalize_containers(statuses: &mut [ContainerStatus], cap: usize) {
    for s in statuses {
        normalize_state(&mut s.state, cap);
        normalize_state(&mut s.last_state, cap);
    }
}

/// Puts `status` in canonical form for `pod`.
pub fn normalize_status(pod: &Pod, status: &mut PodStatus) {
    let cap = termination_message_cap(pod);
    unset_if_empty(&mut status.reason);
    unset_if_empty(&mut status.message);
    for c in &mut status.conditions {
        unset_if_empty(&mut c.reason);
        unset_if_empty(&mut c.message);
    }
    normalize_containers(&mut status.container_statuses, cap);
    status
        .container_statuses
        .sort_by(|a, b| a.name.cmp(&b.name));
    normalize_containers(&mut status.ephemeral_container_statuses, cap);
    status
        .ephemeral_container_statuses
        .sort_by(|a, b| a.name.cmp(&b.name));
    normalize_containers(&mut status.init_container_statuses, cap);
    let spec_index = |name: &str| {
        pod.spec
            .init_containers
            .iter()
            .position(|c| c.name == name)
            .unwrap_or(usize::MAX)
    };
    // Stable: statuses for names not in the spec keep their order, at the end.
    status
        .init_container_statuses
        .sort_by_key(|s| spec_index(&s.name));
}

/// True when `new` says nothing the kubelet owns that `old` does not already say.
///
/// Kubelet-owned and shared conditions of `new` must appear in `old` with the same
/// status, reason and message (transition and probe times are ignored), and no
/// kubelet-owned condition of `old` may be missing from `new`; everything
/// else must be equal, except: conditions themselves beyond that check (foreign ones
/// belong to others), fields litelet does not model (kept in `extra`; not the
/// kubelet's to own), and `observedGeneration` when one side lacks it (API servers
/// before 1.33 drop the field, which would otherwise look like a change forever).
pub fn is_status_equal_by_kubelet(old: &PodStatus, new: &PodStatus) -> bool {
    let same_text = |a: &Option<String>, b: &Option<String>| {
        a.as_deref().unwrap_or("") == b.as_deref().unwrap_or("")
    };
    for c in &new.conditions {
        if !is_owned_by_kubelet(&c.type_) && !is_shared_with_kubelet(&c.type_) {
            continue;
        }
        let same = old.condition(&c.type_).is_some_and(|o| {
            o.status == c.status
                && same_text(&o.reason, &c.reason)
                && same_text(&o.message, &c.message)
        });
        if !same {
            return false;
        }
    }
    // A kubelet-owned condition that went away is a change too: resize conditions are
    // removed when the resize is done (without this a finished resize would stay
    // "in progress" in the API for ever).
    let removed = old
        .conditions
        .iter()
        .any(|c| is_owned_by_kubelet(&c.type_) && new.condition(&c.type_).is_none());
    if removed {
        return false;
    }
    let mut a = old.clone();
    let mut b = new.clone();
    a.conditions.clear();
    b.conditions.clear();
    a.extra.clear();
    b.extra.clear();
    if a.observed_generation.is_none() || b.observed_generation.is_none() {
        a.observed_generation = None;
        b.observed_generation = None;
    }
    a == b
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::meta::{ConditionStatus, Time};
    use crate::api::pod::{
        Container, ContainerStateTerminated, ContainerStateWaiting, EphemeralContainer,
        PodCondition, PodPhase, POD_CONTAINERS_READY, POD_DISRUPTION_TARGET, POD_READY,
    };

    fn pod(init: &[&str], regular: &[&str]) -> Pod {
        let c = |n: &&str| Container {
            name: (*n).into(),
            ..Default::default()
        };
        let mut p = Pod::default();
        p.spec.init_containers = init.iter().map(c).collect();
        p.spec.containers = regular.iter().map(c).collect();
        p
    }

    fn terminated(name: &str, message: &str) -> ContainerStatus {
        ContainerStatus {
            name: name.into(),
            state: Some(ContainerState {
                terminated: Some(ContainerStateTerminated {
                    exit_code: 1,
                    message: Some(message.into()),
                    started_at: Some(Time::from_unix_seconds(5)),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn named(name: &str) -> ContainerStatus {
        ContainerStatus {
            name: name.into(),
            ..Default::default()
        }
    }

    fn message_len(s: &ContainerStatus) -> usize {
        s.state
            .as_ref()
            .and_then(|s| s.terminated.as_ref())
            .and_then(|t| t.message.as_ref())
            .map_or(0, |m| m.len())
    }

    /// Normalises `status` for `pod` and returns it.
    fn check(pod: &Pod, mut status: PodStatus) -> PodStatus {
        normalize_status(pod, &mut status);
        // Normalising is idempotent.
        let mut again = status.clone();
        normalize_status(pod, &mut again);
        assert_eq!(again, status);
        status
    }

    #[test]
    fn termination_messages_are_capped_per_container() {
        // 20000 bytes in a 2-container pod → 6144 bytes.
        let p = pod(&[], &["a", "b"]);
        let mut a = terminated("a", &"x".repeat(20000));
        a.last_state = terminated("a", &"y".repeat(7000)).state;
        let st = PodStatus {
            container_statuses: vec![a, terminated("b", "short")],
            ..Default::default()
        };
        let out = check(&p, st);
        assert_eq!(termination_message_cap(&p), 6144);
        assert_eq!(message_len(&out.container_statuses[0]), 6144);
        let last = out.container_statuses[0].last_state.as_ref();
        let last_len = last
            .and_then(|s| s.terminated.as_ref())
            .and_then(|t| t.message.as_ref())
            .map_or(0, |m| m.len());
        assert_eq!(last_len, 6144);
        assert_eq!(message_len(&out.container_statuses[1]), 5);

        // Init and ephemeral containers share the budget; UTF-8 is never split.
        let mut p = pod(&["i0"], &["a"]);
        p.spec
            .ephemeral_containers
            .push(EphemeralContainer::default());
        assert_eq!(termination_message_cap(&p), 4096);
        let st = PodStatus {
            init_container_statuses: vec![terminated("i0", &"é".repeat(3000))],
            ..Default::default()
        };
        let out = check(&p, st);
        assert_eq!(message_len(&out.init_container_statuses[0]), 4096);
        assert_eq!(termination_message_cap(&Pod::default()), 12288);
    }

    #[test]
    fn sort_orders() {
        // Statuses sorted by name, init statuses in spec order.
        let p = pod(&["z-init", "a-init", "m-init"], &["b", "a", "c"]);
        let st = PodStatus {
            container_statuses: vec![named("c"), named("a"), named("b")],
            init_container_statuses: vec![
                named("stray"),
                named("m-init"),
                named("z-init"),
                named("a-init"),
            ],
            ephemeral_container_statuses: vec![named("dbg2"), named("dbg1")],
            ..Default::default()
        };
        let out = check(&p, st);
        let names = |v: &[ContainerStatus]| v.iter().map(|s| s.name.clone()).collect::<Vec<_>>();
        assert_eq!(names(&out.container_statuses), ["a", "b", "c"]);
        assert_eq!(
            names(&out.init_container_statuses),
            ["z-init", "a-init", "m-init", "stray"]
        );
        assert_eq!(names(&out.ephemeral_container_statuses), ["dbg1", "dbg2"]);
    }

    #[test]
    fn times_are_whole_seconds_and_empty_strings_unset() {
        // Nanosecond times from the wire become whole seconds.
        let st: PodStatus = serde_json::from_value(serde_json::json!({
            "startTime": "2024-05-01T10:00:01.999999999Z",
            "reason": "",
            "conditions": [{"type": "Ready", "status": "True", "message": "",
                "lastTransitionTime": "2024-05-01T10:00:02.5Z"}],
            "containerStatuses": [{"name": "a", "state": {"waiting": {"reason": ""}}}]
        }))
        .unwrap();
        let out = check(&pod(&[], &["a"]), st);
        assert_eq!(
            out.start_time.map(|t| t.to_string()).as_deref(),
            Some("2024-05-01T10:00:01Z")
        );
        let ltt = out.conditions[0].last_transition_time;
        assert_eq!(
            ltt.map(|t| t.to_string()).as_deref(),
            Some("2024-05-01T10:00:02Z")
        );
        assert_eq!(out.reason, None);
        assert_eq!(out.conditions[0].message, None);
        let w = out.container_statuses[0]
            .state
            .as_ref()
            .and_then(|s| s.waiting.clone());
        assert_eq!(w, Some(ContainerStateWaiting::default()));
    }

    fn cond(type_: &str, status: ConditionStatus, ltt: i64) -> PodCondition {
        PodCondition {
            type_: type_.into(),
            status,
            last_transition_time: Some(Time::from_unix_seconds(ltt)),
            last_probe_time: Some(Time::from_unix_seconds(ltt)),
            ..Default::default()
        }
    }

    fn base() -> PodStatus {
        PodStatus {
            phase: Some(PodPhase::Running),
            observed_generation: Some(2),
            conditions: vec![
                cond(POD_READY, ConditionStatus::True, 10),
                cond("example.com/gate", ConditionStatus::True, 10),
            ],
            container_statuses: vec![named("a")],
            ..Default::default()
        }
    }

    /// Whether `base()` and `base()` changed by `edit` compare equal.
    fn equal_after(edit: impl FnOnce(&mut PodStatus)) -> bool {
        let old = base();
        let mut new = base();
        edit(&mut new);
        is_status_equal_by_kubelet(&old, &new)
    }

    #[test]
    fn removing_a_resize_condition_is_a_change() {
        // A finished resize drops PodResizeInProgress; if that counted as "equal" the
        // status would never be sent and the API would show the resize in progress
        // for ever.
        let mut old = base();
        old.conditions.push(cond(
            crate::api::pod::POD_RESIZE_IN_PROGRESS,
            ConditionStatus::True,
            10,
        ));
        assert!(!is_status_equal_by_kubelet(&old, &base()));
        assert!(is_status_equal_by_kubelet(&old, &old.clone()));
    }

    #[test]
    fn equality_ignores_condition_times_and_foreign_conditions() {
        use ConditionStatus::{False, True};
        assert!(equal_after(|_| {}));
        // Only the transition / probe times differ → equal.
        assert!(equal_after(|s| s.conditions[0] = cond(POD_READY, True, 99)));
        // A kubelet-owned condition's status, reason or message differs → not equal.
        assert!(!equal_after(|s| s.conditions[0].status = False));
        assert!(!equal_after(
            |s| s.conditions[0].reason = Some("PodCompleted".into())
        ));
        assert!(!equal_after(|s| s.conditions[0].message = Some("m".into())));
        // A kubelet-owned or shared condition new to `new` → not equal.
        assert!(!equal_after(|s| s.conditions.push(cond(
            POD_CONTAINERS_READY,
            True,
            1
        ))));
        assert!(!equal_after(|s| s.conditions.push(cond(
            POD_DISRUPTION_TARGET,
            True,
            1
        ))));
        // Only a foreign condition differs (or is added / dropped) → equal.
        assert!(equal_after(|s| s.conditions[1].status = False));
        assert!(equal_after(|s| s.conditions.push(cond(
            "example.com/x",
            True,
            1
        ))));
        assert!(equal_after(|s| {
            s.conditions.remove(1);
        }));
        // An empty message equals an unset one.
        assert!(equal_after(
            |s| s.conditions[0].message = Some(String::new())
        ));
        // Any other field counts.
        assert!(!equal_after(|s| s.phase = Some(PodPhase::Succeeded)));
        assert!(!equal_after(|s| s.container_statuses[0].ready = true));
        assert!(!equal_after(|s| s.pod_ip = Some("10.0.0.1".into())));
        assert!(!equal_after(|s| s.observed_generation = Some(3)));
        // ...but not a generation the server did not store, nor unmodelled fields.
        assert!(equal_after(|s| s.observed_generation = None));
        assert!(equal_after(|s| {
            s.extra
                .insert("resourceClaimStatuses".into(), serde_json::json!([]));
        }));
    }
}
