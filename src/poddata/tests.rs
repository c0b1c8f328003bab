//! The pod data store on a temporary root: modes, what is written when, removal with
//! the last pod, damage, sealing and another node's files.

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use super::*;

const NODE: &str = "edge-1";

fn secret(rv: &str, value: &str) -> KeptObject {
    KeptObject {
        kind: ObjectKind::Secret,
        namespace: "ns".into(),
        name: "db".into(),
        uid: "sec-uid".into(),
        resource_version: rv.into(),
        secret_type: Some("Opaque".into()),
        files: BTreeMap::from([("password".into(), value.as_bytes().to_vec())]),
        env: BTreeMap::from([("password".into(), value.into())]),
        pods: BTreeSet::new(),
    }
}

fn token(uid: &str) -> KeptToken {
    KeptToken {
        key: TokenKey {
            pod_uid: uid.into(),
            namespace: "ns".into(),
            service_account: "default".into(),
            audience: String::new(),
            expiration_seconds: 3607,
        },
        token: format!("token-of-{uid}"),
        received: 100,
        expires: 3707,
    }
}

fn mode(path: &Path) -> u32 {
    fs::metadata(path).unwrap().permissions().mode() & 0o777
}

fn mtime(path: &Path) -> std::time::SystemTime {
    fs::metadata(path).unwrap().modified().unwrap()
}

#[test]
fn entries_are_private_and_survive_a_restart() {
    let root = tempfile::tempdir().unwrap();
    let store = Store::open(root.path(), NODE, None).unwrap();
    store.keep_object(&secret("1", "hunter2"), "pod-a").unwrap();
    store.keep_token(&token("pod-a")).unwrap();
    let dir = store_dir(root.path());
    assert_eq!(mode(&dir), 0o700);
    for file in fs::read_dir(&dir).unwrap().flatten() {
        assert_eq!(mode(&file.path()), 0o600, "{:?}", file.path());
    }
    drop(store);

    let again = Store::open(root.path(), NODE, None).unwrap();
    let kept = again
        .object(ObjectKind::Secret, "ns", "db")
        .unwrap()
        .unwrap();
    assert_eq!(kept.files["password"], b"hunter2");
    assert_eq!(kept.resource_version, "1");
    assert_eq!(kept.pods, BTreeSet::from(["pod-a".to_owned()]));
    let t = again.token(&token("pod-a").key).unwrap().unwrap();
    assert_eq!(t, token("pod-a"));
    assert_eq!(again.pods(), BTreeSet::from(["pod-a".to_owned()]));
    assert!(again.token(&token("pod-b").key).unwrap().is_none());
    assert!(again
        .object(ObjectKind::ConfigMap, "ns", "db")
        .unwrap()
        .is_none());
}

#[test]
fn an_object_is_written_when_it_changes_or_gains_a_pod_and_goes_with_its_last_pod() {
    let root = tempfile::tempdir().unwrap();
    let store = Store::open(root.path(), NODE, None).unwrap();
    let file = store_dir(root.path()).join("secret_ns_db");
    store.keep_object(&secret("1", "a"), "pod-a").unwrap();
    let first = mtime(&file);
    std::thread::sleep(std::time::Duration::from_millis(20));
    store.keep_object(&secret("1", "a"), "pod-a").unwrap();
    assert_eq!(mtime(&file), first, "the same version is not written again");
    store.keep_object(&secret("1", "a"), "pod-b").unwrap();
    store.keep_object(&secret("2", "b"), "pod-a").unwrap();
    let kept = store
        .object(ObjectKind::Secret, "ns", "db")
        .unwrap()
        .unwrap();
    assert_eq!(kept.files["password"], b"b");
    assert_eq!(kept.pods.len(), 2, "{kept:?}");
    store.keep_token(&token("pod-a")).unwrap();
    store.keep_token(&token("pod-b")).unwrap();

    store.forget_pod("pod-a").unwrap();
    let kept = store
        .object(ObjectKind::Secret, "ns", "db")
        .unwrap()
        .unwrap();
    assert_eq!(kept.pods, BTreeSet::from(["pod-b".to_owned()]));
    assert!(store.token(&token("pod-a").key).unwrap().is_none());
    assert!(store.token(&token("pod-b").key).unwrap().is_some());
    store.forget_pod("pod-b").unwrap();
    assert!(store.is_empty());
    assert_eq!(fs::read_dir(store_dir(root.path())).unwrap().count(), 0);
}

#[test]
fn an_object_the_api_server_says_is_gone_is_dropped() {
    let root = tempfile::tempdir().unwrap();
    let store = Store::open(root.path(), NODE, None).unwrap();
    store.keep_object(&secret("1", "a"), "pod-a").unwrap();
    store.drop_object(ObjectKind::Secret, "ns", "db").unwrap();
    assert!(store
        .object(ObjectKind::Secret, "ns", "db")
        .unwrap()
        .is_none());
    assert!(store.is_empty());
    store.drop_object(ObjectKind::Secret, "ns", "db").unwrap();
}

#[test]
fn a_damaged_or_foreign_entry_is_absent_and_removed() {
    let root = tempfile::tempdir().unwrap();
    let store = Store::open(root.path(), NODE, None).unwrap();
    store.keep_object(&secret("1", "hunter2"), "pod-a").unwrap();
    store.keep_token(&token("pod-a")).unwrap();
    drop(store);
    let dir = store_dir(root.path());
    let file = dir.join("secret_ns_db");
    let mut bytes = fs::read(&file).unwrap();
    let at = bytes.len() - 4;
    bytes[at] ^= 0x04;
    fs::write(&file, bytes).unwrap();
    fs::write(dir.join("garbage"), b"not an entry").unwrap();

    let store = Store::open(root.path(), NODE, None).unwrap();
    assert!(store
        .object(ObjectKind::Secret, "ns", "db")
        .unwrap()
        .is_none());
    assert!(!file.exists(), "the damaged entry is removed");
    assert!(!dir.join("garbage").exists());
    assert!(
        store.token(&token("pod-a").key).unwrap().is_some(),
        "others stay"
    );
    drop(store);

    // The root dir of another node: nothing of it is believed.
    let other = Store::open(root.path(), "edge-2", None).unwrap();
    assert!(other.is_empty());
    assert!(other.token(&token("pod-a").key).unwrap().is_none());
}

#[test]
fn a_sealed_store_holds_no_plain_data_and_opens_only_with_its_key() {
    let root = tempfile::tempdir().unwrap();
    let key = || SealKey::parse(&[5u8; 32]).unwrap();
    let store = Store::open(root.path(), NODE, Some(key())).unwrap();
    store.keep_object(&secret("1", "hunter2"), "pod-a").unwrap();
    store.keep_token(&token("pod-a")).unwrap();
    for file in fs::read_dir(store_dir(root.path())).unwrap().flatten() {
        let bytes = fs::read(file.path()).unwrap();
        for plain in [&b"hunter2"[..], b"token-of-pod-a", b"aHVudGVyMg"] {
            assert!(!bytes.windows(plain.len()).any(|w| w == plain), "{plain:?}");
        }
    }
    drop(store);
    let store = Store::open(root.path(), NODE, Some(key())).unwrap();
    let kept = store
        .object(ObjectKind::Secret, "ns", "db")
        .unwrap()
        .unwrap();
    assert_eq!(kept.files["password"], b"hunter2");
    drop(store);
    // Another key opens nothing (and the copies are dropped: the API server has them).
    let other = Store::open(root.path(), NODE, SealKey::parse(&[6u8; 32])).unwrap();
    assert!(other.is_empty());
}

#[test]
fn names_that_could_leave_the_directory_are_refused() {
    let root = tempfile::tempdir().unwrap();
    let store = Store::open(root.path(), NODE, None).unwrap();
    let mut bad = secret("1", "x");
    bad.name = "../../etc".into();
    assert!(matches!(
        store.keep_object(&bad, "pod-a"),
        Err(PodDataError::Name(_))
    ));
    assert!(store.token(&token("../x").key).is_err());
    assert!(store.is_empty());
}

#[test]
fn turning_it_off_removes_everything_kept() {
    let root = tempfile::tempdir().unwrap();
    let store = Store::open(root.path(), NODE, None).unwrap();
    store.keep_object(&secret("1", "x"), "pod-a").unwrap();
    drop(store);
    remove_all(root.path());
    assert!(!store_dir(root.path()).exists());
    remove_all(root.path());
}
