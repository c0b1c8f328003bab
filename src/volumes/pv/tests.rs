//! Tables for claim → volume resolution: binding checks, ephemeral ownership, PV
//! sources and a local PV's node affinity.

use std::collections::BTreeMap;

use serde_json::{json, Value};

use super::*;

fn claim(phase: &str, volume: &str, uid: &str) -> PersistentVolumeClaim {
    serde_json::from_value(json!({
        "metadata": {"name": "data", "namespace": "ns", "uid": uid},
        "spec": {"volumeName": volume},
        "status": {"phase": phase},
    }))
    .unwrap()
}

fn pv(spec: Value) -> PersistentVolume {
    serde_json::from_value(json!({"metadata": {"name": "pv1"}, "spec": spec})).unwrap()
}

fn bound_to(ns: &str, name: &str, uid: &str) -> PersistentVolume {
    pv(
        json!({"claimRef": {"namespace": ns, "name": name, "uid": uid},
              "csi": {"driver": "d", "volumeHandle": "h"}}),
    )
}

/// Name, claim, its PV, and the expected result (or a part of the error).
type Case = (
    &'static str,
    PersistentVolumeClaim,
    Option<PersistentVolume>,
    Result<(), &'static str>,
);

#[test]
fn a_claim_is_usable_only_when_bound_both_ways() {
    let good = bound_to("ns", "data", "u1");
    let cases: Vec<Case> = vec![
        (
            "bound",
            claim("Bound", "pv1", "u1"),
            Some(good.clone()),
            Ok(()),
        ),
        (
            "pending",
            claim("Pending", "", "u1"),
            None,
            Err("is not bound (phase \"Pending\")"),
        ),
        (
            "bound without a volume name",
            claim("Bound", "", "u1"),
            None,
            Err("is not bound"),
        ),
        (
            "lost",
            claim("Lost", "pv1", "u1"),
            Some(good.clone()),
            Err("is not bound"),
        ),
        (
            "pv bound to an older claim of the same name",
            claim("Bound", "pv1", "u2"),
            Some(good.clone()),
            Err("claimRef is ns/data (uid u1)"),
        ),
        (
            "pv bound to another claim",
            claim("Bound", "pv1", "u1"),
            Some(bound_to("ns", "other", "u1")),
            Err("is not bound to claim ns/data"),
        ),
        (
            "pv in another namespace",
            claim("Bound", "pv1", "u1"),
            Some(bound_to("ns2", "data", "u1")),
            Err("is not bound to claim"),
        ),
        (
            "pv without claimRef",
            claim("Bound", "pv1", "u1"),
            Some(pv(json!({"csi": {"driver": "d"}}))),
            Err("its claimRef is empty"),
        ),
    ];
    for (name, c, v, want) in cases {
        let got = check_claim("ns", "data", &c, v.as_ref());
        match (got, want) {
            (Ok(()), Ok(())) => {}
            (Err(e), Err(needle)) => {
                assert!(
                    e.to_string().contains(needle),
                    "{name}: {e} lacks {needle:?}"
                )
            }
            (got, want) => panic!("{name}: got {got:?}, want {want:?}"),
        }
    }
}

#[test]
fn a_generic_ephemeral_claim_must_be_controlled_by_its_pod() {
    let owned = |kind: &str, uid: &str, controller: bool| -> PersistentVolumeClaim {
        serde_json::from_value(json!({"metadata": {"name": "p-data", "namespace": "ns",
            "ownerReferences": [{"apiVersion": "v1", "kind": kind, "name": "p",
                                 "uid": uid, "controller": controller}]}}))
        .unwrap()
    };
    assert!(check_ephemeral_owner(&owned("Pod", "pod-uid", true), "pod-uid").is_ok());
    let err = check_ephemeral_owner(&owned("Pod", "old-uid", true), "pod-uid").unwrap_err();
    assert!(
        err.to_string().contains("was not created for pod pod-uid"),
        "{err}"
    );
    assert!(check_ephemeral_owner(&owned("Pod", "pod-uid", false), "pod-uid").is_err());
    assert!(check_ephemeral_owner(&owned("StatefulSet", "pod-uid", true), "pod-uid").is_err());
    assert!(check_ephemeral_owner(&PersistentVolumeClaim::default(), "pod-uid").is_err());
}

#[test]
fn pv_sources_resolve_or_name_what_is_unsupported() {
    let r = source_of(&pv(
        json!({"hostPath": {"path": "/srv", "type": "Directory"},
                                  "accessModes": ["ReadWriteOnce"]}),
    ))
    .unwrap();
    assert_eq!(
        r.source,
        PvSource::HostPath {
            path: "/srv".into(),
            type_: Some("Directory".into())
        }
    );
    assert_eq!(r.pv_name, "pv1");
    assert_eq!(r.access_modes, ["ReadWriteOnce"]);
    let r = source_of(&pv(json!({"local": {"path": "/mnt/disk1"}}))).unwrap();
    assert_eq!(
        r.source,
        PvSource::Local {
            path: "/mnt/disk1".into()
        }
    );
    let r = source_of(&pv(json!({"csi": {"driver": "d", "volumeHandle": "h",
        "readOnly": true, "fsType": "ext4", "volumeAttributes": {"k": "v"}}})))
    .unwrap();
    assert!(r.read_only);
    let PvSource::Csi(csi) = r.source else {
        panic!("csi expected")
    };
    assert_eq!(
        (csi.driver.as_str(), csi.volume_handle.as_str()),
        ("d", "h")
    );
    assert_eq!(csi.volume_attributes["k"], "v");
    let err = source_of(&pv(json!({"nfs": {"server": "s", "path": "/"}}))).unwrap_err();
    assert!(err.to_string().contains("(nfs)"), "{err}");
    let err = source_of(&pv(json!({"csi": {"driver": "d"}, "volumeMode": "Block"}))).unwrap_err();
    assert!(err.to_string().contains("(volumeMode Block)"), "{err}");
    let err = source_of(&pv(json!({}))).unwrap_err();
    assert!(err.to_string().contains("(none)"), "{err}");
}

#[test]
fn a_local_pv_is_used_only_where_its_node_affinity_matches() {
    let labels = BTreeMap::from([
        ("kubernetes.io/hostname".to_owned(), "n1".to_owned()),
        ("disk".to_owned(), "ssd".to_owned()),
    ]);
    let with = |terms: Value| {
        pv(json!({"local": {"path": "/mnt"},
                  "nodeAffinity": {"required": {"nodeSelectorTerms": terms}}}))
    };
    let host = |v: &str| {
        json!([{"matchExpressions": [
        {"key": "kubernetes.io/hostname", "operator": "In", "values": [v]}]}])
    };
    assert!(local_fits_node(&with(host("n1")), "n1", &labels).is_ok());
    let err = local_fits_node(&with(host("n2")), "n1", &labels).unwrap_err();
    assert!(err.to_string().contains("does not match"), "{err}");
    // Terms are ORed.
    let either = json!([
        {"matchExpressions": [{"key": "disk", "operator": "In", "values": ["hdd"]}]},
        {"matchExpressions": [{"key": "disk", "operator": "Exists"}]}]);
    assert!(local_fits_node(&with(either), "n1", &labels).is_ok());
    let by_name = json!([{"matchFields": [
        {"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]);
    assert!(local_fits_node(&with(by_name), "n1", &labels).is_ok());
    // No affinity at all: nothing to check.
    assert!(local_fits_node(&pv(json!({"local": {"path": "/mnt"}})), "n1", &labels).is_ok());
}
