//! The files of configMap, secret and downwardAPI volumes (and of the same sources in
//! a projected volume): which keys become which files with which mode.
//!
//! Pure: the caller fetches the objects and hands over their decoded data; the
//! result goes to the atomic writer.

use std::collections::BTreeMap;

use super::atomic::{FileProjection, Payload};
use super::error::{DownwardApiError, VolumeError};
use super::paths::clean_file_path;
use crate::api::pod::{Container, DownwardApiVolumeFile, KeyToPath, Pod};
use crate::runtime::env::{resource_value, EnvContext};

/// Mode of projected files when the volume names none (0644, the API default).
pub const DEFAULT_MODE: u32 = 0o644;

/// A configMap or secret as a volume source sees it.
pub struct KeySource<'a> {
    /// "configmap" or "secret", for messages.
    pub kind: &'static str,
    pub namespace: &'a str,
    pub name: &'a str,
    /// The decoded data; `None` when the object does not exist.
    pub data: Option<&'a BTreeMap<String, Vec<u8>>>,
    pub items: &'a [KeyToPath],
    pub mode: u32,
    pub optional: bool,
}

/// Mode bits from the API (an int32 that validation keeps within 0..=0777).
pub fn mode_bits(mode: Option<i32>, default: u32) -> u32 {
    mode.and_then(|m| u32::try_from(m).ok())
        .map(|m| m & 0o777)
        .unwrap_or(default)
}

/// Files of a configMap or secret: every key, or only the keys `items` names.
/// A missing object or key fails unless the source is optional.
pub fn keys(source: &KeySource<'_>) -> Result<Payload, VolumeError> {
    let mut payload = Payload::new();
    let Some(data) = source.data else {
        if source.optional {
            return Ok(payload);
        }
        return Err(VolumeError::NotFound {
            kind: source.kind,
            namespace: source.namespace.to_owned(),
            name: source.name.to_owned(),
        });
    };
    if source.items.is_empty() {
        for (key, value) in data {
            payload.insert(
                clean_file_path(key)?,
                FileProjection {
                    data: value.clone(),
                    mode: source.mode,
                },
            );
        }
        return Ok(payload);
    }
    for item in source.items {
        let Some(value) = data.get(&item.key) else {
            if source.optional {
                continue;
            }
            return Err(VolumeError::MissingKey {
                kind: source.kind,
                namespace: source.namespace.to_owned(),
                name: source.name.to_owned(),
                key: item.key.clone(),
            });
        };
        payload.insert(
            clean_file_path(&item.path)?,
            FileProjection {
                data: value.clone(),
                mode: mode_bits(item.mode, source.mode),
            },
        );
    }
    Ok(payload)
}

/// Quotes like Go's `%q` (the downward API's label and annotation format): ASCII
/// escapes for quotes, backslashes and control characters; other text kept.
fn go_quote(value: &str) -> String {
    let mut out = String::with_capacity(value.len() + 2);
    out.push('"');
    for c in value.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\u{b}' => out.push_str("\\v"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                out.push_str(&format!("\\x{:02x}", c as u32))
            }
            c if c.is_control() => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// `key="value"` lines sorted by key, no final newline (upstream FormatMap).
pub fn format_map(map: &BTreeMap<String, String>) -> String {
    map.iter()
        .map(|(k, v)| format!("{k}={}", go_quote(v)))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The value of a downward API volume `fieldRef` (metadata only, as upstream).
fn field(pod: &Pod, path: &str) -> Result<String, DownwardApiError> {
    let meta = &pod.metadata;
    let subscript = |prefix: &str| {
        path.strip_prefix(prefix)
            .and_then(|rest| rest.strip_suffix("']"))
            .map(str::to_owned)
    };
    if let Some(key) = subscript("metadata.labels['") {
        return Ok(meta.labels.get(&key).cloned().unwrap_or_default());
    }
    if let Some(key) = subscript("metadata.annotations['") {
        return Ok(meta.annotations.get(&key).cloned().unwrap_or_default());
    }
    Ok(match path {
        "metadata.name" => pod.name().to_owned(),
        "metadata.namespace" => pod.namespace().to_owned(),
        "metadata.uid" => pod.uid().to_owned(),
        "metadata.labels" => format_map(&meta.labels),
        "metadata.annotations" => format_map(&meta.annotations),
        other => return Err(DownwardApiError::UnsupportedField(other.to_owned())),
    })
}

fn container<'a>(pod: &'a Pod, name: &str) -> Option<&'a Container> {
    pod.spec
        .containers
        .iter()
        .chain(pod.spec.init_containers.iter())
        .find(|c| c.name == name)
}

/// Files of a downwardAPI source: pod metadata fields and container resources.
pub fn downward(
    pod: &Pod,
    items: &[DownwardApiVolumeFile],
    default_mode: u32,
    node: &EnvContext,
) -> Result<Payload, VolumeError> {
    let mut payload = Payload::new();
    for item in items {
        let path = clean_file_path(&item.path)?;
        let failed = |source: DownwardApiError| VolumeError::DownwardApi {
            path: item.path.clone(),
            source,
        };
        let value = match (&item.field_ref, &item.resource_field_ref) {
            (Some(f), _) => field(pod, &f.field_path).map_err(failed)?,
            (None, Some(r)) => {
                let name = r.container_name.as_deref().unwrap_or("");
                let own = container(pod, name)
                    .ok_or_else(|| failed(DownwardApiError::NoContainer(name.to_owned())))?;
                resource_value(pod, own, None, &r.resource, r.divisor.as_ref(), node)
                    .map_err(|err| failed(err.into()))?
            }
            (None, None) => return Err(failed(DownwardApiError::NoSource)),
        };
        payload.insert(
            path,
            FileProjection {
                data: value.into_bytes(),
                mode: mode_bits(item.mode, default_mode),
            },
        );
    }
    Ok(payload)
}

/// Adds `more` to `payload`; the same file from two sources is an error.
pub fn merge(payload: &mut Payload, more: Payload) -> Result<(), VolumeError> {
    for (path, file) in more {
        if payload.contains_key(&path) {
            return Err(VolumeError::Conflict { path });
        }
        payload.insert(path, file);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::pod::{ObjectFieldSelector, ResourceFieldSelector, ResourceRequirements};
    use crate::api::quantity::Quantity;

    fn data() -> BTreeMap<String, Vec<u8>> {
        BTreeMap::from([
            ("ca.crt".to_owned(), b"PEM".to_vec()),
            ("other".to_owned(), b"x".to_vec()),
        ])
    }

    fn source<'a>(
        data: Option<&'a BTreeMap<String, Vec<u8>>>,
        items: &'a [KeyToPath],
        optional: bool,
    ) -> KeySource<'a> {
        KeySource {
            kind: "configmap",
            namespace: "ns",
            name: "cfg",
            data,
            items,
            mode: 0o644,
            optional,
        }
    }

    fn item(key: &str, path: &str, mode: Option<i32>) -> KeyToPath {
        KeyToPath {
            key: key.into(),
            path: path.into(),
            mode,
        }
    }

    #[test]
    fn keys_items_modes_and_optional() {
        let d = data();
        let all = keys(&source(Some(&d), &[], false)).unwrap();
        assert_eq!(all.keys().collect::<Vec<_>>(), ["ca.crt", "other"]);
        assert_eq!(all["ca.crt"].mode, 0o644);

        let items = [item("ca.crt", "certs/ca.pem", Some(0o400))];
        let some = keys(&source(Some(&d), &items, false)).unwrap();
        assert_eq!(some.len(), 1);
        assert_eq!(some["certs/ca.pem"].data, b"PEM");
        assert_eq!(some["certs/ca.pem"].mode, 0o400);

        let missing = [item("nope", "n", None)];
        let err = keys(&source(Some(&d), &missing, false)).unwrap_err();
        assert_eq!(err.to_string(), "configmap ns/cfg has no key \"nope\"");
        assert!(keys(&source(Some(&d), &missing, true)).unwrap().is_empty());

        let err = keys(&source(None, &[], false)).unwrap_err();
        assert_eq!(err.to_string(), "configmap ns/cfg not found");
        assert!(keys(&source(None, &[], true)).unwrap().is_empty());

        let escape = [item("ca.crt", "../../etc/passwd", None)];
        assert!(keys(&source(Some(&d), &escape, false)).is_err());
    }

    #[test]
    fn downward_fields_and_resources() {
        let mut pod = Pod::default();
        pod.metadata.name = Some("web".into());
        pod.metadata.namespace = Some("shop".into());
        pod.metadata.labels.insert("tier".into(), "front".into());
        pod.metadata.labels.insert("app".into(), "a \"b\"\n".into());
        pod.spec.containers.push(Container {
            name: "app".into(),
            resources: Some(ResourceRequirements {
                limits: BTreeMap::from([("memory".to_owned(), Quantity::parse("64Mi").unwrap())]),
                ..Default::default()
            }),
            ..Default::default()
        });
        let f = |path: &str, field_path: &str| DownwardApiVolumeFile {
            path: path.into(),
            field_ref: Some(ObjectFieldSelector {
                field_path: field_path.into(),
                ..Default::default()
            }),
            ..Default::default()
        };
        let mut mem = DownwardApiVolumeFile {
            path: "mem".into(),
            resource_field_ref: Some(ResourceFieldSelector {
                container_name: Some("app".into()),
                resource: "limits.memory".into(),
                divisor: Some(Quantity::parse("1Mi").unwrap()),
            }),
            mode: Some(0o600),
            ..Default::default()
        };
        let items = vec![
            f("namespace", "metadata.namespace"),
            f("labels", "metadata.labels"),
            f("tier", "metadata.labels['tier']"),
            mem.clone(),
        ];
        let node = EnvContext::default();
        let p = downward(&pod, &items, 0o644, &node).unwrap();
        assert_eq!(p["namespace"].data, b"shop");
        assert_eq!(
            String::from_utf8_lossy(&p["labels"].data),
            "app=\"a \\\"b\\\"\\n\"\ntier=\"front\""
        );
        assert_eq!(p["tier"].data, b"front");
        assert_eq!(p["mem"].data, b"64");
        assert_eq!(p["mem"].mode, 0o600);

        let bad = vec![f("ip", "status.podIP")];
        assert!(downward(&pod, &bad, 0o644, &node).is_err());
        mem.resource_field_ref.as_mut().unwrap().container_name = Some("ghost".into());
        let err = downward(&pod, &[mem], 0o644, &node)
            .unwrap_err()
            .to_string();
        assert!(err.contains("no container named \"ghost\""), "{err}");
    }

    #[test]
    fn downward_limits_of_a_container_without_limits_are_node_allocatable() {
        let mut pod = Pod::default();
        pod.spec.containers.push(Container {
            name: "app".into(),
            ..Default::default()
        });
        pod.spec.containers.push(Container {
            name: "zero".into(),
            resources: Some(ResourceRequirements {
                limits: BTreeMap::from([("cpu".to_owned(), Quantity::parse("0").unwrap())]),
                ..Default::default()
            }),
            ..Default::default()
        });
        let item =
            |path: &str, container: &str, resource: &str, divisor: &str| DownwardApiVolumeFile {
                path: path.into(),
                resource_field_ref: Some(ResourceFieldSelector {
                    container_name: Some(container.into()),
                    resource: resource.into(),
                    divisor: Some(Quantity::parse(divisor).unwrap()),
                }),
                ..Default::default()
            };
        let items = vec![
            item("cpu", "app", "limits.cpu", "1m"),
            item("mem", "app", "limits.memory", "1Mi"),
            item("disk", "app", "limits.ephemeral-storage", "1Gi"),
            item("req", "app", "requests.memory", "1"),
            item("zero-cpu", "zero", "limits.cpu", "1"),
        ];
        let node = EnvContext {
            node_allocatable: BTreeMap::from([
                ("cpu".to_owned(), Quantity::parse("3500m").unwrap()),
                ("memory".to_owned(), Quantity::parse("2Gi").unwrap()),
                (
                    "ephemeral-storage".to_owned(),
                    Quantity::parse("20Gi").unwrap(),
                ),
            ]),
            ..Default::default()
        };
        let p = downward(&pod, &items, 0o644, &node).unwrap();
        let text = |k: &str| String::from_utf8_lossy(&p[k].data).into_owned();
        assert_eq!(text("cpu"), "3500");
        assert_eq!(text("mem"), "2048");
        assert_eq!(text("disk"), "20");
        assert_eq!(text("req"), "0", "requests are not defaulted");
        assert_eq!(
            text("zero-cpu"),
            "4",
            "a zero limit reads as allocatable, rounded up"
        );
    }

    #[test]
    fn merge_refuses_duplicates() {
        let mut a = Payload::new();
        let file = FileProjection {
            data: vec![],
            mode: 0o644,
        };
        a.insert("x".into(), file.clone());
        let mut b = Payload::new();
        b.insert("x".into(), file);
        assert!(merge(&mut a, b).is_err());
        assert_eq!(go_quote("\u{1}é"), "\"\\x01é\"");
    }
}
