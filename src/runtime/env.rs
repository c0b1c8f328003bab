//! A container's environment (upstream makeEnvironmentVariables) and the `$(VAR)`
//! expansion of env values, command and args (upstream expansion package).
//!
//! Pure apart from the [`ConfigSource`] the caller passes for configMap and secret
//! references (the API-backed one arrives with the volumes work; standalone mode has
//! none, and a required reference then fails with a clear message).

use std::collections::BTreeMap;

use crate::api::pod::{Container, EnvVar, Pod};
use crate::api::quantity::Quantity;

/// Looks up configMaps and secrets of the pod's namespace.
pub trait ConfigSource {
    /// The data of configMap `name`, or `None` when it does not exist.
    fn config_map(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<BTreeMap<String, String>>, String>;
    /// The decoded data of secret `name`, or `None` when it does not exist.
    fn secret(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<BTreeMap<String, String>>, String>;
}

/// Standalone mode: there is no API server to read configMaps or secrets from.
pub struct NoConfigSource;

impl ConfigSource for NoConfigSource {
    fn config_map(&self, _: &str, name: &str) -> Result<Option<BTreeMap<String, String>>, String> {
        Err(format!(
            "configmap {name:?} cannot be read: litelet runs without an API server"
        ))
    }
    fn secret(&self, _: &str, name: &str) -> Result<Option<BTreeMap<String, String>>, String> {
        Err(format!(
            "secret {name:?} cannot be read: litelet runs without an API server"
        ))
    }
}

/// Facts about the node and the pod's network that fieldRefs can name.
#[derive(Clone, Debug, Default)]
pub struct EnvContext {
    pub node_name: String,
    pub host_ips: Vec<String>,
    pub pod_ips: Vec<String>,
    /// The node's allocatable cpu and memory, for resourceFieldRefs to unset limits.
    pub node_allocatable: BTreeMap<String, Quantity>,
}

/// Expands `$(NAME)` from `vars`; `$$` escapes a dollar; unknown references stay as
/// written (upstream behaviour, so a literal `$(x)` survives).
pub fn expand(input: &str, vars: &dyn Fn(&str) -> Option<String>) -> String {
    let mut out = String::with_capacity(input.len());
    let bytes = input.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'$' && i + 1 < bytes.len() {
            match bytes[i + 1] {
                b'$' => {
                    out.push('$');
                    i += 2;
                    continue;
                }
                b'(' => {
                    if let Some(close) = input[i + 2..].find(')') {
                        let name = &input[i + 2..i + 2 + close];
                        match vars(name) {
                            Some(value) => out.push_str(&value),
                            None => out.push_str(&input[i..i + 3 + close]),
                        }
                        i += 3 + close;
                        continue;
                    }
                }
                _ => {}
            }
        }
        let ch = input[i..].chars().next().unwrap_or('$');
        out.push(ch);
        i += ch.len_utf8();
    }
    out
}

fn field_value(pod: &Pod, path: &str, ctx: &EnvContext) -> Result<String, String> {
    let meta = &pod.metadata;
    let indexed = |prefix: &str, map: &BTreeMap<String, String>| {
        path.strip_prefix(prefix)
            .and_then(|rest| rest.strip_suffix("']"))
            .map(|key| map.get(key).cloned().unwrap_or_default())
    };
    if let Some(v) = indexed("metadata.labels['", &meta.labels) {
        return Ok(v);
    }
    if let Some(v) = indexed("metadata.annotations['", &meta.annotations) {
        return Ok(v);
    }
    Ok(match path {
        "metadata.name" => pod.name().to_owned(),
        "metadata.namespace" => pod.namespace().to_owned(),
        "metadata.uid" => pod.uid().to_owned(),
        "spec.nodeName" => pod
            .spec
            .node_name
            .clone()
            .unwrap_or_else(|| ctx.node_name.clone()),
        "spec.serviceAccountName" => pod.spec.service_account_name.clone().unwrap_or_default(),
        "status.hostIP" => ctx.host_ips.first().cloned().unwrap_or_default(),
        "status.hostIPs" => ctx.host_ips.join(","),
        "status.podIP" => ctx.pod_ips.first().cloned().unwrap_or_default(),
        "status.podIPs" => ctx.pod_ips.join(","),
        other => return Err(format!("unsupported fieldRef path {other:?}")),
    })
}

/// The value of a resourceFieldRef such as `limits.memory` with a divisor; CPU rounds
/// up to whole divisor units, as upstream. An unset limit reads as node allocatable.
pub(crate) fn resource_value(
    pod: &Pod,
    own: &Container,
    container_name: Option<&str>,
    resource: &str,
    divisor: Option<&Quantity>,
    ctx: &EnvContext,
) -> Result<String, String> {
    let container = match container_name.filter(|n| !n.is_empty() && *n != own.name) {
        Some(name) => pod
            .spec
            .containers
            .iter()
            .chain(pod.spec.init_containers.iter())
            .find(|c| c.name == name)
            .ok_or_else(|| format!("resourceFieldRef names unknown container {name:?}"))?,
        None => own,
    };
    let (kind, name) = resource
        .split_once('.')
        .ok_or_else(|| format!("unsupported resourceFieldRef resource {resource:?}"))?;
    let resources = container.resources.clone().unwrap_or_default();
    let map = match kind {
        "limits" => &resources.limits,
        "requests" => &resources.requests,
        _ => {
            return Err(format!(
                "unsupported resourceFieldRef resource {resource:?}"
            ))
        }
    };
    let quantity = map
        .get(name)
        .or_else(|| {
            (kind == "limits")
                .then(|| ctx.node_allocatable.get(name))
                .flatten()
        })
        .cloned()
        .unwrap_or_else(Quantity::zero);
    let one = Quantity::from_value(1, Default::default());
    let divisor = divisor.filter(|d| !d.is_zero()).unwrap_or(&one);
    if name == "cpu" {
        let milli = quantity.milli_value();
        let per = divisor.milli_value().max(1);
        return Ok((milli.saturating_add(per - 1) / per).to_string());
    }
    let per = divisor.value().max(1);
    let value = quantity.value();
    Ok((value.saturating_add(per - 1) / per).to_string())
}

/// The container's environment in order: envFrom sources, then env entries (later
/// ones win, and `$(VAR)` in a value sees everything defined before it).
pub fn container_env(
    pod: &Pod,
    container: &Container,
    ctx: &EnvContext,
    source: &dyn ConfigSource,
) -> Result<Vec<(String, String)>, String> {
    let namespace = pod.namespace();
    let mut env: Vec<(String, String)> = Vec::new();
    let set = |env: &mut Vec<(String, String)>, key: String, value: String| match env
        .iter_mut()
        .find(|(k, _)| *k == key)
    {
        Some(entry) => entry.1 = value,
        None => env.push((key, value)),
    };
    for from in &container.env_from {
        let prefix = from.prefix.clone().unwrap_or_default();
        let (data, what, reference) = match (&from.config_map_ref, &from.secret_ref) {
            (Some(r), _) => {
                let name = r.name.clone().unwrap_or_default();
                (source.config_map(namespace, &name)?, "configmap", r)
            }
            (None, Some(r)) => {
                let name = r.name.clone().unwrap_or_default();
                (source.secret(namespace, &name)?, "secret", r)
            }
            (None, None) => continue,
        };
        match data {
            Some(data) => {
                for (key, value) in data {
                    set(&mut env, format!("{prefix}{key}"), value);
                }
            }
            None if reference.optional.unwrap_or(false) => {}
            None => {
                return Err(format!(
                    "{what} {:?} not found",
                    reference.name.clone().unwrap_or_default()
                ))
            }
        }
    }
    for var in &container.env {
        if let Some(value) = env_var_value(pod, container, var, &env, ctx, source)? {
            set(&mut env, var.name.clone(), value);
        }
    }
    Ok(env)
}

fn env_var_value(
    pod: &Pod,
    container: &Container,
    var: &EnvVar,
    defined: &[(String, String)],
    ctx: &EnvContext,
    source: &dyn ConfigSource,
) -> Result<Option<String>, String> {
    let Some(from) = &var.value_from else {
        let lookup = |name: &str| {
            defined
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.clone())
        };
        return Ok(Some(expand(var.value.as_deref().unwrap_or(""), &lookup)));
    };
    if let Some(field) = &from.field_ref {
        return field_value(pod, &field.field_path, ctx).map(Some);
    }
    if let Some(r) = &from.resource_field_ref {
        return resource_value(
            pod,
            container,
            r.container_name.as_deref(),
            &r.resource,
            r.divisor.as_ref(),
            ctx,
        )
        .map(Some);
    }
    let (selector, data, what) = match (&from.config_map_key_ref, &from.secret_key_ref) {
        (Some(s), _) => (
            s,
            source.config_map(pod.namespace(), s.name.as_deref().unwrap_or(""))?,
            "configmap",
        ),
        (None, Some(s)) => (
            s,
            source.secret(pod.namespace(), s.name.as_deref().unwrap_or(""))?,
            "secret",
        ),
        (None, None) => return Ok(None),
    };
    let optional = selector.optional.unwrap_or(false);
    let name = selector.name.clone().unwrap_or_default();
    match data.and_then(|d| d.get(&selector.key).cloned()) {
        Some(value) => Ok(Some(value)),
        None if optional => Ok(None),
        None => Err(format!(
            "couldn't find key {} in {what} {}/{name}",
            selector.key,
            pod.namespace()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::pod::{
        EnvFromSource, EnvVarSource, KeySelector, ObjectFieldSelector, OptionalNameRef,
        ResourceFieldSelector, ResourceRequirements,
    };

    struct Maps;
    impl ConfigSource for Maps {
        fn config_map(
            &self,
            _: &str,
            name: &str,
        ) -> Result<Option<BTreeMap<String, String>>, String> {
            Ok((name == "settings")
                .then(|| BTreeMap::from([("MODE".to_owned(), "fast".to_owned())])))
        }
        fn secret(&self, _: &str, _: &str) -> Result<Option<BTreeMap<String, String>>, String> {
            Ok(None)
        }
    }

    fn var(name: &str, value: &str) -> EnvVar {
        EnvVar {
            name: name.into(),
            value: Some(value.into()),
            value_from: None,
        }
    }

    fn from(name: &str, source: EnvVarSource) -> EnvVar {
        EnvVar {
            name: name.into(),
            value: None,
            value_from: Some(source),
        }
    }

    #[test]
    fn expansion_rules() {
        let vars = |name: &str| (name == "A").then(|| "1".to_owned());
        assert_eq!(expand("x$(A)y", &vars), "x1y");
        assert_eq!(expand("$(B)", &vars), "$(B)");
        assert_eq!(expand("$$(A)", &vars), "$(A)");
        assert_eq!(expand("cost $5 $(A", &vars), "cost $5 $(A");
        assert_eq!(expand("ünï$(A)", &vars), "ünï1");
    }

    #[test]
    fn env_from_fields_resources_and_config_maps() {
        let mut pod = Pod::default();
        pod.metadata.name = Some("web".into());
        pod.metadata.namespace = Some("shop".into());
        pod.metadata.labels.insert("tier".into(), "front".into());
        let mut container = Container {
            name: "app".into(),
            resources: Some(ResourceRequirements {
                limits: BTreeMap::from([
                    ("cpu".to_owned(), Quantity::parse("250m").unwrap()),
                    ("memory".to_owned(), Quantity::parse("64Mi").unwrap()),
                ]),
                ..Default::default()
            }),
            ..Default::default()
        };
        container.env_from.push(EnvFromSource {
            prefix: Some("CFG_".into()),
            config_map_ref: Some(OptionalNameRef {
                name: Some("settings".into()),
                optional: None,
            }),
            secret_ref: None,
        });
        container.env = vec![
            var("BASE", "/srv"),
            var("DATA", "$(BASE)/data"),
            from(
                "POD",
                EnvVarSource {
                    field_ref: Some(ObjectFieldSelector {
                        field_path: "metadata.name".into(),
                        ..Default::default()
                    }),
                    ..Default::default()
                },
            ),
            from(
                "TIER",
                EnvVarSource {
                    field_ref: Some(ObjectFieldSelector {
                        field_path: "metadata.labels['tier']".into(),
                        ..Default::default()
                    }),
                    ..Default::default()
                },
            ),
            from(
                "CPUS",
                EnvVarSource {
                    resource_field_ref: Some(ResourceFieldSelector {
                        resource: "limits.cpu".into(),
                        ..Default::default()
                    }),
                    ..Default::default()
                },
            ),
            from(
                "MEM_MI",
                EnvVarSource {
                    resource_field_ref: Some(ResourceFieldSelector {
                        resource: "limits.memory".into(),
                        divisor: Some(Quantity::parse("1Mi").unwrap()),
                        ..Default::default()
                    }),
                    ..Default::default()
                },
            ),
            from(
                "OPTIONAL",
                EnvVarSource {
                    secret_key_ref: Some(KeySelector {
                        name: Some("missing".into()),
                        key: "x".into(),
                        optional: Some(true),
                    }),
                    ..Default::default()
                },
            ),
        ];
        let env = container_env(&pod, &container, &EnvContext::default(), &Maps).unwrap();
        let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        assert_eq!(get("CFG_MODE"), Some("fast"));
        assert_eq!(get("DATA"), Some("/srv/data"));
        assert_eq!(get("POD"), Some("web"));
        assert_eq!(get("TIER"), Some("front"));
        assert_eq!(get("CPUS"), Some("1"), "cpu rounds up");
        assert_eq!(get("MEM_MI"), Some("64"));
        assert_eq!(get("OPTIONAL"), None);

        // A required key that is missing is a clear error.
        container.env.push(from(
            "NEED",
            EnvVarSource {
                secret_key_ref: Some(KeySelector {
                    name: Some("creds".into()),
                    key: "token".into(),
                    optional: None,
                }),
                ..Default::default()
            },
        ));
        let err = container_env(&pod, &container, &EnvContext::default(), &Maps).unwrap_err();
        assert!(
            err.contains("couldn't find key token in secret shop/creds"),
            "{err}"
        );
        // Without an API server, references fail with a message saying so.
        let err =
            container_env(&pod, &container, &EnvContext::default(), &NoConfigSource).unwrap_err();
        assert!(err.contains("without an API server"), "{err}");
    }
}
