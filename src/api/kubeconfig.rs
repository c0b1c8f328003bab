//! Loads a kubeconfig file (`--kubeconfig`) into a [`ClientConfig`].
//!
//! Supported: clusters (`server`, `certificate-authority[-data]`,
//! `insecure-skip-tls-verify`), users (`client-certificate[-data]`,
//! `client-key[-data]`, `token`, `tokenFile`) and contexts with `current-context`.
//! Relative file paths resolve against the kubeconfig's own directory, as kubectl does.
//! Credential plugins (`exec`, `auth-provider`) and basic auth are refused with an
//! error naming the field. A token file is read once, at load time.
//!
//! Called once at start-up from the main thread; pure apart from reading the
//! kubeconfig and the files it names. Every error names the kubeconfig and the field.

use std::fmt;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::api::base64;
use crate::api::certs::{self, CertError};
use crate::api::client::ClientConfig;
use crate::api::meta::nullable;

mod render;
pub use render::client_cert_kubeconfig;

/// A kubeconfig that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum KubeconfigError {
    #[error("read kubeconfig {}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("kubeconfig {}: parse yaml: {source}", path.display())]
    Parse {
        path: PathBuf,
        source: serde_yaml_ng::Error,
    },
    /// A field's value is wrong; `field` is its path, e.g. `users[0].user.token`.
    #[error("kubeconfig {}: {field}: {message}", path.display())]
    Field {
        path: PathBuf,
        field: String,
        message: String,
    },
    /// A file named by a field cannot be read.
    #[error("kubeconfig {}: {field}: read {}: {source}", path.display(), file.display())]
    ReadReferenced {
        path: PathBuf,
        field: String,
        file: PathBuf,
        source: std::io::Error,
    },
    /// The pieces do not fit together (unknown context, cluster or user).
    #[error("kubeconfig {}: {message}", path.display())]
    Invalid { path: PathBuf, message: String },
    /// A certificate, key or CA bundle TLS cannot use; `file` is the file the field
    /// names (none for inline `-data`).
    #[error("kubeconfig {}: {field}{}: {source}", path.display(), in_file(file))]
    Certificate {
        path: PathBuf,
        field: String,
        file: Option<PathBuf>,
        source: CertError,
    },
}

fn in_file(file: &Option<PathBuf>) -> String {
    file.as_ref()
        .map(|f| format!(" (file {})", f.display()))
        .unwrap_or_default()
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "kebab-case")]
struct RawConfig {
    #[serde(deserialize_with = "nullable")]
    clusters: Vec<Named<RawCluster>>,
    #[serde(deserialize_with = "nullable")]
    users: Vec<Named<RawUser>>,
    #[serde(deserialize_with = "nullable")]
    contexts: Vec<Named<RawContext>>,
    #[serde(deserialize_with = "nullable")]
    current_context: String,
}

/// `{name, cluster|user|context}`: the entry body sits under a key that differs per list.
#[derive(Debug, Default, Deserialize)]
#[serde(default, bound(deserialize = "T: Deserialize<'de> + Default"))]
struct Named<T: Default> {
    #[serde(deserialize_with = "nullable")]
    name: String,
    #[serde(alias = "cluster", alias = "user", alias = "context")]
    #[serde(deserialize_with = "nullable")]
    body: T,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "kebab-case")]
struct RawCluster {
    server: Option<String>,
    certificate_authority: Option<String>,
    certificate_authority_data: Option<String>,
    insecure_skip_tls_verify: Option<bool>,
}

#[derive(Default, Deserialize)]
#[serde(default, rename_all = "kebab-case")]
struct RawUser {
    client_certificate: Option<String>,
    client_certificate_data: Option<String>,
    client_key: Option<String>,
    client_key_data: Option<String>,
    token: Option<String>,
    #[serde(rename = "tokenFile")]
    token_file: Option<String>,
    username: Option<String>,
    password: Option<String>,
    exec: Option<serde_yaml_ng::Value>,
    auth_provider: Option<serde_yaml_ng::Value>,
}

// Hand-written so a token or key never reaches a log through `{:?}`.
impl fmt::Debug for RawUser {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RawUser")
            .field("client_certificate", &self.client_certificate)
            .field("client_key", &self.client_key)
            .field("token_file", &self.token_file)
            .finish_non_exhaustive()
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct RawContext {
    cluster: Option<String>,
    user: Option<String>,
}

/// Reads the kubeconfig at `path` and resolves its current context.
pub fn load(path: &Path) -> Result<ClientConfig, KubeconfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| KubeconfigError::Read {
        path: path.to_owned(),
        source,
    })?;
    from_yaml(&text, path, None)
}

/// Resolves kubeconfig `text` as if read from `path` (which names it in errors and
/// anchors relative paths). `context` overrides `current-context`.
pub fn from_yaml(
    text: &str,
    path: &Path,
    context: Option<&str>,
) -> Result<ClientConfig, KubeconfigError> {
    let raw: RawConfig =
        serde_yaml_ng::from_str(text).map_err(|source| KubeconfigError::Parse {
            path: path.to_owned(),
            source,
        })?;
    Resolver { path, raw: &raw }.resolve(context)
}

struct Resolver<'a> {
    path: &'a Path,
    raw: &'a RawConfig,
}

impl Resolver<'_> {
    fn invalid(&self, message: String) -> KubeconfigError {
        KubeconfigError::Invalid {
            path: self.path.to_owned(),
            message,
        }
    }

    fn field(&self, field: &str, message: impl Into<String>) -> KubeconfigError {
        KubeconfigError::Field {
            path: self.path.to_owned(),
            field: field.to_owned(),
            message: message.into(),
        }
    }

    fn resolve(&self, context: Option<&str>) -> Result<ClientConfig, KubeconfigError> {
        let ctx_name = match context {
            Some(c) => c,
            None if self.raw.current_context.is_empty() => {
                return Err(self.invalid("current-context is not set".into()))
            }
            None => self.raw.current_context.as_str(),
        };
        let ctx = self
            .raw
            .contexts
            .iter()
            .find(|c| c.name == ctx_name)
            .ok_or_else(|| self.invalid(format!("context {ctx_name:?} not found")))?;

        let cluster_name = ctx.body.cluster.as_deref().unwrap_or("");
        let (ci, cluster) = self
            .raw
            .clusters
            .iter()
            .enumerate()
            .find(|(_, c)| c.name == cluster_name)
            .ok_or_else(|| {
                self.invalid(format!(
                    "context {ctx_name:?} names unknown cluster {cluster_name:?}"
                ))
            })?;
        let mut config = self.cluster(ci, &cluster.body)?;

        match ctx.body.user.as_deref().filter(|u| !u.is_empty()) {
            None => {}
            Some(user_name) => {
                let (ui, user) = self
                    .raw
                    .users
                    .iter()
                    .enumerate()
                    .find(|(_, u)| u.name == user_name)
                    .ok_or_else(|| {
                        self.invalid(format!(
                            "context {ctx_name:?} names unknown user {user_name:?}"
                        ))
                    })?;
                self.user(ui, &user.body, &mut config)?;
            }
        }
        Ok(config)
    }

    fn cluster(&self, i: usize, c: &RawCluster) -> Result<ClientConfig, KubeconfigError> {
        let prefix = format!("clusters[{i}].cluster");
        let server = c.server.as_deref().unwrap_or("").trim();
        if server.is_empty() {
            return Err(self.field(&format!("{prefix}.server"), "missing"));
        }
        if !(server.starts_with("https://") || server.starts_with("http://")) {
            return Err(self.field(
                &format!("{prefix}.server"),
                format!("{server:?} is not an http:// or https:// URL"),
            ));
        }
        let mut config = ClientConfig::new(server);
        config.insecure_skip_tls_verify = c.insecure_skip_tls_verify.unwrap_or(false);
        config.ca_pem = self.data_or_file(
            &prefix,
            "certificate-authority",
            c.certificate_authority_data.as_deref(),
            c.certificate_authority.as_deref(),
        )?;
        if let Some(pem) = &config.ca_pem {
            let field = format!("{prefix}.certificate-authority");
            if count_pem(pem, &field, self)?.certs == 0 {
                return Err(self.field(&field, "no PEM certificate found"));
            }
            certs::check_ca_bundle(pem).map_err(|source| {
                self.certificate(
                    &prefix,
                    "certificate-authority",
                    (
                        c.certificate_authority_data.as_deref(),
                        c.certificate_authority.as_deref(),
                    ),
                    source,
                )
            })?;
        }
        Ok(config)
    }

    fn user(
        &self,
        i: usize,
        u: &RawUser,
        config: &mut ClientConfig,
    ) -> Result<(), KubeconfigError> {
        let prefix = format!("users[{i}].user");
        if u.exec.is_some() {
            return Err(self.field(
                &format!("{prefix}.exec"),
                "credential plugins are not supported; use a client certificate or a token",
            ));
        }
        if u.auth_provider.is_some() {
            return Err(self.field(
                &format!("{prefix}.auth-provider"),
                "auth providers are not supported; use a client certificate or a token",
            ));
        }
        if u.username.is_some() || u.password.is_some() {
            return Err(self.field(
                &format!("{prefix}.username"),
                "basic authentication is not supported",
            ));
        }

        let cert = self.data_or_file(
            &prefix,
            "client-certificate",
            u.client_certificate_data.as_deref(),
            u.client_certificate.as_deref(),
        )?;
        let key = self.data_or_file(
            &prefix,
            "client-key",
            u.client_key_data.as_deref(),
            u.client_key.as_deref(),
        )?;
        match (&cert, &key) {
            (Some(c), Some(k)) => {
                let cf = format!("{prefix}.client-certificate");
                if count_pem(c, &cf, self)?.certs == 0 {
                    return Err(self.field(&cf, "no PEM certificate found"));
                }
                let kf = format!("{prefix}.client-key");
                if count_pem(k, &kf, self)?.keys == 0 {
                    return Err(self.field(&kf, "no PEM private key found"));
                }
                // What rustls would refuse on the first connection is refused now,
                // naming the certificate (or the key when only it is wrong).
                let key_source = (u.client_key_data.as_deref(), u.client_key.as_deref());
                let cert_source = (
                    u.client_certificate_data.as_deref(),
                    u.client_certificate.as_deref(),
                );
                let key = certs::parse_key(k).map_err(|source| {
                    self.certificate(&prefix, "client-key", key_source, source)
                })?;
                let chain = certs::parse_certs(c).map_err(|source| {
                    self.certificate(&prefix, "client-certificate", cert_source, source)
                })?;
                certs::check_pair(&chain, &key).map_err(|source| match source {
                    CertError::Key(_) => {
                        self.certificate(&prefix, "client-key", key_source, source)
                    }
                    _ => self.certificate(&prefix, "client-certificate", cert_source, source),
                })?;
            }
            (Some(_), None) => {
                return Err(self.field(&prefix, "client-certificate given without client-key"))
            }
            (None, Some(_)) => {
                return Err(self.field(&prefix, "client-key given without client-certificate"))
            }
            (None, None) => {}
        }
        config.client_cert_pem = cert;
        config.client_key_pem = key;

        config.token = match (u.token.as_deref(), u.token_file.as_deref()) {
            (Some(t), _) if !t.trim().is_empty() => Some(t.trim().to_owned()),
            (_, Some(file)) if !file.is_empty() => {
                let field = format!("{prefix}.tokenFile");
                let bytes = self.read_file(&field, file)?;
                let token = String::from_utf8(bytes)
                    .map_err(|_| self.field(&field, "token file is not UTF-8"))?;
                let token = token.trim();
                if token.is_empty() {
                    return Err(self.field(&field, "token file is empty"));
                }
                Some(token.to_owned())
            }
            _ => None,
        };
        Ok(())
    }

    /// Reads `<name>-data` (base64) or `<name>` (a file); both set is an error, as in
    /// client-go's validation.
    fn data_or_file(
        &self,
        prefix: &str,
        name: &str,
        data: Option<&str>,
        file: Option<&str>,
    ) -> Result<Option<Vec<u8>>, KubeconfigError> {
        let data = data.filter(|d| !d.trim().is_empty());
        let file = file.filter(|f| !f.is_empty());
        match (data, file) {
            (Some(_), Some(_)) => Err(self.field(
                &format!("{prefix}.{name}"),
                format!("both {name} and {name}-data are set"),
            )),
            (Some(d), None) => {
                let field = format!("{prefix}.{name}-data");
                base64::decode(d)
                    .map(Some)
                    .map_err(|why| self.field(&field, format!("invalid base64: {why}")))
            }
            (None, Some(f)) => self.read_file(&format!("{prefix}.{name}"), f).map(Some),
            (None, None) => Ok(None),
        }
    }

    /// A [`KubeconfigError::Certificate`] for `<prefix>.<name>[-data]`, naming the
    /// file when the value came from one.
    fn certificate(
        &self,
        prefix: &str,
        name: &str,
        (data, file): (Option<&str>, Option<&str>),
        source: CertError,
    ) -> KubeconfigError {
        let inline = data.is_some_and(|d| !d.trim().is_empty());
        let (field, file) = match file.filter(|f| !f.is_empty() && !inline) {
            Some(f) => (
                format!("{prefix}.{name}"),
                Some(resolve_relative(self.path, f)),
            ),
            None => (format!("{prefix}.{name}-data"), None),
        };
        KubeconfigError::Certificate {
            path: self.path.to_owned(),
            field,
            file,
            source,
        }
    }

    fn read_file(&self, field: &str, file: &str) -> Result<Vec<u8>, KubeconfigError> {
        let file = resolve_relative(self.path, file);
        std::fs::read(&file).map_err(|source| KubeconfigError::ReadReferenced {
            path: self.path.to_owned(),
            field: field.to_owned(),
            file,
            source,
        })
    }
}

/// A path from the kubeconfig, anchored at the kubeconfig's directory when relative.
fn resolve_relative(kubeconfig: &Path, file: &str) -> PathBuf {
    let p = Path::new(file);
    if p.is_absolute() {
        return p.to_owned();
    }
    match kubeconfig.parent() {
        Some(dir) => dir.join(p),
        None => p.to_owned(),
    }
}

#[derive(Default)]
struct PemCounts {
    certs: usize,
    keys: usize,
}

fn count_pem(pem: &[u8], field: &str, r: &Resolver<'_>) -> Result<PemCounts, KubeconfigError> {
    let mut counts = PemCounts::default();
    for item in ureq::tls::parse_pem(pem) {
        match item {
            Ok(ureq::tls::PemItem::Certificate(_)) => counts.certs += 1,
            Ok(ureq::tls::PemItem::PrivateKey(_)) => counts.keys += 1,
            Ok(_) => {}
            Err(e) => return Err(r.field(field, format!("invalid PEM: {e}"))),
        }
    }
    Ok(counts)
}

#[cfg(test)]
mod tests;
