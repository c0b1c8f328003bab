//! Keeps the packaging files in step with the binary: the man page documents every
//! flag `litelet --help` shows, the systemd unit starts the packaged binary with the
//! packaged config, the packaged config file is one litelet accepts, and the kubeadm
//! drop-in's command line is one litelet takes.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

fn repo_file(path: &str) -> String {
    let full = Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
    std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("{}: {e}", full.display()))
}

fn litelet(args: &[&str]) -> std::process::Output {
    // Should the agent ever get as far as the kernel tunables, a copy is what it sees.
    let dir = tempfile::tempdir().unwrap();
    let proc_sys = dir.path().join("proc-sys");
    litelet::kernel_tunables::write_wanted(&proc_sys).unwrap();
    Command::new(env!("CARGO_BIN_EXE_litelet"))
        .args(args)
        .env_remove("RUST_LOG")
        .env(litelet::kernel_tunables::TEST_ROOT_ENV, proc_sys)
        .output()
        .expect("run litelet")
}

/// Long flags (`--name`) in a help text.
fn long_flags(help: &str) -> BTreeSet<String> {
    help.split(|c: char| c.is_whitespace() || c == ',' || c == '[' || c == ']')
        .filter_map(|word| word.strip_prefix("--"))
        .map(|name| name.split(['=', '<']).next().unwrap_or(name))
        .filter(|name| !name.is_empty())
        .map(str::to_owned)
        .collect()
}

#[test]
fn man_page_documents_every_flag() {
    let man = repo_file("packaging/litelet.1");
    let mut flags = BTreeSet::new();
    for args in [
        &["--help"][..],
        &["runtime-info", "--help"],
        &["ps", "--help"],
    ] {
        let out = litelet(args);
        assert!(out.status.success(), "litelet {args:?} failed");
        flags.extend(long_flags(&String::from_utf8_lossy(&out.stdout)));
    }
    assert!(flags.contains("pod-manifest-path"), "{flags:?}");
    let missing: Vec<&String> = flags
        .iter()
        .filter(|flag| !man.contains(&format!("\\-\\-{}", flag.replace('-', "\\-"))))
        .collect();
    assert!(missing.is_empty(), "packaging/litelet.1 lacks {missing:?}");
}

#[test]
fn version_matches_the_package_version() {
    let out = litelet(&["--version"]);
    assert!(out.status.success());
    let version = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        version.trim(),
        format!("Kubernetes v1.36.3+litelet.{}", env!("CARGO_PKG_VERSION"))
    );
    assert!(
        kubeadm_reads_kubelet_version(version.trim()),
        "kubeadm's preflight cannot read {version:?}"
    );
    let changelog = repo_file("packaging/changelog");
    let first = changelog.lines().next().unwrap_or_default();
    assert!(
        first.starts_with(&format!("litelet ({}-", env!("CARGO_PKG_VERSION"))),
        "packaging/changelog starts with {first:?}"
    );
}

#[test]
fn unit_starts_the_packaged_binary_after_the_runtime() {
    let unit = repo_file("packaging/litelet.service");
    let lines: Vec<&str> = unit.lines().map(str::trim).collect();
    let has = |line: &str| lines.contains(&line);
    assert!(has(
        "ExecStart=/usr/bin/litelet --config /etc/litelet/config.yaml $LITELET_ARGS"
    ));
    assert!(lines
        .iter()
        .any(|l| l.starts_with("After=") && l.contains("containerd.service")));
    assert!(has("Restart=always"));
    assert!(has("EnvironmentFile=-/etc/default/litelet"));
    assert!(has("WantedBy=multi-user.target"));
}

/// Memory per pod (issue 18): one thread per pod worker, so glibc's per-thread cache
/// of freed chunks would cost about 75 KiB a pod; the unit turns it off.
#[test]
fn unit_turns_off_the_per_thread_malloc_cache() {
    let unit = repo_file("packaging/litelet.service");
    assert!(unit
        .lines()
        .map(str::trim)
        .any(|l| l == "Environment=GLIBC_TUNABLES=glibc.malloc.tcache_count=0"));
}

#[test]
fn a_bad_config_file_is_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.yaml");
    std::fs::write(
        &path,
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
         cgroupDriver: openrc\nrunOnce: true\nreadOnlyPort: 10255\n",
    )
    .unwrap();
    let out = litelet(&["--config", path.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    for field in ["cgroupDriver", "runOnce", "readOnlyPort"] {
        assert!(err.contains(field), "{err}");
    }
}

/// `scripts/package.sh target-dir` run from `cwd` with `CARGO_TARGET_DIR` set to `dir`
/// (or unset).
fn package_target_dir(cwd: &Path, dir: Option<&str>) -> String {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/package.sh");
    let mut cmd = Command::new("bash");
    cmd.arg(&script).arg("target-dir").current_dir(cwd);
    match dir {
        Some(d) => cmd.env("CARGO_TARGET_DIR", d),
        None => cmd.env_remove("CARGO_TARGET_DIR"),
    };
    let out = cmd.output().expect("run scripts/package.sh");
    assert!(
        out.status.success(),
        "package.sh target-dir: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

// Issue 23 item 7: dpkg --root got a relative path from a fresh clone's default
// target dir and could not run the maintainer scripts.
#[test]
fn package_script_resolves_the_target_dir_to_an_absolute_path() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let tmp = std::env::temp_dir().join(format!("litelet-pkgdir-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).expect("temp dir");

    let default = package_target_dir(&tmp, None);
    assert_eq!(Path::new(&default), repo.join("target"), "unset");

    let empty = package_target_dir(&tmp, Some(""));
    assert_eq!(Path::new(&empty), repo.join("target"), "empty");

    let relative = package_target_dir(&tmp, Some("rel/../tgt"));
    assert_eq!(
        Path::new(&relative),
        tmp.join("tgt"),
        "relative to the caller"
    );

    let absolute = package_target_dir(repo, Some("/var/tmp/litelet-t"));
    assert_eq!(absolute, "/var/tmp/litelet-t");
    let _ = std::fs::remove_dir_all(&tmp);
}

/// The kubeadm drop-in's command line, with what `kubeadm join` writes into its
/// variables (`kubeadm-flags.env`) and an admin's extra flag, is one litelet takes;
/// otherwise the unit kubeadm restarts could not start.
#[test]
fn the_kubeadm_drop_in_starts_litelet_with_flags_it_takes() {
    let dropin = repo_file("packaging/kubeadm/10-kubeadm.conf");
    let mut vars = std::collections::HashMap::new();
    for line in dropin.lines() {
        if let Some(setting) = line.strip_prefix("Environment=\"") {
            let (name, value) = setting.trim_end_matches('"').split_once('=').unwrap();
            vars.insert(name.to_owned(), value.to_owned());
        }
    }
    vars.insert(
        "KUBELET_KUBEADM_ARGS".into(),
        "--container-runtime-endpoint=unix:///var/run/containerd/containerd.sock".into(),
    );
    vars.insert("KUBELET_EXTRA_ARGS".into(), "--node-ip=192.0.2.10".into());
    let exec = dropin
        .lines()
        .filter_map(|l| l.strip_prefix("ExecStart="))
        .rfind(|l| !l.is_empty())
        .expect("an ExecStart");
    let mut args: Vec<String> = Vec::new();
    for word in exec.split_whitespace() {
        match word.strip_prefix('$') {
            Some(var) => args.extend(vars[var].split_whitespace().map(str::to_owned)),
            None => args.push(word.to_owned()),
        }
    }
    assert_eq!(args[0], "/usr/bin/litelet");
    let flags =
        litelet::config::Flags::try_parse_from(&args).unwrap_or_else(|e| panic!("{args:?}: {e}"));
    assert_eq!(
        flags.bootstrap_kubeconfig.as_deref(),
        Some(Path::new("/etc/kubernetes/bootstrap-kubelet.conf"))
    );
    assert_eq!(
        flags.kubeconfig.as_deref(),
        Some(Path::new("/etc/kubernetes/kubelet.conf"))
    );
    assert_eq!(
        flags.config.as_deref(),
        Some(Path::new("/var/lib/kubelet/config.yaml"))
    );
}

/// kubeadm's preflight (KubeletVersionCheck) reads `kubelet --version` as
/// `Kubernetes vMAJOR.MINOR.PATCH` with an optional semver suffix of `[-0-9a-zA-Z_.+]`.
fn kubeadm_reads_kubelet_version(text: &str) -> bool {
    let Some(version) = text.strip_prefix("Kubernetes v") else {
        return false;
    };
    let core_end = version
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(version.len());
    let (core, suffix) = version.split_at(core_end);
    let numbers: Vec<&str> = core.split('.').collect();
    numbers.len() == 3
        && numbers.iter().all(|n| !n.is_empty())
        && suffix
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.+".contains(c))
}
