//! Table tests of the update plan: a base (a known pod, not terminating, receiving a
//! sync) and named cases that each change something, all through one `check`.

use super::*;
use crate::api::meta::Time;
use crate::api::pod::PodPhase;

struct Case {
    name: &'static str,
    record: RecordView,
    update_type: UpdateType,
    runtime_pod: bool,
    deleted: bool,
    phase: Option<PodPhase>,
    evict: bool,
    want: UpdatePlan,
}

const BASE: Case = Case {
    name: "",
    record: RecordView {
        first_time: false,
        termination_requested: false,
        terminated: false,
        finished: false,
    },
    update_type: UpdateType::Sync,
    runtime_pod: false,
    deleted: false,
    phase: None,
    evict: false,
    want: UpdatePlan::Accept {
        terminate: None,
        kill: KillStep::Discard,
    },
};

const TERMINATING: RecordView = RecordView {
    first_time: false,
    termination_requested: true,
    terminated: false,
    finished: false,
};

const TERMINATED: RecordView = RecordView {
    terminated: true,
    ..TERMINATING
};

fn check(case: &Case) {
    let mut pod = Pod::default();
    if case.deleted {
        pod.metadata.deletion_timestamp = Some(Time::default());
    }
    pod.status.phase = case.phase.clone();
    let update = UpdateView {
        update_type: case.update_type,
        runtime_pod: case.runtime_pod,
        pod: Some(&pod),
        evict: case.evict,
    };
    assert_eq!(
        plan_update(&case.record, &update),
        case.want,
        "{}",
        case.name
    );
}

fn terminate(deleted: bool, evicted: Option<bool>, kill: KillStep) -> UpdatePlan {
    UpdatePlan::Accept {
        terminate: Some(Termination { deleted, evicted }),
        kill,
    }
}

#[test]
fn update_plans() {
    let cases = [
        Case {
            name: "a sync of a running pod is recorded and drops kill options",
            ..BASE
        },
        Case {
            name: "a create while terminating requests a restart",
            record: TERMINATING,
            update_type: UpdateType::Create,
            want: UpdatePlan::RequestRestart,
            ..BASE
        },
        Case {
            name: "a create that made the record is no restart",
            record: RecordView {
                first_time: true,
                ..TERMINATING
            },
            update_type: UpdateType::Create,
            want: UpdatePlan::Accept {
                terminate: None,
                kill: KillStep::Merge,
            },
            ..BASE
        },
        Case {
            name: "a finished pod ignores updates",
            record: RecordView {
                finished: true,
                ..TERMINATED
            },
            update_type: UpdateType::Kill,
            want: UpdatePlan::Ignore,
            ..BASE
        },
        Case {
            name: "a deleted pod starts terminating as deleted",
            deleted: true,
            want: terminate(true, None, KillStep::Merge),
            ..BASE
        },
        Case {
            name: "a terminal pod starts terminating, not deleted",
            phase: Some(PodPhase::Succeeded),
            want: terminate(false, None, KillStep::Merge),
            ..BASE
        },
        Case {
            name: "a kill of a running pod records whether it evicts",
            update_type: UpdateType::Kill,
            evict: true,
            want: terminate(false, Some(true), KillStep::Merge),
            ..BASE
        },
        Case {
            name: "a kill of a terminal pod leaves evicted alone",
            update_type: UpdateType::Kill,
            phase: Some(PodPhase::Failed),
            evict: true,
            want: terminate(false, None, KillStep::Merge),
            ..BASE
        },
        Case {
            name: "a kill of a deleted pod leaves evicted alone",
            update_type: UpdateType::Kill,
            deleted: true,
            evict: true,
            want: terminate(true, None, KillStep::Merge),
            ..BASE
        },
        Case {
            name: "a runtime pod's kill terminates it as deleted",
            update_type: UpdateType::Kill,
            runtime_pod: true,
            want: terminate(true, None, KillStep::Merge),
            ..BASE
        },
        Case {
            name: "an update while terminating merges its kill options",
            record: TERMINATING,
            update_type: UpdateType::Kill,
            want: UpdatePlan::Accept {
                terminate: None,
                kill: KillStep::Merge,
            },
            ..BASE
        },
        Case {
            name: "an update of a terminated pod drops its kill options",
            record: TERMINATED,
            update_type: UpdateType::Kill,
            want: UpdatePlan::Accept {
                terminate: None,
                kill: KillStep::Discard,
            },
            ..BASE
        },
        Case {
            name: "a runtime pod's kill after termination is dropped",
            record: TERMINATED,
            update_type: UpdateType::Kill,
            runtime_pod: true,
            want: UpdatePlan::Accept {
                terminate: None,
                kill: KillStep::DropUpdate,
            },
            ..BASE
        },
    ];
    for case in &cases {
        check(case);
    }
}
