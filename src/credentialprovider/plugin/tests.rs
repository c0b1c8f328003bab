//! Plugins end to end inside the process: real child processes (shell scripts
//! written by the test), a fake API server side for service account token mode.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::sync::Mutex;
use std::time::Duration;

use super::config::{TokenAttributes, TokenCacheType};
use super::wire::ProtocolVersion;
use super::*;
use crate::api::stats::Verb;
use crate::credentialprovider::keyring::CredentialSource;

const V1: &str = "credentialprovider.kubelet.k8s.io/v1";

/// A plugin that appends its stdin (one line) to `$LOG` and prints `$ANSWER`.
fn plugin(bin: &Path, name: &str, answer: &str, log: &Path) -> ProviderConfig {
    let path = bin.join(name);
    std::fs::write(
        &path,
        "#!/bin/sh\ncat >> \"$LOG\"; echo >> \"$LOG\"; printf '%s' \"$ANSWER\"; echo \"$1\" >&2\n",
    )
    .unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    ProviderConfig {
        name: name.to_owned(),
        match_images: vec!["reg.io".into(), "*.corp.io:5000/team".into()],
        default_cache_duration: Duration::ZERO,
        api_version: ProtocolVersion::V1,
        args: vec!["an-arg".into()],
        env: vec![
            ("LOG".into(), log.display().to_string()),
            ("ANSWER".into(), answer.to_owned()),
        ],
        token_attributes: None,
    }
}

fn answer(key_type: &str, duration: Option<&str>, password: &str) -> String {
    let duration = duration.map_or(String::new(), |d| format!(",\"cacheDuration\":\"{d}\""));
    format!(
        "{{\"apiVersion\":\"{V1}\",\"kind\":\"CredentialProviderResponse\",\"cacheKeyType\":\"{key_type}\"{duration},\
         \"auth\":{{\"reg.io\":{{\"username\":\"user\",\"password\":\"{password}\"}},\
         \"a.corp.io:5000\":{{\"username\":\"user\",\"password\":\"{password}\"}}}}}}"
    )
}

/// The requests the plugin received, one JSON object per run.
fn requests(log: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn plugins(
    configs: Vec<ProviderConfig>,
    bin: &Path,
    accounts: Option<Box<dyn ServiceAccounts>>,
) -> CredentialPlugins {
    CredentialPlugins::new(
        configs,
        bin,
        exec::Limits::default(),
        crate::config::parse_duration,
        accounts,
    )
}

const POD: PodIdentity<'static> = PodIdentity {
    namespace: "ns",
    name: "web",
    uid: "pod-uid",
    service_account: "",
};

fn passwords(keyring: &Keyring, repository: &str) -> Vec<String> {
    keyring
        .lookup(repository)
        .into_iter()
        .map(|c| c.password)
        .collect()
}

/// Upstream's URLsMatch rules applied to `matchImages`: one glob per host part,
/// equal ports, the pattern's path a prefix of the image's.
#[test]
fn match_images_globs_host_parts_ports_and_path_prefixes() {
    let provider = |pattern: &str| {
        Provider::new(
            ProviderConfig {
                name: "p".into(),
                match_images: vec![pattern.into()],
                default_cache_duration: Duration::ZERO,
                api_version: ProtocolVersion::V1,
                args: vec![],
                env: vec![],
                token_attributes: None,
            },
            PathBuf::from("/nonexistent"),
            exec::Limits::default(),
            crate::config::parse_duration,
        )
    };
    let cases = [
        (
            "*.dkr.ecr.*.amazonaws.com",
            "123.dkr.ecr.us-east-1.amazonaws.com/app",
            true,
        ),
        (
            "*.dkr.ecr.*.amazonaws.com",
            "dkr.ecr.us-east-1.amazonaws.com/app",
            false,
        ),
        (
            "*.dkr.ecr.*.amazonaws.com",
            "a.b.dkr.ecr.us-east-1.amazonaws.com/app",
            false,
        ),
        ("*.azurecr.io", "team.azurecr.io/app", true),
        ("*-docker.pkg.dev", "europe-docker.pkg.dev/p/r/app", true),
        ("reg.io", "reg.io/any/path", true),
        ("reg.io", "reg.io:5000/app", false),
        ("reg.io:5000", "reg.io:5000/app", true),
        ("reg.io:5000", "reg.io:5001/app", false),
        ("reg.io/team", "reg.io/team/app", true),
        ("reg.io/team", "reg.io/teamwork/app", true),
        ("reg.io/team", "reg.io/other/app", false),
        ("reg.io/team/app", "reg.io/team", false),
        ("127.0.0.*:5000", "127.0.0.1:5000/litelet/busybox", true),
        ("*", "docker.io/library/busybox", false),
        ("docker.io", "docker.io/library/busybox", true),
    ];
    for (pattern, repository, want) in cases {
        assert_eq!(
            provider(pattern).matches(repository),
            want,
            "{pattern} vs {repository}"
        );
    }
}

#[test]
fn plugin_answers_become_credentials_for_matching_images_only() {
    let tmp = tempfile::tempdir().unwrap();
    let log = tmp.path().join("requests");
    let config = plugin(tmp.path(), "p", &answer("Image", None, "pw"), &log);
    let plugins = plugins(vec![config], tmp.path(), None);

    let keyring = plugins.keyring(&POD, "reg.io/team/app");
    assert_eq!(passwords(&keyring, "reg.io/team/app"), ["pw"]);
    let source = &keyring.lookup("reg.io/team/app")[0].source;
    assert_eq!(
        source,
        &CredentialSource::Node,
        "a plugin without token mode serves every pod"
    );
    let asked = requests(&log);
    assert_eq!(
        asked,
        [
            serde_json::json!({"apiVersion": V1, "kind": "CredentialProviderRequest", "image": "reg.io/team/app"})
        ]
    );

    // Not in matchImages: the plugin is not run.
    assert!(plugins.keyring(&POD, "other.io/app").is_empty());
    assert_eq!(requests(&log).len(), 1);
    // The answer's keys are matched to the image as Docker config keys are.
    let keyring = plugins.keyring(&POD, "a.corp.io:5000/team/app");
    assert_eq!(passwords(&keyring, "a.corp.io:5000/team/app"), ["pw"]);
    assert_eq!(
        requests(&log).len(),
        2,
        "defaultCacheDuration 0: no caching"
    );
}

#[test]
fn cache_duration_and_key_type_decide_when_the_plugin_runs_again() {
    let tmp = tempfile::tempdir().unwrap();
    let cases = [
        // (answer, defaultCacheDuration, runs for: app, app again, other image of the registry)
        (answer("Image", Some("1h"), "pw"), Duration::ZERO, 2),
        (answer("Registry", Some("1h"), "pw"), Duration::ZERO, 1),
        (answer("Global", Some("1h"), "pw"), Duration::ZERO, 1),
        (
            answer("Registry", Some("0s"), "pw"),
            Duration::from_secs(3600),
            3,
        ),
        (answer("Registry", None, "pw"), Duration::from_secs(3600), 1),
        (answer("Registry", None, "pw"), Duration::ZERO, 3),
    ];
    for (i, (text, default, runs)) in cases.into_iter().enumerate() {
        let log = tmp.path().join(format!("requests-{i}"));
        let mut config = plugin(tmp.path(), &format!("p{i}"), &text, &log);
        config.default_cache_duration = default;
        let plugins = plugins(vec![config], tmp.path(), None);
        for repository in ["reg.io/app", "reg.io/app", "reg.io/other"] {
            assert_eq!(
                passwords(&plugins.keyring(&POD, repository), repository),
                ["pw"]
            );
        }
        assert_eq!(requests(&log).len(), runs, "case {i}: {text}");
    }
}

#[test]
fn a_failing_plugin_gives_nothing_and_the_others_still_count() {
    let tmp = tempfile::tempdir().unwrap();
    let log = tmp.path().join("requests");
    let good = plugin(tmp.path(), "good", &answer("Image", None, "pw"), &log);
    let bad_answers = [
        (
            "mismatch",
            answer("Image", None, "x").replace(V1, "credentialprovider.kubelet.k8s.io/v1beta1"),
        ),
        ("garbage", "not json".to_owned()),
        ("badkey", answer("Pod", None, "x")),
    ];
    let mut configs = vec![good];
    for (name, text) in &bad_answers {
        configs.push(plugin(tmp.path(), name, text, &log));
    }
    let failing = tmp.path().join("failing");
    std::fs::write(
        &failing,
        "#!/bin/sh\necho 'registry unreachable' >&2\nexit 7\n",
    )
    .unwrap();
    std::fs::set_permissions(&failing, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut exits = configs[0].clone();
    exits.name = "failing".into();
    configs.push(exits);
    let plugins = plugins(configs, tmp.path(), None);
    let keyring = plugins.keyring(&POD, "reg.io/app");
    assert_eq!(
        passwords(&keyring, "reg.io/app"),
        ["pw"],
        "only the good plugin's credential"
    );

    let errors: Vec<String> = plugins.providers()[1..]
        .iter()
        .map(|p| p.provide("reg.io/app", &POD, None).unwrap_err().to_string())
        .collect();
    assert!(
        errors[0].contains(
            "apiVersion \"credentialprovider.kubelet.k8s.io/v1beta1\" is not the expected"
        ),
        "{errors:?}"
    );
    assert!(
        errors[1].contains("reading apiVersion: not JSON"),
        "{errors:?}"
    );
    assert!(errors[2].contains("cacheKeyType \"Pod\""), "{errors:?}");
    assert!(
        errors[3].contains("\"failing\": plugin exited with exit status: 7: registry unreachable"),
        "{errors:?}"
    );
}

/// The API side of token mode, recording what was asked.
#[derive(Default)]
struct FakeAccounts {
    accounts: BTreeMap<String, AccountData>,
    asked: Mutex<Vec<String>>,
}

impl ServiceAccounts for FakeAccounts {
    fn service_account(&self, namespace: &str, name: &str) -> Result<AccountData, ApiError> {
        self.accounts
            .get(&format!("{namespace}/{name}"))
            .cloned()
            .ok_or_else(|| ApiError::NotFound {
                verb: Verb::Get,
                path: format!("/api/v1/namespaces/{namespace}/serviceaccounts/{name}"),
                message: "not found".into(),
            })
    }

    fn token(&self, r: &TokenFor<'_>) -> Result<String, ApiError> {
        let mut asked = self.asked.lock().unwrap();
        asked.push(format!(
            "{}/{} uid={} aud={} pod={}/{}",
            r.namespace,
            r.service_account,
            r.service_account_uid,
            r.audience,
            r.pod_name,
            r.pod_uid
        ));
        Ok(format!("token-{}-{}", r.service_account, asked.len()))
    }
}

fn fake_accounts() -> FakeAccounts {
    let account = |uid: &str, annotations: &[(&str, &str)]| AccountData {
        uid: uid.into(),
        annotations: annotations
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    };
    FakeAccounts {
        accounts: BTreeMap::from([
            (
                "ns/builder".into(),
                account(
                    "sa-1",
                    &[
                        ("reg.io/role", "pull"),
                        ("reg.io/team", "a"),
                        ("other", "x"),
                    ],
                ),
            ),
            ("ns/plain".into(), account("sa-2", &[])),
        ]),
        ..Default::default()
    }
}

fn token_mode(config: &mut ProviderConfig, cache_type: TokenCacheType, require: bool) {
    config.token_attributes = Some(TokenAttributes {
        audience: "registry-audience".into(),
        require_service_account: require,
        required_annotation_keys: if require {
            vec!["reg.io/role".into()]
        } else {
            vec![]
        },
        optional_annotation_keys: vec!["reg.io/team".into()],
        cache_type,
    });
}

fn pod_as(service_account: &'static str, uid: &'static str) -> PodIdentity<'static> {
    PodIdentity {
        service_account,
        uid,
        ..POD
    }
}

#[test]
fn token_mode_sends_the_pods_token_and_keys_answers_by_service_account() {
    let tmp = tempfile::tempdir().unwrap();
    let log = tmp.path().join("requests");
    let mut config = plugin(
        tmp.path(),
        "sa",
        &answer("Registry", Some("1h"), "pw"),
        &log,
    );
    token_mode(&mut config, TokenCacheType::ServiceAccount, true);
    let accounts = std::sync::Arc::new(fake_accounts());
    struct Shared(std::sync::Arc<FakeAccounts>);
    impl ServiceAccounts for Shared {
        fn service_account(&self, ns: &str, name: &str) -> Result<AccountData, ApiError> {
            self.0.service_account(ns, name)
        }
        fn token(&self, r: &TokenFor<'_>) -> Result<String, ApiError> {
            self.0.token(r)
        }
    }
    let plugins = plugins(
        vec![config],
        tmp.path(),
        Some(Box::new(Shared(accounts.clone()))),
    );

    let keyring = plugins.keyring(&pod_as("builder", "pod-1"), "reg.io/app");
    let creds = keyring.lookup("reg.io/app");
    assert_eq!(creds.len(), 1);
    assert_eq!(
        creds[0].source,
        CredentialSource::ServiceAccount {
            namespace: "ns".into(),
            name: "builder".into(),
            uid: "sa-1".into()
        }
    );
    let asked = requests(&log);
    assert_eq!(asked.len(), 1);
    assert_eq!(asked[0]["serviceAccountToken"], "token-builder-1");
    assert_eq!(
        asked[0]["serviceAccountAnnotations"],
        serde_json::json!({"reg.io/role": "pull", "reg.io/team": "a"}),
        "required and optional keys only"
    );
    assert_eq!(
        accounts.asked.lock().unwrap().as_slice(),
        ["ns/builder uid=sa-1 aud=registry-audience pod=web/pod-1"]
    );

    // Another pod of the same account: a new token, but the cached answer.
    plugins.keyring(&pod_as("builder", "pod-2"), "reg.io/other");
    assert_eq!(requests(&log).len(), 1);
    assert_eq!(accounts.asked.lock().unwrap().len(), 2);

    // A required annotation missing, no service account, an unknown one: not asked.
    assert!(plugins
        .keyring(&pod_as("plain", "pod-3"), "reg.io/app")
        .is_empty());
    assert!(plugins
        .keyring(&pod_as("", "pod-4"), "reg.io/app")
        .is_empty());
    assert!(plugins
        .keyring(&pod_as("ghost", "pod-5"), "reg.io/app")
        .is_empty());
    assert_eq!(requests(&log).len(), 1);
    let err = plugins.providers()[0]
        .provide(
            "reg.io/app",
            &pod_as("ghost", "pod-5"),
            Some(accounts.as_ref()),
        )
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("service account ns/ghost") && err.contains("not found"),
        "{err}"
    );
}

#[test]
fn token_cache_type_keys_answers_by_token_and_only_it_may_echo_the_token() {
    let tmp = tempfile::tempdir().unwrap();
    let log = tmp.path().join("requests");
    // The plugin answers with the token it was given as the password.
    let script = tmp.path().join("echo");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\nread req; echo \"$req\" >> \"$LOG\"\ntoken=$(echo \"$req\" | sed 's/.*\"serviceAccountToken\":\"\\([^\"]*\\)\".*/\\1/')\n\
             printf '{{\"apiVersion\":\"{V1}\",\"kind\":\"CredentialProviderResponse\",\"cacheKeyType\":\"Global\",\"cacheDuration\":\"1h\",\"auth\":{{\"reg.io\":{{\"username\":\"sa\",\"password\":\"%s\"}}}}}}' \"$token\"\n"
        ),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let base = ProviderConfig {
        name: "echo".into(),
        match_images: vec!["reg.io".into()],
        default_cache_duration: Duration::ZERO,
        api_version: ProtocolVersion::V1,
        args: vec![],
        env: vec![("LOG".into(), log.display().to_string())],
        token_attributes: None,
    };
    let mut by_token = base.clone();
    token_mode(&mut by_token, TokenCacheType::Token, false);
    let plugins = self::plugins(vec![by_token], tmp.path(), Some(Box::new(fake_accounts())));
    let keyring = plugins.keyring(&pod_as("plain", "pod-1"), "reg.io/app");
    assert_eq!(passwords(&keyring, "reg.io/app"), ["token-plain-1"]);
    // Each token is its own cache key: the next pod's new token runs the plugin.
    let keyring = plugins.keyring(&pod_as("plain", "pod-2"), "reg.io/app");
    assert_eq!(passwords(&keyring, "reg.io/app"), ["token-plain-2"]);
    assert_eq!(requests(&log).len(), 2);
    // requireServiceAccount false: a pod without one is asked about, with no token.
    plugins.keyring(&pod_as("", "pod-3"), "reg.io/app");
    assert_eq!(requests(&log).len(), 3);
    assert!(requests(&log)[2].get("serviceAccountToken").is_none());

    let mut by_account = base;
    token_mode(&mut by_account, TokenCacheType::ServiceAccount, false);
    let plugins = self::plugins(
        vec![by_account],
        tmp.path(),
        Some(Box::new(fake_accounts())),
    );
    let provider = &plugins.providers()[0];
    let err = provider
        .provide(
            "reg.io/app",
            &pod_as("plain", "pod-1"),
            Some(&fake_accounts()),
        )
        .unwrap_err();
    assert!(matches!(err, PluginError::EchoedToken { .. }), "{err}");
    assert!(!err.to_string().contains("token-plain"), "{err}");
    assert_eq!(provider.cached(), 0, "a refused answer is not cached");
}

#[test]
fn token_mode_without_an_api_server_is_an_error_not_a_hang() {
    let tmp = tempfile::tempdir().unwrap();
    let mut config = plugin(
        tmp.path(),
        "sa",
        &answer("Image", None, "pw"),
        &tmp.path().join("log"),
    );
    token_mode(&mut config, TokenCacheType::ServiceAccount, true);
    let plugins = plugins(vec![config], tmp.path(), None);
    let err = plugins.providers()[0]
        .provide("reg.io/app", &pod_as("builder", "pod-1"), None)
        .unwrap_err();
    assert!(matches!(err, PluginError::NoApiServer { .. }), "{err}");
}
