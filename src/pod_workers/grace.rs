//! The effective grace period of a terminating pod (upstream
//! calculateEffectiveGracePeriod): it can only shrink once set, and is at least 1 s.

use crate::api::pod::Pod;

/// Returns the grace period and whether it shortened the current one.
/// `current` is 0 while no grace has been computed yet.
pub fn effective_grace_period(
    current: i64,
    pod: Option<&Pod>,
    grace_override: Option<i64>,
) -> (i64, bool) {
    let mut grace = current;
    let mut overridden = false;
    if let Some(deletion) = pod.and_then(|p| p.metadata.deletion_grace_period_seconds) {
        if grace == 0 || deletion < grace {
            grace = deletion;
            overridden = true;
        }
    }
    if let Some(o) = grace_override {
        if grace == 0 || o < grace {
            grace = o;
            overridden = true;
        }
    }
    if !overridden && grace == 0 {
        if let Some(spec) = pod.and_then(|p| p.spec.termination_grace_period_seconds) {
            grace = spec;
        }
    }
    let grace = grace.max(1);
    (grace, current != 0 && current != grace)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(deletion: Option<i64>, spec: Option<i64>) -> Pod {
        let mut pod = Pod::default();
        pod.metadata.deletion_grace_period_seconds = deletion;
        pod.spec.termination_grace_period_seconds = spec;
        pod
    }

    #[test]
    fn grace_rules() {
        // (name, current, pod, override, expected grace, shortened)
        let cases = [
            (
                "spec grace first time",
                0,
                pod(None, Some(30)),
                None,
                30,
                false,
            ),
            (
                "deletion grace wins",
                0,
                pod(Some(10), Some(30)),
                None,
                10,
                false,
            ),
            (
                "B7 shorter deletion grace shortens",
                30,
                pod(Some(5), Some(30)),
                None,
                5,
                true,
            ),
            (
                "B7 longer deletion grace is ignored",
                5,
                pod(Some(20), Some(30)),
                None,
                5,
                false,
            ),
            (
                "B8 deletion grace 0 floors at 1",
                0,
                pod(Some(0), Some(30)),
                None,
                1,
                false,
            ),
            (
                "B8 no spec grace, no override: 1",
                0,
                pod(None, None),
                None,
                1,
                false,
            ),
            (
                "B8 kill override 0 floors at 1",
                0,
                pod(None, Some(30)),
                Some(0),
                1,
                false,
            ),
            (
                "override below current",
                30,
                pod(None, Some(30)),
                Some(3),
                3,
                true,
            ),
        ];
        for (name, current, pod, grace_override, want, shortened) in cases {
            assert_eq!(
                effective_grace_period(current, Some(&pod), grace_override),
                (want, shortened),
                "{name}"
            );
        }
        assert_eq!(effective_grace_period(0, None, None), (1, false));
    }
}
