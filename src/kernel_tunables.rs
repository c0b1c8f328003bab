//! The kernel tunables the kubelet depends on (upstream's `setupKernelTunables` in
//! `pkg/kubelet/cm/container_manager_linux.go`): memory overcommit always allowed, the
//! OOM killer rather than a panic on OOM, a reboot 10 s after a panic, a panic on an
//! oops, and room in the root user's keyring for one key per container.
//!
//! `protectKernelDefaults: true` makes litelet refuse to start while any of them
//! differs, naming each; `false` (upstream's default) makes litelet set them, as
//! upstream does, and a tunable it cannot write stops the start as upstream's
//! container manager does.
//!
//! Called once on the main thread at start-up ([`setup`]). The `/proc/sys` root is a
//! parameter, so tests work on a copy and never change the machine's tunables;
//! [`mismatches`] is the pure decision.

use std::io;
use std::path::{Path, PathBuf};

/// Where the kernel's tunables live.
pub const PROC_SYS: &str = "/proc/sys";

/// Test hook, for the integration tests and benchmarks only: a folder litelet uses in
/// place of `/proc/sys`, so a test run never changes the machine's tunables. Read once.
pub const TEST_ROOT_ENV: &str = "LITELET_TEST_PROC_SYS";

/// `/proc/sys`, or the folder [`TEST_ROOT_ENV`] names.
pub fn root() -> PathBuf {
    std::env::var_os(TEST_ROOT_ENV).map_or_else(|| PathBuf::from(PROC_SYS), PathBuf::from)
}

/// Writes every tunable at the value the kubelet wants under `root` (a test's copy of
/// `/proc/sys`), creating folders as needed.
pub fn write_wanted(root: &Path) -> io::Result<()> {
    for tunable in KUBELET_TUNABLES {
        let path = path_of(root, tunable.name);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(path, format!("{}\n", tunable.want))?;
    }
    Ok(())
}

/// One tunable and the value the kubelet wants.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tunable {
    /// The sysctl name, e.g. `vm.overcommit_memory`.
    pub name: &'static str,
    pub want: i64,
}

/// Upstream v1.36's list, in its order.
pub const KUBELET_TUNABLES: [Tunable; 6] = [
    Tunable {
        name: "vm.overcommit_memory",
        want: 1,
    },
    Tunable {
        name: "vm.panic_on_oom",
        want: 0,
    },
    Tunable {
        name: "kernel.panic",
        want: 10,
    },
    Tunable {
        name: "kernel.panic_on_oops",
        want: 1,
    },
    Tunable {
        name: "kernel.keys.root_maxkeys",
        want: 1_000_000,
    },
    Tunable {
        name: "kernel.keys.root_maxbytes",
        want: 25_000_000,
    },
];

/// A tunable whose current value is not the wanted one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mismatch {
    pub tunable: Tunable,
    pub actual: i64,
}

/// One thing that went wrong with one tunable.
#[derive(Debug, thiserror::Error)]
pub enum TunableProblem {
    #[error("{name} cannot be read at {}: {source}", path.display())]
    Unreadable {
        name: &'static str,
        path: PathBuf,
        source: io::Error,
    },
    #[error("{name} at {} holds {text:?}, not a number", path.display())]
    Unparsable {
        name: &'static str,
        path: PathBuf,
        text: String,
    },
    #[error("{name} is {actual}, the kubelet needs {want}")]
    Differs {
        name: &'static str,
        want: i64,
        actual: i64,
    },
    #[error("{name} cannot be set to {want} at {}: {source}", path.display())]
    Unwritable {
        name: &'static str,
        want: i64,
        path: PathBuf,
        source: io::Error,
    },
}

/// Why the tunables stop litelet's start: every problem, each naming its tunable.
#[derive(Debug, thiserror::Error)]
pub enum KernelTunablesError {
    /// `protectKernelDefaults: true` and the kernel differs (or cannot be read).
    #[error(
        "protectKernelDefaults is true and the kernel tunables are not what the kubelet \
         needs: {}; set them on the host (e.g. in /etc/sysctl.d) or set \
         protectKernelDefaults to false to let litelet set them",
        join(.0)
    )]
    Protected(Vec<TunableProblem>),
    /// `protectKernelDefaults: false` and litelet could not read or set them.
    #[error("kernel tunables: {}", join(.0))]
    NotSet(Vec<TunableProblem>),
}

fn join(problems: &[TunableProblem]) -> String {
    problems
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

/// The tunables among `current` that differ from what the kubelet wants.
pub fn mismatches(current: &[(Tunable, i64)]) -> Vec<Mismatch> {
    current
        .iter()
        .filter(|(tunable, actual)| tunable.want != *actual)
        .map(|&(tunable, actual)| Mismatch { tunable, actual })
        .collect()
}

/// The file of sysctl `name` under `root` (`vm.panic_on_oom` → `vm/panic_on_oom`).
pub fn path_of(root: &Path, name: &str) -> PathBuf {
    root.join(name.replace('.', "/"))
}

fn read(root: &Path, tunable: Tunable) -> Result<i64, TunableProblem> {
    let path = path_of(root, tunable.name);
    let text = std::fs::read_to_string(&path).map_err(|source| TunableProblem::Unreadable {
        name: tunable.name,
        path: path.clone(),
        source,
    })?;
    text.trim().parse().map_err(|_| TunableProblem::Unparsable {
        name: tunable.name,
        path,
        text: text.trim().to_owned(),
    })
}

/// Checks (`protect`) or sets the kubelet's tunables under `root` (normally
/// [`PROC_SYS`]); returns the tunables it changed. Every tunable is looked at before
/// an error is returned, so the error names all that are wrong.
pub fn setup(root: &Path, protect: bool) -> Result<Vec<Mismatch>, KernelTunablesError> {
    let mut problems = Vec::new();
    let mut current = Vec::new();
    for tunable in KUBELET_TUNABLES {
        match read(root, tunable) {
            Ok(value) => current.push((tunable, value)),
            Err(problem) => problems.push(problem),
        }
    }
    let wrong = mismatches(&current);
    if protect {
        problems.extend(wrong.iter().map(|m| TunableProblem::Differs {
            name: m.tunable.name,
            want: m.tunable.want,
            actual: m.actual,
        }));
        return match problems.is_empty() {
            true => Ok(Vec::new()),
            false => Err(KernelTunablesError::Protected(problems)),
        };
    }
    let mut changed = Vec::new();
    for m in wrong {
        let path = path_of(root, m.tunable.name);
        match std::fs::write(&path, m.tunable.want.to_string()) {
            Ok(()) => {
                log::info!(
                    "kernel tunable {} set to {} (was {})",
                    m.tunable.name,
                    m.tunable.want,
                    m.actual
                );
                changed.push(m);
            }
            Err(source) => problems.push(TunableProblem::Unwritable {
                name: m.tunable.name,
                want: m.tunable.want,
                path,
                source,
            }),
        }
    }
    match problems.is_empty() {
        true => Ok(changed),
        false => Err(KernelTunablesError::NotSet(problems)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `/proc/sys` copy holding `values` (by sysctl name); the others absent.
    fn proc_sys(values: &[(&str, &str)]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for (name, value) in values {
            let path = path_of(dir.path(), name);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, format!("{value}\n")).unwrap();
        }
        dir
    }

    /// Debian 12's defaults: three of the six differ.
    const DEBIAN: [(&str, &str); 6] = [
        ("vm.overcommit_memory", "0"),
        ("vm.panic_on_oom", "0"),
        ("kernel.panic", "0"),
        ("kernel.panic_on_oops", "0"),
        ("kernel.keys.root_maxkeys", "1000000"),
        ("kernel.keys.root_maxbytes", "25000000"),
    ];

    fn value(root: &Path, name: &str) -> String {
        std::fs::read_to_string(path_of(root, name))
            .unwrap()
            .trim()
            .to_owned()
    }

    #[test]
    fn the_list_is_upstreams() {
        let list: Vec<(&str, i64)> = KUBELET_TUNABLES.iter().map(|t| (t.name, t.want)).collect();
        assert_eq!(
            list,
            [
                ("vm.overcommit_memory", 1),
                ("vm.panic_on_oom", 0),
                ("kernel.panic", 10),
                ("kernel.panic_on_oops", 1),
                ("kernel.keys.root_maxkeys", 1_000_000),
                ("kernel.keys.root_maxbytes", 25_000_000),
            ]
        );
    }

    #[test]
    fn mismatches_name_each_differing_tunable() {
        let current: Vec<(Tunable, i64)> = KUBELET_TUNABLES
            .iter()
            .map(|&t| (t, if t.name == "kernel.panic" { 0 } else { t.want }))
            .collect();
        let wrong = mismatches(&current);
        assert_eq!(wrong.len(), 1);
        assert_eq!(
            (wrong[0].tunable.name, wrong[0].actual),
            ("kernel.panic", 0)
        );
        let all_right: Vec<(Tunable, i64)> =
            KUBELET_TUNABLES.iter().map(|&t| (t, t.want)).collect();
        assert!(mismatches(&all_right).is_empty());
    }

    #[test]
    fn protected_defaults_refuse_naming_every_differing_tunable_and_change_nothing() {
        let dir = proc_sys(&DEBIAN);
        let err = setup(dir.path(), true).unwrap_err().to_string();
        for part in [
            "protectKernelDefaults is true",
            "vm.overcommit_memory is 0, the kubelet needs 1",
            "kernel.panic is 0, the kubelet needs 10",
            "kernel.panic_on_oops is 0, the kubelet needs 1",
        ] {
            assert!(err.contains(part), "{part:?} missing in {err}");
        }
        assert!(!err.contains("vm.panic_on_oom"), "{err}");
        assert_eq!(
            value(dir.path(), "vm.overcommit_memory"),
            "0",
            "nothing written"
        );
    }

    #[test]
    fn protected_defaults_pass_when_the_kernel_already_matches() {
        let dir = tempfile::tempdir().unwrap();
        write_wanted(dir.path()).unwrap();
        assert!(setup(dir.path(), true).unwrap().is_empty());
        assert!(setup(dir.path(), false).unwrap().is_empty());
    }

    #[test]
    fn unprotected_defaults_are_set_as_upstream_sets_them() {
        let dir = proc_sys(&DEBIAN);
        let changed = setup(dir.path(), false).unwrap();
        let names: Vec<&str> = changed.iter().map(|m| m.tunable.name).collect();
        assert_eq!(
            names,
            [
                "vm.overcommit_memory",
                "kernel.panic",
                "kernel.panic_on_oops"
            ]
        );
        for tunable in KUBELET_TUNABLES {
            assert_eq!(value(dir.path(), tunable.name), tunable.want.to_string());
        }
        assert!(setup(dir.path(), false).unwrap().is_empty(), "set once");
        assert!(setup(dir.path(), true).is_ok());
    }

    #[test]
    fn missing_or_garbled_tunables_are_named() {
        let dir = proc_sys(&[("vm.overcommit_memory", "lots"), ("vm.panic_on_oom", "0")]);
        for protect in [true, false] {
            let err = setup(dir.path(), protect).unwrap_err().to_string();
            assert!(
                err.contains("vm.overcommit_memory at ") && err.contains("\"lots\", not a number"),
                "{err}"
            );
            assert!(
                err.contains("kernel.keys.root_maxbytes cannot be read at "),
                "{err}"
            );
        }
    }

    #[test]
    fn an_unwritable_tunable_stops_the_start_naming_it() {
        let dir = proc_sys(&DEBIAN);
        // A read-only tunable of the real kernel (mode 0444: even root cannot write
        // it) stands in for a read-only /proc/sys.
        let oops = path_of(dir.path(), "kernel.panic_on_oops");
        std::fs::remove_file(&oops).unwrap();
        std::os::unix::fs::symlink("/proc/sys/kernel/ngroups_max", &oops).unwrap();
        let err = setup(dir.path(), false).unwrap_err().to_string();
        assert!(
            err.starts_with("kernel tunables: kernel.panic_on_oops cannot be set to 1 at "),
            "{err}"
        );
        assert_eq!(
            value(dir.path(), "kernel.panic"),
            "10",
            "the others are still set"
        );
    }
}
