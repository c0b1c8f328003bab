//! Table tests of the housekeeping plan: a base world (one desired running pod with a
//! worker) and named cases that each change something, all through one `check`.

use std::collections::{HashMap, HashSet};

use super::*;
use crate::api::meta::Time;
use crate::api::pod::PodPhase;

fn pod(uid: &str) -> Pod {
    let mut pod = Pod::default();
    pod.metadata.name = Some(format!("pod-{uid}"));
    pod.metadata.namespace = Some("default".into());
    pod.metadata.uid = Some(uid.into());
    pod
}

fn worker(state: WorkType) -> PodWorkerSync {
    PodWorkerSync {
        state,
        orphan: false,
        has_config: true,
        is_static: false,
    }
}

fn running(uid: &str) -> RunningPod {
    RunningPod {
        uid: uid.into(),
        name: format!("pod-{uid}"),
        namespace: "default".into(),
        ..Default::default()
    }
}

fn mirror(name: &str) -> MirrorRef {
    MirrorRef {
        fullname: format!("{name}_default"),
        namespace: "default".into(),
        name: name.into(),
        uid: format!("mirror-{name}"),
    }
}

/// The world a case starts from: pod "a" desired, active, worked on and running.
struct World {
    desired: Vec<Pod>,
    inactive: HashSet<String>,
    working: HashMap<String, PodWorkerSync>,
    running: Vec<RunningPod>,
    mirrors: Vec<(MirrorRef, bool)>,
    provisional: bool,
}

fn base() -> World {
    World {
        desired: vec![pod("a")],
        inactive: HashSet::new(),
        working: HashMap::from([("a".to_owned(), worker(WorkType::Sync))]),
        running: vec![running("a")],
        mirrors: Vec::new(),
        provisional: false,
    }
}

/// What a case expects, in UIDs and names.
#[derive(Default)]
struct Expect {
    start: Vec<&'static str>,
    finish: Vec<&'static str>,
    kill: Vec<&'static str>,
    mirrors: Vec<&'static str>,
    keep: Vec<&'static str>,
    remove_orphans: bool,
}

fn check(name: &str, world: World, want: Expect) {
    let desired: Vec<&Pod> = world.desired.iter().collect();
    let active: Vec<&Pod> = desired
        .iter()
        .copied()
        .filter(|p| !world.inactive.contains(p.uid()))
        .collect();
    let got = plan(&PlanInputs {
        desired: &desired,
        active: &active,
        working: &world.working,
        running: &world.running,
        orphaned_mirrors: &world.mirrors,
        provisional: world.provisional,
    });
    let sorted = |mut v: Vec<String>| {
        v.sort();
        v
    };
    let strings = |v: &[&str]| sorted(v.iter().map(|s| s.to_string()).collect());
    assert_eq!(
        sorted(got.start.clone()),
        strings(&want.start),
        "{name}: start"
    );
    assert_eq!(
        sorted(got.finish.clone()),
        strings(&want.finish),
        "{name}: finish"
    );
    let killed: Vec<String> = got.kill_runtime.iter().map(|p| p.uid.clone()).collect();
    assert_eq!(sorted(killed), strings(&want.kill), "{name}: kill");
    let mirrors: Vec<String> = got
        .cleanup
        .delete_mirrors
        .iter()
        .map(|m| m.name.clone())
        .collect();
    assert_eq!(sorted(mirrors), strings(&want.mirrors), "{name}: mirrors");
    let keep: Vec<String> = got.cleanup.keep.iter().cloned().collect();
    assert_eq!(sorted(keep), strings(&want.keep), "{name}: keep");
    assert_eq!(
        got.cleanup.remove_orphans, want.remove_orphans,
        "{name}: remove orphans"
    );
}

#[test]
fn housekeeping_plan_table() {
    check(
        "steady state: nothing to do",
        base(),
        Expect {
            keep: vec!["a"],
            remove_orphans: true,
            ..Default::default()
        },
    );
    let mut w = base();
    w.working.clear();
    check(
        "a desired pod no worker knows is started again",
        w,
        Expect {
            start: vec!["a"],
            keep: vec!["a"],
            remove_orphans: true,
            ..Default::default()
        },
    );
    let mut w = base();
    w.working.clear();
    w.inactive.insert("a".into());
    check(
        "an inactive pod is not started again",
        w,
        Expect {
            keep: vec!["a"],
            remove_orphans: true,
            ..Default::default()
        },
    );
    let mut w = base();
    w.working.clear();
    w.running.clear();
    w.inactive.insert("a".into());
    w.desired[0].metadata.deletion_timestamp = Some(Time::now());
    w.desired[0].status.phase = Some(PodPhase::Succeeded);
    check(
        "a deleted terminal pod nobody runs is finished",
        w,
        Expect {
            finish: vec!["a"],
            keep: vec!["a"],
            remove_orphans: true,
            ..Default::default()
        },
    );
    let mut w = base();
    w.working.clear();
    w.inactive.insert("a".into());
    w.desired[0].metadata.deletion_timestamp = Some(Time::now());
    w.desired[0].status.phase = Some(PodPhase::Failed);
    check(
        "a deleted terminal pod still in the runtime waits",
        w,
        Expect {
            keep: vec!["a"],
            remove_orphans: true,
            ..Default::default()
        },
    );
    let mut w = base();
    w.running.push(running("orphan"));
    check(
        "a runtime pod no source wants is killed",
        w,
        Expect {
            kill: vec!["orphan"],
            keep: vec!["a"],
            remove_orphans: true,
            ..Default::default()
        },
    );
    let mut w = base();
    w.running.push(running("orphan"));
    w.working
        .insert("orphan".into(), worker(WorkType::Terminating));
    check(
        "a runtime pod a worker terminates is left to it and kept",
        w,
        Expect {
            keep: vec!["a", "orphan"],
            remove_orphans: true,
            ..Default::default()
        },
    );
    let mut w = base();
    w.running.push(running("orphan"));
    w.working
        .insert("done".into(), worker(WorkType::Terminated));
    check(
        "a terminated worker's pod is not kept",
        w,
        Expect {
            kill: vec!["orphan"],
            keep: vec!["a"],
            remove_orphans: true,
            ..Default::default()
        },
    );
    let mut w = base();
    w.running.push(running("orphan"));
    w.provisional = true;
    check(
        "while a source is provisional no orphan is killed or removed",
        w,
        Expect {
            keep: vec!["a"],
            remove_orphans: false,
            ..Default::default()
        },
    );
    let mut w = base();
    w.mirrors = vec![(mirror("gone"), false), (mirror("stopping"), true)];
    check(
        "orphaned mirror pods are deleted unless their static pod still terminates",
        w,
        Expect {
            mirrors: vec!["gone"],
            keep: vec!["a"],
            remove_orphans: true,
            ..Default::default()
        },
    );
}
