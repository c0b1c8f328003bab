//! The command line split into each component's own configuration: the node's
//! (`node::NodeConfig`) and the server's (`server::ServerConfig`).
//!
//! Flags sit at the top of the layers: they know every component's value types, and
//! no component reads [`Flags`]; each gets its own config built here, so components
//! stay testable without a command line.

use crate::server::tls::ciphers::{self, CipherError};
use crate::server::tls::TlsPolicy;
use std::time::Duration;

use crate::node::addresses::{CloudProvider, NodeIps};
use crate::node::config::{
    check_subdomain, parse_eviction_hard, parse_node_labels, parse_reserved, validate_node_ip,
    ConfigError, NodeConfig,
};
use crate::server::ServerConfig;

use super::value::pairs_text;
use super::Flags;

impl Flags {
    /// The node's configuration (`node::NodeConfig`) from the command line. The node
    /// name (and hostname) is `--hostname-override` or `machine_hostname`, lowercased,
    /// as upstream.
    pub fn node_config(&self, machine_hostname: Option<&str>) -> Result<NodeConfig, ConfigError> {
        let flags = self;
        let name = flags
            .hostname_override
            .as_deref()
            .or(machine_hostname)
            .map(|h| h.trim().to_lowercase())
            .filter(|h| !h.is_empty())
            .ok_or_else(|| {
                ConfigError::NodeName("no hostname; set --hostname-override".to_owned())
            })?;
        check_subdomain(&name)
            .map_err(|e| ConfigError::NodeName(format!("{name:?} is not a valid name: {e}")))?;
        let mut c = NodeConfig::new(&name, &name);
        // Both checked when the flags were read.
        c.node_ips = NodeIps::parse(&flags.node_ip).unwrap_or_default();
        c.node_ip = c.node_ips.primary();
        if let Some(ip) = c.node_ip {
            validate_node_ip(ip)?;
        }
        c.cloud_provider = CloudProvider::parse(&flags.cloud_provider).unwrap_or_default();
        c.provider_id = flags.provider_id.clone();
        // Checked positive when the flags were read.
        let _ = c.set_lease_duration(flags.node_lease_duration_seconds);
        c.port = flags.port;
        c.max_pods = flags.max_pods;
        c.node_status_update_frequency = flags.node_status_update_frequency;
        c.node_status_report_frequency = flags.node_status_report_frequency;
        c.labels = parse_node_labels(&pairs_text(&flags.node_labels, '='))?;
        c.register_with_taints = flags.register_with_taints.clone();
        c.kube_reserved = parse_reserved(&pairs_text(&flags.kube_reserved, '='))?;
        c.system_reserved = parse_reserved(&pairs_text(&flags.system_reserved, '='))?;
        c.eviction_hard = parse_eviction_hard(&pairs_text(&flags.eviction_hard, '<'))?;
        Ok(c)
    }

    /// `--tls-cipher-suites` and `--tls-min-version` (or their config fields) as the
    /// node API will offer them; an error names what cannot be honoured.
    pub fn tls_policy(&self) -> Result<TlsPolicy, CipherError> {
        ciphers::parse(&self.tls_cipher_suites, &self.tls_min_version)
    }

    /// The server's settings from the command line: TLS files, ports and addresses,
    /// authentication and authorization modes, connection limits; the self-signed certificate (when no
    /// files are given) names the node and its `--node-ip`.
    pub fn server_config(&self, node_name: &str) -> ServerConfig {
        let flags = self;
        let mut config = ServerConfig::new(node_name, flags.root_dir.clone());
        config.address = flags.address.0;
        config.port = flags.port;
        config.healthz_address = flags.healthz_bind_address.0;
        config.healthz_port = (flags.healthz_port != 0).then_some(flags.healthz_port);
        config.tls.cert_file = flags.tls_cert_file.clone();
        config.tls.key_file = flags.tls_private_key_file.clone();
        config.tls.client_ca_file = flags.client_ca_file.clone();
        config.tls.host_ips = NodeIps::parse(&flags.node_ip)
            .map(NodeIps::given)
            .unwrap_or_default();
        config.anonymous_auth = flags.anonymous_auth;
        config.authorization_mode = flags.authorization_mode;
        let token_ttl = flags.authentication_token_webhook_cache_ttl;
        config.token_cache.authenticated = token_ttl;
        config.token_cache.rejected = config.token_cache.rejected.min(token_ttl);
        config.authz_cache.allowed = flags.authorization_webhook_cache_authorized_ttl;
        config.authz_cache.denied = flags.authorization_webhook_cache_unauthorized_ttl;
        config.sync_loop_threshold = (flags.sync_frequency * 2).max(Duration::from_secs(300));
        config.pod_logs_dir = flags.pod_logs_dir.clone();
        config.limits.max_connections = flags.server_max_connections.unwrap_or_else(|| {
            crate::server::default_max_connections(crate::server::memory_bytes())
        });
        config.limits.stream_idle_timeout = flags.streaming_connection_idle_timeout;
        config.tls.policy = flags.tls_policy().unwrap_or_default();
        config.limits.max_unauthenticated_connections =
            flags.server_max_unauthenticated_connections;
        config.limits.max_unauthenticated_per_client = flags.server_max_unauthenticated_per_client;
        config.configz = Some(std::sync::Arc::new(flags.configz()));
        config
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::quantity::Quantity;
    use crate::node::config::default_eviction_hard;

    fn q(s: &str) -> Quantity {
        Quantity::parse(s).unwrap()
    }

    #[test]
    fn node_config_from_flags() {
        let flags = Flags::try_parse_from([
            "litelet",
            "--hostname-override=Edge-1",
            "--node-ip=192.168.1.20",
            "--node-labels=site=berlin",
            "--register-with-taints=dedicated=edge:NoSchedule",
            "--kube-reserved=cpu=100m",
            "--system-reserved=memory=128Mi",
            "--eviction-hard=memory.available<200Mi",
            "--node-status-update-frequency=20s",
            "--max-pods=30",
            "--port=10251",
        ])
        .unwrap();
        let c = flags.node_config(Some("ignored")).unwrap();
        assert_eq!(
            (c.node_name.as_str(), c.hostname.as_str()),
            ("edge-1", "edge-1")
        );
        assert_eq!(c.node_ip, Some("192.168.1.20".parse().unwrap()));
        assert_eq!(c.labels["site"], "berlin");
        assert_eq!(c.register_with_taints.len(), 1);
        assert_eq!(c.kube_reserved["cpu"], q("100m"));
        assert_eq!(c.system_reserved["memory"], q("128Mi"));
        assert_eq!(c.eviction_hard.len(), 1);
        assert_eq!(c.node_status_update_frequency, Duration::from_secs(20));
        assert_eq!((c.max_pods, c.port), (30, 10251));

        let plain = Flags::try_parse_from(["litelet"]).unwrap();
        let c = plain.node_config(Some("Host.Example")).unwrap();
        assert_eq!(c.node_name, "host.example");
        assert_eq!(c.eviction_hard, default_eviction_hard());
        assert!(plain.node_config(None).is_err());
        assert!(plain.node_config(Some("bad_name")).is_err());

        // Bad values are refused while parsing the command line.
        let e = Flags::try_parse_from(["litelet", "--register-with-taints=k=v:Sometimes"])
            .unwrap_err()
            .to_string();
        assert!(e.contains("effect \"Sometimes\" must be"), "{e}");
        let e = Flags::try_parse_from(["litelet", "--node-labels=node-role.kubernetes.io/worker="])
            .unwrap_err()
            .to_string();
        assert!(e.contains("a node may not set labels"), "{e}");
    }
}
