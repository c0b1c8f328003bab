//! Table tests of the snapshot merge: one base pod set, named cases that change
//! something, and the updates expected, all routed through `check`.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::*;
use crate::api::meta::ObjectMeta;
use crate::api::pod::{Container, PodPhase, PodSpec, PodStatus};

fn pod(name: &str, uid: &str) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("default".into()),
            uid: Some(uid.into()),
            resource_version: Some("1".into()),
            ..ObjectMeta::default()
        },
        spec: PodSpec {
            node_name: Some("node-1".into()),
            containers: vec![Container {
                name: "c".into(),
                image: Some("busybox".into()),
                ..Container::default()
            }],
            ..PodSpec::default()
        },
        ..Pod::default()
    }
}

/// The tests build plain pods; a source shares each one it is handed.
trait ApplyPods {
    fn apply_pods<'a>(
        &mut self,
        pods: impl IntoIterator<Item = &'a Pod>,
        now: SystemTime,
    ) -> Vec<PodUpdate>;
}

impl ApplyPods for SourcePods {
    fn apply_pods<'a>(
        &mut self,
        pods: impl IntoIterator<Item = &'a Pod>,
        now: SystemTime,
    ) -> Vec<PodUpdate> {
        let pods: Vec<Arc<Pod>> = pods.into_iter().cloned().map(Arc::new).collect();
        self.apply_snapshot(&pods, now)
    }
}

fn t0() -> SystemTime {
    UNIX_EPOCH + Duration::new(1_700_000_000, 120_000_000)
}

/// Bumps the resourceVersion, as the API server does on every write.
fn bumped(mut p: Pod) -> Pod {
    let rv: u64 = p
        .metadata
        .resource_version
        .as_deref()
        .unwrap_or("1")
        .parse()
        .unwrap();
    p.metadata.resource_version = Some((rv + 1).to_string());
    p
}

type Want = &'static [(PodOperation, &'static [&'static str])];

fn summary(updates: &[PodUpdate]) -> Vec<(PodOperation, Vec<String>)> {
    updates
        .iter()
        .map(|u| (u.op, u.pods.iter().map(|p| p.name().to_owned()).collect()))
        .collect()
}

/// Applies `before` (first snapshot) then `after`; compares the second result.
fn check(name: &str, before: &[Pod], after: &[Pod], want: Want) -> SourcePods {
    let mut s = SourcePods::new("api");
    s.apply_pods(before, t0());
    let got = s.apply_pods(after, t0() + Duration::from_secs(5));
    let want: Vec<(PodOperation, Vec<String>)> = want
        .iter()
        .map(|(op, names)| (*op, names.iter().map(|n| n.to_string()).collect()))
        .collect();
    assert_eq!(summary(&got), want, "case {name}");
    for u in &got {
        assert_eq!(u.source, "api", "case {name}");
        for p in &u.pods {
            assert_eq!(p.config_source(), Some("api"), "case {name}");
        }
    }
    s
}

#[test]
fn classification_table() {
    use PodOperation::*;
    let a = pod("a", "uid-a");
    let b = pod("b", "uid-b");
    let base = [a.clone(), b.clone()];

    let mut spec = bumped(a.clone());
    spec.spec.containers[0].image = Some("busybox:2".into());
    let mut labels = bumped(a.clone());
    labels.metadata.labels.insert("app".into(), "x".into());
    let mut ann = bumped(a.clone());
    ann.metadata.annotations.insert("team".into(), "y".into());
    let mut local_ann = bumped(a.clone());
    local_ann
        .metadata
        .annotations
        .insert(CONFIG_SEEN_ANNOTATION_KEY.into(), "whenever".into());
    let mut deleting = bumped(a.clone());
    deleting.metadata.deletion_timestamp = Some(Time::from_unix_seconds(1_700_000_030));
    deleting.metadata.deletion_grace_period_seconds = Some(30);
    let mut status = bumped(a.clone());
    status.status = PodStatus {
        phase: Some(PodPhase::Running),
        ..PodStatus::default()
    };
    let mut spec_and_status = spec.clone();
    spec_and_status.status = status.status.clone();
    let mut owners_only = bumped(a.clone());
    owners_only.metadata.owner_references = vec![Default::default()];
    let same_rv_other_content = {
        let mut p = a.clone();
        p.spec.containers[0].image = Some("ignored-because-rv-equal".into());
        p
    };
    let c = pod("c", "uid-c");
    let recreated = pod("a", "uid-a2");
    let dup_name = pod("a", "uid-dup");

    let cases: Vec<(&str, Vec<Pod>, Want)> = vec![
        ("unchanged", base.to_vec(), &[]),
        (
            "spec change is an update",
            vec![spec, b.clone()],
            &[(Update, &["a"])],
        ),
        (
            "label change is an update",
            vec![labels, b.clone()],
            &[(Update, &["a"])],
        ),
        (
            "annotation change is an update",
            vec![ann, b.clone()],
            &[(Update, &["a"])],
        ),
        (
            "local annotation only is nothing",
            vec![local_ann, b.clone()],
            &[],
        ),
        (
            "deletion timestamp is a delete",
            vec![deleting, b.clone()],
            &[(Delete, &["a"])],
        ),
        (
            "status only is a reconcile",
            vec![status, b.clone()],
            &[(Reconcile, &["a"])],
        ),
        (
            "spec and status is only an update",
            vec![spec_and_status, b.clone()],
            &[(Update, &["a"])],
        ),
        (
            "owner refs only is nothing",
            vec![owners_only, b.clone()],
            &[],
        ),
        (
            "same resourceVersion is the same object",
            vec![same_rv_other_content, b.clone()],
            &[],
        ),
        (
            "new uid is an add",
            vec![a.clone(), b.clone(), c.clone()],
            &[(Add, &["c"])],
        ),
        (
            "missing uid is a remove",
            vec![a.clone()],
            &[(Remove, &["b"])],
        ),
        (
            "recreated under a new uid",
            vec![recreated, b.clone()],
            &[(Remove, &["a"]), (Add, &["a"])],
        ),
        (
            "duplicate name: first wins",
            vec![a.clone(), b.clone(), dup_name],
            &[],
        ),
        ("everything goes", vec![], &[(Remove, &["a", "b"])]),
    ];
    for (name, after, want) in cases {
        check(name, &base, &after, want);
    }
}

#[test]
fn upstream_order_of_a_mixed_snapshot() {
    use PodOperation::*;
    let (a, b, c, d) = (pod("a", "1"), pod("b", "2"), pod("c", "3"), pod("d", "4"));
    let mut b2 = bumped(b.clone());
    b2.spec.active_deadline_seconds = Some(5);
    let mut c2 = bumped(c.clone());
    c2.metadata.deletion_timestamp = Some(Time::from_unix_seconds(1));
    let mut d2 = bumped(d.clone());
    d2.status.message = Some("m".into());
    let e = pod("e", "5");
    check(
        "mixed",
        &[a, b, c, d],
        &[e, d2, c2, b2],
        &[
            (Remove, &["a"]),
            (Add, &["e"]),
            (Update, &["b"]),
            (Delete, &["c"]),
            (Reconcile, &["d"]),
        ],
    );
}

#[test]
fn first_snapshot_always_says_ready() {
    let mut s = SourcePods::new("file");
    let got = s.apply_pods(&[], t0());
    assert_eq!(summary(&got), vec![(PodOperation::Add, vec![])]);
    assert_eq!(got[0].source, "file");
    // Not again.
    assert!(s.apply_pods(&[], t0()).is_empty());

    // A first snapshot with pods sends them as one Add (no extra empty one).
    let mut s = SourcePods::new("api");
    let got = s.apply_pods(&[pod("a", "1")], t0());
    assert_eq!(
        summary(&got),
        vec![(PodOperation::Add, vec!["a".to_string()])]
    );

    // A first snapshot with only a status change... cannot exist, but with only a
    // reconcile-worthy pod the ready marker comes before the reconcile.
    let mut s = SourcePods::new("api");
    s.seen_snapshot = false;
    s.pods
        .insert("1".into(), s.first_seen(&pod("a", "1"), t0()));
    let mut changed = bumped(pod("a", "1"));
    changed.status.message = Some("x".into());
    let got = s.apply_pods(&[changed], t0());
    assert_eq!(
        summary(&got),
        vec![
            (PodOperation::Add, vec![]),
            (PodOperation::Reconcile, vec!["a".to_string()])
        ]
    );
}

#[test]
fn seen_annotation_is_first_seen_time_and_kept() {
    let mut s = SourcePods::new("api");
    let a = pod("a", "uid-a");
    let added = s.apply_pods(std::slice::from_ref(&a), t0());
    let seen = added[0].pods[0]
        .metadata
        .annotation(CONFIG_SEEN_ANNOTATION_KEY)
        .unwrap()
        .to_owned();
    assert_eq!(seen, "2023-11-14T22:13:20.12Z");

    let mut later = bumped(a);
    later.metadata.labels.insert("x".into(), "y".into());
    let got = s.apply_pods(&[later], t0() + Duration::from_secs(60));
    let p = &got[0].pods[0];
    assert_eq!(
        p.metadata.annotation(CONFIG_SEEN_ANNOTATION_KEY),
        Some(seen.as_str())
    );
    assert_eq!(p.metadata.label("x"), Some("y"));
    // The kept copy is the newest object.
    assert_eq!(
        s.get("uid-a").unwrap().metadata.resource_version.as_deref(),
        Some("2")
    );
}

#[test]
fn kept_copy_follows_metadata_only_changes() {
    let mut s = SourcePods::new("api");
    let a = pod("a", "uid-a");
    s.apply_pods(std::slice::from_ref(&a), t0());
    let mut owners = bumped(a);
    owners.metadata.owner_references = vec![Default::default()];
    assert!(s.apply_pods(std::slice::from_ref(&owners), t0()).is_empty());
    let kept = s.get("uid-a").unwrap();
    assert_eq!(kept.metadata.owner_references.len(), 1);
    assert_eq!(kept.config_source(), Some("api"));
    assert!(kept
        .metadata
        .annotation(CONFIG_SEEN_ANNOTATION_KEY)
        .is_some());
}

#[test]
fn pods_without_uid_are_skipped() {
    let mut s = SourcePods::new("api");
    let mut p = pod("a", "");
    p.metadata.uid = None;
    let got = s.apply_pods(&[p], t0());
    assert_eq!(summary(&got), vec![(PodOperation::Add, vec![])]);
    assert!(s.is_empty());
}

#[test]
fn seen_timestamp_format() {
    assert_eq!(
        seen_timestamp(UNIX_EPOCH + Duration::from_secs(1_700_000_000)),
        "2023-11-14T22:13:20Z"
    );
    assert_eq!(
        seen_timestamp(UNIX_EPOCH + Duration::new(1_700_000_000, 1)),
        "2023-11-14T22:13:20.000000001Z"
    );
}

/// One change a watch can bring: (event kind, pod slot 0..6, name slot 0..4, phase flip).
type Event = (u8, usize, usize, bool);

proptest::proptest! {
    /// Watch events applied one at a time give exactly what re-diffing the whole pod
    /// set gives, duplicate names (few names, more pods) included.
    #[test]
    fn one_pod_at_a_time_equals_the_whole_snapshot(
        events in proptest::collection::vec((0u8..3, 0usize..6, 0usize..4, proptest::bool::ANY), 1..60)
    ) {
        let mut all: BTreeMap<String, Arc<Pod>> = BTreeMap::new();
        let mut incremental = SourcePods::new("api");
        let mut full = SourcePods::new("api");
        incremental.apply_snapshot(all.values(), t0());
        full.apply_snapshot(all.values(), t0());
        let mut version = 10u64;
        for (i, (kind, slot, name, flip)) in events.iter().copied().enumerate() {
            let (kind, slot, name, flip): Event = (kind, slot, name, flip);
            let uid = format!("uid-{slot}");
            version += 1;
            match kind {
                // Add (or replace) the pod in this slot.
                0 => {
                    let mut p = pod(&format!("p{name}"), &uid);
                    if let Some(old) = all.get(&uid) {
                        // Names are immutable: a modification keeps the old name.
                        p.metadata.name = old.metadata.name.clone();
                    }
                    p.metadata.resource_version = Some(version.to_string());
                    if flip {
                        p.status.phase = Some(PodPhase::Running);
                    }
                    all.insert(uid.clone(), Arc::new(p));
                }
                // Change the spec of an existing pod.
                1 => {
                    if let Some(p) = all.get_mut(&uid).map(Arc::make_mut) {
                        p.metadata.resource_version = Some(version.to_string());
                        p.spec.active_deadline_seconds = Some(i as i64);
                    }
                }
                // Delete it.
                _ => {
                    all.remove(&uid);
                }
            }
            let now = t0() + Duration::from_secs(i as u64);
            let a = summary(&incremental.apply_one(&all, &uid, now));
            let b = summary(&full.apply_snapshot(all.values(), now));
            proptest::prop_assert_eq!(&a, &b, "event {} {:?}", i, (kind, slot, name, flip));
            let kept = |s: &SourcePods| s.pods().map(|p| (p.uid().to_owned(), p.name().to_owned())).collect::<Vec<_>>();
            proptest::prop_assert_eq!(kept(&incremental), kept(&full));
        }
    }
}

#[test]
fn the_kept_pod_is_the_one_sent_and_one_carrying_the_local_annotations_is_not_copied() {
    let mut s = SourcePods::new("api");
    let v1 = Arc::new(pod("a", "uid-a"));
    let got = s.apply_snapshot([&v1], t0());
    let sent = Arc::clone(&got[0].pods[0]);
    assert!(Arc::ptr_eq(&sent, s.get("uid-a").unwrap()), "kept = sent");
    assert!(
        !Arc::ptr_eq(&sent, &v1),
        "the local annotations make a new version"
    );
    // Unchanged (same resourceVersion): nothing sent, the kept version stays.
    assert!(s.apply_snapshot([&v1], t0()).is_empty());
    assert!(Arc::ptr_eq(&sent, s.get("uid-a").unwrap()));
    // A newer version that already carries them (the API source keeps what it
    // sent) is kept and sent as it is.
    let mut v2 = Pod::clone(&sent);
    v2.metadata.resource_version = Some("2".into());
    v2.spec.active_deadline_seconds = Some(5);
    let v2 = Arc::new(v2);
    let got = s.apply_snapshot([&v2], t0());
    assert_eq!(
        summary(&got),
        vec![(PodOperation::Update, vec!["a".to_string()])]
    );
    assert!(Arc::ptr_eq(&got[0].pods[0], &v2));
    assert!(Arc::ptr_eq(s.get("uid-a").unwrap(), &v2));
}
