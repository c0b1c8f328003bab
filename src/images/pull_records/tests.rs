//! Tests of the pull records: decisions, the files, crashes and damage.

use super::*;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

fn secret_cred(name: &str, password: &str) -> Credential {
    Credential {
        username: "u".into(),
        password: password.into(),
        source: CredentialSource::Secret {
            namespace: "ns".into(),
            name: name.into(),
            uid: format!("uid-{name}"),
        },
    }
}

/// A runtime image `id` with repo tags or digests `names`.
fn image(id: &str, names: &[&str]) -> RuntimeImage {
    RuntimeImage {
        id: id.into(),
        names: names.iter().map(|n| n.to_string()).collect(),
    }
}

/// Opens the records under `dir` with a runtime holding `images`, expecting no
/// problem.
fn open(dir: &Path, images: &[RuntimeImage]) -> PullRecords {
    let (records, problems) = open_with(dir, images);
    assert!(problems.is_empty(), "{problems:?}");
    records
}

fn open_with(dir: &Path, images: &[RuntimeImage]) -> (PullRecords, Vec<PullRecordsError>) {
    let images = images.to_vec();
    PullRecords::open(dir, &move || Ok(images.clone()))
}

/// The default policy's answer for a pod offering `offered`.
fn default_must_pull(records: &PullRecords, id: &str, repo: &str, offered: &[Credential]) -> bool {
    let pulled = records.get(id, repo);
    must_pull(
        VerificationPolicy::NeverVerifyPreloadedImages,
        false,
        &pulled,
        offered,
        |c| records.digest(c),
    )
}

#[test]
fn verification_decisions() {
    use VerificationPolicy::*;
    let good = secret_cred("good", "right");
    let same_elsewhere = secret_cred("copy", "right");
    let wrong = secret_cred("bad", "wrong");
    let records = PullRecords::in_memory();
    records
        .record("sha256:private", "reg.io/app", Some(&good))
        .unwrap();
    records.record("sha256:public", "reg.io/pub", None).unwrap();
    let private = records.get("sha256:private", "reg.io/app");
    let public = records.get("sha256:public", "reg.io/pub");
    let preloaded = Pulled::Preloaded;
    let unrecorded = Pulled::Unrecorded;
    let node = Credential {
        source: CredentialSource::Node,
        ..wrong.clone()
    };
    let cases = [
        (
            "preloaded image, default policy",
            NeverVerifyPreloadedImages,
            &preloaded,
            vec![],
            false,
        ),
        (
            "preloaded image, always verify",
            AlwaysVerify,
            &preloaded,
            vec![],
            true,
        ),
        (
            "anonymous pull is for everyone",
            NeverVerifyPreloadedImages,
            &public,
            vec![],
            false,
        ),
        (
            "secret pull, pod without credentials",
            NeverVerifyPreloadedImages,
            &private,
            vec![],
            true,
        ),
        (
            "secret pull, pod with the same secret",
            NeverVerifyPreloadedImages,
            &private,
            vec![good.clone()],
            false,
        ),
        (
            "secret pull, same credential in another secret",
            NeverVerifyPreloadedImages,
            &private,
            vec![same_elsewhere],
            false,
        ),
        (
            "secret pull, wrong credential",
            NeverVerifyPreloadedImages,
            &private,
            vec![wrong],
            true,
        ),
        (
            "secret pull, never verify",
            NeverVerify,
            &private,
            vec![],
            false,
        ),
        (
            "node credentials are for every pod",
            AlwaysVerify,
            &private,
            vec![node],
            false,
        ),
        (
            "no record and not preloaded (a lost record, someone else's pull)",
            NeverVerifyPreloadedImages,
            &unrecorded,
            vec![],
            true,
        ),
        (
            "no record and not preloaded, never verify",
            NeverVerify,
            &unrecorded,
            vec![],
            false,
        ),
        (
            "no record, a credential offered: pulled with it",
            NeverVerifyPreloadedImages,
            &unrecorded,
            vec![good.clone()],
            true,
        ),
        (
            "preloaded, always verify even with a credential",
            AlwaysVerify,
            &preloaded,
            vec![good],
            true,
        ),
    ];
    for (name, policy, pulled, offered, want) in cases {
        let digest = |c: &Credential| records.digest(c);
        assert_eq!(
            must_pull(policy, false, pulled, &offered, digest),
            want,
            "{name}"
        );
    }
    // The allowlist exempts what it names, pulled by litelet or not.
    let allow = NeverVerifyAllowlistedImages;
    let digest = |c: &Credential| records.digest(c);
    assert!(
        !must_pull(allow, true, &private, &[], digest),
        "allowlisted"
    );
    assert!(
        must_pull(allow, false, &private, &[], digest),
        "not allowlisted, secret pull"
    );
    assert!(
        must_pull(allow, false, &preloaded, &[], digest),
        "not allowlisted, preloaded"
    );
}

#[test]
fn allowlist_entries_and_matching() {
    for good in [
        "registry.k8s.io/pause",
        "reg.io:5000/team/*",
        "localhost/litelet/busybox",
    ] {
        assert_eq!(check_allowlist_entry(good), Ok(()), "{good}");
    }
    for bad in [
        "busybox",
        "reg.io/app:1",
        "reg.io/app@sha256:ab",
        "reg.io/*/app",
        "*",
        "",
    ] {
        assert!(check_allowlist_entry(bad).is_err(), "{bad}");
    }
    let list = vec![
        "registry.k8s.io/pause".to_owned(),
        "reg.io/team/*".to_owned(),
    ];
    assert!(is_allowlisted(&list, "registry.k8s.io/pause"));
    assert!(!is_allowlisted(&list, "registry.k8s.io/pause2"));
    assert!(is_allowlisted(&list, "reg.io/team/app"));
    assert!(is_allowlisted(&list, "reg.io/team/a/b"));
    assert!(!is_allowlisted(&list, "reg.io/teamwork"));
}

#[test]
fn records_survive_a_restart_and_hold_no_credential() {
    let dir = tempfile::tempdir().unwrap();
    let records = open(dir.path(), &[]);
    records
        .record(
            "sha256:img",
            "reg.io/app",
            Some(&secret_cred("s", "hunter2")),
        )
        .unwrap();
    let text = std::fs::read_to_string(dir.path().join("image_manager/pulled.json")).unwrap();
    assert!(!text.contains("hunter2"), "{text}");
    let again = open(dir.path(), &[]);
    let Pulled::As(record) = again.get("sha256:img", "reg.io/app") else {
        panic!("the record is gone after a reload");
    };
    assert!(!record.node_wide);
    assert_eq!(record.secrets.len(), 1);
    assert!(!must_pull(
        VerificationPolicy::NeverVerifyPreloadedImages,
        false,
        &Pulled::As(record),
        &[secret_cred("s", "hunter2")],
        |c| again.digest(c)
    ));
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

fn plain_sha256(cred: &Credential) -> String {
    let input = format!("{}\0{}", cred.username, cred.password);
    let d = ring::digest::digest(&ring::digest::SHA256, input.as_bytes());
    d.as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

/// The records and their key are readable by root only, and the file holds a
/// keyed digest rather than the plain SHA-256 of the credential.
#[test]
fn records_and_key_are_private_and_digests_are_keyed() {
    let dir = tempfile::tempdir().unwrap();
    let records = open(dir.path(), &[]);
    let cred = secret_cred("s", "hunter2");
    records
        .record("sha256:img", "reg.io/app", Some(&cred))
        .unwrap();
    let file = dir.path().join("image_manager/pulled.json");
    let key = dir.path().join("image_manager/credential_digest.key");
    assert_eq!(mode(&file), 0o600);
    assert_eq!(mode(&key), 0o600);
    assert_eq!(std::fs::read(&key).unwrap().len(), files::KEY_LEN);
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(!text.contains(&plain_sha256(&cred)), "{text}");
    assert!(text.contains(DIGEST_SCHEME), "{text}");
    // The key is made once: a reload digests the same way.
    let again = open(dir.path(), &[]);
    assert_eq!(again.digest(&cred), records.digest(&cred));
}

/// A file written by an earlier version (world-readable, unkeyed SHA-256 digests)
/// loads without error; the old digest matches nothing, so the image is verified
/// again, and the file is rewritten without it, 0600.
#[test]
fn old_unkeyed_records_are_dropped_and_verified_again() {
    let dir = tempfile::tempdir().unwrap();
    let cred = secret_cred("s", "hunter2");
    let file = dir.path().join("image_manager/pulled.json");
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    let old = serde_json::json!({"sha256:img": {"reg.io/app": {"node_wide": false,
        "secrets": [{"namespace": "ns", "name": "s", "uid": "uid-s",
                     "credential_hash": plain_sha256(&cred)}]}}});
    std::fs::write(&file, old.to_string()).unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();

    // An upgrade: records, no inventory; the recorded image is not taken as preloaded.
    let records = open(dir.path(), &[image("sha256:img", &["reg.io/app:1"])]);
    let pulled = records.get("sha256:img", "reg.io/app");
    assert!(must_pull(
        VerificationPolicy::NeverVerifyPreloadedImages,
        false,
        &pulled,
        std::slice::from_ref(&cred),
        |c| records.digest(c)
    ));
    assert_eq!(mode(&file), 0o600);
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(!text.contains(&plain_sha256(&cred)), "{text}");
    // After the re-pull the keyed digest is recorded and matches.
    records
        .record("sha256:img", "reg.io/app", Some(&cred))
        .unwrap();
    let pulled = records.get("sha256:img", "reg.io/app");
    assert!(!must_pull(
        VerificationPolicy::NeverVerifyPreloadedImages,
        false,
        &pulled,
        &[cred],
        |c| records.digest(c)
    ));
}

/// The images the runtime held at the first start are preloaded (any pod may use
/// them); one that arrives later without a record is not, and a restart does not
/// make it so.
#[test]
fn only_images_present_at_the_first_start_count_as_preloaded() {
    let dir = tempfile::tempdir().unwrap();
    let first = [image("sha256:pre", &["localhost/litelet/busybox:1.0"])];
    let records = open(dir.path(), &first);
    assert_eq!(
        records.get("sha256:pre", "localhost/litelet/busybox"),
        Pulled::Preloaded
    );
    assert_eq!(
        records.get("sha256:pre", "reg.io/busybox"),
        Pulled::Unrecorded,
        "preloaded under its own name only"
    );
    let later = [
        first[0].clone(),
        image("sha256:late", &["reg.io/private/app:1"]),
    ];
    let again = open(dir.path(), &later);
    assert_eq!(
        again.get("sha256:late", "reg.io/private/app"),
        Pulled::Unrecorded
    );
    assert!(default_must_pull(
        &again,
        "sha256:late",
        "reg.io/private/app",
        &[]
    ));
    assert!(!default_must_pull(
        &again,
        "sha256:pre",
        "localhost/litelet/busybox",
        &[]
    ));
}

/// litelet dies after the pull and before the record: the intent written before the
/// pull turns into a record without credentials at the next start, so no pod may
/// use the image without showing a credential, and the intent is gone.
#[test]
fn an_intent_left_by_a_crash_makes_the_image_verified_at_the_next_start() {
    let dir = tempfile::tempdir().unwrap();
    let records = open(dir.path(), &[]);
    let intent = records.intend("reg.io/private/app:1").unwrap();
    let pulling = dir.path().join("image_manager/pulling");
    assert_eq!(std::fs::read_dir(&pulling).unwrap().count(), 1);
    std::mem::forget(intent); // the crash: neither record nor withdrawal
    drop(records);

    // The runtime reports the image under its full name.
    let held = [image("sha256:app", &["reg.io/private/app:1"])];
    let again = open(dir.path(), &held);
    assert_eq!(
        again.get("sha256:app", "reg.io/private/app"),
        Pulled::As(PullRecord::default())
    );
    assert!(default_must_pull(
        &again,
        "sha256:app",
        "reg.io/private/app",
        &[]
    ));
    let good = secret_cred("s", "pw");
    assert!(
        default_must_pull(&again, "sha256:app", "reg.io/private/app", &[good]),
        "no credential is known to have pulled it: the pod's pulls it again"
    );
    assert_eq!(std::fs::read_dir(&pulling).unwrap().count(), 0);
    // And it stays that way after another restart.
    let third = open(dir.path(), &held);
    assert!(default_must_pull(
        &third,
        "sha256:app",
        "reg.io/private/app",
        &[]
    ));
}

/// A short reference in the intent matches the runtime's full name for it.
#[test]
fn intents_match_the_runtime_names_of_their_image() {
    assert_eq!(
        reference_key("busybox:1.36"),
        reference_key("docker.io/library/busybox:1.36")
    );
    assert_eq!(reference_key("busybox"), reference_key("busybox:latest"));
    assert_ne!(reference_key("busybox:1.36"), reference_key("busybox:1.37"));
    assert_eq!(
        reference_key("reg.io:5000/a@sha256:ab"),
        reference_key("reg.io:5000/a@sha256:ab")
    );
    assert_ne!(
        reference_key("reg.io:5000/a:1"),
        reference_key("reg.io:5001/a:1")
    );
}

/// A pull that fails withdraws its intent; two pulls of one image share it until
/// both are over.
#[test]
fn intents_last_while_any_pull_of_the_image_runs() {
    let dir = tempfile::tempdir().unwrap();
    let records = open(dir.path(), &[]);
    let pulling = dir.path().join("image_manager/pulling");
    let count = || std::fs::read_dir(&pulling).map_or(0, |d| d.count());
    let a = records.intend("reg.io/app:1").unwrap();
    let b = records.intend("reg.io/app:1").unwrap();
    assert_eq!(count(), 1);
    drop(a); // failed
    assert_eq!(count(), 1, "the other pull still runs");
    b.pulled("sha256:app", "reg.io/app", None);
    assert_eq!(count(), 0);
    assert!(matches!(
        records.get("sha256:app", "reg.io/app"),
        Pulled::As(PullRecord {
            node_wide: true,
            ..
        })
    ));
}

/// No intent can be written: the pull must not start (it could be lost).
#[test]
fn an_intent_that_cannot_be_written_refuses_the_pull() {
    let dir = tempfile::tempdir().unwrap();
    let records = open(dir.path(), &[]);
    std::fs::write(dir.path().join("image_manager/pulling"), b"not a folder").unwrap();
    let err = records.intend("reg.io/app:1").err().expect("refused");
    assert!(err.to_string().contains("reg.io/app:1"), "{err}");
}

/// Many pulls finishing at once: every record reaches the disk (the writes happen
/// under the lock, each with its own temp file).
#[test]
fn concurrent_records_are_all_on_disk() {
    let dir = tempfile::tempdir().unwrap();
    let records = open(dir.path(), &[]);
    let cred = secret_cred("s", "pw");
    let barrier = std::sync::Barrier::new(16);
    std::thread::scope(|s| {
        for i in 0..16 {
            let (records, barrier, cred) = (&records, &barrier, &cred);
            s.spawn(move || {
                let image = format!("reg.io/app{i}:1");
                let intent = records.intend(&image).unwrap();
                barrier.wait();
                intent.pulled(
                    &format!("sha256:{i}"),
                    &format!("reg.io/app{i}"),
                    Some(cred),
                );
            });
        }
    });
    let again = open(dir.path(), &[]);
    for i in 0..16 {
        let (id, repo) = (format!("sha256:{i}"), format!("reg.io/app{i}"));
        assert!(
            matches!(again.get(&id, &repo), Pulled::As(ref r) if r.secrets.len() == 1),
            "record {i} lost"
        );
        assert!(!default_must_pull(
            &again,
            &id,
            &repo,
            std::slice::from_ref(&cred)
        ));
    }
}

/// A truncated records file: reported, kept aside for the admin; the images litelet
/// pulled are verified again (they were never in the inventory), the preloaded ones
/// stay preloaded, and the next record starts a new file.
#[test]
fn a_damaged_records_file_fails_closed() {
    let dir = tempfile::tempdir().unwrap();
    let held = [
        image("sha256:pre", &["localhost/litelet/busybox:1.0"]),
        image("sha256:app", &["reg.io/private/app:1"]),
    ];
    let records = open(dir.path(), &held[..1]);
    records
        .record(
            "sha256:app",
            "reg.io/private/app",
            Some(&secret_cred("s", "pw")),
        )
        .unwrap();
    let file = dir.path().join("image_manager/pulled.json");
    let text = std::fs::read(&file).unwrap();
    std::fs::write(&file, &text[..text.len() / 2]).unwrap();

    let (again, problems) = open_with(dir.path(), &held);
    assert!(
        matches!(problems[..], [PullRecordsError::DamagedRecords { .. }]),
        "{problems:?}"
    );
    assert!(problems[0].to_string().contains("verified again"));
    assert!(dir
        .path()
        .join("image_manager/pulled.json.damaged")
        .exists());
    assert!(default_must_pull(
        &again,
        "sha256:app",
        "reg.io/private/app",
        &[]
    ));
    assert!(!default_must_pull(
        &again,
        "sha256:pre",
        "localhost/litelet/busybox",
        &[]
    ));
    // Garbage instead of JSON, and no inventory either: nothing is preloaded, and
    // that holds at the next start too.
    std::fs::write(&file, b"\x00garbage").unwrap();
    std::fs::remove_file(dir.path().join("image_manager/preloaded.json")).unwrap();
    let (third, problems) = open_with(dir.path(), &held);
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(default_must_pull(
        &third,
        "sha256:pre",
        "localhost/litelet/busybox",
        &[]
    ));
    let fourth = open(dir.path(), &held);
    assert!(default_must_pull(
        &fourth,
        "sha256:pre",
        "localhost/litelet/busybox",
        &[]
    ));
    assert!(default_must_pull(
        &fourth,
        "sha256:app",
        "reg.io/private/app",
        &[]
    ));
}

/// A damaged inventory counts nothing as preloaded, now and after a restart.
#[test]
fn a_damaged_inventory_counts_nothing_as_preloaded() {
    let dir = tempfile::tempdir().unwrap();
    let held = [image("sha256:pre", &["localhost/litelet/busybox:1.0"])];
    open(dir.path(), &held);
    std::fs::write(dir.path().join("image_manager/preloaded.json"), b"{\"sha").unwrap();
    let (records, problems) = open_with(dir.path(), &held);
    assert!(
        matches!(problems[..], [PullRecordsError::DamagedInventory { .. }]),
        "{problems:?}"
    );
    assert!(default_must_pull(
        &records,
        "sha256:pre",
        "localhost/litelet/busybox",
        &[]
    ));
    let again = open(dir.path(), &held);
    assert!(default_must_pull(
        &again,
        "sha256:pre",
        "localhost/litelet/busybox",
        &[]
    ));
}

/// Without an image list the inventory cannot be taken: nothing is preloaded in
/// this run, and the next start takes it (leaving out what litelet recorded).
#[test]
fn without_the_runtime_nothing_is_preloaded_until_the_inventory_is_taken() {
    let dir = tempfile::tempdir().unwrap();
    let unavailable = || {
        Err(CriError::Unavailable {
            op: "list_images",
            message: "connection refused".into(),
        })
    };
    let (records, problems) = PullRecords::open(dir.path(), &unavailable);
    assert!(
        matches!(problems[..], [PullRecordsError::ListImages { .. }]),
        "{problems:?}"
    );
    assert_eq!(
        records.get("sha256:pre", "localhost/litelet/busybox"),
        Pulled::Unrecorded
    );
    records
        .record("sha256:app", "reg.io/app", Some(&secret_cred("s", "pw")))
        .unwrap();
    let held = [
        image("sha256:pre", &["localhost/litelet/busybox:1.0"]),
        image("sha256:app", &["reg.io/app:1"]),
    ];
    let again = open(dir.path(), &held);
    assert_eq!(
        again.get("sha256:pre", "localhost/litelet/busybox"),
        Pulled::Preloaded
    );
    assert!(default_must_pull(&again, "sha256:app", "reg.io/app", &[]));
}

/// A records file that went missing while the inventory stayed is reported; the
/// images litelet pulled are not in the inventory, so they are verified again.
#[test]
fn missing_records_are_reported_and_their_images_verified() {
    let dir = tempfile::tempdir().unwrap();
    let records = open(dir.path(), &[]);
    records
        .record("sha256:app", "reg.io/app", Some(&secret_cred("s", "pw")))
        .unwrap();
    std::fs::remove_file(dir.path().join("image_manager/pulled.json")).unwrap();
    let held = [image("sha256:app", &["reg.io/app:1"])];
    let (again, problems) = open_with(dir.path(), &held);
    assert!(
        matches!(problems[..], [PullRecordsError::MissingRecords { .. }]),
        "{problems:?}"
    );
    assert!(default_must_pull(&again, "sha256:app", "reg.io/app", &[]));
}

/// The in-memory store (no history) counts every unrecorded image as preloaded, as
/// upstream does.
#[test]
fn the_in_memory_store_treats_unrecorded_images_as_preloaded() {
    let records = PullRecords::in_memory();
    assert_eq!(records.get("sha256:x", "reg.io/x"), Pulled::Preloaded);
    records
        .record("sha256:x", "reg.io/x", Some(&secret_cred("s", "pw")))
        .unwrap();
    assert!(default_must_pull(&records, "sha256:x", "reg.io/x", &[]));
}

/// An image pulled with a service-account-token plugin's credential serves the pods
/// of that service account (same namespace, name and UID), not others, and survives
/// a restart (upstream's ImagePullServiceAccount records).
#[test]
fn service_account_pulls_serve_pods_of_that_service_account_only() {
    let dir = tempfile::tempdir().unwrap();
    let sa = |name: &str, uid: &str| Credential {
        username: "u".into(),
        password: "rotating".into(),
        source: CredentialSource::ServiceAccount {
            namespace: "ns".into(),
            name: name.into(),
            uid: uid.into(),
        },
    };
    open(dir.path(), &[])
        .record("sha256:img", "reg.io/app", Some(&sa("b", "u1")))
        .unwrap();
    let records = open(dir.path(), &[]);
    let must =
        |offered: &[Credential]| default_must_pull(&records, "sha256:img", "reg.io/app", offered);
    assert!(!must(&[sa("b", "u1")]), "same service account");
    assert!(
        must(&[sa("b", "u2")]),
        "recreated service account (new UID)"
    );
    assert!(must(&[sa("c", "u3")]), "another service account");
    assert!(must(&[]), "no credentials");
}
