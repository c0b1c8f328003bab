//! The litelet binary under measurement: started with the flags a node would use,
//! read through /proc (RSS, threads, fds, CPU time) and its /metrics endpoint, and
//! stopped with SIGTERM.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use crate::support::fake_api::FakeApi;

/// The binary under test: this build's, or `LITELET_BENCH_BINARY` (e.g. one built with
/// `--profile profiling` for perf).
fn litelet_binary() -> String {
    std::env::var("LITELET_BENCH_BINARY")
        .unwrap_or_else(|_| env!("CARGO_BIN_EXE_litelet").to_owned())
}
pub const NODE: &str = "bench-node";

/// One reading of the process.
#[derive(Clone, Copy, Debug, Default)]
pub struct Sample {
    pub at: Option<Instant>,
    pub rss_kib: u64,
    /// Anonymous memory (heap, stacks): what litelet itself allocated.
    pub rss_anon_kib: u64,
    /// File-backed pages (the binary's code and data, shared libraries): shared with
    /// the page cache and reclaimable.
    pub rss_file_kib: u64,
    pub threads: u64,
    pub fds: u64,
    /// User + system CPU time, in seconds.
    pub cpu_seconds: f64,
}

impl Sample {
    pub fn rss_mib(&self) -> f64 {
        self.rss_kib as f64 / 1024.0
    }

    pub fn anon_mib(&self) -> f64 {
        self.rss_anon_kib as f64 / 1024.0
    }

    pub fn file_mib(&self) -> f64 {
        self.rss_file_kib as f64 / 1024.0
    }
}

/// CPU used between two samples, in percent of one core.
pub fn cpu_percent(from: &Sample, to: &Sample) -> f64 {
    match (from.at, to.at) {
        (Some(a), Some(b)) if b > a => {
            100.0 * (to.cpu_seconds - from.cpu_seconds) / (b - a).as_secs_f64()
        }
        _ => 0.0,
    }
}

/// Reads `/proc/<pid>`; zeros where a file cannot be read (the process ended).
pub fn sample(pid: u32) -> Sample {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| -> u64 {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count() as u64)
        .unwrap_or(0);
    Sample {
        at: Some(Instant::now()),
        rss_kib: field("VmRSS:"),
        rss_anon_kib: field("RssAnon:"),
        rss_file_kib: field("RssFile:"),
        threads: field("Threads:"),
        fds,
        cpu_seconds: cpu_seconds(pid),
    }
}

/// CPU seconds of the process's threads whose name (`comm`) is `name`.
pub fn thread_cpu_seconds(pid: u32, name: &str) -> f64 {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return 0.0;
    };
    tasks
        .flatten()
        .filter(|t| std::fs::read_to_string(t.path().join("comm")).is_ok_and(|c| c.trim() == name))
        .map(|t| stat_cpu_seconds(&t.path().join("stat")))
        .sum()
}

/// utime + stime of `/proc/<pid>/stat`, in seconds.
fn cpu_seconds(pid: u32) -> f64 {
    stat_cpu_seconds(Path::new(&format!("/proc/{pid}/stat")))
}

/// utime + stime of a `stat` file (a process's or a thread's), in seconds.
fn stat_cpu_seconds(path: &Path) -> f64 {
    let stat = std::fs::read_to_string(path).unwrap_or_default();
    // The command name may hold spaces: fields are counted after its closing ')'.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // After ')': state is field 3 of the full line, utime 14, stime 15.
    let ticks = |i: usize| fields.get(i).and_then(|v| v.parse::<u64>().ok());
    let (Some(utime), Some(stime)) = (ticks(11), ticks(12)) else {
        return 0.0;
    };
    let hz = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .unwrap_or(100) as f64;
    (utime + stime) as f64 / hz
}

/// A port nobody listens on right now.
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

/// How to start litelet.
pub struct Options<'a> {
    pub endpoint: String,
    pub api: Option<&'a FakeApi>,
    pub max_pods: usize,
    pub extra: Vec<String>,
}

/// A running litelet with its own root dir, log dir and cgroup root.
pub struct Litelet {
    child: std::cell::RefCell<Child>,
    dir: tempfile::TempDir,
    cgroup_root: String,
    port: u16,
    pub started: Instant,
}

impl Litelet {
    pub fn start(options: Options<'_>) -> Litelet {
        static SEQ: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let seq = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = tempfile::tempdir().expect("temp dir");
        let cgroup_root = format!("/litelet-bench-{}-{seq}", std::process::id());
        let port = free_port();
        // LITELET_BENCH_WRAPPER runs litelet under a profiler, e.g.
        // "valgrind --tool=massif --massif-out-file=/tmp/massif.%p".
        let wrapper = std::env::var("LITELET_BENCH_WRAPPER").unwrap_or_default();
        let mut words = wrapper.split_whitespace();
        let mut cmd = match words.next() {
            Some(program) => {
                let mut cmd = Command::new(program);
                cmd.args(words).arg(litelet_binary());
                cmd
            }
            None => Command::new(litelet_binary()),
        };
        cmd.env(
            litelet::kernel_tunables::TEST_ROOT_ENV,
            crate::support::proc_sys(dir.path()),
        )
        .args(["--container-runtime-endpoint", &options.endpoint])
        .args(["--hostname-override", NODE])
        .arg("--device-plugins-dir")
        .arg(dir.path().join("device-plugins"))
        .arg("--root-dir")
        .arg(dir.path().join("root"))
        .arg("--pod-logs-dir")
        .arg(dir.path().join("logs"))
        .args(["--cgroup-root", &cgroup_root])
        .args(["--max-pods", &options.max_pods.to_string()])
        // The node API on free loopback ports, open to the harness's /metrics scrape.
        .args(["--address", "127.0.0.1", "--port", &port.to_string()])
        .args(["--healthz-port", &free_port().to_string()])
        .args([
            "--anonymous-auth",
            "true",
            "--authorization-mode",
            "AlwaysAllow",
        ])
        .args(&options.extra)
        // No eviction thresholds: upstream's defaults judge this machine's own disk.
        .args(
            (!options
                .extra
                .iter()
                .any(|a| a.starts_with("--eviction-hard")))
            .then_some("--eviction-hard="),
        )
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.path().join("litelet.log")).expect("litelet log file"));
        if let Some(api) = options.api {
            let kubeconfig = dir.path().join("kubeconfig");
            std::fs::write(&kubeconfig, kubeconfig_for(&api.url())).expect("write kubeconfig");
            cmd.arg("--kubeconfig").arg(&kubeconfig);
        }
        let started = Instant::now();
        let child = cmd.spawn().expect("start litelet");
        Litelet {
            child: std::cell::RefCell::new(child),
            dir,
            cgroup_root,
            port,
            started,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.borrow().id()
    }

    /// Its directory: `root/` (the root dir), `logs/` (the pod logs dir).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The node API's port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// False once the process has exited (waits fail fast instead of timing out).
    pub fn alive(&self) -> bool {
        matches!(self.child.borrow_mut().try_wait(), Ok(None))
    }

    pub fn sample(&self) -> Sample {
        sample(self.pid())
    }

    /// The Prometheus text of `/metrics`, or None when the server does not answer.
    pub fn metrics(&self) -> Option<String> {
        self.get("/metrics")
    }

    /// The body of the node API's `path`, or None when the server does not answer.
    pub fn get(&self, path: &str) -> Option<String> {
        let tls = ureq::tls::TlsConfig::builder()
            .disable_verification(true)
            .build();
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .tls_config(tls)
            .timeout_global(Some(Duration::from_secs(10)))
            .build()
            .into();
        let url = format!("https://127.0.0.1:{}{path}", self.port);
        agent
            .get(&url)
            .call()
            .ok()?
            .body_mut()
            .read_to_string()
            .ok()
    }

    /// The last lines of litelet's log, for failure messages.
    pub fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(self.dir.path().join("litelet.log")).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }

    /// The pod cgroup directory `pod<uid>` in the v1 memory hierarchy, if there is one.
    pub fn pod_memory_cgroup(&self, uid: &str) -> Option<PathBuf> {
        let root =
            Path::new("/sys/fs/cgroup/memory").join(self.cgroup_root.trim_start_matches('/'));
        find_dir(&root, &format!("pod{uid}"), 3)
    }
}

fn find_dir(dir: &Path, name: &str, depth: usize) -> Option<PathBuf> {
    let entries = std::fs::read_dir(dir).ok()?;
    for entry in entries.flatten().filter(|e| e.path().is_dir()) {
        if entry.file_name().to_string_lossy() == name {
            return Some(entry.path());
        }
        if depth > 0 {
            if let Some(found) = find_dir(&entry.path(), name, depth - 1) {
                return Some(found);
            }
        }
    }
    None
}

impl Drop for Litelet {
    fn drop(&mut self) {
        if let Ok(dir) = std::env::var("LITELET_BENCH_KEEP_LOGS") {
            let name = self.cgroup_root.trim_start_matches('/');
            let _ = std::fs::copy(
                self.dir.path().join("litelet.log"),
                Path::new(&dir).join(format!("{name}.log")),
            );
        }
        let child = self.child.get_mut();
        let _ = kill(Pid::from_raw(child.id() as i32), Signal::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = child.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        let _ = child.wait();
        remove_cgroup_tree(&self.cgroup_root);
    }
}

fn kubeconfig_for(server: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster:\n    server: {server}\n\
         users:\n- name: node\n  user: {{}}\ncontexts:\n- name: default\n  context:\n    \
         cluster: fake\n    user: node\ncurrent-context: default\n"
    )
}

/// Removes a cgroup tree bottom-up in every v1 hierarchy (litelet leaves the pod
/// cgroups of pods it still runs when it exits, as it leaves their containers).
fn remove_cgroup_tree(root: &str) {
    fn remove(dir: &Path) {
        if let Ok(entries) = std::fs::read_dir(dir) {
            for entry in entries.flatten().filter(|e| e.path().is_dir()) {
                remove(&entry.path());
            }
        }
        let _ = std::fs::remove_dir(dir);
    }
    if let Ok(controllers) = std::fs::read_dir("/sys/fs/cgroup") {
        for controller in controllers.flatten() {
            remove(&controller.path().join(root.trim_start_matches('/')));
        }
    }
}

/// Sum and count of a Prometheus histogram series, plus its cumulative buckets.
#[derive(Clone, Debug, Default)]
pub struct Histogram {
    pub sum: f64,
    pub count: f64,
    /// (upper bound, cumulative count), ascending; +Inf last.
    pub buckets: Vec<(f64, f64)>,
}

impl Histogram {
    /// Reads the series of `name` whose labels contain `labels` (all series summed when
    /// `labels` is empty).
    pub fn parse(text: &str, name: &str, labels: &str) -> Histogram {
        let mut h = Histogram::default();
        let mut buckets: std::collections::BTreeMap<u64, (f64, f64)> = Default::default();
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let Some((series, value)) = line.rsplit_once(' ') else {
                continue;
            };
            let Ok(value) = value.parse::<f64>() else {
                continue;
            };
            if !series.contains(labels) {
                continue;
            }
            if series.starts_with(&format!("{name}_sum")) {
                h.sum += value;
            } else if series.starts_with(&format!("{name}_count")) {
                h.count += value;
            } else if let Some(rest) = series.strip_prefix(&format!("{name}_bucket")) {
                let le = rest
                    .split("le=\"")
                    .nth(1)
                    .and_then(|r| r.split('"').next())
                    .map(|v| {
                        if v == "+Inf" {
                            f64::INFINITY
                        } else {
                            v.parse().unwrap_or(f64::NAN)
                        }
                    })
                    .unwrap_or(f64::NAN);
                if le.is_nan() {
                    continue;
                }
                let entry = buckets.entry(le.to_bits()).or_insert((le, 0.0));
                entry.1 += value;
            }
        }
        let mut list: Vec<(f64, f64)> = buckets.into_values().collect();
        list.sort_by(|a, b| a.0.total_cmp(&b.0));
        h.buckets = list;
        h
    }

    /// What was observed between `earlier` and `self`.
    pub fn minus(&self, earlier: &Histogram) -> Histogram {
        let buckets = self
            .buckets
            .iter()
            .map(|&(le, c)| {
                let before = earlier
                    .buckets
                    .iter()
                    .find(|(l, _)| *l == le)
                    .map_or(0.0, |b| b.1);
                (le, c - before)
            })
            .collect();
        Histogram {
            sum: self.sum - earlier.sum,
            count: self.count - earlier.count,
            buckets,
        }
    }

    pub fn mean(&self) -> Option<f64> {
        (self.count > 0.0).then(|| self.sum / self.count)
    }

    /// The upper bound of the bucket holding quantile `q` (a histogram cannot say more).
    pub fn quantile_bound(&self, q: f64) -> Option<f64> {
        let want = self.count * q;
        self.buckets
            .iter()
            .find(|(_, c)| *c >= want && *c > 0.0)
            .map(|(le, _)| *le)
    }
}
