//! The `litelet` binary: parses flags, sets up logging and signals, and starts the
//! agent's threads (or runs an operator subcommand). Wiring only; the work lives in
//! the library.

use std::process::ExitCode;
use std::time::Duration;

use crossbeam_channel::{after, select};

use litelet::config::{log_filter, Command, Flags, RuntimeFlags};
use litelet::cri::{self, RuntimeClient};
use litelet::log_format;
use litelet::{agent, process, runtime_info};

fn main() -> ExitCode {
    let flags = match Flags::load() {
        Ok(flags) => flags,
        Err(err) => {
            eprintln!("litelet: {err}");
            return ExitCode::from(2);
        }
    };
    log_format::init(flags.log_format, log_filter(flags.verbosity));
    for warning in &flags.warnings {
        log::warn!("{warning}");
    }
    match &flags.command {
        Some(Command::RuntimeInfo(info)) => {
            run_operator(&info.runtime, "runtime-info", runtime_info::report)
        }
        Some(Command::Ps(info)) => run_operator(&info.runtime, "ps", runtime_info::pods_report),
        None => run_agent(&flags),
    }
}

fn run_operator(
    flags: &RuntimeFlags,
    name: &str,
    command: fn(&RuntimeClient) -> Result<String, cri::CriError>,
) -> ExitCode {
    let result = flags.resolve().and_then(|(endpoint, options)| {
        let (runtime, _images) = cri::connect(&endpoint, &options);
        command(&runtime)
    });
    match result {
        Ok(text) => {
            print!("{text}");
            ExitCode::SUCCESS
        }
        Err(err) => {
            eprintln!("litelet {name}: {err}");
            ExitCode::FAILURE
        }
    }
}

fn run_agent(flags: &Flags) -> ExitCode {
    process::limit_malloc_arenas();
    // client-go's rest_client_* series, for every API client of the process.
    litelet::api::stats::observe_attempts(litelet::metrics::rest_attempt);
    // The cgroup manager's kubelet_cgroup_manager_duration_seconds.
    litelet::cgroups::observe_operations(litelet::metrics::cgroup_operation);
    let shutdown = match process::install_shutdown_signals() {
        Ok(shutdown) => shutdown,
        Err(err) => {
            log::error!("cannot install signal handling: {err}");
            return ExitCode::FAILURE;
        }
    };
    process::set_own_oom_score_adj(flags.oom_score_adj);
    let (endpoint, options) = match flags.runtime.resolve() {
        Ok(resolved) => resolved,
        Err(err) => {
            log::error!("{err}");
            return ExitCode::from(2);
        }
    };
    log::info!(
        "litelet {} starting, runtime {endpoint}",
        env!("CARGO_PKG_VERSION")
    );
    // Certificates and the kubeconfig are checked before the (possibly long) wait for
    // the runtime: a bad file is a configuration error, reported at once.
    let prepared = match agent::prepare(flags) {
        Ok(prepared) => prepared,
        Err(err) => {
            log::error!("{err}");
            return ExitCode::from(2);
        }
    };
    // protectKernelDefaults: the tunables are checked, never changed by litelet.
    if flags.protect_kernel_defaults {
        if let Err(err) = litelet::kernel_tunables::setup(&litelet::kernel_tunables::root(), true) {
            log::error!("{err}");
            return ExitCode::from(2);
        }
    }
    let (runtime, images) = cri::connect(&endpoint, &options);
    if !wait_for_runtime(&runtime, &shutdown) {
        return ExitCode::SUCCESS;
    }
    // The sync loop runs on this thread: a panic in it ends the process the same way
    // as one in any other essential thread.
    let result = process::exit_on_panic("sync", || {
        agent::run(flags, prepared, runtime, images, shutdown)
    });
    match result {
        Ok(()) => {
            log::info!("litelet stopped; running containers are left to the runtime");
            ExitCode::SUCCESS
        }
        Err(err) => {
            log::error!("{err}");
            ExitCode::FAILURE
        }
    }
}

/// Retries the CRI version check until it succeeds or shutdown begins. A runtime that
/// is down at start-up is normal on boot (litelet may start before containerd).
fn wait_for_runtime(runtime: &RuntimeClient, shutdown: &process::Shutdown) -> bool {
    let mut delay = Duration::from_millis(200);
    loop {
        match runtime.check_version() {
            Ok(version) => {
                log::info!(
                    "runtime {} {} (CRI {}) is ready",
                    version.runtime_name,
                    version.runtime_version,
                    version.runtime_api_version
                );
                return true;
            }
            Err(err) => log::warn!("{err}; retrying in {delay:?}"),
        }
        select! {
            recv(shutdown) -> _ => return false,
            recv(after(delay)) -> _ => {}
        }
        delay = (delay * 2).min(Duration::from_secs(10));
    }
}
