//! The UID of a static pod: a hash over the node name, the manifest's path and the
//! pod's content, as upstream's `applyDefaults` does (`pkg/kubelet/config/common.go`).
//!
//! The hash function is litelet's own: 128-bit FNV-1a over a canonical encoding of the
//! decoded document (object keys sorted, every value tagged and length-prefixed), shown
//! as 32 hex digits like upstream's MD5. It need not equal upstream's value; what
//! matters is that it is stable (across restarts and litelet versions, so a restarted
//! kubelet adopts the running containers) and that it changes whenever the content
//! does, so an edited manifest becomes a new pod, as upstream. Because the decoded
//! document is hashed, not the bytes, comments, whitespace and key order do not count.
//!
//! Pure; called by the `static-pods` thread while parsing.

use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use serde_json::Value;

const FNV_OFFSET: u128 = 0x6c62_272e_07bb_0142_62b8_2175_6295_c58d;
const FNV_PRIME: u128 = 0x0000_0000_0100_0000_0000_0000_0000_013b;

struct Fnv128(u128);

impl Fnv128 {
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 ^= u128::from(*b);
            self.0 = self.0.wrapping_mul(FNV_PRIME);
        }
    }

    /// A length-prefixed byte string, so concatenations cannot collide.
    fn write_str(&mut self, bytes: &[u8]) {
        self.write(&(bytes.len() as u64).to_le_bytes());
        self.write(bytes);
    }
}

/// The UID of the pod decoded from `content`, read from `path` on node `node`.
pub fn static_pod_uid(node: &str, path: &Path, content: &Value) -> String {
    let mut h = Fnv128(FNV_OFFSET);
    h.write(b"host:");
    h.write_str(node.as_bytes());
    h.write(b"file:");
    h.write_str(path.as_os_str().as_bytes());
    hash_value(&mut h, content);
    format!("{:032x}", h.0)
}

fn hash_value(h: &mut Fnv128, v: &Value) {
    match v {
        Value::Null => h.write(b"n"),
        Value::Bool(true) => h.write(b"t"),
        Value::Bool(false) => h.write(b"f"),
        Value::Number(n) => {
            h.write(b"#");
            h.write_str(n.to_string().as_bytes());
        }
        Value::String(s) => {
            h.write(b"s");
            h.write_str(s.as_bytes());
        }
        Value::Array(items) => {
            h.write(b"[");
            h.write(&(items.len() as u64).to_le_bytes());
            for item in items {
                hash_value(h, item);
            }
        }
        Value::Object(map) => {
            h.write(b"{");
            h.write(&(map.len() as u64).to_le_bytes());
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            for key in keys {
                h.write_str(key.as_bytes());
                hash_value(h, &map[key.as_str()]);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn fnv_matches_reference_vectors() {
        // Published FNV-1a 128-bit test vectors.
        let mut h = Fnv128(FNV_OFFSET);
        assert_eq!(h.0, 0x6c62272e07bb014262b821756295c58d);
        h.write(b"a");
        assert_eq!(h.0, 0xd228cb696f1a8caf78912b704e4a8964);
    }

    #[test]
    fn known_value_is_pinned() {
        // Changing the encoding would change every static pod's UID on upgrade and
        // restart all of them: this test makes such a change deliberate.
        let uid = static_pod_uid(
            "node-1",
            Path::new("/etc/kubernetes/manifests/web.yaml"),
            &json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web"}}),
        );
        assert_eq!(uid.len(), 32);
        assert_eq!(uid, "0dc39bbb3f9108edb32e5d4bd03b4af3");
    }

    #[test]
    fn key_order_does_not_count_but_values_do() {
        let p = Path::new("/m/a.yaml");
        let a = static_pod_uid("n", p, &json!({"a": 1, "b": [1, "x"]}));
        let b = static_pod_uid("n", p, &json!({"b": [1, "x"], "a": 1}));
        assert_eq!(a, b);
        assert_ne!(a, static_pod_uid("n", p, &json!({"a": 1, "b": ["x", 1]})));
        assert_ne!(a, static_pod_uid("n", p, &json!({"a": "1", "b": [1, "x"]})));
        // Length prefixes: moving a boundary changes the hash.
        assert_ne!(
            static_pod_uid("n", p, &json!({"ab": "c"})),
            static_pod_uid("n", p, &json!({"a": "bc"}))
        );
        assert_ne!(
            static_pod_uid("no", Path::new("de"), &json!(null)),
            static_pod_uid("nod", Path::new("e"), &json!(null))
        );
    }
}
