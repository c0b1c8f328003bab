//! Service environment variables (upstream pkg/kubelet/envvars and
//! getServiceEnvVarMap): which Services a pod sees, and the Docker-link style
//! variables each one gives.
//!
//! Pure: the caller passes the Services (from `sources::services::ServiceStore`) and
//! gets a name → value map back.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Arc;

use crate::api::pod::Pod;
use crate::api::service::Service;

/// The service variables a pod's containers get, or why they cannot start yet.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum ServiceEnv {
    /// No services at all: standalone mode (no API server).
    #[default]
    None,
    /// An API pod while the services have not been listed once: its containers wait
    /// (upstream serviceHasSynced).
    NotSynced,
    /// The variables, by name.
    Vars(Arc<BTreeMap<String, String>>),
}

impl ServiceEnv {
    /// The decision for `pod` given what the services store has: an API pod waits for
    /// the first list; a static pod takes what is there (it may have to run the API
    /// server itself). `enableServiceLinks` unset means true.
    pub fn for_pod<'a>(
        pod: &Pod,
        synced: bool,
        services: impl IntoIterator<Item = &'a Service>,
    ) -> ServiceEnv {
        if !synced && !pod.is_static() {
            return ServiceEnv::NotSynced;
        }
        let links = pod.spec.enable_service_links.unwrap_or(true);
        ServiceEnv::Vars(Arc::new(service_env(services, pod.namespace(), links)))
    }
}

/// Services from `default` that every pod sees, even with `enableServiceLinks: false`
/// (upstream's "master services").
pub const MASTER_SERVICES: &[&str] = &["kubernetes"];

const DEFAULT_NAMESPACE: &str = "default";

/// The service variables of a pod in `namespace`: the master services of `default`,
/// plus, when `enable_links`, every service of `namespace` (a service of that name
/// in the pod's own namespace wins over the master one). Services without a cluster
/// IP (headless, ExternalName) give nothing.
pub fn service_env<'a>(
    services: impl IntoIterator<Item = &'a Service>,
    namespace: &str,
    enable_links: bool,
) -> BTreeMap<String, String> {
    let mut chosen: BTreeMap<&str, &Service> = BTreeMap::new();
    for service in services {
        if !service.has_cluster_ip() {
            continue;
        }
        let (ns, name) = (
            service.metadata.namespace.as_str(),
            service.metadata.name.as_str(),
        );
        if ns == DEFAULT_NAMESPACE && MASTER_SERVICES.contains(&name) {
            chosen.entry(name).or_insert(service);
        } else if ns == namespace && enable_links {
            chosen.insert(name, service);
        }
    }
    chosen
        .into_values()
        .flat_map(from_service)
        .collect::<BTreeMap<_, _>>()
}

/// `my-svc` → `MY_SVC` (upstream makeEnvVariableName).
pub fn env_name(name: &str) -> String {
    name.replace('-', "_").to_uppercase()
}

/// The variables of one service with a cluster IP, in upstream's order: host, first
/// port, named ports, then the Docker link variables of every port.
pub fn from_service(service: &Service) -> Vec<(String, String)> {
    let ip = service.spec.cluster_ip.as_str();
    let Some(first) = service.spec.ports.first() else {
        // Validation requires a port for a service with a cluster IP.
        return Vec::new();
    };
    let prefix = env_name(&service.metadata.name);
    let port_var = format!("{prefix}_SERVICE_PORT");
    let mut out = vec![
        (format!("{prefix}_SERVICE_HOST"), ip.to_owned()),
        (port_var.clone(), first.port.to_string()),
    ];
    for port in service.spec.ports.iter().filter(|p| !p.name.is_empty()) {
        out.push((
            format!("{port_var}_{}", env_name(&port.name)),
            port.port.to_string(),
        ));
    }
    for (i, port) in service.spec.ports.iter().enumerate() {
        let protocol = match port.protocol.as_str() {
            "" => "TCP",
            p => p,
        };
        let lower = protocol.to_lowercase();
        let url = format!("{lower}://{}", host_port(ip, port.port));
        if i == 0 {
            // Docker gives the first port a variable of its own.
            out.push((format!("{prefix}_PORT"), url.clone()));
        }
        let port_prefix = format!("{prefix}_PORT_{}_{}", port.port, protocol.to_uppercase());
        out.push((port_prefix.clone(), url));
        out.push((format!("{port_prefix}_PROTO"), lower));
        out.push((format!("{port_prefix}_PORT"), port.port.to_string()));
        out.push((format!("{port_prefix}_ADDR"), ip.to_owned()));
    }
    out
}

/// `ip:port`, with brackets around an IPv6 address (Go's net.JoinHostPort).
fn host_port(ip: &str, port: i32) -> String {
    match ip.parse::<IpAddr>() {
        Ok(IpAddr::V6(_)) => format!("[{ip}]:{port}"),
        _ if ip.contains(':') => format!("[{ip}]:{port}"),
        _ => format!("{ip}:{port}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::service::{ServiceMeta, ServicePort, ServiceSpec};

    fn svc(ns: &str, name: &str, ip: &str, ports: &[(&str, &str, i32)]) -> Service {
        Service {
            metadata: ServiceMeta {
                name: name.into(),
                namespace: ns.into(),
                ..Default::default()
            },
            spec: ServiceSpec {
                cluster_ip: ip.into(),
                type_: "ClusterIP".into(),
                ports: ports
                    .iter()
                    .map(|(name, protocol, port)| ServicePort {
                        name: (*name).into(),
                        protocol: (*protocol).into(),
                        port: *port,
                    })
                    .collect(),
            },
        }
    }

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    /// The cluster every case reads: the master service, services in `shop`
    /// (dashed name, two ports, UDP, headless, ExternalName) and one elsewhere.
    fn cluster() -> Vec<Service> {
        let mut external = svc("shop", "ext", "", &[("", "", 80)]);
        external.spec.type_ = "ExternalName".into();
        vec![
            svc(
                "default",
                "kubernetes",
                "10.0.0.1",
                &[("https", "TCP", 443)],
            ),
            svc("default", "other", "10.0.0.9", &[("", "TCP", 80)]),
            svc(
                "shop",
                "front-end",
                "10.0.0.2",
                &[("http", "", 80), ("metrics-port", "TCP", 9090)],
            ),
            svc("shop", "dns", "10.0.0.3", &[("dns", "UDP", 53)]),
            svc("shop", "db", "None", &[("pg", "TCP", 5432)]),
            external,
            svc("elsewhere", "cache", "10.0.0.4", &[("", "TCP", 6379)]),
        ]
    }

    fn kubernetes_vars() -> Vec<(&'static str, &'static str)> {
        vec![
            ("KUBERNETES_SERVICE_HOST", "10.0.0.1"),
            ("KUBERNETES_SERVICE_PORT", "443"),
            ("KUBERNETES_SERVICE_PORT_HTTPS", "443"),
            ("KUBERNETES_PORT", "tcp://10.0.0.1:443"),
            ("KUBERNETES_PORT_443_TCP", "tcp://10.0.0.1:443"),
            ("KUBERNETES_PORT_443_TCP_PROTO", "tcp"),
            ("KUBERNETES_PORT_443_TCP_PORT", "443"),
            ("KUBERNETES_PORT_443_TCP_ADDR", "10.0.0.1"),
        ]
    }

    struct Case {
        name: &'static str,
        services: Vec<Service>,
        namespace: &'static str,
        links: bool,
        want: Vec<(&'static str, &'static str)>,
    }

    fn check(case: Case) {
        let got = service_env(&case.services, case.namespace, case.links);
        assert_eq!(got, map(&case.want), "case {}", case.name);
    }

    #[test]
    fn service_env_table() {
        let mut shop = kubernetes_vars();
        shop.extend([
            ("FRONT_END_SERVICE_HOST", "10.0.0.2"),
            ("FRONT_END_SERVICE_PORT", "80"),
            ("FRONT_END_SERVICE_PORT_HTTP", "80"),
            ("FRONT_END_SERVICE_PORT_METRICS_PORT", "9090"),
            ("FRONT_END_PORT", "tcp://10.0.0.2:80"),
            ("FRONT_END_PORT_80_TCP", "tcp://10.0.0.2:80"),
            ("FRONT_END_PORT_80_TCP_PROTO", "tcp"),
            ("FRONT_END_PORT_80_TCP_PORT", "80"),
            ("FRONT_END_PORT_80_TCP_ADDR", "10.0.0.2"),
            ("FRONT_END_PORT_9090_TCP", "tcp://10.0.0.2:9090"),
            ("FRONT_END_PORT_9090_TCP_PROTO", "tcp"),
            ("FRONT_END_PORT_9090_TCP_PORT", "9090"),
            ("FRONT_END_PORT_9090_TCP_ADDR", "10.0.0.2"),
            ("DNS_SERVICE_HOST", "10.0.0.3"),
            ("DNS_SERVICE_PORT", "53"),
            ("DNS_SERVICE_PORT_DNS", "53"),
            ("DNS_PORT", "udp://10.0.0.3:53"),
            ("DNS_PORT_53_UDP", "udp://10.0.0.3:53"),
            ("DNS_PORT_53_UDP_PROTO", "udp"),
            ("DNS_PORT_53_UDP_PORT", "53"),
            ("DNS_PORT_53_UDP_ADDR", "10.0.0.3"),
        ]);
        let mut local_kubernetes = cluster();
        local_kubernetes.push(svc("shop", "kubernetes", "10.0.0.50", &[("", "TCP", 8443)]));
        let mut other_default = kubernetes_vars();
        other_default.extend([
            ("OTHER_SERVICE_HOST", "10.0.0.9"),
            ("OTHER_SERVICE_PORT", "80"),
            ("OTHER_PORT", "tcp://10.0.0.9:80"),
            ("OTHER_PORT_80_TCP", "tcp://10.0.0.9:80"),
            ("OTHER_PORT_80_TCP_PROTO", "tcp"),
            ("OTHER_PORT_80_TCP_PORT", "80"),
            ("OTHER_PORT_80_TCP_ADDR", "10.0.0.9"),
        ]);
        let cases = vec![
            Case {
                name: "namespace services with dashes, named ports, udp; headless and ExternalName skipped",
                services: cluster(),
                namespace: "shop",
                links: true,
                want: shop,
            },
            Case {
                name: "enableServiceLinks false keeps only the master service",
                services: cluster(),
                namespace: "shop",
                links: false,
                want: kubernetes_vars(),
            },
            Case {
                name: "a namespace without services still sees the master service",
                services: cluster(),
                namespace: "empty",
                links: true,
                want: kubernetes_vars(),
            },
            Case {
                name: "pods in default see default's services",
                services: cluster(),
                namespace: "default",
                links: true,
                want: other_default,
            },
            Case {
                name: "pods in default with links off see only the master service",
                services: cluster(),
                namespace: "default",
                links: false,
                want: kubernetes_vars(),
            },
            Case {
                name: "a service named kubernetes in the pod's namespace wins",
                services: local_kubernetes,
                namespace: "elsewhere",
                links: false,
                want: kubernetes_vars(),
            },
            Case {
                name: "no services, no variables",
                services: Vec::new(),
                namespace: "shop",
                links: true,
                want: Vec::new(),
            },
            Case {
                name: "a service with a cluster IP but no ports gives nothing",
                services: vec![svc("shop", "portless", "10.0.0.8", &[])],
                namespace: "shop",
                links: true,
                want: Vec::new(),
            },
            Case {
                name: "IPv6 cluster IPs are bracketed in URLs",
                services: vec![svc("shop", "v6", "fd00::10", &[("", "SCTP", 9)])],
                namespace: "shop",
                links: true,
                want: vec![
                    ("V6_SERVICE_HOST", "fd00::10"),
                    ("V6_SERVICE_PORT", "9"),
                    ("V6_PORT", "sctp://[fd00::10]:9"),
                    ("V6_PORT_9_SCTP", "sctp://[fd00::10]:9"),
                    ("V6_PORT_9_SCTP_PROTO", "sctp"),
                    ("V6_PORT_9_SCTP_PORT", "9"),
                    ("V6_PORT_9_SCTP_ADDR", "fd00::10"),
                ],
            },
        ];
        for case in cases {
            check(case);
        }
    }

    #[test]
    fn local_kubernetes_service_overrides_the_master_one_with_links() {
        let mut services = cluster();
        services.push(svc("shop", "kubernetes", "10.0.0.50", &[("", "TCP", 8443)]));
        // Either order: the namespace's own service wins.
        for list in [services.clone(), services.into_iter().rev().collect()] {
            let env = service_env(&list, "shop", true);
            assert_eq!(
                env.get("KUBERNETES_SERVICE_HOST").map(String::as_str),
                Some("10.0.0.50")
            );
            assert!(!env.contains_key("KUBERNETES_SERVICE_PORT_HTTPS"));
        }
    }

    #[test]
    fn api_pods_wait_for_the_first_list_and_static_pods_do_not() {
        let mut pod = Pod::default();
        pod.metadata.namespace = Some("shop".into());
        let services = cluster();
        assert_eq!(
            ServiceEnv::for_pod(&pod, false, &services),
            ServiceEnv::NotSynced
        );
        let ServiceEnv::Vars(vars) = ServiceEnv::for_pod(&pod, true, &services) else {
            panic!("a synced store gives variables");
        };
        assert!(
            vars.contains_key("FRONT_END_SERVICE_HOST"),
            "links default to on"
        );
        pod.spec.enable_service_links = Some(false);
        let ServiceEnv::Vars(vars) = ServiceEnv::for_pod(&pod, true, &services) else {
            panic!("a synced store gives variables");
        };
        assert!(!vars.contains_key("FRONT_END_SERVICE_HOST"));
        assert!(vars.contains_key("KUBERNETES_SERVICE_HOST"));

        pod.metadata
            .annotations
            .insert("kubernetes.io/config.source".into(), "file".into());
        assert!(pod.is_static());
        assert!(matches!(
            ServiceEnv::for_pod(&pod, false, &[]),
            ServiceEnv::Vars(v) if v.is_empty()
        ));
    }

    #[test]
    fn env_names_upper_case_and_underscore_dashes() {
        assert_eq!(env_name("my-web-svc"), "MY_WEB_SVC");
        assert_eq!(env_name("a"), "A");
    }
}
