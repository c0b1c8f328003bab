//! Tables for the lean listing: what it keeps of real answers (encoded by the
//! generated types), what it skips, and what it refuses.

use std::collections::HashMap;

use protobuf::{Message, MessageField};

use super::*;

/// A container as a runtime lists it: labels and annotations beyond the pod's, an
/// image, timestamps; `state` None leaves the field out (its zero value).
fn container(
    id: &str,
    name: &str,
    state: Option<pb::ContainerState>,
    pod: Option<&str>,
) -> pb::Container {
    let mut labels = HashMap::from([
        ("io.kubernetes.container.name".to_owned(), name.to_owned()),
        ("app".to_owned(), "web".to_owned()),
    ]);
    if let Some(uid) = pod {
        labels.insert(POD_UID_LABEL.into(), uid.into());
        labels.insert(POD_NAME_LABEL.into(), format!("pod-{uid}"));
        labels.insert(POD_NAMESPACE_LABEL.into(), "shop".into());
    }
    pb::Container {
        id: id.into(),
        pod_sandbox_id: format!("sandbox-of-{id}"),
        metadata: MessageField::some(pb::ContainerMetadata {
            name: name.into(),
            attempt: 3,
            ..Default::default()
        }),
        image: MessageField::some(pb::ImageSpec {
            image: "busybox:1.36".into(),
            ..Default::default()
        }),
        image_ref: "sha256:abc".into(),
        state: state.unwrap_or_default().into(),
        created_at: 1_700_000_000_000_000_000,
        labels,
        annotations: HashMap::from([(
            "io.kubernetes.container.hash".to_owned(),
            "1234".to_owned(),
        )]),
        ..Default::default()
    }
}

fn decode<T>(message: &impl Message, read: fn(&mut CodedInputStream) -> Decoded<T>) -> Decoded<T> {
    let bytes = message.write_to_bytes().expect("encode");
    let mut stream = CodedInputStream::from_bytes(&bytes);
    read(&mut stream)
}

#[test]
fn containers_keep_their_ids_names_states_and_pod_labels_only() {
    let listed = pb::ListContainersResponse {
        containers: vec![
            container(
                "c1",
                "app",
                Some(pb::ContainerState::CONTAINER_RUNNING),
                Some("u1"),
            ),
            container(
                "c2",
                "init",
                Some(pb::ContainerState::CONTAINER_EXITED),
                Some("u1"),
            ),
            container("c3", "other", None, None),
            container(
                "c4",
                "x",
                Some(pb::ContainerState::CONTAINER_UNKNOWN),
                Some("u2"),
            ),
        ],
        ..Default::default()
    };
    let decoded = decode(&listed, decode_containers).expect("decode");
    let pod = |uid: &str| {
        (
            Some(uid.to_owned()),
            Some(format!("pod-{uid}")),
            Some("shop".to_owned()),
        )
    };
    let want = [
        (
            "c1",
            "app",
            pb::ContainerState::CONTAINER_RUNNING,
            pod("u1"),
        ),
        (
            "c2",
            "init",
            pb::ContainerState::CONTAINER_EXITED,
            pod("u1"),
        ),
        (
            "c3",
            "other",
            pb::ContainerState::CONTAINER_CREATED,
            (None, None, None),
        ),
        ("c4", "x", pb::ContainerState::CONTAINER_UNKNOWN, pod("u2")),
    ];
    let want: Vec<ListedContainer> = want
        .into_iter()
        .map(
            |(id, name, state, (pod_uid, pod_name, pod_namespace))| ListedContainer {
                id: id.into(),
                name: name.into(),
                state,
                pod_uid,
                pod_name,
                pod_namespace,
            },
        )
        .collect();
    assert_eq!(decoded.0, want);
}

#[test]
fn sandboxes_keep_their_ids_pod_identity_readiness_and_creation_time() {
    let sandbox =
        |id: &str, uid: &str, state: Option<pb::PodSandboxState>, created: i64| pb::PodSandbox {
            id: id.into(),
            metadata: MessageField::some(pb::PodSandboxMetadata {
                name: format!("pod-{uid}"),
                uid: uid.into(),
                namespace: "shop".into(),
                attempt: 1,
                ..Default::default()
            }),
            state: state.unwrap_or_default().into(),
            created_at: created,
            labels: HashMap::from([(POD_UID_LABEL.to_owned(), uid.to_owned())]),
            annotations: HashMap::from([("a".to_owned(), "b".to_owned())]),
            runtime_handler: "runc".into(),
            ..Default::default()
        };
    let listed = pb::ListPodSandboxResponse {
        items: vec![
            sandbox("s1", "u1", Some(pb::PodSandboxState::SANDBOX_NOTREADY), 5),
            sandbox("s2", "u2", None, 1_700_000_000_000_000_000),
        ],
        ..Default::default()
    };
    let decoded = decode(&listed, decode_sandboxes).expect("decode");
    let want = |id: &str, uid: &str, ready: bool, created_at: i64| ListedSandbox {
        id: id.into(),
        name: format!("pod-{uid}"),
        uid: uid.into(),
        namespace: "shop".into(),
        ready,
        created_at,
    };
    assert_eq!(
        decoded.0,
        [
            want("s1", "u1", false, 5),
            want("s2", "u2", true, 1_700_000_000_000_000_000)
        ]
    );
}

#[test]
fn fields_this_version_does_not_know_are_skipped() {
    let mut c = container(
        "c1",
        "app",
        Some(pb::ContainerState::CONTAINER_RUNNING),
        Some("u1"),
    );
    c.special_fields
        .mut_unknown_fields()
        .add_length_delimited(99, b"from a newer runtime".to_vec());
    c.special_fields.mut_unknown_fields().add_varint(100, 7);
    let mut listed = pb::ListContainersResponse {
        containers: vec![c],
        ..Default::default()
    };
    listed
        .special_fields
        .mut_unknown_fields()
        .add_fixed64(50, 1);
    let decoded = decode(&listed, decode_containers).expect("decode");
    assert_eq!(decoded.0.len(), 1);
    assert_eq!(decoded.0[0].id, "c1");
    assert_eq!(decoded.0[0].pod_uid.as_deref(), Some("u1"));
}

#[test]
fn a_cut_or_mistyped_answer_is_an_error_not_a_panic() {
    let listed = pb::ListContainersResponse {
        containers: vec![container("c1", "app", None, Some("u1"))],
        ..Default::default()
    };
    let bytes = listed.write_to_bytes().expect("encode");
    for cut in 1..bytes.len() {
        let result = decode_containers(&mut CodedInputStream::from_bytes(&bytes[..cut]));
        assert!(result.is_err(), "{cut} of {} bytes decoded", bytes.len());
    }
    // Field 1 of the response (the containers) sent as a varint.
    let mistyped = [0x08, 0x01];
    assert!(decode_containers(&mut CodedInputStream::from_bytes(&mistyped)).is_err());
    assert!(decode_sandboxes(&mut CodedInputStream::from_bytes(&mistyped)).is_err());
}
