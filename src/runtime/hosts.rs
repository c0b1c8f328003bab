//! The pod's hostname and its kubelet-managed `/etc/hosts` (upstream
//! GeneratePodHostNameAndDomain, GetNodenameForKernel, makeHostsMount and the
//! managedHostsFileContent / nodeHostsFileContent / hostsEntriesFromHostAliases trio).
//!
//! Pure apart from [`ensure_hosts_file`], which a pod worker thread calls from
//! `runtime/sync.rs` just before each CreateContainer: like upstream's makeMounts, the
//! file is written once the sandbox's IPs are known, and rewritten (in place, so
//! running containers see the change) only when its content changes. It lives at
//! `<root-dir>/pods/<uid>/etc-hosts` and is bind-mounted read-write at `/etc/hosts` in
//! every container (init, sidecar, regular, ephemeral) that does not mount that path
//! itself. A pod-network pod without an IP gets none (the runtime's own file stays).
//! Host-network pods get the node's hosts file (path injectable through
//! `RuntimeSettings::node_hosts_file`) under a host-network header.

use std::fmt;
use std::path::{Path, PathBuf};

use protobuf::EnumOrUnknown;

use crate::api::pod::{Container, HostAlias, Pod};
use crate::cri::pb;
use crate::sources::file::{is_dns_label, is_dns_subdomain};

/// Where the hosts file is mounted in containers.
pub const ETC_HOSTS: &str = "/etc/hosts";
/// The file's name in the pod directory (upstream getEtcHostsPath).
const HOSTS_FILE_NAME: &str = "etc-hosts";
/// Longest hostname the kernel accepts.
const MAX_HOSTNAME: usize = 63;
/// Longest FQDN that fits the kernel's nodename field (upstream GetNodenameForKernel).
const MAX_FQDN: usize = 64;

const MANAGED_HEADER: &str = "# Kubernetes-managed hosts file.\n";
const HOST_NETWORK_HEADER: &str = "# Kubernetes-managed hosts file (host network).\n";
const ALIASES_HEADER: &str = "# Entries added by HostAliases.\n";

/// A pod's short hostname and its DNS domain (`<subdomain>.<ns>.svc.<cluster-domain>`,
/// empty without a subdomain or with a hostnameOverride).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodNames {
    pub hostname: String,
    pub domain: String,
}

impl PodNames {
    /// `<hostname>.<domain>` when the pod has a domain.
    pub fn fqdn(&self) -> Option<String> {
        (!self.domain.is_empty()).then(|| format!("{}.{}", self.hostname, self.domain))
    }
}

/// Why a pod's hostname cannot be made. The API server refuses such pods; static pods
/// and old API servers can still bring them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HostnameError {
    /// `spec.hostnameOverride` is not an RFC 1123 subdomain.
    InvalidOverride(String),
    /// `spec.hostname` is not an RFC 1123 label.
    InvalidHostname(String),
    /// `spec.subdomain` is not an RFC 1123 label.
    InvalidSubdomain(String),
    /// Cutting the name to 63 characters left nothing but '-' and '.'.
    EmptyAfterTruncation(String),
    /// setHostnameAsFQDN asks for an FQDN longer than the kernel's 64 characters.
    FqdnTooLong(String),
}

impl fmt::Display for HostnameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::InvalidOverride(v) => {
                write!(f, "pod hostnameOverride {v:?} is not a valid DNS subdomain")
            }
            Self::InvalidHostname(v) => write!(f, "pod hostname {v:?} is not a valid DNS label"),
            Self::InvalidSubdomain(v) => {
                write!(f, "pod subdomain {v:?} is not a valid DNS label")
            }
            Self::EmptyAfterTruncation(v) => {
                write!(
                    f,
                    "pod hostname {v:?} is empty once cut to {MAX_HOSTNAME} characters"
                )
            }
            Self::FqdnTooLong(fqdn) => write!(
                f,
                "FQDN {fqdn:?} is too long ({} characters, the kernel takes at most {MAX_FQDN})",
                fqdn.len()
            ),
        }
    }
}

impl std::error::Error for HostnameError {}

/// Cuts a hostname to 63 characters and trims trailing '-' and '.'.
fn truncate(name: &str) -> Result<String, HostnameError> {
    if name.len() <= MAX_HOSTNAME {
        return Ok(name.to_owned());
    }
    // chars, not bytes: a name that skipped validation must not panic here.
    let cut: String = name.chars().take(MAX_HOSTNAME).collect();
    let trimmed = cut.trim_end_matches(['-', '.']);
    if trimmed.is_empty() {
        return Err(HostnameError::EmptyAfterTruncation(name.to_owned()));
    }
    Ok(trimmed.to_owned())
}

/// The pod's hostname and domain (upstream GeneratePodHostNameAndDomain):
/// `hostnameOverride` wins outright and has no domain; otherwise `hostname` (else the
/// pod name), with `<subdomain>.<namespace>.svc.<cluster-domain>` as the domain when a
/// subdomain is set. Without a cluster domain the domain ends at `svc` (upstream would
/// leave a trailing dot).
pub fn pod_names(pod: &Pod, cluster_domain: &str) -> Result<PodNames, HostnameError> {
    if let Some(name) = &pod.spec.hostname_override {
        if !is_dns_subdomain(name) {
            return Err(HostnameError::InvalidOverride(name.clone()));
        }
        return Ok(PodNames {
            hostname: truncate(name)?,
            domain: String::new(),
        });
    }
    let hostname = match pod.spec.hostname.as_deref().filter(|h| !h.is_empty()) {
        Some(h) if !is_dns_label(h) => return Err(HostnameError::InvalidHostname(h.to_owned())),
        Some(h) => h,
        None => pod.name(),
    };
    let domain = match pod.spec.subdomain.as_deref().filter(|s| !s.is_empty()) {
        Some(sub) if !is_dns_label(sub) => {
            return Err(HostnameError::InvalidSubdomain(sub.to_owned()))
        }
        Some(sub) if cluster_domain.is_empty() => format!("{sub}.{}.svc", pod.namespace()),
        Some(sub) => format!("{sub}.{}.svc.{cluster_domain}", pod.namespace()),
        None => String::new(),
    };
    Ok(PodNames {
        hostname: truncate(hostname)?,
        domain,
    })
}

/// The hostname the sandbox gets (upstream GetNodenameForKernel): empty for
/// host-network pods (runc cannot set one without a private UTS namespace), the FQDN
/// with `setHostnameAsFQDN: true` and a domain, else the short hostname.
pub fn sandbox_hostname(pod: &Pod, cluster_domain: &str) -> Result<String, HostnameError> {
    if pod.spec.host_network.unwrap_or(false) {
        return Ok(String::new());
    }
    let names = pod_names(pod, cluster_domain)?;
    match names.fqdn() {
        Some(fqdn) if pod.spec.set_hostname_as_fqdn == Some(true) => {
            if fqdn.len() > MAX_FQDN {
                return Err(HostnameError::FqdnTooLong(fqdn));
            }
            Ok(fqdn)
        }
        _ => Ok(names.hostname),
    }
}

/// The hostAliases section: a blank line, the comment, then one line per alias.
fn alias_entries(aliases: &[HostAlias], out: &mut String) {
    if aliases.is_empty() {
        return;
    }
    out.push('\n');
    out.push_str(ALIASES_HEADER);
    for alias in aliases {
        out.push_str(&alias.ip);
        out.push('\t');
        out.push_str(&alias.hostnames.join("\t"));
        out.push('\n');
    }
}

/// The hosts file of a pod-network pod: header, localhost entries, one line per pod IP
/// (`<ip>\t<fqdn>\t<hostname>` with a domain, else `<ip>\t<hostname>`), hostAliases.
pub fn managed_content(pod_ips: &[String], names: &PodNames, aliases: &[HostAlias]) -> Vec<u8> {
    let mut out = String::from(MANAGED_HEADER);
    out.push_str("127.0.0.1\tlocalhost\n");
    out.push_str("::1\tlocalhost ip6-localhost ip6-loopback\n");
    out.push_str("fe00::0\tip6-localnet\n");
    out.push_str("fe00::0\tip6-mcastprefix\n");
    out.push_str("fe00::1\tip6-allnodes\n");
    out.push_str("fe00::2\tip6-allrouters\n");
    let names_column = match names.fqdn() {
        Some(fqdn) => format!("{fqdn}\t{}", names.hostname),
        None => names.hostname.clone(),
    };
    for ip in pod_ips {
        out.push_str(&format!("{ip}\t{names_column}\n"));
    }
    alias_entries(aliases, &mut out);
    out.into_bytes()
}

/// The hosts file of a host-network pod: the node's own file under a header, then the
/// hostAliases.
pub fn host_network_content(node_hosts: &[u8], aliases: &[HostAlias]) -> Vec<u8> {
    let mut out = HOST_NETWORK_HEADER.as_bytes().to_vec();
    out.extend_from_slice(node_hosts);
    let mut tail = String::new();
    alias_entries(aliases, &mut tail);
    out.extend_from_slice(tail.as_bytes());
    out
}

/// Whether `container` gets the managed hosts file (upstream shouldMountHostsFile plus
/// makeMounts' check): a pod-network pod only once it has an IP, and never a container
/// that mounts `/etc/hosts` itself.
pub fn needs_hosts_file(pod: &Pod, container: &Container, pod_ips: &[String]) -> bool {
    let pod_has_one = pod.spec.host_network.unwrap_or(false) || !pod_ips.is_empty();
    pod_has_one && !mounts_etc_hosts(container)
}

fn mounts_etc_hosts(container: &Container) -> bool {
    container
        .volume_mounts
        .iter()
        .any(|m| m.mount_path == ETC_HOSTS)
}

/// The CRI mount of `hosts_file` at `/etc/hosts`, unless the container mounts that path
/// itself. Read-write, as upstream.
pub fn hosts_mount(container: &Container, hosts_file: Option<&Path>) -> Option<pb::Mount> {
    let file = hosts_file.filter(|_| !mounts_etc_hosts(container))?;
    Some(pb::Mount {
        container_path: ETC_HOSTS.to_owned(),
        host_path: file.display().to_string(),
        propagation: EnumOrUnknown::new(pb::MountPropagation::PROPAGATION_PRIVATE),
        ..Default::default()
    })
}

/// A hosts file that could not be made; the container's start fails with
/// CreateContainerConfigError.
#[derive(Debug)]
pub enum HostsError {
    Hostname(HostnameError),
    ReadNodeHosts {
        path: PathBuf,
        source: std::io::Error,
    },
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
}

impl fmt::Display for HostsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Hostname(err) => write!(f, "cannot make the pod's hosts file: {err}"),
            Self::ReadNodeHosts { path, source } => {
                write!(
                    f,
                    "reading the node's hosts file {}: {source}",
                    path.display()
                )
            }
            Self::Write { path, source } => {
                write!(
                    f,
                    "writing the pod's hosts file {}: {source}",
                    path.display()
                )
            }
        }
    }
}

impl std::error::Error for HostsError {}

/// Where things come from when writing a hosts file.
pub struct HostsInputs<'a> {
    /// `--root-dir`; the file goes to `<root>/pods/<uid>/etc-hosts`.
    pub root_dir: &'a Path,
    /// The node's hosts file, copied for host-network pods (`/etc/hosts`).
    pub node_hosts_file: &'a Path,
    pub cluster_domain: &'a str,
}

/// Writes the pod's hosts file if `container` gets one (upstream makeHostsMount +
/// ensureHostsFile) and returns its path; `None` when it gets none. Mode 0644.
pub fn ensure_hosts_file(
    inputs: &HostsInputs<'_>,
    pod: &Pod,
    container: &Container,
    pod_ips: &[String],
) -> Result<Option<PathBuf>, HostsError> {
    use std::os::unix::fs::PermissionsExt;
    if !needs_hosts_file(pod, container, pod_ips) {
        return Ok(None);
    }
    let aliases = &pod.spec.host_aliases;
    let content = if pod.spec.host_network.unwrap_or(false) {
        let node =
            std::fs::read(inputs.node_hosts_file).map_err(|source| HostsError::ReadNodeHosts {
                path: inputs.node_hosts_file.to_owned(),
                source,
            })?;
        host_network_content(&node, aliases)
    } else {
        let names = pod_names(pod, inputs.cluster_domain).map_err(HostsError::Hostname)?;
        managed_content(pod_ips, &names, aliases)
    };
    let dir = inputs.root_dir.join("pods").join(pod.uid());
    let path = dir.join(HOSTS_FILE_NAME);
    let write_err = |source| HostsError::Write {
        path: path.clone(),
        source,
    };
    if std::fs::read(&path).is_ok_and(|old| old == content) {
        return Ok(Some(path));
    }
    std::fs::create_dir_all(&dir).map_err(write_err)?;
    // In place, not by rename: running containers have this inode bind-mounted.
    std::fs::write(&path, &content).map_err(write_err)?;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).map_err(write_err)?;
    Ok(Some(path))
}

#[cfg(test)]
mod tests;
