//! Mirror pods: the API server's read-only copies of static pods, so the cluster sees
//! them (upstream mirror client).
//!
//! Called from pod worker threads during SyncPod. Errors are returned for the caller
//! to log; a missing mirror is re-created by a later sync.

use crate::api::client::{ApiClient, DeleteOptions};
use crate::api::error::ApiError;
use crate::api::meta::{ObjectMeta, OwnerReference};
use crate::api::node::Node;
use crate::api::paths;
use crate::api::pod::{Pod, CONFIG_HASH_ANNOTATION_KEY, CONFIG_MIRROR_ANNOTATION_KEY};

/// Creates and deletes mirror pods for one node.
#[derive(Clone)]
pub struct MirrorClient {
    client: ApiClient,
    node_name: String,
}

/// The mirror pod of `static_pod`: same name, namespace, labels, annotations and spec,
/// marked with the config.mirror annotation and owned by the node.
pub fn mirror_pod_of(static_pod: &Pod, node: &Node) -> Pod {
    let mut annotations = static_pod.metadata.annotations.clone();
    let hash = static_pod
        .metadata
        .annotation(CONFIG_HASH_ANNOTATION_KEY)
        .unwrap_or(static_pod.uid())
        .to_owned();
    annotations.insert(CONFIG_MIRROR_ANNOTATION_KEY.to_owned(), hash);
    let owner = OwnerReference {
        api_version: "v1".into(),
        kind: "Node".into(),
        name: node.metadata.name.clone().unwrap_or_default(),
        uid: node.metadata.uid.clone().unwrap_or_default(),
        controller: Some(true),
        ..Default::default()
    };
    Pod {
        api_version: "v1".into(),
        kind: "Pod".into(),
        metadata: ObjectMeta {
            name: static_pod.metadata.name.clone(),
            namespace: static_pod.metadata.namespace.clone(),
            labels: static_pod.metadata.labels.clone(),
            annotations,
            owner_references: vec![owner],
            ..Default::default()
        },
        spec: static_pod.spec.clone(),
        ..Default::default()
    }
}

/// True when `mirror` mirrors this version of `static_pod`.
pub fn is_mirror_of(mirror: &Pod, static_pod: &Pod) -> bool {
    let hash = static_pod.metadata.annotation(CONFIG_HASH_ANNOTATION_KEY);
    hash.is_some() && mirror.metadata.annotation(CONFIG_MIRROR_ANNOTATION_KEY) == hash
}

impl MirrorClient {
    pub fn new(client: ApiClient, node_name: String) -> MirrorClient {
        MirrorClient { client, node_name }
    }

    /// Creates the mirror pod unless the node is gone or being deleted.
    pub fn create(&self, static_pod: &Pod) -> Result<(), ApiError> {
        let node: Node = self.client.get(&paths::node(&self.node_name))?;
        if node.metadata.deletion_timestamp.is_some() {
            return Ok(());
        }
        let mirror = mirror_pod_of(static_pod, &node);
        match self
            .client
            .create(&paths::pods(static_pod.namespace()), &mirror)
        {
            Ok(_) | Err(ApiError::AlreadyExists { .. }) => Ok(()),
            Err(err) => Err(err),
        }
    }

    /// Deletes the mirror pod `name` in `namespace`, only if it still has `uid`.
    pub fn delete(&self, namespace: &str, name: &str, uid: Option<&str>) -> Result<(), ApiError> {
        let options = DeleteOptions {
            grace_period_seconds: Some(0),
            precondition_uid: uid.map(str::to_owned),
            ..Default::default()
        };
        match self.client.delete(&paths::pod(namespace, name), &options) {
            Ok(()) | Err(ApiError::NotFound { .. }) => Ok(()),
            Err(err) => Err(err),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::pod::CONFIG_SOURCE_ANNOTATION_KEY;

    #[test]
    fn mirror_copies_the_static_pod_and_marks_it() {
        let mut static_pod = Pod::default();
        static_pod.metadata.name = Some("etcd-edge".into());
        static_pod.metadata.namespace = Some("kube-system".into());
        static_pod.metadata.uid = Some("hash1".into());
        static_pod
            .metadata
            .annotations
            .insert(CONFIG_SOURCE_ANNOTATION_KEY.into(), "file".into());
        static_pod
            .metadata
            .annotations
            .insert(CONFIG_HASH_ANNOTATION_KEY.into(), "hash1".into());
        let node = Node {
            metadata: ObjectMeta {
                name: Some("edge".into()),
                uid: Some("node-uid".into()),
                ..Default::default()
            },
            ..Default::default()
        };
        let mirror = mirror_pod_of(&static_pod, &node);
        assert!(mirror.is_mirror());
        assert!(mirror.metadata.uid.is_none());
        assert_eq!(mirror.metadata.owner_references[0].uid, "node-uid");
        assert!(is_mirror_of(&mirror, &static_pod));
        static_pod
            .metadata
            .annotations
            .insert(CONFIG_HASH_ANNOTATION_KEY.into(), "hash2".into());
        assert!(!is_mirror_of(&mirror, &static_pod));
    }
}
