//! Gate checks: known names at litelet's value pass, others are refused by name.

use super::*;

fn gates(list: &[(&str, bool)]) -> BTreeMap<String, bool> {
    list.iter().map(|(n, v)| (n.to_string(), *v)).collect()
}

#[test]
fn a_gate_at_its_default_is_accepted() {
    let beta_on = UPSTREAM
        .iter()
        .find(|g| g.stage == Stage::Beta && g.default)
        .expect("a beta gate on by default");
    let alpha_off = by_name("AllAlpha").expect("AllAlpha");
    assert!(check(&gates(&[(beta_on.name, true), (alpha_off.name, false)])).is_ok());
    assert!(check(&BTreeMap::new()).is_ok());
}

#[test]
fn a_gate_away_from_litelets_value_is_refused_by_name() {
    let err = check(&gates(&[("AllAlpha", true)]))
        .unwrap_err()
        .to_string();
    assert!(err.contains("AllAlpha=true is not supported"), "{err}");
    assert!(err.contains("AllAlpha=false (ALPHA)"), "{err}");
}

#[test]
fn an_unknown_gate_is_refused_as_upstream_words_it() {
    let err = check(&gates(&[("NoSuchGate", true), ("AllBeta", true)]))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("unrecognized feature gate: NoSuchGate"),
        "{err}"
    );
    assert!(err.contains("AllBeta=true"), "{err}");
}

#[test]
fn evented_pleg_is_switched_and_on_unless_turned_off() {
    assert!(check(&gates(&[("EventedPLEG", false)])).is_ok());
    assert!(check(&gates(&[("EventedPLEG", true)])).is_ok());
    assert!(evented_pleg(&BTreeMap::new()), "litelet's default is on");
    assert!(evented_pleg(&gates(&[("EventedPLEG", true)])));
    assert!(!evented_pleg(&gates(&[("EventedPLEG", false)])));
    assert!(
        !enabled(&gates(&[("AllAlpha", true)]), "AllAlpha"),
        "not switched"
    );
}

#[test]
fn switched_gates_are_upstream_gates() {
    for (name, _) in SWITCHED {
        assert!(by_name(name).is_some(), "{name} is not an upstream gate");
    }
}
