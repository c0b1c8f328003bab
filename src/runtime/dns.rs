//! The DNS configuration a pod's sandbox gets (upstream kubelet network/dns).
//!
//! Pure: the node's resolv.conf text and the cluster DNS settings come in as data,
//! so the policies (ClusterFirst, ClusterFirstWithHostNet, Default, None, plus the
//! pod's dnsConfig) are table-tested without touching `/etc/resolv.conf`.

use crate::api::pod::{DnsPolicy, Pod};
use crate::cri::pb;

/// Resolver limits of glibc that the kubelet enforces too.
const MAX_NAMESERVERS: usize = 3;
const MAX_SEARCHES: usize = 32;

/// The node's DNS settings, from `--cluster-dns`, `--cluster-domain` and the host's
/// resolv.conf (`--resolv-conf`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DnsSettings {
    pub cluster_dns: Vec<String>,
    pub cluster_domain: String,
    pub host: ResolvConf,
}

/// The parts of a resolv.conf litelet uses.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ResolvConf {
    pub nameservers: Vec<String>,
    pub searches: Vec<String>,
    pub options: Vec<String>,
}

impl ResolvConf {
    /// Parses resolv.conf text; unknown lines and comments are ignored.
    pub fn parse(text: &str) -> ResolvConf {
        let mut conf = ResolvConf::default();
        for line in text.lines() {
            let line = line.split(['#', ';']).next().unwrap_or("");
            let mut fields = line.split_whitespace();
            match fields.next() {
                Some("nameserver") => conf.nameservers.extend(fields.next().map(str::to_owned)),
                // The last search/domain line wins, as in glibc.
                Some("search") | Some("domain") => {
                    conf.searches = fields.map(str::to_owned).collect();
                }
                Some("options") => conf.options.extend(fields.map(str::to_owned)),
                _ => {}
            }
        }
        conf
    }
}

fn effective_policy(pod: &Pod) -> DnsPolicy {
    let host_network = pod.spec.host_network.unwrap_or(false);
    match pod
        .spec
        .dns_policy
        .clone()
        .unwrap_or(DnsPolicy::ClusterFirst)
    {
        // ClusterFirst on the host network means the host's resolver, as upstream.
        DnsPolicy::ClusterFirst if host_network => DnsPolicy::Default,
        DnsPolicy::ClusterFirstWithHostNet => DnsPolicy::ClusterFirst,
        other => other,
    }
}

fn push_unique(list: &mut Vec<String>, value: &str) {
    if !list.iter().any(|v| v == value) {
        list.push(value.to_owned());
    }
}

/// Event reason when a ClusterFirst pod gets the host's resolver (upstream's).
pub const MISSING_CLUSTER_DNS: &str = "MissingClusterDNS";

/// True when `pod` asks for cluster DNS and the node has none (`--cluster-dns`
/// unset), so its sandbox gets the host's resolver instead.
pub fn falls_back_to_host(pod: &Pod, settings: &DnsSettings) -> bool {
    settings.cluster_dns.is_empty() && effective_policy(pod) == DnsPolicy::ClusterFirst
}

/// The pod event's message for [`MISSING_CLUSTER_DNS`], in upstream's words.
pub fn missing_cluster_dns_message(pod: &Pod) -> String {
    format!(
        "pod: \"{}_{}({})\". kubelet does not have ClusterDNS IP configured and cannot create Pod using \"ClusterFirst\" policy. Falling back to \"Default\" policy.",
        pod.name(),
        pod.namespace(),
        pod.uid()
    )
}

/// The sandbox DNS config for `pod`. Without cluster DNS servers, ClusterFirst falls
/// back to the host's resolver (what upstream does, with a warning event).
pub fn sandbox_dns_config(pod: &Pod, settings: &DnsSettings) -> pb::DNSConfig {
    let mut servers = Vec::new();
    let mut searches = Vec::new();
    let mut options = Vec::new();
    let policy = match effective_policy(pod) {
        // The caller reports it (see `falls_back_to_host`), once per sandbox.
        DnsPolicy::ClusterFirst if settings.cluster_dns.is_empty() => DnsPolicy::Default,
        policy => policy,
    };
    match policy {
        DnsPolicy::ClusterFirst => {
            servers.extend(settings.cluster_dns.iter().cloned());
            let domain = &settings.cluster_domain;
            if !domain.is_empty() {
                searches.push(format!("{}.svc.{domain}", pod.namespace()));
                searches.push(format!("svc.{domain}"));
                searches.push(domain.clone());
            }
            for search in &settings.host.searches {
                push_unique(&mut searches, search);
            }
            options.push("ndots:5".to_owned());
        }
        DnsPolicy::None => {}
        _ => {
            servers.extend(settings.host.nameservers.iter().cloned());
            searches.extend(settings.host.searches.iter().cloned());
            options.extend(settings.host.options.iter().cloned());
        }
    }
    if let Some(extra) = &pod.spec.dns_config {
        for server in &extra.nameservers {
            push_unique(&mut servers, server);
        }
        for search in &extra.searches {
            push_unique(&mut searches, search);
        }
        for option in &extra.options {
            let Some(name) = option.name.as_deref() else {
                continue;
            };
            // A pod option replaces an inherited option of the same name.
            options.retain(|o| o.split(':').next() != Some(name));
            options.push(match &option.value {
                Some(value) => format!("{name}:{value}"),
                None => name.to_owned(),
            });
        }
    }
    servers.truncate(MAX_NAMESERVERS);
    searches.truncate(MAX_SEARCHES);
    pb::DNSConfig {
        servers,
        searches,
        options,
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::pod::{PodDnsConfig, PodDnsConfigOption};

    fn settings() -> DnsSettings {
        DnsSettings {
            cluster_dns: vec!["10.96.0.10".into()],
            cluster_domain: "cluster.local".into(),
            host: ResolvConf::parse(
                "# host\nnameserver 192.0.2.1\nnameserver 192.0.2.2\nsearch corp.example\noptions rotate\n",
            ),
        }
    }

    fn pod(policy: Option<DnsPolicy>, host_network: bool) -> Pod {
        let mut pod = Pod::default();
        pod.metadata.namespace = Some("web".into());
        pod.spec.dns_policy = policy;
        pod.spec.host_network = Some(host_network);
        pod
    }

    #[test]
    fn only_cluster_first_pods_without_cluster_dns_fall_back() {
        let none = DnsSettings {
            cluster_dns: vec![],
            ..settings()
        };
        assert!(falls_back_to_host(&pod(None, false), &none));
        assert!(falls_back_to_host(
            &pod(Some(DnsPolicy::ClusterFirstWithHostNet), true),
            &none
        ));
        assert!(
            !falls_back_to_host(&pod(None, true), &none),
            "host network: host resolver anyway"
        );
        assert!(!falls_back_to_host(
            &pod(Some(DnsPolicy::Default), false),
            &none
        ));
        assert!(!falls_back_to_host(&pod(None, false), &settings()));
        let message = missing_cluster_dns_message(&pod(None, false));
        assert!(
            message.ends_with("Falling back to \"Default\" policy."),
            "{message}"
        );
    }

    #[test]
    fn resolv_conf_parsing() {
        let conf = settings().host;
        assert_eq!(conf.nameservers, ["192.0.2.1", "192.0.2.2"]);
        assert_eq!(conf.searches, ["corp.example"]);
        assert_eq!(conf.options, ["rotate"]);
    }

    #[test]
    fn policies() {
        let cluster = sandbox_dns_config(&pod(None, false), &settings());
        assert_eq!(cluster.servers, ["10.96.0.10"]);
        assert_eq!(
            cluster.searches,
            [
                "web.svc.cluster.local",
                "svc.cluster.local",
                "cluster.local",
                "corp.example"
            ]
        );
        assert_eq!(cluster.options, ["ndots:5"]);

        let host_net = sandbox_dns_config(&pod(None, true), &settings());
        assert_eq!(host_net.servers, ["192.0.2.1", "192.0.2.2"]);

        let with_host_net = sandbox_dns_config(
            &pod(Some(DnsPolicy::ClusterFirstWithHostNet), true),
            &settings(),
        );
        assert_eq!(with_host_net.servers, ["10.96.0.10"]);

        let default = sandbox_dns_config(&pod(Some(DnsPolicy::Default), false), &settings());
        assert_eq!(default.options, ["rotate"]);

        let no_cluster_dns = DnsSettings {
            cluster_dns: vec![],
            ..settings()
        };
        let fallback = sandbox_dns_config(&pod(None, false), &no_cluster_dns);
        assert_eq!(fallback.servers, ["192.0.2.1", "192.0.2.2"]);
    }

    #[test]
    fn none_policy_takes_only_the_pod_config() {
        let mut p = pod(Some(DnsPolicy::None), false);
        p.spec.dns_config = Some(PodDnsConfig {
            nameservers: vec!["1.1.1.1".into()],
            searches: vec!["a.example".into()],
            options: vec![PodDnsConfigOption {
                name: Some("ndots".into()),
                value: Some("2".into()),
            }],
        });
        let cfg = sandbox_dns_config(&p, &settings());
        assert_eq!(cfg.servers, ["1.1.1.1"]);
        assert_eq!(cfg.searches, ["a.example"]);
        assert_eq!(cfg.options, ["ndots:2"]);

        // A pod option overrides the inherited one of the same name.
        p.spec.dns_policy = None;
        let cfg = sandbox_dns_config(&p, &settings());
        assert_eq!(cfg.options, ["ndots:2"]);
        assert_eq!(cfg.servers, ["10.96.0.10", "1.1.1.1"]);
    }
}
