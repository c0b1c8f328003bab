//! The VM tier: a real host in a QEMU VM (`../shared/vm`: Debian, systemd as PID 1,
//! cgroup v2, containerd), booted fresh for a test, driven step by step.
//!
//! The test owns a task folder (copied into the VM as `/task`); `tests/vm/agent.sh`
//! runs there as the task at every boot and asks this process, over plain HTTP on a
//! loopback port the VM reaches as `10.0.2.2`, for shell scripts to run as root. So a
//! test reads like a session on the node: [`Vm::sh`] runs a script and returns its
//! output, [`Vm::reboot`] and [`Vm::power_off`] end the agent's loop with the code
//! the image's `vm-task` unit understands. Emulation (no KVM here) makes the VM 5 to
//! 20 times slower than the host: waits are long, and nothing here measures time.
//!
//! The image is built once per machine into `LITELET_VM_IMAGE` (default
//! `~/.cache/litelet-vm/<suite>`, always so for a test that names its suite) by
//! `build-image.sh` of `LITELET_VM_SCRIPTS` (default `../shared/vm` beside the
//! repository).

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use super::control_plane::skip;

/// How long the agent's long poll waits before an empty answer.
const POLL: Duration = Duration::from_secs(20);

/// A built VM image and the scripts that boot it.
pub struct VmImage {
    pub dir: PathBuf,
    scripts: PathBuf,
}

impl VmImage {
    /// Builds (or finds) the image of the Debian `suite` (`VM_SUITE`, else bookworm,
    /// when None); None after a loud skip when this machine cannot run VMs and we are
    /// not in CI.
    pub fn ensure(test: &str, suite: Option<&str>) -> Option<VmImage> {
        if !nix::unistd::geteuid().is_root() {
            return skip(test, "the VM tier needs root (image build, task disk)");
        }
        let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
        let scripts = std::env::var_os("LITELET_VM_SCRIPTS")
            .map(PathBuf::from)
            .unwrap_or_else(|| repo.join("../shared/vm"));
        if !scripts.join("run.sh").exists() {
            return skip(
                test,
                &format!(
                    "no VM scripts at {} (LITELET_VM_SCRIPTS)",
                    scripts.display()
                ),
            );
        }
        // A test that needs its own suite gets its own image, whatever the overrides.
        let fixed = suite.is_some();
        let suite = suite
            .map(str::to_owned)
            .unwrap_or_else(|| std::env::var("VM_SUITE").unwrap_or_else(|_| "bookworm".into()));
        let dir = std::env::var_os("LITELET_VM_IMAGE")
            .filter(|_| !fixed)
            .map(PathBuf::from)
            .unwrap_or_else(|| {
                let home = std::env::var_os("HOME").unwrap_or_else(|| "/root".into());
                PathBuf::from(home).join(".cache/litelet-vm").join(&suite)
            });
        // One build at a time: the script may install its tools with apt first.
        static BUILDING: Mutex<()> = Mutex::new(());
        let _building = BUILDING.lock().unwrap_or_else(|e| e.into_inner());
        let out = Command::new("bash")
            .arg(scripts.join("build-image.sh"))
            .arg(&dir)
            .env("VM_SUITE", &suite)
            .output()
            .expect("run build-image.sh");
        assert!(
            out.status.success(),
            "{test}: the VM image did not build: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        Some(VmImage { dir, scripts })
    }
}

/// What the host and the agent share: the one pending script and the answers.
#[derive(Default)]
struct Channel {
    next_seq: u64,
    pending: Option<(u64, String)>,
    answers: HashMap<u64, (i32, String)>,
    /// The boot the agent last asked from (1, 2, ...; 0 before the first).
    boot: u32,
    /// What pods in the VM reported with `GET /mark?<text>` (e.g. from a preStop
    /// hook: `wget -q -O- http://10.0.2.2:$CTL_PORT/mark?prestop`), in order.
    marks: Vec<String>,
}

struct Shared {
    channel: Mutex<Channel>,
    changed: Condvar,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, Channel> {
        self.channel.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A booted VM running `tests/vm/agent.sh`.
pub struct Vm {
    task: PathBuf,
    ctl_port: u16,
    shared: Arc<Shared>,
    qemu: Mutex<Option<Child>>,
    /// Run in the VM when a step fails, its output added to the failure.
    diagnostics: Mutex<Option<String>>,
    _task_dir: tempfile::TempDir,
}

impl Vm {
    /// Boots `image` with a task folder holding `files` (name → source path) and
    /// `task.env` (`CTL_PORT` plus `env`), with QEMU's `forwards` (host → VM, e.g.
    /// `tcp:127.0.0.1:20250-:10250`).
    pub fn boot(
        image: &VmImage,
        files: &[(&str, &Path)],
        env: &[(&str, String)],
        forwards: &[String],
    ) -> Vm {
        let listener = TcpListener::bind("127.0.0.1:0").expect("agent port");
        let port = listener.local_addr().expect("agent address").port();
        let shared = Arc::new(Shared {
            channel: Mutex::new(Channel::default()),
            changed: Condvar::new(),
        });
        let s = shared.clone();
        std::thread::Builder::new()
            .name("vm-agent-accept".into())
            .spawn(move || {
                for conn in listener.incoming().flatten() {
                    let s = s.clone();
                    let _ = std::thread::Builder::new()
                        .name("vm-agent-conn".into())
                        .spawn(move || serve(conn, &s));
                }
            })
            .expect("agent thread");

        let task_dir = tempfile::tempdir().expect("task dir");
        let task = task_dir.path().to_owned();
        let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
        std::fs::copy(repo.join("tests/vm/agent.sh"), task.join("run.sh")).expect("run.sh");
        for (name, from) in files {
            std::fs::copy(from, task.join(name))
                .unwrap_or_else(|e| panic!("copy {} into the task: {e}", from.display()));
        }
        let mut text = format!("CTL_PORT={port}\n");
        for (k, v) in env {
            text.push_str(&format!("{k}='{v}'\n"));
        }
        std::fs::write(task.join("task.env"), text).expect("task.env");

        let mut run = Command::new("bash");
        // A test killed outright must not leave its VM running: run.sh stops QEMU on TERM.
        unsafe {
            use std::os::unix::process::CommandExt;
            run.pre_exec(|| {
                nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGTERM)
                    .map_err(std::io::Error::from)
            });
        }
        let qemu = run
            .arg(image.scripts.join("run.sh"))
            .arg(&image.dir)
            .arg(&task)
            .env("VM_HOSTFWD", forwards.join(" "))
            .env("VM_TIMEOUT", "2400")
            .env("VM_TASK_SIZE", "768")
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start the VM");
        Vm {
            task,
            ctl_port: port,
            shared,
            qemu: Mutex::new(Some(qemu)),
            diagnostics: Mutex::new(None),
            _task_dir: task_dir,
        }
    }

    /// Boots as [`Vm::boot`] until the agent asks from the first boot within
    /// `first_boot`, at most `tries` times. The emulated guest kernel now and then
    /// stalls for good before userspace (RCU stalls on a CPU under QEMU's TCG): that
    /// is the emulator, not the node under test, so such a VM is dropped and booted
    /// afresh.
    pub fn boot_until_up(
        image: &VmImage,
        files: &[(&str, &Path)],
        env: &[(&str, String)],
        forwards: &[String],
        first_boot: Duration,
        tries: u32,
    ) -> Vm {
        for attempt in 1..tries {
            let vm = Vm::boot(image, files, env, forwards);
            if vm.reached_boot(1, first_boot) {
                return vm;
            }
            eprintln!(
                "VM boot attempt {attempt}: no agent within {first_boot:?}, booting again; \
                 console:\n{}",
                vm.console_tail()
            );
        }
        // The last try is given longer: a slow boot rather than a stalled one.
        let vm = Vm::boot(image, files, env, forwards);
        vm.wait_boot(1, first_boot * 2);
        vm
    }

    /// Whether the agent asks from boot `n` within `timeout`.
    fn reached_boot(&self, n: u32, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let mut ch = self.shared.lock();
        while ch.boot < n {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() || self.exit_code().is_some() {
                return false;
            }
            ch = self
                .shared
                .changed
                .wait_timeout(ch, left.min(Duration::from_secs(1)))
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        true
    }

    /// Waits until the agent asks from boot `n`; fails the test when the VM went off
    /// or the time ran out first.
    pub fn wait_boot(&self, n: u32, timeout: Duration) {
        if !self.reached_boot(n, timeout) {
            self.assert_running();
            let last = self.shared.lock().boot;
            panic!(
                "the VM's agent did not start boot {n} (last {last}):\n{}",
                self.console_tail()
            );
        }
    }

    /// Runs `script` as root in the VM; its exit code and output, or an error when
    /// no answer came within `timeout`.
    pub fn run(&self, script: &str, timeout: Duration) -> Result<(i32, String), String> {
        let seq = {
            let mut ch = self.shared.lock();
            ch.next_seq += 1;
            let seq = ch.next_seq;
            ch.pending = Some((seq, script.to_owned()));
            self.shared.changed.notify_all();
            seq
        };
        let deadline = Instant::now() + timeout;
        let mut ch = self.shared.lock();
        loop {
            if let Some(answer) = ch.answers.remove(&seq) {
                return Ok(answer);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                if ch.pending.as_ref().map(|p| p.0) == Some(seq) {
                    ch.pending = None;
                }
                return Err(format!("no answer within {timeout:?} to:\n{script}"));
            }
            ch = self
                .shared
                .changed
                .wait_timeout(ch, left.min(Duration::from_secs(2)))
                .unwrap_or_else(|e| e.into_inner())
                .0;
            drop(ch);
            self.assert_running();
            ch = self.shared.lock();
        }
    }

    /// Runs `script` and returns its output; fails the test on a non-zero exit.
    pub fn sh(&self, script: &str) -> String {
        self.sh_within(script, Duration::from_secs(300))
    }

    pub fn sh_within(&self, script: &str, timeout: Duration) -> String {
        match self.run(script, timeout) {
            Ok((0, out)) => out,
            Ok((rc, out)) => panic!(
                "in the VM, exit {rc}:\n{script}\n--- output:\n{out}{}",
                self.diagnose()
            ),
            Err(e) => panic!("{e}\n--- console:\n{}", self.console_tail()),
        }
    }

    /// What to run in the VM when a step fails (e.g. the agent's journal).
    pub fn on_failure(&self, script: &str) {
        *self.diagnostics.lock().unwrap_or_else(|e| e.into_inner()) = Some(script.to_owned());
    }

    fn diagnose(&self) -> String {
        let script = self
            .diagnostics
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        match script.map(|s| self.run(&s, Duration::from_secs(120))) {
            Some(Ok((_, out))) => format!("\n--- diagnostics:\n{out}"),
            Some(Err(e)) => format!("\n--- diagnostics failed: {e}"),
            None => String::new(),
        }
    }

    /// Polls `script` in the VM until it exits 0 (its output), failing after `timeout`.
    pub fn sh_until(&self, what: &str, script: &str, timeout: Duration) -> String {
        let deadline = Instant::now() + timeout;
        loop {
            let last = self.run(script, timeout);
            if let Ok((0, out)) = &last {
                return out.clone();
            }
            assert!(
                Instant::now() < deadline,
                "in the VM: {what} did not happen within {timeout:?}; last: {last:?}{}",
                self.diagnose()
            );
            std::thread::sleep(Duration::from_secs(3));
        }
    }

    /// Reboots the VM (the agent runs again as boot n + 1).
    pub fn reboot(&self) {
        self.leave(100);
    }

    /// Powers the VM off and waits until QEMU is gone; the task's exit code.
    pub fn power_off(&mut self, timeout: Duration) -> i32 {
        self.leave(0);
        self.wait_off(timeout)
    }

    /// Waits for QEMU to end (after a power-off the test did not ask for itself, e.g.
    /// `systemctl poweroff` run in the VM).
    pub fn wait_off(&mut self, timeout: Duration) -> i32 {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(code) = self.exit_code() {
                return code;
            }
            assert!(
                Instant::now() < deadline,
                "the VM did not power off within {timeout:?}:\n{}",
                self.console_tail()
            );
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    /// QEMU's exit code once it has ended (run.sh's: the task's, 124 on its timeout).
    fn exit_code(&self) -> Option<i32> {
        let mut qemu = self.qemu.lock().unwrap_or_else(|e| e.into_inner());
        match qemu.as_mut().map(|c| c.try_wait()) {
            None => Some(0),
            Some(Ok(Some(status))) => {
                *qemu = None;
                Some(status.code().unwrap_or(-1))
            }
            Some(_) => None,
        }
    }

    fn leave(&self, code: i32) {
        let answer = self.run(&format!("#exit {code}\n"), Duration::from_secs(120));
        assert!(answer.is_ok(), "the VM's agent did not take #exit {code}");
    }

    /// The port of this test's channel, as the VM reaches it at 10.0.2.2.
    pub fn ctl_port(&self) -> u16 {
        self.ctl_port
    }

    /// What the VM's pods reported through `/mark`, in order.
    pub fn marks(&self) -> Vec<String> {
        self.shared.lock().marks.clone()
    }

    /// The end of the serial console (boot messages and the agent's output).
    pub fn console_tail(&self) -> String {
        let text = std::fs::read_to_string(self.task.join("console.log")).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(60)..].join("\n")
    }

    /// The task folder (what the VM left on `/task` is copied back at power-off).
    pub fn task(&self) -> &Path {
        &self.task
    }

    fn assert_running(&self) {
        if let Some(code) = self.exit_code() {
            panic!(
                "the VM is off (exit {code}) while the test waits on it:\n{}",
                self.console_tail()
            );
        }
    }
}

impl Drop for Vm {
    fn drop(&mut self) {
        if std::thread::panicking() && self.exit_code().is_none() {
            eprintln!("{}", self.diagnose());
        }
        let qemu = self.qemu.get_mut().unwrap_or_else(|e| e.into_inner());
        if let Some(mut child) = qemu.take() {
            // run.sh stops QEMU on TERM and copies the task disk back.
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(child.id() as i32),
                nix::sys::signal::Signal::SIGTERM,
            );
            let _ = child.wait();
            if std::thread::panicking() {
                let log = std::fs::read_to_string(self.task.join("out.log")).unwrap_or_default();
                let tail: Vec<&str> = log.lines().collect();
                eprintln!(
                    "--- the VM task's out.log (end):\n{}",
                    tail[tail.len().saturating_sub(80)..].join("\n")
                );
            }
        }
    }
}

/// One HTTP exchange with the agent: `GET /next?boot=B&after=S` (long poll for the
/// pending script) or `POST /result?seq=S&rc=R` (its answer).
fn serve(mut conn: TcpStream, shared: &Shared) {
    let _ = conn.set_read_timeout(Some(Duration::from_secs(30)));
    let mut reader = BufReader::new(match conn.try_clone() {
        Ok(c) => c,
        Err(_) => return,
    });
    let mut line = String::new();
    if reader.read_line(&mut line).is_err() {
        return;
    }
    let target = line.split_whitespace().nth(1).unwrap_or("").to_owned();
    let mut length = 0usize;
    loop {
        let mut header = String::new();
        if reader.read_line(&mut header).is_err() || header.trim().is_empty() {
            break;
        }
        if let Some((k, v)) = header.split_once(':') {
            if k.eq_ignore_ascii_case("content-length") {
                length = v.trim().parse().unwrap_or(0);
            }
        }
    }
    let (path, query) = target.split_once('?').unwrap_or((&target, ""));
    let param = |name: &str| -> u64 {
        query
            .split('&')
            .filter_map(|kv| kv.split_once('='))
            .find(|(k, _)| *k == name)
            .and_then(|(_, v)| v.parse().ok())
            .unwrap_or(0)
    };
    let body = match path {
        "/next" => {
            let after = param("after");
            let deadline = Instant::now() + POLL;
            let mut ch = shared.lock();
            ch.boot = ch.boot.max(param("boot") as u32);
            shared.changed.notify_all();
            loop {
                if let Some((seq, script)) = ch.pending.clone() {
                    if seq > after {
                        break format!("{seq}\n{script}");
                    }
                }
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    break String::new();
                }
                ch = shared
                    .changed
                    .wait_timeout(ch, left)
                    .unwrap_or_else(|e| e.into_inner())
                    .0;
            }
        }
        "/mark" => {
            let mut ch = shared.lock();
            ch.marks.push(query.to_owned());
            shared.changed.notify_all();
            String::new()
        }
        "/result" => {
            let mut data = vec![0u8; length];
            if reader.read_exact(&mut data).is_err() {
                return;
            }
            let seq = param("seq");
            let rc = query
                .split('&')
                .filter_map(|kv| kv.split_once('='))
                .find(|(k, _)| *k == "rc")
                .and_then(|(_, v)| v.parse().ok())
                .unwrap_or(-1);
            let mut ch = shared.lock();
            if ch.pending.as_ref().map(|p| p.0) == Some(seq) {
                ch.pending = None;
            }
            ch.answers
                .insert(seq, (rc, String::from_utf8_lossy(&data).into_owned()));
            shared.changed.notify_all();
            String::new()
        }
        _ => String::new(),
    };
    let _ = write!(
        conn,
        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
}
