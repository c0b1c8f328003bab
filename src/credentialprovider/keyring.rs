//! The keyring (upstream BasicDockerKeyring + UnionDockerKeyring, pure): registry keys
//! from Docker configs, matched to an image's repository as the Docker client does.
//!
//! A key is a host with optional port and path (`reg.io:5000/team`); a scheme and a
//! `/v1/` or `/v2/` path prefix are dropped. A key matches a repository when the
//! ports are equal, the hosts have as many dot-separated parts and each part matches
//! as a glob (`*.example.com` matches `a.example.com`, not `example.com` or
//! `a.b.example.com`), and the key's path is a string prefix of the repository's.
//! More specific keys come first (the index is reverse-sorted); credentials for
//! `index.docker.io` serve Docker Hub images when no key matched.

use std::collections::BTreeMap;

use super::config::DockerConfig;

/// Where a credential came from: it decides what the verification records keep.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum CredentialSource {
    /// A pull secret of the pod (or of its service account, copied into the pod).
    Secret {
        namespace: String,
        name: String,
        uid: String,
    },
    /// The node's own Docker config file, or a credential provider plugin not in
    /// service account token mode: usable by every pod on the node.
    Node,
    /// A credential provider plugin in service account token mode, for this service
    /// account (upstream's ServiceAccountCoordinates): usable by the pods that run as it.
    ServiceAccount {
        namespace: String,
        name: String,
        uid: String,
    },
}

/// One registry credential and its source.
#[derive(Clone, PartialEq, Eq)]
pub struct Credential {
    pub username: String,
    pub password: String,
    pub source: CredentialSource,
}

impl std::fmt::Debug for Credential {
    // Never print a password, even in a debug log.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credential")
            .field("username", &self.username)
            .field("password", &"<redacted>")
            .field("source", &self.source)
            .finish()
    }
}

impl Credential {
    /// An HMAC-SHA256, under a per-node secret `key`, of the username and password:
    /// what verification records keep instead of the credential itself. Keyed, so
    /// that a copy of the records does not let anyone test guessed passwords offline.
    /// Prefixed with its scheme, so records of another scheme never match.
    pub fn digest(&self, key: &ring::hmac::Key) -> String {
        let mut ctx = ring::hmac::Context::with_key(key);
        ctx.update(self.username.as_bytes());
        ctx.update(&[0]);
        ctx.update(self.password.as_bytes());
        let tag = ctx.sign();
        let hex: String = tag.as_ref().iter().map(|b| format!("{b:02x}")).collect();
        format!("{DIGEST_SCHEME}{hex}")
    }
}

/// Prefix of a credential digest made by [`Credential::digest`].
pub const DIGEST_SCHEME: &str = "hmac-sha256:";

const DEFAULT_REGISTRY_HOST: &str = "index.docker.io";

/// Credentials by normalised registry key; see the module doc.
#[derive(Clone, Debug, Default)]
pub struct Keyring {
    /// Keys, reverse-sorted so longer paths of one host come first.
    index: Vec<String>,
    creds: BTreeMap<String, Vec<Credential>>,
}

/// A config key as a schemeless `host[:port][/path]`, or `None` when it has no host.
pub fn normalize_key(key: &str) -> Option<String> {
    let rest = key
        .strip_prefix("https://")
        .or_else(|| key.strip_prefix("http://"))
        .unwrap_or(key);
    let (host, path) = match rest.find('/') {
        Some(slash) => (&rest[..slash], &rest[slash..]),
        None => (rest, ""),
    };
    if host.is_empty() || host.contains(char::is_whitespace) {
        return None;
    }
    let path = if path.starts_with("/v2/") || path.starts_with("/v1/") {
        &path[3..]
    } else {
        path
    };
    Some(if path.is_empty() || path == "/" {
        host.to_owned()
    } else {
        format!("{host}{path}")
    })
}

impl Keyring {
    /// Adds every entry of `config`, in its order, as coming from `source`. Keys
    /// without a host are skipped.
    pub fn add(&mut self, source: &CredentialSource, config: &DockerConfig) {
        for (key, entry) in config {
            let Some(key) = normalize_key(key) else {
                log::warn!("docker config entry {key:?} has no registry host, ignoring it");
                continue;
            };
            self.creds.entry(key.clone()).or_default().push(Credential {
                username: entry.username.clone(),
                password: entry.password.clone(),
                source: source.clone(),
            });
            self.index.push(key);
        }
        self.index.sort();
        self.index.dedup();
        self.index.reverse();
    }

    pub fn is_empty(&self) -> bool {
        self.creds.is_empty()
    }

    /// The credentials to try, in order, for `repository` (an image name without tag
    /// or digest; normalised here, so `busybox` means `docker.io/library/busybox`).
    pub fn lookup(&self, repository: &str) -> Vec<Credential> {
        let repository = normalize_repository(repository);
        let mut out = Vec::new();
        for key in &self.index {
            if urls_match(key, &repository) {
                out.extend(self.creds[key].iter().cloned());
            }
        }
        if out.is_empty() && is_default_registry(&repository) {
            if let Some(found) = self.creds.get(DEFAULT_REGISTRY_HOST) {
                out.extend(found.iter().cloned());
            }
        }
        out
    }
}

/// Each keyring's credentials in turn: the pod's, then the node's, then the
/// plugins' (upstream UnionDockerKeyring).
pub fn lookup_union(keyrings: &[&Keyring], repository: &str) -> Vec<Credential> {
    keyrings.iter().flat_map(|k| k.lookup(repository)).collect()
}

/// The repository of an image reference, with the Docker Hub defaults made explicit
/// (`busybox` → `docker.io/library/busybox`) and tag and digest dropped.
pub fn normalize_repository(image: &str) -> String {
    let without_digest = image.split('@').next().unwrap_or(image);
    let repo = match without_digest.rfind(':') {
        Some(colon) if !without_digest[colon..].contains('/') => &without_digest[..colon],
        _ => without_digest,
    };
    let (domain, rest) = match repo.split_once('/') {
        Some((first, rest))
            if first.contains('.') || first.contains(':') || first == "localhost" =>
        {
            (first, rest.to_owned())
        }
        _ => ("docker.io", repo.to_owned()),
    };
    let domain = if domain == DEFAULT_REGISTRY_HOST {
        "docker.io"
    } else {
        domain
    };
    if domain == "docker.io" && !rest.contains('/') {
        format!("docker.io/library/{rest}")
    } else {
        format!("{domain}/{rest}")
    }
}

/// True when `repository` is pulled from Docker Hub.
fn is_default_registry(repository: &str) -> bool {
    let first = repository.split('/').next().unwrap_or("");
    if first.is_empty() {
        return false;
    }
    if !repository.contains('/') || first == "docker.io" || first == DEFAULT_REGISTRY_HOST {
        return true;
    }
    !first.contains(['.', ':'])
}

/// Splits a schemeless URL into host parts, port and path.
fn split(url: &str) -> (Vec<&str>, &str, &str) {
    let (host, path) = match url.find('/') {
        Some(slash) => (&url[..slash], &url[slash..]),
        None => (url, ""),
    };
    let (host, port) = match host.rsplit_once(':') {
        Some((h, p)) if !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) => (h, p),
        _ => (host, ""),
    };
    (host.split('.').collect(), port, path)
}

/// Upstream URLsMatch: `glob` (a keyring key) against `target` (a repository).
pub fn urls_match(glob: &str, target: &str) -> bool {
    let (glob_parts, glob_port, glob_path) = split(glob);
    let (target_parts, target_port, target_path) = split(target);
    glob_port == target_port
        && glob_parts.len() == target_parts.len()
        && target_path.starts_with(glob_path)
        && glob_parts
            .iter()
            .zip(&target_parts)
            .all(|(g, t)| glob_match(g.as_bytes(), t.as_bytes()))
}

/// Shell glob over one host part (`*`, `?`, `[a-z]`, `[^x]`, `\x`), like Go's
/// filepath.Match on a name without separators; a malformed class never matches.
fn glob_match(pattern: &[u8], text: &[u8]) -> bool {
    match pattern.first() {
        None => text.is_empty(),
        Some(b'*') => (0..=text.len()).any(|skip| glob_match(&pattern[1..], &text[skip..])),
        Some(b'?') => !text.is_empty() && glob_match(&pattern[1..], &text[1..]),
        Some(b'[') => {
            let Some((&c, rest_text)) = text.split_first() else {
                return false;
            };
            match class_match(&pattern[1..], c) {
                Some((matched, rest_pattern)) => matched && glob_match(rest_pattern, rest_text),
                None => false,
            }
        }
        Some(b'\\') if pattern.len() > 1 => {
            text.first() == Some(&pattern[1]) && glob_match(&pattern[2..], &text[1..])
        }
        Some(&p) => text.first() == Some(&p) && glob_match(&pattern[1..], &text[1..]),
    }
}

/// Matches `c` against a class body (after `[`); returns the result and the pattern
/// after `]`, or `None` when the class is not closed.
fn class_match(body: &[u8], c: u8) -> Option<(bool, &[u8])> {
    let (negated, mut i) = match body.first() {
        Some(b'^') => (true, 1),
        _ => (false, 0),
    };
    let mut matched = false;
    let mut first = true;
    while i < body.len() {
        if body[i] == b']' && !first {
            return Some((matched != negated, &body[i + 1..]));
        }
        first = false;
        let lo = body[i];
        if i + 2 < body.len() && body[i + 1] == b'-' && body[i + 2] != b']' {
            matched |= (lo..=body[i + 2]).contains(&c);
            i += 3;
        } else {
            matched |= lo == c;
            i += 1;
        }
    }
    None
}

#[cfg(test)]
mod tests;
