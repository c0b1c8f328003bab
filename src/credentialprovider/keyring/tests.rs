//! Table tests of the keyring's matching rules (upstream keyring_test.go's cases plus
//! litelet's own: IP registries with ports, order, Docker Hub defaults).

use super::*;
use crate::credentialprovider::config::DockerConfigEntry;

/// Upstream TestURLsMatch, one row per rule: (key, repository, matches).
#[test]
fn registry_matching_rules() {
    let cases = [
        // Host wildcards: one glob per dot-separated part, never across parts.
        ("*.kubernetes.io", "prefix.kubernetes.io", true),
        ("prefix.*.io", "prefix.kubernetes.io", true),
        ("prefix.kubernetes.*", "prefix.kubernetes.io", true),
        ("*-good.kubernetes.io", "prefix-good.kubernetes.io", true),
        ("*.kubernetes.io", "kubernetes.io", false),
        ("*.kubernetes.io", "foo.bar.kubernetes.io", false),
        ("*-good.kubernetes.io", "prefix-bad.kubernetes.io", false),
        ("reg?.io", "reg1.io", true),
        ("reg[0-9].io", "reg7.io", true),
        ("reg[^0-9].io", "reg7.io", false),
        // Paths: the key's path is a string prefix of the repository's.
        (
            "prefix.kubernetes.io/foo",
            "prefix.kubernetes.io/foo/bar",
            true,
        ),
        ("*.kubernetes.io/foo", "prefix.kubernetes.io/foo/bar", true),
        (
            "prefix.kubernetes.io/foo/bar",
            "prefix.kubernetes.io/foo",
            false,
        ),
        (
            "prefix.kubernetes.io/foo",
            "prefix.kubernetes.io/other/bar",
            false,
        ),
        (
            "prefix.kubernetes.io",
            "prefix.kubernetes.io/any/path",
            true,
        ),
        // Ports: equal or both absent.
        (
            "*.kubernetes.io:1234/foo",
            "prefix.kubernetes.io:1234/foo/bar",
            true,
        ),
        (
            "prefix.*.io:1234/foo",
            "prefix.kubernetes.io:1234/foo/bar",
            true,
        ),
        ("*.kubernetes.io", "prefix.kubernetes.io:1234", false),
        ("*.kubernetes.io:1234", "prefix.kubernetes.io", false),
        ("127.0.0.1:5000", "127.0.0.1:5000/litelet/busybox", true),
        ("127.0.0.1:5000", "127.0.0.1:5001/litelet/busybox", false),
        ("127.0.0.1", "127.0.0.1:5000/litelet/busybox", false),
        ("localhost:5000/team", "localhost:5000/team/app", true),
    ];
    for (key, repository, want) in cases {
        assert_eq!(
            urls_match(key, repository),
            want,
            "key {key:?} vs {repository:?}"
        );
    }
}

#[test]
fn config_keys_lose_scheme_and_api_version_path() {
    let cases = [
        ("https://index.docker.io/v1/", Some("index.docker.io")),
        ("http://reg.io:5000", Some("reg.io:5000")),
        ("reg.io/v2/team", Some("reg.io/team")),
        ("reg.io/", Some("reg.io")),
        ("https://reg.io/team/", Some("reg.io/team/")),
        ("", None),
        ("https:///path", None),
    ];
    for (key, want) in cases {
        assert_eq!(normalize_key(key).as_deref(), want, "{key:?}");
    }
}

#[test]
fn image_references_normalise_like_the_docker_client() {
    let cases = [
        ("busybox", "docker.io/library/busybox"),
        ("busybox:1.36", "docker.io/library/busybox"),
        ("team/app@sha256:abcd", "docker.io/team/app"),
        ("index.docker.io/team/app", "docker.io/team/app"),
        ("localhost/litelet/busybox:1.0", "localhost/litelet/busybox"),
        ("127.0.0.1:5000/app:v1", "127.0.0.1:5000/app"),
        ("reg.io/a/b/c", "reg.io/a/b/c"),
    ];
    for (image, want) in cases {
        assert_eq!(normalize_repository(image), want, "{image:?}");
    }
}

fn secret(name: &str) -> CredentialSource {
    CredentialSource::Secret {
        namespace: "ns".into(),
        name: name.into(),
        uid: format!("uid-{name}"),
    }
}

fn config(entries: &[(&str, &str)]) -> DockerConfig {
    entries
        .iter()
        .map(|(key, user)| {
            (
                key.to_string(),
                DockerConfigEntry {
                    username: user.to_string(),
                    password: format!("pw-{user}"),
                    email: String::new(),
                },
            )
        })
        .collect()
}

/// The usernames `lookup` offers for `image`, in order.
fn check(keyring: &Keyring, image: &str) -> Vec<String> {
    keyring
        .lookup(image)
        .into_iter()
        .map(|c| c.username)
        .collect()
}

#[test]
fn lookup_offers_specific_keys_first_then_broader_ones() {
    let mut keyring = Keyring::default();
    keyring.add(
        &secret("a"),
        &config(&[
            ("reg.io", "host"),
            ("reg.io/team", "team"),
            ("*.io", "wild"),
        ]),
    );
    keyring.add(&secret("b"), &config(&[("https://reg.io/v2/", "host-b")]));
    assert_eq!(
        check(&keyring, "reg.io/team/app:1"),
        ["team", "host", "host-b", "wild"]
    );
    assert_eq!(check(&keyring, "reg.io/other"), ["host", "host-b", "wild"]);
    assert!(check(&keyring, "other.example.com/x").is_empty());
}

#[test]
fn docker_hub_credentials_serve_hub_images_only_as_a_fallback() {
    let mut keyring = Keyring::default();
    keyring.add(
        &secret("hub"),
        &config(&[("https://index.docker.io/v1/", "hubuser")]),
    );
    assert_eq!(check(&keyring, "busybox"), ["hubuser"]);
    assert_eq!(check(&keyring, "team/app:1"), ["hubuser"]);
    assert_eq!(check(&keyring, "docker.io/team/app"), ["hubuser"]);
    assert!(check(&keyring, "quay.io/team/app").is_empty());
    assert!(check(&keyring, "localhost:5000/app").is_empty());
}

#[test]
fn pod_credentials_come_before_the_nodes() {
    let mut pod = Keyring::default();
    pod.add(&secret("p"), &config(&[("reg.io", "pod")]));
    let mut node = Keyring::default();
    node.add(&CredentialSource::Node, &config(&[("reg.io", "node")]));
    let users: Vec<String> = lookup_union(&[&pod, &node], "reg.io/app")
        .into_iter()
        .map(|c| c.username)
        .collect();
    assert_eq!(users, ["pod", "node"]);
}

#[test]
fn credential_digest_is_keyed_stable_and_hides_the_password() {
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, b"node secret one");
    let other_key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, b"node secret two");
    let cred = Credential {
        username: "u".into(),
        password: "hunter2".into(),
        source: CredentialSource::Node,
    };
    let digest = cred.digest(&key);
    assert_eq!(digest.len(), "hmac-sha256:".len() + 64);
    assert!(digest.starts_with("hmac-sha256:"), "{digest}");
    assert_eq!(digest, cred.clone().digest(&key));
    // Not the plain SHA-256 of the credential, and another node's key gives another
    // digest: the records alone allow no offline guessing.
    let plain = ring::digest::digest(&ring::digest::SHA256, b"u\0hunter2");
    let plain: String = plain.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    assert!(!digest.contains(&plain));
    assert_ne!(digest, cred.digest(&other_key));
    assert!(!format!("{cred:?}").contains("hunter2"));
    let other = Credential {
        password: "hunter3".into(),
        ..cred.clone()
    };
    assert_ne!(digest, other.digest(&key));
}
