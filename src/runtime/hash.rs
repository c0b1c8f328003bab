//! The container spec hash: how litelet notices that a running container no longer
//! matches its spec (upstream `HashContainer` / `HashContainerWithoutResources`).
//!
//! The hash is 64-bit FNV-1a over a canonical JSON form of the `Container`: the serde
//! serialisation turned into a `serde_json::Value`, written back with object keys
//! sorted, so neither field order nor serde_json's `preserve_order` feature can move
//! it. Pure and infallible; called by the sync path when a container is created (the
//! value goes into its annotations, see `labels`) and by `compute_pod_actions` to
//! compare a running container with the spec. The hash also keys a container's
//! restart back-off ([`stable_key`]), so editing the spec starts a fresh one.
//!
//! Contract: the numbers need not equal upstream's (upstream uses FNV-32a over Go's
//! JSON), so a container created by another kubelet is seen as changed once and
//! restarted. They must stay the same across litelet versions for the same spec and
//! change whenever a field litelet acts on changes. Hence:
//! - unset fields are omitted by the `api` types, so modelling a new optional field
//!   does not move the hash of specs that do not use it;
//! - top-level fields of the container that litelet does not model (its `extra` map)
//!   are left out: they cannot change what litelet runs, and an API server upgrade
//!   that starts sending a new defaulted field must not restart every container.

use serde_json::Value;

use crate::api::pod::{Container, Pod};

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// Both hashes of a container spec, as stored in its annotations.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct ContainerHashes {
    /// Hash of the whole spec.
    pub hash: u64,
    /// Hash of the spec with `resources` removed (for in-place resize).
    pub hash_without_resources: u64,
}

impl ContainerHashes {
    /// Computes both hashes of `container`.
    pub fn of(container: &Container) -> Self {
        Self {
            hash: container_hash(container),
            hash_without_resources: container_hash_without_resources(container),
        }
    }
}

/// The hash of the whole container spec.
pub fn container_hash(container: &Container) -> u64 {
    if container.extra.is_empty() {
        return hash_value_of(container);
    }
    let mut trimmed = container.clone();
    trimmed.extra.clear();
    hash_value_of(&trimmed)
}

/// The hash of the container spec with `resources` removed: equal for two specs that
/// differ only in their resource requests and limits.
pub fn container_hash_without_resources(container: &Container) -> u64 {
    let mut trimmed = container.clone();
    trimmed.extra.clear();
    trimmed.resources = None;
    hash_value_of(&trimmed)
}

fn hash_value_of(container: &Container) -> u64 {
    let mut fnv = Fnv1a(FNV_OFFSET);
    match serde_json::to_value(container) {
        Ok(value) => write_canonical(&value, &mut fnv),
        // The api types only have string map keys, so this cannot happen; if it ever
        // did, the hash still depends only on the spec, through the error text.
        Err(err) => {
            fnv.write(b"!");
            fnv.write(err.to_string().as_bytes());
        }
    }
    fnv.0
}

/// 64-bit FNV-1a.
struct Fnv1a(u64);

impl Fnv1a {
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 ^= u64::from(*b);
            self.0 = self.0.wrapping_mul(FNV_PRIME);
        }
    }
}

/// Writes `value` as compact JSON with object keys in byte order.
fn write_canonical(value: &Value, out: &mut Fnv1a) {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            out.write(b"{");
            for (i, (key, v)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.write(b",");
                }
                out.write(Value::from(key.as_str()).to_string().as_bytes());
                out.write(b":");
                write_canonical(v, out);
            }
            out.write(b"}");
        }
        Value::Array(items) => {
            out.write(b"[");
            for (i, v) in items.iter().enumerate() {
                if i > 0 {
                    out.write(b",");
                }
                write_canonical(v, out);
            }
            out.write(b"]");
        }
        scalar => out.write(scalar.to_string().as_bytes()),
    }
}

/// The back-off key of a container: `<pod name>_<namespace>_<pod uid>_<container>_<hex
/// spec hash>` (upstream `getStableKey`). A spec change gives a fresh key.
pub fn stable_key(pod: &Pod, container: &Container) -> String {
    format!(
        "{}_{}_{}_{}_{:x}",
        pod.name(),
        pod.namespace(),
        pod.uid(),
        container.name,
        container_hash(container)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn container(value: Value) -> Container {
        serde_json::from_value(value).unwrap()
    }

    fn base() -> Value {
        json!({
            "name": "app",
            "image": "busybox:1.36",
            "command": ["sh", "-c", "sleep 3600"],
            "resources": {"limits": {"cpu": "500m", "memory": "64Mi"},
                          "requests": {"cpu": "250m", "memory": "64Mi"}},
            "env": [{"name": "A", "value": "1"}],
            "ports": [{"containerPort": 80, "protocol": "TCP"}]
        })
    }

    #[test]
    fn fnv1a_matches_reference_vectors() {
        let hash = |s: &str| {
            let mut h = Fnv1a(FNV_OFFSET);
            h.write(s.as_bytes());
            h.0
        };
        assert_eq!(hash(""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(hash("a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(hash("foobar"), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn hash_is_stable_for_the_same_spec() {
        let a = ContainerHashes::of(&container(base()));
        let b = ContainerHashes::of(&container(base()));
        assert_eq!(a, b);
        // Pinned so that a change in serialisation (which would restart every running
        // container after a litelet upgrade) fails this test.
        assert_eq!(
            container_hash(&container(json!({"name": "c", "image": "busybox"}))),
            {
                let mut h = Fnv1a(FNV_OFFSET);
                h.write(br#"{"image":"busybox","name":"c"}"#);
                h.0
            }
        );
    }

    #[test]
    fn key_order_of_the_input_does_not_matter() {
        let reordered = json!({
            "ports": [{"protocol": "TCP", "containerPort": 80}],
            "env": [{"value": "1", "name": "A"}],
            "resources": {"requests": {"memory": "64Mi", "cpu": "250m"},
                          "limits": {"memory": "64Mi", "cpu": "500m"}},
            "command": ["sh", "-c", "sleep 3600"],
            "image": "busybox:1.36",
            "name": "app"
        });
        assert_eq!(
            ContainerHashes::of(&container(reordered)),
            ContainerHashes::of(&container(base()))
        );
    }

    #[test]
    fn image_or_command_change_changes_both_hashes() {
        let before = ContainerHashes::of(&container(base()));
        let mut image = base();
        image["image"] = json!("busybox:1.37");
        let mut command = base();
        command["command"] = json!(["sh", "-c", "sleep 60"]);
        for changed in [image, command] {
            let after = ContainerHashes::of(&container(changed));
            assert_ne!(after.hash, before.hash);
            assert_ne!(after.hash_without_resources, before.hash_without_resources);
        }
    }

    #[test]
    fn resources_change_moves_only_the_full_hash() {
        let before = ContainerHashes::of(&container(base()));
        let mut resized = base();
        resized["resources"]["limits"]["memory"] = json!("128Mi");
        let after = ContainerHashes::of(&container(resized));
        assert_ne!(after.hash, before.hash);
        assert_eq!(after.hash_without_resources, before.hash_without_resources);
    }

    #[test]
    fn unknown_top_level_fields_do_not_change_the_hash() {
        let mut future = base();
        future["someFutureField"] = json!({"enabled": true});
        assert_eq!(
            ContainerHashes::of(&container(future)),
            ContainerHashes::of(&container(base()))
        );
    }

    #[test]
    fn stable_key_contains_the_spec_hash() {
        // A new spec means a new key, so no back-off carries over.
        let mut pod = Pod::default();
        pod.metadata.name = Some("web".into());
        pod.metadata.namespace = Some("prod".into());
        pod.metadata.uid = Some("u1".into());
        let mut c = Container {
            name: "app".into(),
            image: Some("busybox:1".into()),
            ..Container::default()
        };
        let key = stable_key(&pod, &c);
        assert_eq!(key, format!("web_prod_u1_app_{:x}", container_hash(&c)));
        c.image = Some("busybox:2".into());
        assert_ne!(stable_key(&pod, &c), key);
    }
}
