//! Values: Go's parsers, flag text to JSON per kind, the config file's type checks.

use serde_json::json;

use super::*;

#[test]
fn go_bools_as_strconv_parse_bool() {
    for t in ["1", "t", "T", "TRUE", "true", "True"] {
        assert_eq!(go_bool(t), Ok(true), "{t}");
    }
    for f in ["0", "f", "F", "FALSE", "false", "False"] {
        assert_eq!(go_bool(f), Ok(false), "{f}");
    }
    for bad in ["", "yes", "tRUE", "2", "on"] {
        assert!(go_bool(bad).is_err(), "{bad}");
    }
}

#[test]
fn go_ints_with_base_prefixes() {
    let cases = [
        ("110", 110),
        ("-1", -1),
        ("+7", 7),
        ("0x10", 16),
        ("010", 8),
        ("0b11", 3),
        ("0", 0),
    ];
    for (text, n) in cases {
        assert_eq!(go_int(text), Ok(n), "{text}");
    }
    for bad in ["", "1.5", "ten", "0x", "1e3"] {
        assert!(go_int(bad).is_err(), "{bad}");
    }
}

#[test]
fn go_durations() {
    let cases: [(&str, i128); 9] = [
        ("2m0s", 120_000_000_000),
        ("10s", 10_000_000_000),
        ("1h30m", 5_400_000_000_000),
        ("500ms", 500_000_000),
        ("1.5s", 1_500_000_000),
        ("0", 0),
        ("-1s", -1_000_000_000),
        ("1us", 1_000),
        ("4h0m0s", 14_400_000_000_000),
    ];
    for (text, nanos) in cases {
        assert_eq!(go_duration(text), Ok(nanos), "{text}");
    }
    for bad in ["", "10", "s", "1x", "m1", ".s"] {
        assert!(go_duration(bad).is_err(), "{bad} should fail");
    }
    assert!(
        parse_duration("-1s").is_err(),
        "std durations are not negative"
    );
    assert_eq!(parse_duration("90s"), Ok(Duration::from_secs(90)));
}

#[test]
fn go_duration_strings_match_go() {
    let cases = [
        (Duration::ZERO, "0s"),
        (Duration::from_secs(10), "10s"),
        (Duration::from_secs(60), "1m0s"),
        (Duration::from_secs(3600), "1h0m0s"),
        (Duration::from_secs(3725), "1h2m5s"),
        (Duration::from_millis(500), "500ms"),
        (Duration::from_millis(1500), "1.5s"),
    ];
    for (d, want) in cases {
        assert_eq!(go_duration_string(d), want, "{d:?}");
    }
}

/// Flag text becomes the JSON the config field holds; repeats accumulate for lists
/// and maps, as pflag's slice and map values do.
#[test]
fn flag_text_becomes_field_json() {
    let list = json!(["a"]);
    let headers = json!({"X-A": ["0"]});
    let map = json!({"a": "1"});
    let cases: Vec<(Kind, &str, Option<&Value>, Value)> = vec![
        (Kind::Bool, "false", None, json!(false)),
        (Kind::Int, "110", None, json!(110)),
        (Kind::Duration, "1m30s", None, json!("1m30s")),
        (Kind::Str, "", None, json!("")),
        (
            Kind::List,
            "10.0.0.10, 10.0.0.11",
            None,
            json!(["10.0.0.10", "10.0.0.11"]),
        ),
        (Kind::List, "b", Some(&list), json!(["a", "b"])),
        (Kind::List, "", None, json!([])),
        (
            Kind::Map('='),
            "cpu=100m, memory=1Gi",
            None,
            json!({"cpu": "100m", "memory": "1Gi"}),
        ),
        (
            Kind::Map('='),
            "b=2,a=3",
            Some(&map),
            json!({"a": "3", "b": "2"}),
        ),
        (
            Kind::Map('<'),
            "memory.available<100Mi",
            None,
            json!({"memory.available": "100Mi"}),
        ),
        (
            Kind::Gates,
            "A=true,B=0",
            None,
            json!({"A": true, "B": false}),
        ),
        (
            Kind::Headers,
            "X-A:1,X-B:2,X-A:3",
            Some(&headers),
            json!({"X-A": ["0", "1", "3"], "X-B": ["2"]}),
        ),
        (
            Kind::Taints,
            "k=v:NoSchedule,g:NoExecute",
            None,
            json!([{"key": "k", "value": "v", "effect": "NoSchedule"}, {"key": "g", "effect": "NoExecute"}]),
        ),
    ];
    for (kind, text, before, want) in cases {
        assert_eq!(kind.from_flag(text, before), Ok(want), "{kind:?} {text:?}");
    }
    let bad = [
        (Kind::Bool, "maybe"),
        (Kind::Int, "many"),
        (Kind::Duration, "10"),
        (Kind::Map('='), "cpu"),
        (Kind::Gates, "A=maybe"),
        (Kind::Gates, "A"),
        (Kind::Taints, "k=v:Sometimes"),
    ];
    for (kind, text) in bad {
        assert!(kind.from_flag(text, None).is_err(), "{kind:?} {text:?}");
    }
}

/// The config file's values must have their field's JSON type, as Go's decoder wants.
#[test]
fn config_values_are_type_checked() {
    let good = [
        (Kind::Bool, json!(true)),
        (Kind::Int, json!(3)),
        (Kind::Float, json!(0.9)),
        (Kind::Str, json!("x")),
        (Kind::Duration, json!("5m")),
        (Kind::List, json!(["a"])),
        (Kind::Map('='), json!({"cpu": "1"})),
        (Kind::Gates, json!({"A": true})),
        (Kind::Taints, json!([{"key": "k", "effect": "NoSchedule"}])),
        (Kind::Object, json!({"anything": [1]})),
        (Kind::Int, Value::Null),
    ];
    for (kind, value) in good {
        assert_eq!(kind.check(&value), Ok(()), "{kind:?} {value}");
    }
    let bad = [
        (Kind::Bool, json!("true")),
        (Kind::Int, json!("3")),
        (Kind::Int, json!(1.5)),
        (Kind::Str, json!(3)),
        (Kind::Duration, json!("5 minutes")),
        (Kind::List, json!("a,b")),
        (Kind::Map('='), json!({"cpu": 1})),
        (Kind::Gates, json!({"A": "true"})),
    ];
    for (kind, value) in bad {
        assert!(kind.check(&value).is_err(), "{kind:?} {value}");
    }
}

#[test]
fn same_values_and_zero_values_per_kind() {
    assert!(Kind::Duration.same(&json!("0s"), &json!("0")));
    assert!(Kind::Duration.same(&json!("5m"), &json!("5m0s")));
    assert!(Kind::Int.same(&json!(1), &json!(1.0)));
    assert!(Kind::Map('=').same(&json!({}), &Value::Null));
    assert!(Kind::List.same(&json!([]), &Value::Null));
    assert!(!Kind::Str.same(&json!("none"), &json!("None")));
    assert!(Kind::Duration.is_zero(&json!("0s")));
    assert!(Kind::Int.is_zero(&json!(0)));
    assert!(Kind::Str.is_zero(&json!("")));
    assert!(!Kind::Duration.is_zero(&json!("1s")));
}

#[test]
fn setting_values_decode_and_encode() {
    assert_eq!(u16::decode(&json!(10250)), Ok(10250));
    assert!(u16::decode(&json!(70000))
        .unwrap_err()
        .to_string()
        .contains("out of range"));
    assert!(u32::decode(&json!(-1)).is_err());
    assert_eq!(Option::<PathBuf>::decode(&json!("")), Ok(None));
    assert_eq!(Option::<PathBuf>::None.encode(), json!(""));
    assert_eq!(Duration::from_secs(90).encode(), json!("1m30s"));
    assert!(IpAddr::decode(&json!("not-an-ip")).is_err());
    let taints =
        Vec::<Taint>::decode(&json!([{"key": "k", "value": "v", "effect": "NoSchedule"}])).unwrap();
    assert_eq!(
        taints.encode(),
        json!([{"key": "k", "value": "v", "effect": "NoSchedule"}])
    );
    assert!(Vec::<Taint>::decode(&json!([{"key": "k", "effect": "Later"}])).is_err());
}
