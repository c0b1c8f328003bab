//! The node's addresses and what a cloud provider changes about registration, as
//! upstream: `--cloud-provider` ("" or `external`), `--node-ip` (one address, `0.0.0.0`
//! or `::` for "detect, preferring this family", or a dual-stack pair), the
//! `status.addresses` the node publishes (upstream's `NodeAddress` setter), and the
//! `alpha.kubernetes.io/provided-node-ip` annotation an external cloud controller
//! manager reads.
//!
//! Pure: no I/O. The `node` thread calls [`node_addresses`] on every status
//! computation and `register.rs` reads [`provided_node_ip`] and
//! [`CloudProvider::registration_taint`] when it creates the Node.
//!
//! Invariants: with an external cloud provider, addresses already published (by
//! litelet at registration or by the cloud controller manager) are never replaced by
//! litelet; a dual-stack `--node-ip` is two addresses of different families, neither
//! unspecified, published as two `InternalIP`s in the given order.

use std::net::IpAddr;

use crate::api::node::{NodeAddress, Taint, TaintEffect, ADDRESS_HOSTNAME, ADDRESS_INTERNAL_IP};

/// Set on the Node when `--cloud-provider=external` and `--node-ip` is given: the
/// addresses the cloud controller manager should keep (upstream's
/// `AnnotationAlphaProvidedIPAddr`).
pub const ANNOTATION_PROVIDED_NODE_IP: &str = "alpha.kubernetes.io/provided-node-ip";

/// The taint a node registers with under an external cloud provider; the cloud
/// controller manager removes it once it has initialised the node.
pub const TAINT_UNINITIALIZED: &str = "node.cloudprovider.kubernetes.io/uninitialized";

/// `--cloud-provider`: upstream v1.36 has no built-in cloud providers left.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CloudProvider {
    /// `""`: no cloud provider; litelet finds the node's addresses itself.
    #[default]
    None,
    /// `external`: a cloud controller manager initialises the node (addresses,
    /// provider ID, labels) and then removes the uninitialized taint.
    External,
}

/// A `--cloud-provider` value upstream v1.36 refuses (any built-in provider name).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "cloud provider {0:?} was specified, but built-in cloud providers are disabled. \
     Please set --cloud-provider=external and migrate to an external cloud provider"
)]
pub struct UnsupportedCloudProvider(pub String);

impl CloudProvider {
    /// Parses `--cloud-provider` / `cloudProvider` as upstream accepts it.
    pub fn parse(text: &str) -> Result<CloudProvider, UnsupportedCloudProvider> {
        match text {
            "" => Ok(CloudProvider::None),
            "external" => Ok(CloudProvider::External),
            other => Err(UnsupportedCloudProvider(other.to_owned())),
        }
    }

    /// The flag's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            CloudProvider::None => "",
            CloudProvider::External => "external",
        }
    }

    pub fn is_external(self) -> bool {
        self == CloudProvider::External
    }

    /// The taint the Node is created with under this provider, if any.
    pub fn registration_taint(self) -> Option<Taint> {
        self.is_external().then(|| Taint {
            key: TAINT_UNINITIALIZED.to_owned(),
            value: Some("true".to_owned()),
            effect: TaintEffect::NoSchedule,
            time_added: None,
        })
    }
}

/// An IP family, for `--node-ip=0.0.0.0` / `--node-ip=::`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IpFamily {
    V4,
    V6,
}

/// `--node-ip` as upstream reads it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum NodeIps {
    /// Not given: the default route's address, IPv4 first.
    #[default]
    Detect,
    /// `0.0.0.0` or `::`: the default route's address, this family first.
    DetectPreferring(IpFamily),
    /// One address.
    Single(IpAddr),
    /// A dual-stack pair, primary first.
    DualStack(IpAddr, IpAddr),
}

/// A `--node-ip` that cannot be used.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NodeIpsError {
    /// upstream logs and ignores an entry that is not an address; litelet refuses it,
    /// since the node would otherwise register with an address nobody chose.
    #[error("bad --node-ip {text:?}: {entry:?} is not an IP address")]
    NotAnAddress { text: String, entry: String },
    #[error("bad --node-ip {0:?}: must contain either a single IP or a dual-stack pair of IPs")]
    NotOneOrAPair(String),
    #[error("bad --node-ip {0:?}: dual-stack node IP cannot include '0.0.0.0' or '::'")]
    UnspecifiedInPair(String),
    #[error("bad --node-ip {text:?}: {ip} {reason}")]
    Unusable {
        text: String,
        ip: IpAddr,
        reason: &'static str,
    },
}

impl NodeIps {
    /// Parses `--node-ip` / `nodeIP`: comma-separated, blanks around entries ignored,
    /// then upstream's checks (one address or a pair of different families, no
    /// unspecified address in a pair, no loopback, multicast or link-local address).
    pub fn parse(text: &str) -> Result<NodeIps, NodeIpsError> {
        if text.trim().is_empty() {
            return Ok(NodeIps::Detect);
        }
        let mut ips = Vec::new();
        for entry in text.split(',').map(str::trim) {
            let ip: IpAddr = entry.parse().map_err(|_| NodeIpsError::NotAnAddress {
                text: text.to_owned(),
                entry: entry.to_owned(),
            })?;
            ips.push(ip.to_canonical());
        }
        let ips = match ips[..] {
            [ip] if ip.is_unspecified() => {
                return Ok(NodeIps::DetectPreferring(family(ip)));
            }
            [ip] => NodeIps::Single(ip),
            [a, b] if family(a) != family(b) => {
                if a.is_unspecified() || b.is_unspecified() {
                    return Err(NodeIpsError::UnspecifiedInPair(text.to_owned()));
                }
                NodeIps::DualStack(a, b)
            }
            _ => return Err(NodeIpsError::NotOneOrAPair(text.to_owned())),
        };
        for ip in ips.given() {
            if let Some(reason) = unusable(ip) {
                return Err(NodeIpsError::Unusable {
                    text: text.to_owned(),
                    ip,
                    reason,
                });
            }
        }
        Ok(ips)
    }

    /// The addresses given on the command line, primary first.
    pub fn given(self) -> Vec<IpAddr> {
        match self {
            NodeIps::Detect | NodeIps::DetectPreferring(_) => Vec::new(),
            NodeIps::Single(ip) => vec![ip],
            NodeIps::DualStack(a, b) => vec![a, b],
        }
    }

    /// The primary address given, if any.
    pub fn primary(self) -> Option<IpAddr> {
        self.given().first().copied()
    }

    /// Whether detection tries IPv6 before IPv4 (`--node-ip=::`).
    pub fn prefers_ipv6(self) -> bool {
        self == NodeIps::DetectPreferring(IpFamily::V6)
    }
}

fn family(ip: IpAddr) -> IpFamily {
    match ip {
        IpAddr::V4(_) => IpFamily::V4,
        IpAddr::V6(_) => IpFamily::V6,
    }
}

/// Upstream's `validateNodeIP` checks that need no syscall: an address pods and the
/// control plane can reach.
pub fn unusable(ip: IpAddr) -> Option<&'static str> {
    let link_local = match ip {
        IpAddr::V4(v4) => v4.is_link_local(),
        IpAddr::V6(v6) => (v6.segments()[0] & 0xffc0) == 0xfe80,
    };
    if ip.is_unspecified() {
        Some("must not be unspecified")
    } else if ip.is_loopback() {
        Some("must not be a loopback address")
    } else if ip.is_multicast() {
        Some("must not be a multicast address")
    } else if link_local {
        Some("must not be a link-local address")
    } else {
        None
    }
}

/// The value of [`ANNOTATION_PROVIDED_NODE_IP`]: the given addresses, comma-separated,
/// under an external cloud provider; `None` otherwise (upstream then removes it).
pub fn provided_node_ip(cloud: CloudProvider, ips: NodeIps) -> Option<String> {
    let given = ips.given();
    (cloud.is_external() && !given.is_empty()).then(|| {
        given
            .iter()
            .map(IpAddr::to_string)
            .collect::<Vec<_>>()
            .join(",")
    })
}

/// What the node publishes in `status.addresses`, given what is published now
/// (`current`), or `None` to leave it as it is. `detected` is the default route's
/// address, used when `--node-ip` names none.
///
/// As upstream: under an external cloud provider, published addresses win (the cloud
/// controller manager owns them) and a node without `--node-ip` publishes only its
/// hostname until the manager adds the rest; a dual-stack pair is two `InternalIP`s;
/// otherwise one `InternalIP` and the `Hostname`. A detection that fails keeps what
/// was published (a passing lookup failure must not drop the node's address).
pub fn node_addresses(
    current: &[NodeAddress],
    ips: NodeIps,
    detected: Option<IpAddr>,
    hostname: &str,
    cloud: CloudProvider,
) -> Option<Vec<NodeAddress>> {
    let host = || address(ADDRESS_HOSTNAME, hostname.to_owned());
    let internal = |ip: IpAddr| address(ADDRESS_INTERNAL_IP, ip.to_string());
    if cloud.is_external() {
        if !current.is_empty() {
            return None;
        }
        if ips == NodeIps::Detect {
            return Some(vec![host()]);
        }
    }
    match ips {
        NodeIps::DualStack(a, b) => Some(vec![internal(a), internal(b), host()]),
        NodeIps::Single(ip) => Some(vec![internal(ip), host()]),
        NodeIps::Detect | NodeIps::DetectPreferring(_) => match detected {
            Some(ip) => Some(vec![internal(ip), host()]),
            None if current.is_empty() => Some(vec![host()]),
            None => None,
        },
    }
}

fn address(type_: &str, address: String) -> NodeAddress {
    NodeAddress {
        type_: type_.to_owned(),
        address,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    #[test]
    fn cloud_provider_accepts_only_none_and_external() {
        assert_eq!(CloudProvider::parse(""), Ok(CloudProvider::None));
        assert_eq!(
            CloudProvider::parse("external"),
            Ok(CloudProvider::External)
        );
        for builtin in ["aws", "gce", "azure", "External", "foo"] {
            let err = CloudProvider::parse(builtin).unwrap_err().to_string();
            assert!(
                err.contains(&format!("cloud provider {builtin:?} was specified"))
                    && err.contains("--cloud-provider=external"),
                "{err}"
            );
        }
        let taint = CloudProvider::External.registration_taint().unwrap();
        assert_eq!(
            (taint.key.as_str(), taint.value.as_deref(), taint.effect),
            (TAINT_UNINITIALIZED, Some("true"), TaintEffect::NoSchedule)
        );
        assert_eq!(CloudProvider::None.registration_taint(), None);
    }

    #[test]
    fn node_ip_parsing_as_upstream() {
        let ok = [
            ("", NodeIps::Detect),
            ("  ", NodeIps::Detect),
            ("10.0.0.5", NodeIps::Single(ip("10.0.0.5"))),
            (" 10.0.0.5 ", NodeIps::Single(ip("10.0.0.5"))),
            ("::ffff:10.0.0.5", NodeIps::Single(ip("10.0.0.5"))),
            ("2001:db8::5", NodeIps::Single(ip("2001:db8::5"))),
            ("0.0.0.0", NodeIps::DetectPreferring(IpFamily::V4)),
            ("::", NodeIps::DetectPreferring(IpFamily::V6)),
            (
                "10.0.0.5,2001:db8::5",
                NodeIps::DualStack(ip("10.0.0.5"), ip("2001:db8::5")),
            ),
            (
                "2001:db8::5, 10.0.0.5",
                NodeIps::DualStack(ip("2001:db8::5"), ip("10.0.0.5")),
            ),
        ];
        for (text, want) in ok {
            assert_eq!(NodeIps::parse(text), Ok(want), "{text:?}");
        }
        let bad = [
            (
                "10.0.0.5,10.0.0.6",
                "must contain either a single IP or a dual-stack pair",
            ),
            ("2001:db8::5,2001:db8::6", "must contain either a single IP"),
            (
                "10.0.0.5,2001:db8::5,10.0.0.6",
                "must contain either a single IP",
            ),
            ("0.0.0.0,2001:db8::5", "cannot include '0.0.0.0' or '::'"),
            ("10.0.0.5,::", "cannot include '0.0.0.0' or '::'"),
            ("bogus", "\"bogus\" is not an IP address"),
            ("10.0.0.5,", "\"\" is not an IP address"),
            ("127.0.0.1", "must not be a loopback address"),
            ("10.0.0.5,::1", "must not be a loopback address"),
            ("224.0.0.1", "must not be a multicast address"),
            ("169.254.1.1", "must not be a link-local address"),
            ("fe80::1,10.0.0.5", "must not be a link-local address"),
        ];
        for (text, why) in bad {
            let err = NodeIps::parse(text).unwrap_err().to_string();
            assert!(
                err.starts_with(&format!("bad --node-ip {text:?}")) && err.contains(why),
                "{text:?}: {err}"
            );
        }
        assert!(NodeIps::parse("::").unwrap().prefers_ipv6());
        assert!(!NodeIps::parse("0.0.0.0").unwrap().prefers_ipv6());
        assert_eq!(NodeIps::parse("0.0.0.0").unwrap().primary(), None);
    }

    #[test]
    fn provided_node_ip_annotation_only_under_an_external_cloud_provider() {
        let pair = NodeIps::DualStack(ip("10.0.0.5"), ip("2001:db8::5"));
        let cases = [
            (CloudProvider::External, pair, Some("10.0.0.5,2001:db8::5")),
            (
                CloudProvider::External,
                NodeIps::Single(ip("10.0.0.5")),
                Some("10.0.0.5"),
            ),
            (CloudProvider::External, NodeIps::Detect, None),
            (
                CloudProvider::External,
                NodeIps::DetectPreferring(IpFamily::V6),
                None,
            ),
            (CloudProvider::None, pair, None),
        ];
        for (cloud, ips, want) in cases {
            assert_eq!(
                provided_node_ip(cloud, ips).as_deref(),
                want,
                "{cloud:?} {ips:?}"
            );
        }
    }

    /// One case of [`node_addresses`]: inputs and the `(type, address)` list expected,
    /// `None` for "left as published".
    struct Case {
        name: &'static str,
        current: Vec<(&'static str, &'static str)>,
        ips: NodeIps,
        detected: Option<&'static str>,
        cloud: CloudProvider,
        want: Option<Vec<(&'static str, &'static str)>>,
    }

    fn check(case: Case) {
        let current: Vec<NodeAddress> = case
            .current
            .iter()
            .map(|(t, a)| address(t, (*a).to_owned()))
            .collect();
        let got = node_addresses(
            &current,
            case.ips,
            case.detected.map(ip),
            "edge-1",
            case.cloud,
        );
        let got: Option<Vec<(String, String)>> =
            got.map(|v| v.into_iter().map(|a| (a.type_, a.address)).collect());
        let want: Option<Vec<(String, String)>> = case.want.map(|v| {
            v.iter()
                .map(|(t, a)| ((*t).to_owned(), (*a).to_owned()))
                .collect()
        });
        assert_eq!(got, want, "{}", case.name);
    }

    #[test]
    fn addresses_as_upstreams_setter() {
        let pair = NodeIps::DualStack(ip("10.0.0.5"), ip("2001:db8::5"));
        let published = vec![("InternalIP", "10.9.9.9"), ("Hostname", "edge-1")];
        let base = || Case {
            name: "",
            current: Vec::new(),
            ips: NodeIps::Detect,
            detected: Some("192.168.1.20"),
            cloud: CloudProvider::None,
            want: None,
        };
        let cases = [
            Case {
                name: "detected address and hostname",
                want: Some(vec![("InternalIP", "192.168.1.20"), ("Hostname", "edge-1")]),
                ..base()
            },
            Case {
                name: "the given address wins over the detected one",
                ips: NodeIps::Single(ip("10.0.0.5")),
                current: published.clone(),
                want: Some(vec![("InternalIP", "10.0.0.5"), ("Hostname", "edge-1")]),
                ..base()
            },
            Case {
                name: "dual-stack: two InternalIPs in the given order",
                ips: pair,
                want: Some(vec![
                    ("InternalIP", "10.0.0.5"),
                    ("InternalIP", "2001:db8::5"),
                    ("Hostname", "edge-1"),
                ]),
                ..base()
            },
            Case {
                name: "a failed detection keeps what was published",
                detected: None,
                current: published.clone(),
                want: None,
                ..base()
            },
            Case {
                name: "a failed detection with nothing published: the hostname",
                detected: None,
                want: Some(vec![("Hostname", "edge-1")]),
                ..base()
            },
            Case {
                name: "external, no --node-ip: the hostname only, for the manager to fill",
                cloud: CloudProvider::External,
                want: Some(vec![("Hostname", "edge-1")]),
                ..base()
            },
            Case {
                name: "external with --node-ip: the given addresses at first",
                cloud: CloudProvider::External,
                ips: pair,
                want: Some(vec![
                    ("InternalIP", "10.0.0.5"),
                    ("InternalIP", "2001:db8::5"),
                    ("Hostname", "edge-1"),
                ]),
                ..base()
            },
            Case {
                name: "external: published addresses are the manager's, never replaced",
                cloud: CloudProvider::External,
                ips: pair,
                current: vec![("InternalIP", "10.0.0.5"), ("ExternalIP", "203.0.113.7")],
                want: None,
                ..base()
            },
            Case {
                name: "external with --node-ip=::: detection as without a provider",
                cloud: CloudProvider::External,
                ips: NodeIps::DetectPreferring(IpFamily::V6),
                detected: Some("2001:db8::9"),
                want: Some(vec![("InternalIP", "2001:db8::9"), ("Hostname", "edge-1")]),
                ..base()
            },
        ];
        for case in cases {
            check(case);
        }
    }
}
