//! The `--image-credential-provider-config` file (upstream CredentialProviderConfig,
//! `kubelet.config.k8s.io/v1`, `v1beta1` or `v1alpha1`): read once at start-up on the
//! main thread, strictly, and checked as upstream's validateCredentialProviderConfig
//! does. A bad file stops litelet with an error naming the file and the field.
//!
//! The path may be a file (YAML or JSON) or a directory: then every `*.json`,
//! `*.yaml` and `*.yml` in it (not below) is read in name order and the providers
//! are merged; a name used twice is refused. `--image-credential-provider-bin-dir`
//! must exist and hold an executable named after each provider.
//!
//! Parsing ([`parse`], which validates) is pure; [`load`] is the file I/O around it.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use super::wire::{DurationParser, ProtocolVersion};

/// The config file's group; its kind is [`KIND`].
pub const GROUP: &str = "kubelet.config.k8s.io";
pub const KIND: &str = "CredentialProviderConfig";
/// The versions of the config file upstream v1.36 reads.
pub const VERSIONS: [&str; 3] = ["v1", "v1beta1", "v1alpha1"];

/// Parsers owned by the layers above (the flags' Go durations, the API's qualified
/// names), handed in so that this module imports nothing above it.
#[derive(Clone, Copy, Debug)]
pub struct Syntax {
    /// A Go duration (`10m`, `1h30m`, `0`).
    pub duration: DurationParser,
    /// A label or annotation key: `[DNS-subdomain/]name`.
    pub qualified_name: fn(&str) -> bool,
}

/// One plugin, checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProviderConfig {
    /// The executable's name in the bin dir.
    pub name: String,
    /// Images the plugin is asked about (globs per host part, optional port and path).
    pub match_images: Vec<String>,
    /// How long an answer without `cacheDuration` is kept (zero: not kept).
    pub default_cache_duration: Duration,
    /// The request/response version the plugin speaks.
    pub api_version: ProtocolVersion,
    pub args: Vec<String>,
    /// Added to litelet's own environment (and winning over it).
    pub env: Vec<(String, String)>,
    /// Service account token mode (v1 only).
    pub token_attributes: Option<TokenAttributes>,
}

/// `tokenAttributes`: the plugin gets a token of the pod's service account.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TokenAttributes {
    /// `serviceAccountTokenAudience`: the token's only audience.
    pub audience: String,
    /// `requireServiceAccount`: pods without a service account get no credentials.
    pub require_service_account: bool,
    /// Annotations the service account must have for the plugin to be asked.
    pub required_annotation_keys: Vec<String>,
    /// Annotations passed to the plugin when present.
    pub optional_annotation_keys: Vec<String>,
    pub cache_type: TokenCacheType,
}

/// `tokenAttributes.cacheType`: whether answers are kept per service account or per
/// token.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TokenCacheType {
    /// Per token: the credential lives as long as the token (and may be the token).
    Token,
    /// Per service account (namespace, name, UID, the annotations passed).
    ServiceAccount,
}

/// Why the credential provider config cannot be used. Each names the file.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error(
        "--image-credential-provider-config is set but --image-credential-provider-bin-dir is not"
    )]
    NoBinDir,
    #[error("plugin binary directory {}: {source}", path.display())]
    BinDir {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("credential provider config {}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("credential provider config {}: no *.json, *.yaml or *.yml file in the directory", path.display())]
    NoFiles { path: PathBuf },
    /// Syntax, an unknown field or a value of the wrong type.
    #[error("credential provider config {}: {field}: {message}", path.display())]
    Decode {
        path: PathBuf,
        field: String,
        message: String,
    },
    /// The checks upstream's validation makes, each naming its field.
    #[error("credential provider config {}: {}", path.display(), problems.join("; "))]
    Invalid {
        path: PathBuf,
        problems: Vec<String>,
    },
    #[error("credential provider config {}: providers: duplicate provider name {name:?}", path.display())]
    Duplicate { path: PathBuf, name: String },
    #[error("credential provider {name:?}: plugin binary {}: {why}", path.display())]
    Binary {
        name: String,
        path: PathBuf,
        why: String,
    },
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawConfig {
    #[serde(default)]
    kind: String,
    #[serde(default)]
    api_version: String,
    #[serde(default)]
    providers: Vec<RawProvider>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawProvider {
    #[serde(default)]
    name: String,
    #[serde(default)]
    match_images: Vec<String>,
    default_cache_duration: Option<String>,
    #[serde(default)]
    api_version: String,
    #[serde(default)]
    args: Vec<String>,
    #[serde(default)]
    env: Vec<RawEnv>,
    token_attributes: Option<RawTokenAttributes>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEnv {
    name: String,
    value: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawTokenAttributes {
    #[serde(default)]
    service_account_token_audience: String,
    #[serde(default)]
    cache_type: String,
    require_service_account: Option<bool>,
    #[serde(default)]
    required_service_account_annotation_keys: Vec<String>,
    #[serde(default)]
    optional_service_account_annotation_keys: Vec<String>,
}

/// Reads and checks the config at `path` (a file or a directory of files) and the
/// plugin executables in `bin_dir`.
pub fn load(
    path: &Path,
    bin_dir: Option<&Path>,
    syntax: Syntax,
) -> Result<Vec<ProviderConfig>, ConfigError> {
    let bin_dir = bin_dir.ok_or(ConfigError::NoBinDir)?;
    std::fs::metadata(bin_dir).map_err(|source| ConfigError::BinDir {
        path: bin_dir.to_owned(),
        source,
    })?;
    let read_err = |path: &Path| {
        let path = path.to_owned();
        move |source| ConfigError::Read { path, source }
    };
    let files = if std::fs::metadata(path).map_err(read_err(path))?.is_dir() {
        config_files(path)?
    } else {
        vec![path.to_owned()]
    };
    let mut providers: Vec<ProviderConfig> = Vec::new();
    for file in files {
        let bytes = std::fs::read(&file).map_err(read_err(&file))?;
        for provider in parse(&bytes, &file, syntax)? {
            if providers.iter().any(|p| p.name == provider.name) {
                return Err(ConfigError::Duplicate {
                    path: file,
                    name: provider.name,
                });
            }
            providers.push(provider);
        }
    }
    for provider in &providers {
        check_executable(&bin_dir.join(&provider.name), &provider.name)?;
    }
    Ok(providers)
}

/// The config files of directory `dir`, in name order.
fn config_files(dir: &Path) -> Result<Vec<PathBuf>, ConfigError> {
    let read_err = |source| ConfigError::Read {
        path: dir.to_owned(),
        source,
    };
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(read_err)? {
        let entry = entry.map_err(read_err)?;
        let path = entry.path();
        let config_ext = matches!(
            path.extension().and_then(|e| e.to_str()),
            Some("json" | "yaml" | "yml")
        );
        if config_ext && !entry.file_type().map_err(read_err)?.is_dir() {
            files.push(path);
        }
    }
    files.sort();
    if files.is_empty() {
        return Err(ConfigError::NoFiles {
            path: dir.to_owned(),
        });
    }
    Ok(files)
}

/// A regular file with an execute bit (upstream's exec.LookPath).
fn check_executable(path: &Path, name: &str) -> Result<(), ConfigError> {
    use std::os::unix::fs::PermissionsExt;
    let why = match std::fs::metadata(path) {
        Ok(m) if m.is_file() && m.permissions().mode() & 0o111 != 0 => return Ok(()),
        Ok(m) if m.is_file() => "is not executable".to_owned(),
        Ok(_) => "is not a file".to_owned(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => "does not exist".to_owned(),
        Err(e) => e.to_string(),
    };
    Err(ConfigError::Binary {
        name: name.to_owned(),
        path: path.to_owned(),
        why,
    })
}

/// Decodes (strictly) and checks one config file's text; `path` names it in errors.
pub fn parse(
    bytes: &[u8],
    path: &Path,
    syntax: Syntax,
) -> Result<Vec<ProviderConfig>, ConfigError> {
    let decode_err = |field: String, message: String| ConfigError::Decode {
        path: path.to_owned(),
        field,
        message,
    };
    let raw = decode(bytes).map_err(|(field, message)| decode_err(field, message))?;
    if raw.kind != KIND {
        return Err(decode_err(
            "kind".into(),
            format!("{:?} is not {KIND}", raw.kind),
        ));
    }
    let version = match raw.api_version.split_once('/') {
        Some((GROUP, v)) if VERSIONS.contains(&v) => v,
        _ => {
            let known: Vec<String> = VERSIONS.iter().map(|v| format!("{GROUP}/{v}")).collect();
            return Err(decode_err(
                "apiVersion".into(),
                format!("{:?} is not one of {}", raw.api_version, known.join(", ")),
            ));
        }
    };
    // Only v1 has tokenAttributes: in the older versions it is an unknown field.
    if version != "v1" {
        if let Some(i) = raw
            .providers
            .iter()
            .position(|p| p.token_attributes.is_some())
        {
            return Err(decode_err(
                format!("providers[{i}].tokenAttributes"),
                format!("unknown field (only in {GROUP}/v1)"),
            ));
        }
    }
    validate(raw, syntax).map_err(|problems| ConfigError::Invalid {
        path: path.to_owned(),
        problems,
    })
}

/// JSON when the text starts with `{` (YAML parsers dislike JSON's tabs), else YAML;
/// an error is (field path, message).
fn decode(bytes: &[u8]) -> Result<RawConfig, (String, String)> {
    fn split<E: std::fmt::Display>(e: serde_path_to_error::Error<E>) -> (String, String) {
        let field = e.path().to_string();
        (field, e.into_inner().to_string())
    }
    let text = String::from_utf8_lossy(bytes);
    if text.trim_start().starts_with('{') {
        let mut de = serde_json::Deserializer::from_str(&text);
        serde_path_to_error::deserialize(&mut de).map_err(split)
    } else {
        let de = serde_yaml_ng::Deserializer::from_str(&text);
        serde_path_to_error::deserialize(de).map_err(split)
    }
}

/// Upstream's validateCredentialProviderConfig on the decoded file: every problem,
/// each starting with its field (`providers[1].matchImages[0]`).
fn validate(raw: RawConfig, syntax: Syntax) -> Result<Vec<ProviderConfig>, Vec<String>> {
    let mut problems = Vec::new();
    if raw.providers.is_empty() {
        problems.push("providers: at least one provider is required".to_owned());
    }
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    for (i, raw) in raw.providers.into_iter().enumerate() {
        if !seen.insert(raw.name.clone()) {
            problems.push(format!(
                "providers[{i}].name: duplicate provider name {:?}",
                raw.name
            ));
        }
        let mut bad =
            |what: &str, why: String| problems.push(format!("providers[{i}].{what}: {why}"));
        if let Some(provider) = provider(raw, syntax, &mut bad) {
            out.push(provider);
        }
    }
    if problems.is_empty() {
        Ok(out)
    } else {
        Err(problems)
    }
}

/// One provider checked; each problem goes to `bad(field, why)`.
fn provider(
    p: RawProvider,
    syntax: Syntax,
    bad: &mut dyn FnMut(&str, String),
) -> Option<ProviderConfig> {
    if let Some(why) = name_problem(&p.name) {
        bad("name", format!("{:?} {why}", p.name));
    }
    let api_version = ProtocolVersion::parse(&p.api_version);
    if api_version.is_none() {
        let known = ProtocolVersion::ALL.map(|v| v.as_str()).join(", ");
        bad(
            "apiVersion",
            match p.api_version.as_str() {
                "" => format!("required: one of {known}"),
                other => format!("{other:?} is not one of {known}"),
            },
        );
    }
    if p.match_images.is_empty() {
        bad(
            "matchImages",
            "at least one image pattern is required".into(),
        );
    }
    for (j, pattern) in p.match_images.iter().enumerate() {
        if let Some(why) = match_image_problem(pattern) {
            bad(&format!("matchImages[{j}]"), format!("{pattern:?}: {why}"));
        }
    }
    let default_cache_duration = match p.default_cache_duration.as_deref() {
        None => {
            bad("defaultCacheDuration", "required".into());
            None
        }
        Some(text) => (syntax.duration)(text)
            .map_err(|why| bad("defaultCacheDuration", format!("{why} (must be 0 or more)")))
            .ok(),
    };
    let token_attributes = match p.token_attributes {
        None => None,
        Some(t) => token_attributes(t, api_version, syntax)
            .map_err(|problems| {
                for (what, why) in problems {
                    bad(&format!("tokenAttributes{what}"), why);
                }
            })
            .ok(),
    };
    Some(ProviderConfig {
        name: p.name,
        match_images: p.match_images,
        default_cache_duration: default_cache_duration?,
        api_version: api_version?,
        args: p.args,
        env: p.env.into_iter().map(|e| (e.name, e.value)).collect(),
        token_attributes,
    })
}

/// Why a provider name cannot name a file in the bin dir, if it cannot.
fn name_problem(name: &str) -> Option<&'static str> {
    if name.is_empty() {
        Some("is empty")
    } else if name.contains('/') {
        Some("cannot contain '/'")
    } else if name.contains(' ') {
        Some("cannot contain spaces")
    } else if name == "." || name == ".." {
        Some("cannot be '.' or '..'")
    } else {
        None
    }
}

/// What Go's url.Parse refuses in `https://<pattern>`: whitespace and control
/// characters, a `%` not followed by two hex digits, a port that is not a number.
pub fn match_image_problem(pattern: &str) -> Option<String> {
    if let Some(c) = pattern
        .chars()
        .find(|c| c.is_whitespace() || c.is_control())
    {
        return Some(format!("invalid character {c:?}"));
    }
    let bytes = pattern.as_bytes();
    for (i, _) in pattern.match_indices('%') {
        let hex = bytes.get(i + 1..i + 3);
        if !hex.is_some_and(|h| h.iter().all(u8::is_ascii_hexdigit)) {
            return Some("invalid URL escape".into());
        }
    }
    let host = pattern.split('/').next().unwrap_or("");
    if let Some((_, port)) = host.rsplit_once(':') {
        if !port.bytes().all(|b| b.is_ascii_digit()) {
            return Some(format!("invalid port {port:?} after host"));
        }
    }
    None
}

/// The annotation key lists: qualified names, no duplicates, none in both.
fn annotation_key_problems(
    t: &RawTokenAttributes,
    syntax: Syntax,
    bad: &mut dyn FnMut(&str, String),
) {
    let (required, optional) = (
        &t.required_service_account_annotation_keys,
        &t.optional_service_account_annotation_keys,
    );
    let lists = [
        (".requiredServiceAccountAnnotationKeys", required),
        (".optionalServiceAccountAnnotationKeys", optional),
    ];
    for (what, keys) in lists {
        let mut seen = BTreeSet::new();
        for key in keys {
            // Upstream's annotation key rule: a qualified name, case aside.
            if !(syntax.qualified_name)(&key.to_ascii_lowercase()) {
                bad(
                    what,
                    format!("{key:?} is not a qualified name ([prefix/]name)"),
                );
            }
            if !seen.insert(key) {
                bad(what, format!("duplicate key {key:?}"));
            }
        }
    }
    let both: Vec<&String> = required.iter().filter(|k| optional.contains(k)).collect();
    if !both.is_empty() {
        bad(
            "",
            format!("annotation keys {both:?} are both required and optional"),
        );
    }
}

/// Checks `tokenAttributes`; problems are (field suffix, why).
fn token_attributes(
    t: RawTokenAttributes,
    api_version: Option<ProtocolVersion>,
    syntax: Syntax,
) -> Result<TokenAttributes, Vec<(String, String)>> {
    let mut problems: Vec<(String, String)> = Vec::new();
    let mut bad = |what: &str, why: String| problems.push((what.to_owned(), why));
    if api_version.is_some_and(|v| v != ProtocolVersion::V1) {
        bad(
            "",
            format!(
                "only for plugins of apiVersion {}",
                ProtocolVersion::V1.as_str()
            ),
        );
    }
    if t.service_account_token_audience.is_empty() {
        bad(".serviceAccountTokenAudience", "required".into());
    }
    if t.require_service_account.is_none() {
        bad(".requireServiceAccount", "required".into());
    }
    if t.require_service_account == Some(false)
        && !t.required_service_account_annotation_keys.is_empty()
    {
        bad(
            ".requiredServiceAccountAnnotationKeys",
            "requireServiceAccount cannot be false when requiredServiceAccountAnnotationKeys is set"
                .into(),
        );
    }
    annotation_key_problems(&t, syntax, &mut bad);
    let cache_type = match t.cache_type.as_str() {
        "Token" => Some(TokenCacheType::Token),
        "ServiceAccount" => Some(TokenCacheType::ServiceAccount),
        "" => {
            bad(".cacheType", "required: ServiceAccount or Token".into());
            None
        }
        other => {
            bad(
                ".cacheType",
                format!("{other:?} is not ServiceAccount or Token"),
            );
            None
        }
    };
    match (problems.is_empty(), cache_type) {
        (true, Some(cache_type)) => Ok(TokenAttributes {
            audience: t.service_account_token_audience,
            require_service_account: t.require_service_account.unwrap_or(true),
            required_annotation_keys: t.required_service_account_annotation_keys,
            optional_annotation_keys: t.optional_service_account_annotation_keys,
            cache_type,
        }),
        _ => Err(problems),
    }
}

#[cfg(test)]
mod tests;
