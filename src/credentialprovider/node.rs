//! The node-wide Docker config (upstream credentialprovider ReadDockerConfigFile):
//! the first valid `config.json` in the kubelet's root dir, `/var/lib/kubelet`,
//! `$HOME/.docker` and `/.docker`; failing that, the first valid legacy `.dockercfg`
//! in the root dir, `/var/lib/kubelet`, `$HOME` and `/`. Upstream also searches the
//! working directory; litelet does not, so credentials never depend on where it was
//! started. Read afresh at each pull (a few small files), so an operator's edit counts
//! at once. A malformed file is logged by path (never its content) and skipped.

use std::path::{Path, PathBuf};

use super::config::{parse_config_json, parse_dockercfg};
use super::keyring::{CredentialSource, Keyring};
use super::CredentialError;

/// Where the node's Docker config files are searched.
#[derive(Clone, Debug, Default)]
pub struct NodeDockerConfig {
    /// Directories searched for `config.json`, in order.
    pub json_dirs: Vec<PathBuf>,
    /// Directories searched for `.dockercfg`, in order.
    pub cfg_dirs: Vec<PathBuf>,
}

impl NodeDockerConfig {
    /// Upstream's search paths for a kubelet with `root_dir` and home `home`.
    pub fn for_root_dir(root_dir: &Path, home: Option<&Path>) -> NodeDockerConfig {
        let mut bases = vec![root_dir.to_path_buf()];
        let default_root = Path::new("/var/lib/kubelet");
        if root_dir != default_root {
            bases.push(default_root.to_path_buf());
        }
        let mut json_dirs = bases.clone();
        let mut cfg_dirs = bases;
        if let Some(home) = home {
            json_dirs.push(home.join(".docker"));
            cfg_dirs.push(home.to_path_buf());
        }
        json_dirs.push(PathBuf::from("/.docker"));
        cfg_dirs.push(PathBuf::from("/"));
        dedup(&mut json_dirs);
        dedup(&mut cfg_dirs);
        NodeDockerConfig {
            json_dirs,
            cfg_dirs,
        }
    }

    /// The node's credentials (empty when no file is found).
    pub fn read(&self) -> Keyring {
        let mut keyring = Keyring::default();
        let found = first_valid(&self.json_dirs, "config.json", parse_config_json)
            .or_else(|| first_valid(&self.cfg_dirs, ".dockercfg", parse_dockercfg));
        if let Some(config) = found {
            keyring.add(&CredentialSource::Node, &config);
        }
        keyring
    }
}

fn dedup(dirs: &mut Vec<PathBuf>) {
    let mut seen = std::collections::HashSet::new();
    dirs.retain(|d| seen.insert(d.clone()));
}

fn first_valid<T>(
    dirs: &[PathBuf],
    file: &str,
    parse: impl Fn(&[u8], &str) -> Result<T, CredentialError>,
) -> Option<T> {
    for dir in dirs {
        let path = dir.join(file);
        let bytes = match std::fs::read(&path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => {
                log::warn!("cannot read docker config {}: {e}", path.display());
                continue;
            }
        };
        match parse(&bytes, &path.display().to_string()) {
            Ok(config) => {
                log::debug!("using node docker config {}", path.display());
                return Some(config);
            }
            // The error text names the file and registry, never a credential.
            Err(why) => log::warn!("ignoring docker config: {why}"),
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn users(keyring: &Keyring, image: &str) -> Vec<String> {
        keyring
            .lookup(image)
            .into_iter()
            .map(|c| c.username)
            .collect()
    }

    #[test]
    fn first_valid_config_json_wins_then_legacy_dockercfg() {
        let dir = tempfile::tempdir().unwrap();
        let (root, home) = (dir.path().join("root"), dir.path().join("home"));
        std::fs::create_dir_all(home.join(".docker")).unwrap();
        std::fs::create_dir_all(&root).unwrap();
        let config = NodeDockerConfig {
            json_dirs: vec![root.clone(), home.join(".docker")],
            cfg_dirs: vec![root.clone(), home.clone()],
        };
        assert!(config.read().is_empty(), "no files, no credentials");

        std::fs::write(
            home.join(".dockercfg"),
            r#"{"reg.io": {"auth": "bGVnYWN5OnA="}}"#,
        )
        .unwrap();
        assert_eq!(users(&config.read(), "reg.io/app"), ["legacy"]);

        std::fs::write(
            home.join(".docker/config.json"),
            r#"{"auths": {"reg.io": {"username": "home", "password": "p"}}}"#,
        )
        .unwrap();
        assert_eq!(users(&config.read(), "reg.io/app"), ["home"]);

        // A malformed file earlier in the search order is skipped, not fatal.
        std::fs::write(root.join("config.json"), "{broken").unwrap();
        assert_eq!(users(&config.read(), "reg.io/app"), ["home"]);

        std::fs::write(
            root.join("config.json"),
            r#"{"auths": {"reg.io": {"username": "root", "password": "p"}}}"#,
        )
        .unwrap();
        let keyring = config.read();
        assert_eq!(users(&keyring, "reg.io/app"), ["root"]);
        assert_eq!(
            keyring.lookup("reg.io/app")[0].source,
            CredentialSource::Node
        );
    }

    #[test]
    fn search_paths_follow_upstream_without_the_working_directory() {
        let config =
            NodeDockerConfig::for_root_dir(Path::new("/srv/litelet"), Some(Path::new("/root")));
        let json: Vec<&str> = config
            .json_dirs
            .iter()
            .map(|p| p.to_str().unwrap())
            .collect();
        assert_eq!(
            json,
            [
                "/srv/litelet",
                "/var/lib/kubelet",
                "/root/.docker",
                "/.docker"
            ]
        );
        let cfg: Vec<&str> = config
            .cfg_dirs
            .iter()
            .map(|p| p.to_str().unwrap())
            .collect();
        assert_eq!(cfg, ["/srv/litelet", "/var/lib/kubelet", "/root", "/"]);
        let default = NodeDockerConfig::for_root_dir(Path::new("/var/lib/kubelet"), None);
        assert_eq!(default.json_dirs.len(), 2);
    }
}
