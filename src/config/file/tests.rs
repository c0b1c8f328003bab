//! Reading config files, the drop-in walk and JSON merge patch.

use serde_json::json;

use super::*;

const HEADER: &str = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n";

#[test]
fn yaml_and_json_files_give_their_fields() {
    let fields = parse(
        &format!("{HEADER}maxPods: 3\nstaticPodPath: null\n"),
        Path::new("c"),
    )
    .unwrap();
    assert_eq!(
        Value::Object(fields),
        json!({"maxPods": 3, "staticPodPath": null})
    );
    let text = r#"{"apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
                   "maxPods": 12}"#;
    assert_eq!(
        Value::Object(parse(text, Path::new("c.json")).unwrap()),
        json!({"maxPods": 12})
    );
}

/// As upstream's decoder: the file must say what it is.
#[test]
fn files_without_type_meta_are_refused() {
    let cases = [
        ("maxPods: 3\n", "apiVersion is missing"),
        (
            "apiVersion: kubelet.config.k8s.io/v1beta1\nmaxPods: 3\n",
            "kind is missing",
        ),
        (
            "apiVersion: kubelet.config.k8s.io/v1\nkind: KubeletConfiguration\n",
            "is not \"kubelet.config.k8s.io/v1beta1\"",
        ),
        ("[1, 2]", "expected a mapping"),
    ];
    for (text, why) in cases {
        let err = parse(text, Path::new("c.yaml")).unwrap_err().to_string();
        assert!(err.contains(why), "{text:?}: {err}");
    }
    assert!(matches!(
        parse("  \n", Path::new("c.yaml")),
        Err(ConfigFileError::Empty { .. })
    ));
    assert!(matches!(
        parse("a: [", Path::new("c.yaml")),
        Err(ConfigFileError::Syntax { .. })
    ));
}

/// Upstream walks the folder in lexical order, subfolders in their place, and skips
/// what is not `*.conf`.
#[test]
fn dropins_are_walked_in_lexical_order() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::create_dir_all(d.join("15-sub")).unwrap();
    for f in [
        "20-b.conf",
        "10-a.conf",
        "15-sub/01.conf",
        "30-c.yaml",
        "99-z.conf",
    ] {
        std::fs::write(d.join(f), "").unwrap();
    }
    let (conf, skipped) = dropins(d).unwrap();
    let names: Vec<String> = conf
        .iter()
        .map(|p| p.strip_prefix(d).unwrap().display().to_string())
        .collect();
    assert_eq!(
        names,
        ["10-a.conf", "15-sub/01.conf", "20-b.conf", "99-z.conf"]
    );
    assert_eq!(skipped, [d.join("30-c.yaml")]);
    assert!(matches!(
        dropins(&d.join("missing")),
        Err(ConfigFileError::Folder { .. })
    ));
}

/// RFC 7386: objects (maps too) merge by key, null removes, the rest replaces.
#[test]
fn merge_patch_follows_rfc_7386() {
    let cases = [
        (json!({"a": 1}), json!({"a": 2}), json!({"a": 2})),
        (json!({"a": 1}), json!({"b": 2}), json!({"a": 1, "b": 2})),
        (json!({"a": 1, "b": 2}), json!({"a": null}), json!({"b": 2})),
        (
            json!({"evictionHard": {"memory.available": "100Mi", "nodefs.available": "10%"}}),
            json!({"evictionHard": {"memory.available": "1Gi"}}),
            json!({"evictionHard": {"memory.available": "1Gi", "nodefs.available": "10%"}}),
        ),
        (json!({"l": [1, 2]}), json!({"l": [3]}), json!({"l": [3]})),
        (
            json!({"a": "x"}),
            json!({"a": {"b": 1}}),
            json!({"a": {"b": 1}}),
        ),
        (json!({"a": {"b": 1}}), json!({"a": 5}), json!({"a": 5})),
    ];
    for (mut target, patch, want) in cases {
        merge_patch(&mut target, &patch);
        assert_eq!(target, want, "{patch}");
    }
}
