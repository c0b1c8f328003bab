//! Table tests for the image GC decisions: records, pressure and eviction order.

use super::*;

fn at(secs: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(1_000_000 + secs)
}

fn image(id: &str, size: u64) -> ListedImage {
    ListedImage {
        id: id.into(),
        names: vec![format!("registry/{id}:1")],
        size,
        pinned: false,
    }
}

fn used(refs: &[&str]) -> HashSet<String> {
    refs.iter().map(|s| s.to_string()).collect()
}

fn policy(min_age_secs: u64) -> ImageGcPolicy {
    ImageGcPolicy {
        min_age: Duration::from_secs(min_age_secs),
        ..Default::default()
    }
}

fn order(
    records: &ImageRecords,
    in_use: &HashSet<String>,
    policy: &ImageGcPolicy,
    now: SystemTime,
) -> Vec<String> {
    eviction_order(records, in_use, policy, now)
        .into_iter()
        .map(|(id, _)| id.to_owned())
        .collect()
}

#[test]
fn first_run_images_count_as_old_later_ones_get_now() {
    let mut records = ImageRecords::default();
    records.observe(&[image("a", 1)], &used(&[]), at(0));
    assert_eq!(records.get("a").unwrap().first_seen, UNIX_EPOCH);
    records.observe(&[image("a", 1), image("b", 2)], &used(&[]), at(10));
    assert_eq!(records.get("a").unwrap().first_seen, UNIX_EPOCH);
    assert_eq!(records.get("b").unwrap().first_seen, at(10));
    assert_eq!(records.get("b").unwrap().size, 2);
    // Vanished images are forgotten.
    records.observe(&[image("b", 2)], &used(&[]), at(20));
    assert!(records.get("a").is_none());
}

#[test]
fn use_is_matched_by_id_tag_or_digest() {
    let mut records = ImageRecords::default();
    let mut digest = image("c", 1);
    digest.names = vec!["registry/c@sha256:abc".into()];
    let images = [image("a", 1), image("b", 1), digest, image("d", 1)];
    let in_use = records.observe(
        &images,
        &used(&["a", "registry/b:1", "registry/c@sha256:abc"]),
        at(5),
    );
    let mut ids: Vec<&str> = in_use.iter().map(String::as_str).collect();
    ids.sort();
    assert_eq!(ids, ["a", "b", "c"]);
    assert_eq!(records.get("a").unwrap().last_used, Some(at(5)));
    assert_eq!(records.get("d").unwrap().last_used, None);
}

#[test]
fn eviction_order_is_least_recently_used_first() {
    let mut records = ImageRecords::default();
    let all = [
        image("never", 1),
        image("early", 1),
        image("late", 1),
        image("busy", 1),
    ];
    records.observe(&all, &used(&[]), at(0));
    records.observe(&all, &used(&["early"]), at(100));
    records.observe(&all, &used(&["late"]), at(200));
    let in_use = records.observe(&all, &used(&["busy"]), at(300));
    assert_eq!(
        order(&records, &in_use, &policy(120), at(300)),
        ["never", "early", "late"]
    );
}

#[test]
fn ties_break_by_first_seen_then_id() {
    let mut records = ImageRecords::default();
    records.observe(&[image("z-old", 1)], &used(&[]), at(0));
    let later = [image("z-old", 1), image("b-new", 1), image("a-new", 1)];
    records.observe(&later, &used(&[]), at(10));
    assert_eq!(
        order(&records, &HashSet::new(), &policy(0), at(500)),
        ["z-old", "a-new", "b-new"]
    );
}

#[test]
fn in_use_pinned_and_young_images_are_never_candidates() {
    let mut records = ImageRecords::default();
    records.observe(&[image("old", 1)], &used(&[]), at(0));
    let mut pause = image("pause", 1);
    pause.pinned = true;
    let all = [image("old", 1), pause, image("used", 1), image("young", 1)];
    // "used" was used once and is no longer; still in use in the final listing below.
    let in_use = records.observe(&all, &used(&["used"]), at(60));
    assert_eq!(order(&records, &in_use, &policy(120), at(100)), ["old"]);
    // Old enough two minutes after it was first seen.
    assert_eq!(
        order(&records, &in_use, &policy(120), at(180)),
        ["old", "young"]
    );
    // Once nothing uses it, it is a candidate, after the ones never used.
    let in_use = records.observe(&all, &used(&[]), at(200));
    assert_eq!(
        order(&records, &in_use, &policy(120), at(200)),
        ["old", "young", "used"]
    );
}

#[test]
fn pressure_thresholds() {
    let p = ImageGcPolicy::default();
    let stats = |capacity, available| FsStats {
        capacity_bytes: capacity,
        available_bytes: available,
    };
    // 84 % used: below the high threshold.
    assert_eq!(
        pressure(stats(1000, 160), &p),
        Some(Pressure {
            usage_percent: 84,
            to_free: 0
        })
    );
    // 85 % used: free down to 80 % (200 bytes available).
    assert_eq!(
        pressure(stats(1000, 150), &p),
        Some(Pressure {
            usage_percent: 85,
            to_free: 50
        })
    );
    // Full disk.
    assert_eq!(
        pressure(stats(1000, 0), &p),
        Some(Pressure {
            usage_percent: 100,
            to_free: 200
        })
    );
    // More available than capacity is clamped.
    assert_eq!(
        pressure(stats(1000, 5000), &p),
        Some(Pressure {
            usage_percent: 0,
            to_free: 0
        })
    );
    assert_eq!(pressure(stats(0, 0), &p), None);
    // Large filesystems do not overflow.
    let big = u64::MAX / 2;
    assert_eq!(
        pressure(stats(big, 0), &p).map(|x| x.usage_percent),
        Some(100)
    );
}

#[test]
fn policy_validation() {
    assert!(ImageGcPolicy::default().validate().is_ok());
    let bad = |high, low| ImageGcPolicy {
        high_threshold_percent: high,
        low_threshold_percent: low,
        ..Default::default()
    };
    assert!(bad(80, 85).validate().is_err());
    assert!(bad(101, 80).validate().is_err());
    assert!(bad(100, 100).validate().is_ok());
}

#[test]
fn statvfs_measures_a_real_filesystem() {
    let stats = statvfs_stats(Path::new("/")).unwrap();
    assert!(stats.capacity_bytes > 0);
    assert!(stats.available_bytes <= stats.capacity_bytes);
}

#[test]
fn sandbox_image_comes_from_containerds_verbose_config() {
    let info = HashMap::from([(
        "config".to_owned(),
        r#"{"containerd":{},"sandboxImage":"registry.k8s.io/pause:3.9"}"#.to_owned(),
    )]);
    assert_eq!(
        sandbox_image_from_info(&info).as_deref(),
        Some("registry.k8s.io/pause:3.9")
    );
    assert_eq!(sandbox_image_from_info(&HashMap::new()), None);
    let broken = HashMap::from([("config".to_owned(), "not json".to_owned())]);
    assert_eq!(sandbox_image_from_info(&broken), None);
}

#[test]
fn references_are_normalized_like_runtimes_list_them() {
    let cases = [
        ("pause", "docker.io/library/pause:latest"),
        ("pause:3.9", "docker.io/library/pause:3.9"),
        ("rancher/pause:3.6", "docker.io/rancher/pause:3.6"),
        ("registry.k8s.io/pause:3.9", "registry.k8s.io/pause:3.9"),
        ("localhost/litelet/pause:1.0", "localhost/litelet/pause:1.0"),
        ("host:5000/pause", "host:5000/pause:latest"),
        ("busybox@sha256:abc", "docker.io/library/busybox@sha256:abc"),
    ];
    for (reference, want) in cases {
        assert_eq!(normalize_reference(reference), want, "{reference}");
    }
}

#[test]
fn images_unused_past_the_maximum_age_expire_once_litelet_watched_that_long() {
    let hour = 3600;
    let policy = ImageGcPolicy {
        max_age: Duration::from_secs(hour),
        ..policy(120)
    };
    let mut records = ImageRecords::default();
    let images = [
        image("old", 1),
        image("busy", 1),
        image("fresh", 1),
        image("gone-by", 1),
    ];
    // At start: every image is old news; "busy" and "gone-by" are in use.
    records.observe(&images, &used(&["busy", "gone-by"]), at(0));
    // "gone-by" stops being used at 10 s; "fresh" is pulled anew at 1 h 50 min.
    records.observe(&images, &used(&["busy"]), at(10));
    records.forget("fresh");
    records.observe(&images, &used(&["busy"]), at(hour + 50 * 60));
    let expired = |records: &ImageRecords, in_use: &[&str], now| {
        expired_images(records, &used(in_use), &policy, now)
            .into_iter()
            .map(|(id, _)| id.to_owned())
            .collect::<Vec<_>>()
    };
    // Litelet has not watched for an hour yet: nothing expires.
    assert!(expired(&records, &["busy"], at(hour)).is_empty());
    // After an hour of watching: the never-used image and the one unused for an
    // hour go; the image in use and the one seen for the first time stay.
    assert_eq!(
        expired(&records, &["busy"], at(hour + 11)),
        ["old", "gone-by"]
    );
    // "fresh" was first seen 10 minutes ago, never used: younger than min_age it
    // would be kept, older it goes (an unused image counts as used long ago).
    assert_eq!(
        expired(&records, &["busy"], at(hour + 50 * 60 + 60)),
        ["old", "gone-by"]
    );
    assert_eq!(
        expired(&records, &["busy"], at(hour + 50 * 60 + 121)),
        ["old", "fresh", "gone-by"],
        "in eviction order: never used first"
    );
    // Off when zero.
    let off = ImageGcPolicy {
        max_age: Duration::ZERO,
        ..policy.clone()
    };
    assert!(expired_images(&records, &used(&["busy"]), &off, at(10 * hour)).is_empty());
}

#[test]
fn a_maximum_age_must_exceed_the_minimum_age() {
    let with = |max: u64| ImageGcPolicy {
        max_age: Duration::from_secs(max),
        ..policy(120)
    };
    assert!(with(0).validate().is_ok());
    assert!(with(121).validate().is_ok());
    for bad in [60, 120] {
        let err = with(bad).validate().unwrap_err().to_string();
        assert!(
            err.contains("imageMaximumGCAge")
                && err.contains("must be greater than imageMinimumGCAge"),
            "{err}"
        );
    }
}
