//! A container's environment (upstream makeEnvironmentVariables) and the `$(VAR)`
//! expansion of env values, command and args (upstream expansion package).
//!
//! Pure apart from the [`ConfigSource`] the caller passes for configMap and secret
//! references (the API-backed one arrives with the volumes work; standalone mode has
//! none, and a required reference then fails with a clear message). Service
//! variables come precomputed in [`EnvContext::services`] (`envvars.rs`).

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::api::pod::{Container, EnvVar, Pod};
use crate::api::quantity::Quantity;
use crate::runtime::envvars::ServiceEnv;

/// The data of a configMap or secret, or `None` when it does not exist.
pub type ConfigData = Result<Option<BTreeMap<String, String>>, ConfigSourceError>;

/// Why a configMap or secret could not be read.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ConfigSourceError {
    /// Standalone mode: there is no API server to read it from.
    #[error("{kind} {name:?} cannot be read: litelet runs without an API server")]
    NoApiServer { kind: &'static str, name: String },
    /// The reader's own error (the volume manager's object cache, above `runtime`).
    #[error(transparent)]
    Lookup(Arc<dyn std::error::Error + Send + Sync>),
}

/// Looks up configMaps and secrets of the pod's namespace.
pub trait ConfigSource {
    /// The data of configMap `name`, or `None` when it does not exist.
    fn config_map(&self, namespace: &str, name: &str) -> ConfigData;
    /// The decoded data of secret `name`, or `None` when it does not exist.
    fn secret(&self, namespace: &str, name: &str) -> ConfigData;
}

/// Standalone mode: there is no API server to read configMaps or secrets from.
pub struct NoConfigSource;

impl ConfigSource for NoConfigSource {
    fn config_map(&self, _: &str, name: &str) -> ConfigData {
        Err(ConfigSourceError::NoApiServer {
            kind: "configmap",
            name: name.to_owned(),
        })
    }
    fn secret(&self, _: &str, name: &str) -> ConfigData {
        Err(ConfigSourceError::NoApiServer {
            kind: "secret",
            name: name.to_owned(),
        })
    }
}

/// Why a container's environment cannot be built.
#[derive(Debug, Clone, thiserror::Error)]
pub enum EnvError {
    /// An API pod's service variables are not known yet (upstream's message).
    #[error("services have not yet been read at least once, cannot construct envvars")]
    ServicesNotSynced,
    /// A configMap or secret could not be read.
    #[error(transparent)]
    Source(#[from] ConfigSourceError),
    /// A required envFrom object does not exist.
    #[error("{kind} {name:?} not found")]
    NotFound { kind: &'static str, name: String },
    /// A required key is missing from its configMap or secret.
    #[error("couldn't find key {key} in {kind} {namespace}/{name}")]
    MissingKey {
        key: String,
        kind: &'static str,
        namespace: String,
        name: String,
    },
    /// A fieldRef names a field the downward API does not offer.
    #[error("unsupported fieldRef path {0:?}")]
    FieldPath(String),
    /// A resourceFieldRef names a container the pod does not have.
    #[error("resourceFieldRef names unknown container {0:?}")]
    UnknownContainer(String),
    /// A resourceFieldRef names a resource the downward API does not offer.
    #[error("unsupported container resource {0:?}")]
    UnsupportedResource(String),
}

/// Facts about the node and the pod's network that fieldRefs can name.
#[derive(Clone, Debug, Default)]
pub struct EnvContext {
    pub node_name: String,
    pub host_ips: Vec<String>,
    pub pod_ips: Vec<String>,
    /// The node's allocatable cpu and memory, for resourceFieldRefs to unset limits.
    pub node_allocatable: BTreeMap<String, Quantity>,
    /// The pod's service variables (or why there are none yet).
    pub services: ServiceEnv,
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

fn field_value(pod: &Pod, path: &str, ctx: &EnvContext) -> Result<String, EnvError> {
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
        other => return Err(EnvError::FieldPath(other.to_owned())),
    })
}

/// Limits that default to the node's allocatable when a container sets none (or
/// zero) for them (upstream MergeContainerResourceLimits; hugepages are never
/// overcommitted, so they are not among them).
pub const ALLOCATABLE_DEFAULTED_LIMITS: &[&str] = &["cpu", "memory", "ephemeral-storage"];

/// The value of a resourceFieldRef such as `limits.memory` with a divisor (upstream
/// ExtractContainerResourceValue after defaultPodLimitsForDownwardAPI).
///
/// - `limits.{cpu,memory,ephemeral-storage}` unset or zero read as the node's
///   allocatable (`ctx.node_allocatable`), so a container learns what it may use.
/// - Requests are read as written; an unset request is 0 (the API server, and the
///   static pod source, already defaulted requests to limits).
/// - CPU rounds up to whole divisor units of millicores, the others to whole divisor
///   units of the value; a zero or missing divisor means 1.
/// - Other resources than cpu, memory, ephemeral-storage and `hugepages-*` are an
///   error, as upstream.
pub(crate) fn resource_value(
    pod: &Pod,
    own: &Container,
    container_name: Option<&str>,
    resource: &str,
    divisor: Option<&Quantity>,
    ctx: &EnvContext,
) -> Result<String, EnvError> {
    let container = match container_name.filter(|n| !n.is_empty() && *n != own.name) {
        Some(name) => pod
            .spec
            .containers
            .iter()
            .chain(pod.spec.init_containers.iter())
            .find(|c| c.name == name)
            .ok_or_else(|| EnvError::UnknownContainer(name.to_owned()))?,
        None => own,
    };
    let unsupported = || EnvError::UnsupportedResource(resource.to_owned());
    let (kind, name) = resource.split_once('.').ok_or_else(unsupported)?;
    let known =
        matches!(name, "cpu" | "memory" | "ephemeral-storage") || name.starts_with("hugepages-");
    if !known {
        return Err(unsupported());
    }
    let resources = container.resources.as_ref();
    let set = |map: &BTreeMap<String, Quantity>| map.get(name).filter(|q| !q.is_zero()).cloned();
    let quantity = match kind {
        "limits" => resources.and_then(|r| set(&r.limits)).or_else(|| {
            ALLOCATABLE_DEFAULTED_LIMITS
                .contains(&name)
                .then(|| ctx.node_allocatable.get(name).cloned())
                .flatten()
        }),
        "requests" => resources.and_then(|r| set(&r.requests)),
        _ => return Err(unsupported()),
    };
    let quantity = quantity.unwrap_or_else(Quantity::zero);
    let one = Quantity::from_value(1, Default::default());
    let divisor = divisor.filter(|d| !d.is_zero()).unwrap_or(&one);
    Ok(match name {
        "cpu" => ceil_div(quantity.milli_value(), divisor.milli_value()),
        _ => ceil_div(quantity.value(), divisor.value()),
    }
    .to_string())
}

/// `value / per` rounded up (per at least 1).
fn ceil_div(value: i64, per: i64) -> i64 {
    let per = per.max(1);
    value.div_euclid(per) + i64::from(value.rem_euclid(per) != 0)
}

/// The container's environment in order: envFrom sources, then env entries (later
/// ones win, and `$(VAR)` in a value sees everything defined before it, then the
/// service variables), then the service variables no entry defined.
///
/// Fails while an API pod's services have not been read once (upstream waits too:
/// a container started now would miss its service variables for good).
pub fn container_env(
    pod: &Pod,
    container: &Container,
    ctx: &EnvContext,
    source: &dyn ConfigSource,
) -> Result<Vec<(String, String)>, EnvError> {
    let services = match &ctx.services {
        ServiceEnv::NotSynced => return Err(EnvError::ServicesNotSynced),
        ServiceEnv::None => None,
        ServiceEnv::Vars(vars) => Some(vars.as_ref()),
    };
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
                return Err(EnvError::NotFound {
                    kind: what,
                    name: reference.name.clone().unwrap_or_default(),
                })
            }
        }
    }
    let scope = Scope {
        pod,
        container,
        ctx,
        source,
        services,
    };
    for var in &container.env {
        if let Some(value) = env_var_value(&scope, var, &env)? {
            set(&mut env, var.name.clone(), value);
        }
    }
    // Explicit variables (env and envFrom) win over service ones.
    for (key, value) in services.into_iter().flatten() {
        if !env.iter().any(|(k, _)| k == key) {
            env.push((key.clone(), value.clone()));
        }
    }
    Ok(env)
}

/// What every variable of one container is resolved against.
struct Scope<'a> {
    pod: &'a Pod,
    container: &'a Container,
    ctx: &'a EnvContext,
    source: &'a dyn ConfigSource,
    /// The service variables; `None` without an API server.
    services: Option<&'a BTreeMap<String, String>>,
}

/// The value of one `env` entry given the variables `defined` before it; `None` for
/// an optional reference that is not there.
fn env_var_value(
    scope: &Scope<'_>,
    var: &EnvVar,
    defined: &[(String, String)],
) -> Result<Option<String>, EnvError> {
    let Scope {
        pod,
        container,
        ctx,
        source,
        services,
    } = *scope;
    let Some(from) = &var.value_from else {
        let lookup = |name: &str| {
            defined
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.clone())
                .or_else(|| services.and_then(|s| s.get(name).cloned()))
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
        None => Err(EnvError::MissingKey {
            key: selector.key.clone(),
            kind: what,
            namespace: pod.namespace().to_owned(),
            name,
        }),
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
        fn config_map(&self, _: &str, name: &str) -> ConfigData {
            Ok((name == "settings")
                .then(|| BTreeMap::from([("MODE".to_owned(), "fast".to_owned())])))
        }
        fn secret(&self, _: &str, _: &str) -> ConfigData {
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
            err.to_string()
                .contains("couldn't find key token in secret shop/creds"),
            "{err}"
        );
        // Without an API server, references fail with a message saying so.
        let err =
            container_env(&pod, &container, &EnvContext::default(), &NoConfigSource).unwrap_err();
        assert!(
            matches!(err, EnvError::Source(ConfigSourceError::NoApiServer { .. })),
            "{err}"
        );
    }

    fn resource_env(name: &str, resource: &str, divisor: Option<&str>) -> EnvVar {
        from(
            name,
            EnvVarSource {
                resource_field_ref: Some(ResourceFieldSelector {
                    resource: resource.into(),
                    divisor: divisor.map(|d| Quantity::parse(d).unwrap()),
                    ..Default::default()
                }),
                ..Default::default()
            },
        )
    }

    fn node_with(cpu: &str, memory: &str, storage: &str) -> EnvContext {
        EnvContext {
            node_allocatable: BTreeMap::from([
                ("cpu".to_owned(), Quantity::parse(cpu).unwrap()),
                ("memory".to_owned(), Quantity::parse(memory).unwrap()),
                (
                    "ephemeral-storage".to_owned(),
                    Quantity::parse(storage).unwrap(),
                ),
                ("pods".to_owned(), Quantity::parse("110").unwrap()),
            ]),
            ..Default::default()
        }
    }

    /// One resourceFieldRef resolved for a container with `limits`/`requests`.
    fn resolve(
        limits: &[(&str, &str)],
        requests: &[(&str, &str)],
        resource: &str,
        divisor: Option<&str>,
    ) -> Result<String, EnvError> {
        let list = |pairs: &[(&str, &str)]| {
            pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), Quantity::parse(v).unwrap()))
                .collect()
        };
        let container = Container {
            name: "app".into(),
            resources: Some(ResourceRequirements {
                limits: list(limits),
                requests: list(requests),
                ..Default::default()
            }),
            env: vec![resource_env("V", resource, divisor)],
            ..Default::default()
        };
        let ctx = node_with("4", "8Gi", "100Gi");
        let env = container_env(&Pod::default(), &container, &ctx, &Maps)?;
        Ok(env
            .into_iter()
            .find(|(k, _)| k == "V")
            .map(|(_, v)| v)
            .unwrap_or_default())
    }

    /// name, limits, requests, resource, divisor, expected value.
    type Case<'a> = (
        &'a str,
        &'a [(&'a str, &'a str)],
        &'a [(&'a str, &'a str)],
        &'a str,
        Option<&'a str>,
        &'a str,
    );

    #[test]
    fn resource_field_ref_table() {
        let cases: &[Case] = &[
            (
                "unset cpu limit is allocatable",
                &[],
                &[],
                "limits.cpu",
                None,
                "4",
            ),
            (
                "unset cpu limit in millicores",
                &[],
                &[],
                "limits.cpu",
                Some("1m"),
                "4000",
            ),
            (
                "unset memory limit is allocatable",
                &[],
                &[],
                "limits.memory",
                Some("1Mi"),
                "8192",
            ),
            (
                "unset storage limit is allocatable",
                &[],
                &[],
                "limits.ephemeral-storage",
                Some("1Gi"),
                "100",
            ),
            (
                "zero limit counts as unset",
                &[("memory", "0")],
                &[],
                "limits.memory",
                Some("1Gi"),
                "8",
            ),
            (
                "a set limit wins",
                &[("cpu", "250m")],
                &[],
                "limits.cpu",
                Some("1m"),
                "250",
            ),
            (
                "cpu rounds up to whole divisors",
                &[("cpu", "250m")],
                &[],
                "limits.cpu",
                None,
                "1",
            ),
            (
                "memory rounds up",
                &[("memory", "1025Ki")],
                &[],
                "limits.memory",
                Some("1Mi"),
                "2",
            ),
            (
                "zero divisor means one",
                &[("memory", "64Mi")],
                &[],
                "limits.memory",
                Some("0"),
                "67108864",
            ),
            ("unset request is zero", &[], &[], "requests.cpu", None, "0"),
            (
                "unset memory request is zero",
                &[],
                &[],
                "requests.memory",
                None,
                "0",
            ),
            (
                "a set request",
                &[],
                &[("memory", "32Mi")],
                "requests.memory",
                Some("1Mi"),
                "32",
            ),
            (
                "hugepages limits are not defaulted",
                &[],
                &[],
                "limits.hugepages-2Mi",
                None,
                "0",
            ),
            (
                "hugepages limits are read",
                &[("hugepages-2Mi", "4Mi")],
                &[],
                "limits.hugepages-2Mi",
                Some("2Mi"),
                "2",
            ),
        ];
        for (name, limits, requests, resource, divisor, want) in cases {
            let got = resolve(limits, requests, resource, *divisor);
            assert_eq!(got.as_deref().ok(), Some(*want), "case {name}: {got:?}");
        }
        for bad in [
            "limits.pods",
            "requests.nvidia.com/gpu",
            "cpu",
            "status.cpu",
        ] {
            let err = resolve(&[], &[], bad, None).unwrap_err();
            assert!(
                matches!(err, EnvError::UnsupportedResource(_)),
                "{bad}: {err}"
            );
        }
    }

    #[test]
    fn service_variables_come_after_explicit_env_which_wins() {
        let container = Container {
            name: "app".into(),
            env: vec![
                var("WEB_SERVICE_HOST", "mine"),
                var("ADDR", "$(WEB_SERVICE_PORT)/$(NOPE)"),
            ],
            env_from: vec![EnvFromSource {
                prefix: Some("WEB_".into()),
                config_map_ref: Some(OptionalNameRef {
                    name: Some("settings".into()),
                    optional: None,
                }),
                secret_ref: None,
            }],
            ..Default::default()
        };
        let services = BTreeMap::from([
            ("WEB_SERVICE_HOST".to_owned(), "10.0.0.2".to_owned()),
            ("WEB_SERVICE_PORT".to_owned(), "80".to_owned()),
            ("WEB_MODE".to_owned(), "from-service".to_owned()),
        ]);
        let ctx = EnvContext {
            services: ServiceEnv::Vars(std::sync::Arc::new(services)),
            ..Default::default()
        };
        let env = container_env(&Pod::default(), &container, &ctx, &Maps).unwrap();
        let names: Vec<&str> = env.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(
            names,
            ["WEB_MODE", "WEB_SERVICE_HOST", "ADDR", "WEB_SERVICE_PORT"],
            "explicit entries first, then the service ones not defined"
        );
        let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        assert_eq!(get("WEB_SERVICE_HOST"), Some("mine"), "env wins");
        assert_eq!(get("WEB_MODE"), Some("fast"), "envFrom wins");
        assert_eq!(
            get("ADDR"),
            Some("80/$(NOPE)"),
            "values expand service variables"
        );
        assert_eq!(get("WEB_SERVICE_PORT"), Some("80"));
    }

    #[test]
    fn containers_cannot_be_configured_before_services_synced() {
        let ctx = EnvContext {
            services: ServiceEnv::NotSynced,
            ..Default::default()
        };
        let err = container_env(&Pod::default(), &Container::default(), &ctx, &Maps).unwrap_err();
        assert!(matches!(err, EnvError::ServicesNotSynced), "{err}");
        assert!(err.to_string().contains("services have not yet been read"));
        // Standalone: no service variables, no waiting.
        let env = container_env(
            &Pod::default(),
            &Container::default(),
            &EnvContext::default(),
            &Maps,
        )
        .unwrap();
        assert!(env.is_empty());
    }
}
