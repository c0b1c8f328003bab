//! The CredentialProviderConfig reader against upstream's config_test.go cases:
//! the three versions, JSON and YAML, strictness, directories, and every check of
//! validateCredentialProviderConfig, each refusal naming its file and field.

use super::*;

fn syntax() -> Syntax {
    Syntax {
        duration: crate::config::parse_duration,
        qualified_name: |k| crate::node::config::check_qualified_name(k).is_ok(),
    }
}

fn parse_text(text: &str) -> Result<Vec<ProviderConfig>, String> {
    parse(text.as_bytes(), Path::new("/etc/cp.yaml"), syntax()).map_err(|e| e.to_string())
}

const V1: &str = "kind: CredentialProviderConfig\napiVersion: kubelet.config.k8s.io/v1\n";

fn v1(providers: &str) -> String {
    format!("{V1}providers:\n{providers}")
}

const GOOD: &str = "- name: ecr
  matchImages: [\"*.dkr.ecr.*.amazonaws.com\", \"reg.io:5000/team\"]
  defaultCacheDuration: 12h
  apiVersion: credentialprovider.kubelet.k8s.io/v1
  args: [get-credentials, --v=5]
  env: [{name: AWS_PROFILE, value: node}]
";

#[test]
fn every_version_in_yaml_and_json_reads_the_same() {
    let want = ProviderConfig {
        name: "ecr".into(),
        match_images: vec![
            "*.dkr.ecr.*.amazonaws.com".into(),
            "reg.io:5000/team".into(),
        ],
        default_cache_duration: Duration::from_secs(12 * 3600),
        api_version: ProtocolVersion::V1,
        args: vec!["get-credentials".into(), "--v=5".into()],
        env: vec![("AWS_PROFILE".into(), "node".into())],
        token_attributes: None,
    };
    assert_eq!(parse_text(&v1(GOOD)).unwrap(), std::slice::from_ref(&want));
    for version in ["v1beta1", "v1alpha1"] {
        let text = format!(
            "kind: CredentialProviderConfig\napiVersion: kubelet.config.k8s.io/{version}\nproviders:\n{GOOD}"
        );
        assert_eq!(
            parse_text(&text).unwrap(),
            std::slice::from_ref(&want),
            "{version}"
        );
    }
    // JSON with tab indentation, as upstream's test writes it.
    let json = "{\n\t\"kind\": \"CredentialProviderConfig\",\n\t\"apiVersion\": \"kubelet.config.k8s.io/v1\",\n\t\"providers\": [{\n\t\t\"name\": \"ecr\",\n\t\t\"matchImages\": [\"*.dkr.ecr.*.amazonaws.com\", \"reg.io:5000/team\"],\n\t\t\"defaultCacheDuration\": \"12h\",\n\t\t\"apiVersion\": \"credentialprovider.kubelet.k8s.io/v1\",\n\t\t\"args\": [\"get-credentials\", \"--v=5\"],\n\t\t\"env\": [{\"name\": \"AWS_PROFILE\", \"value\": \"node\"}]\n\t}]\n}";
    assert_eq!(parse_text(json).unwrap(), [want]);
}

#[test]
fn token_attributes_are_read_in_v1_only() {
    let sa = v1("- name: reg
  matchImages: [reg.io]
  defaultCacheDuration: 1m
  apiVersion: credentialprovider.kubelet.k8s.io/v1
  tokenAttributes:
    serviceAccountTokenAudience: reg.io
    cacheType: ServiceAccount
    requireServiceAccount: true
    requiredServiceAccountAnnotationKeys: [reg.io/role]
    optionalServiceAccountAnnotationKeys: [reg.io/Team]
");
    let parsed = parse_text(&sa).unwrap();
    assert_eq!(
        parsed[0].token_attributes,
        Some(TokenAttributes {
            audience: "reg.io".into(),
            require_service_account: true,
            required_annotation_keys: vec!["reg.io/role".into()],
            optional_annotation_keys: vec!["reg.io/Team".into()],
            cache_type: TokenCacheType::ServiceAccount,
        })
    );
    let beta = sa.replace(
        "kubelet.config.k8s.io/v1\n",
        "kubelet.config.k8s.io/v1beta1\n",
    );
    let err = parse_text(&beta).unwrap_err();
    assert!(
        err.contains("/etc/cp.yaml: providers[0].tokenAttributes: unknown field"),
        "{err}"
    );
}

/// Each case: the providers list, and what the error must say (file and field).
#[test]
fn bad_configs_are_refused_naming_the_field() {
    let provider = |name: &str, images: &str, duration: &str, version: &str| {
        format!("- name: {name}\n  matchImages: {images}\n{duration}  apiVersion: {version}\n")
    };
    let ok_version = "credentialprovider.kubelet.k8s.io/v1";
    let d = "  defaultCacheDuration: 1m\n";
    let cases: Vec<(&str, String, &str)> = vec![
        ("no providers", format!("{V1}providers: []\n"), "providers: at least one provider is required"),
        ("no matchImages", v1(&provider("p", "[]", d, ok_version)), "providers[0].matchImages: at least one"),
        ("no defaultCacheDuration", v1(&provider("p", "[r.io]", "", ok_version)), "providers[0].defaultCacheDuration: required"),
        ("negative duration", v1(&provider("p", "[r.io]", "  defaultCacheDuration: -1m\n", ok_version)), "providers[0].defaultCacheDuration: invalid duration"),
        ("name with a slash", v1(&provider("foo/../bar", "[r.io]", d, ok_version)), "providers[0].name: \"foo/../bar\" cannot contain '/'"),
        ("name with a space", v1(&provider("\"foo bar\"", "[r.io]", d, ok_version)), "cannot contain spaces"),
        ("name ..", v1(&provider("\"..\"", "[r.io]", d, ok_version)), "cannot be '.' or '..'"),
        ("duplicate names", v1(&(provider("p", "[r.io]", d, ok_version) + &provider("p", "[s.io]", d, ok_version))), "providers[1].name: duplicate provider name \"p\""),
        ("no apiVersion", v1(&provider("p", "[r.io]", d, "\"\"")), "providers[0].apiVersion: required"),
        ("unknown apiVersion", v1(&provider("p", "[r.io]", d, "credentialprovider.kubelet.k8s.io/v1alpha0")), "\"credentialprovider.kubelet.k8s.io/v1alpha0\" is not one of credentialprovider.kubelet.k8s.io/v1, credentialprovider.kubelet.k8s.io/v1alpha1, credentialprovider.kubelet.k8s.io/v1beta1"),
        ("bad match image escape", v1(&provider("p", "[\"%invalid%\"]", d, ok_version)), "providers[0].matchImages[0]: \"%invalid%\": invalid URL escape"),
        ("bad match image port", v1(&provider("p", "[\"r.io:http/x\"]", d, ok_version)), "invalid port \"http\" after host"),
        ("unknown field", v1(&format!("{}  unknownField: 1\n", provider("p", "[r.io]", d, ok_version))), "providers[0]: unknown field `unknownField`"),
        ("wrong type", v1(&provider("p", "r.io", d, ok_version)), "providers[0].matchImages: invalid type"),
        ("wrong kind", "kind: WrongKind\napiVersion: kubelet.config.k8s.io/v1\nproviders: []\n".into(), "kind: \"WrongKind\" is not CredentialProviderConfig"),
        ("wrong group", "kind: CredentialProviderConfig\napiVersion: foobar/v1alpha1\nproviders: []\n".into(), "apiVersion: \"foobar/v1alpha1\" is not one of kubelet.config.k8s.io/v1"),
        ("not YAML", "providers: [".into(), "/etc/cp.yaml"),
    ];
    for (name, text, want) in cases {
        let err = parse_text(&text).expect_err(name);
        assert!(
            err.starts_with("credential provider config /etc/cp.yaml"),
            "{name}: {err}"
        );
        assert!(err.contains(want), "{name}: {err}");
    }
}

#[test]
fn token_attribute_checks_follow_upstream() {
    let with = |attrs: &str| {
        v1(&format!(
            "- name: p\n  matchImages: [r.io]\n  defaultCacheDuration: 1m\n  apiVersion: credentialprovider.kubelet.k8s.io/v1\n  tokenAttributes:\n{attrs}"
        ))
    };
    let cases = [
        ("no audience", "    cacheType: Token\n    requireServiceAccount: true\n", "tokenAttributes.serviceAccountTokenAudience: required"),
        ("no requireServiceAccount", "    serviceAccountTokenAudience: a\n    cacheType: Token\n", "tokenAttributes.requireServiceAccount: required"),
        ("no cacheType", "    serviceAccountTokenAudience: a\n    requireServiceAccount: true\n", "tokenAttributes.cacheType: required: ServiceAccount or Token"),
        ("bad cacheType", "    serviceAccountTokenAudience: a\n    requireServiceAccount: true\n    cacheType: Pod\n", "\"Pod\" is not ServiceAccount or Token"),
        ("required keys without requiring an account", "    serviceAccountTokenAudience: a\n    requireServiceAccount: false\n    cacheType: Token\n    requiredServiceAccountAnnotationKeys: [a.io/x]\n", "requireServiceAccount cannot be false"),
        ("bad key", "    serviceAccountTokenAudience: a\n    requireServiceAccount: true\n    cacheType: Token\n    requiredServiceAccountAnnotationKeys: [cantendwithadash-]\n", "requiredServiceAccountAnnotationKeys: \"cantendwithadash-\" is not a qualified name"),
        ("duplicate key", "    serviceAccountTokenAudience: a\n    requireServiceAccount: true\n    cacheType: Token\n    optionalServiceAccountAnnotationKeys: [a.io/x, a.io/x]\n", "optionalServiceAccountAnnotationKeys: duplicate key \"a.io/x\""),
        ("required and optional", "    serviceAccountTokenAudience: a\n    requireServiceAccount: true\n    cacheType: Token\n    requiredServiceAccountAnnotationKeys: [a.io/x]\n    optionalServiceAccountAnnotationKeys: [a.io/x]\n", "are both required and optional"),
    ];
    for (name, attrs, want) in cases {
        let err = parse_text(&with(attrs)).expect_err(name);
        assert!(
            err.contains(&format!("providers[0].{want}")) || err.contains(want),
            "{name}: {err}"
        );
    }
    let v1beta1_plugin = with("    serviceAccountTokenAudience: a\n    requireServiceAccount: true\n    cacheType: Token\n")
        .replace("credentialprovider.kubelet.k8s.io/v1\n", "credentialprovider.kubelet.k8s.io/v1beta1\n");
    let err = parse_text(&v1beta1_plugin).unwrap_err();
    assert!(err.contains("providers[0].tokenAttributes: only for plugins of apiVersion credentialprovider.kubelet.k8s.io/v1"), "{err}");
}

fn executable(dir: &Path, name: &str) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(dir.join(name), "#!/bin/sh\n").unwrap();
    std::fs::set_permissions(dir.join(name), std::fs::Permissions::from_mode(0o755)).unwrap();
}

fn provider_file(name: &str) -> String {
    v1(&format!(
        "- name: {name}\n  matchImages: [r.io]\n  defaultCacheDuration: 1m\n  apiVersion: credentialprovider.kubelet.k8s.io/v1\n"
    ))
}

#[test]
fn a_directory_merges_its_config_files_in_name_order() {
    let tmp = tempfile::tempdir().unwrap();
    let (dir, bin) = (tmp.path().join("conf.d"), tmp.path().join("bin"));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::write(dir.join("20-b.yml"), provider_file("b")).unwrap();
    std::fs::write(dir.join("10-a.yaml"), provider_file("a")).unwrap();
    std::fs::write(dir.join("30-c.json"), "{\"kind\":\"CredentialProviderConfig\",\"apiVersion\":\"kubelet.config.k8s.io/v1beta1\",\"providers\":[{\"name\":\"c\",\"matchImages\":[\"r.io\"],\"defaultCacheDuration\":\"5m\",\"apiVersion\":\"credentialprovider.kubelet.k8s.io/v1beta1\"}]}").unwrap();
    std::fs::write(dir.join("README.txt"), "not a config").unwrap();
    for name in ["a", "b", "c"] {
        executable(&bin, name);
    }
    let names: Vec<String> = load(&dir, Some(&bin), syntax())
        .unwrap()
        .into_iter()
        .map(|p| p.name)
        .collect();
    assert_eq!(names, ["a", "b", "c"]);

    std::fs::write(dir.join("40-dup.yaml"), provider_file("a")).unwrap();
    let err = load(&dir, Some(&bin), syntax()).unwrap_err().to_string();
    assert!(
        err.contains("40-dup.yaml") && err.contains("duplicate provider name \"a\""),
        "{err}"
    );

    let empty = tmp.path().join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    let err = load(&empty, Some(&bin), syntax()).unwrap_err().to_string();
    assert!(err.contains("no *.json, *.yaml or *.yml file"), "{err}");
}

#[test]
fn the_bin_dir_and_each_plugin_executable_must_exist() {
    let tmp = tempfile::tempdir().unwrap();
    let (file, bin) = (tmp.path().join("cp.yaml"), tmp.path().join("bin"));
    std::fs::write(&file, provider_file("ecr")).unwrap();
    let err = load(&file, None, syntax()).unwrap_err().to_string();
    assert!(
        err.contains("--image-credential-provider-bin-dir is not"),
        "{err}"
    );
    let err = load(&file, Some(&bin), syntax()).unwrap_err().to_string();
    assert!(
        err.contains(&format!("plugin binary directory {}", bin.display())),
        "{err}"
    );
    std::fs::create_dir_all(&bin).unwrap();
    let err = load(&file, Some(&bin), syntax()).unwrap_err().to_string();
    assert!(
        err.contains("credential provider \"ecr\"") && err.contains("does not exist"),
        "{err}"
    );
    std::fs::write(bin.join("ecr"), "#!/bin/sh\n").unwrap();
    let err = load(&file, Some(&bin), syntax()).unwrap_err().to_string();
    assert!(err.contains("is not executable"), "{err}");
    executable(&bin, "ecr");
    assert_eq!(load(&file, Some(&bin), syntax()).unwrap().len(), 1);
    let err = load(&tmp.path().join("absent.yaml"), Some(&bin), syntax())
        .unwrap_err()
        .to_string();
    assert!(err.contains("absent.yaml"), "{err}");
}
