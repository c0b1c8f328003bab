//! The `litelet` binary: parses flags, sets up logging and signals, and starts the
//! agent's threads (or runs an operator subcommand). Wiring only; the work lives in
//! the library.

use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use crossbeam_channel::{after, select};

use litelet::config::{log_filter, Command, Flags, RuntimeFlags};
use litelet::cri::{self, RuntimeClient};
use litelet::{process, runtime_info};

fn main() -> ExitCode {
    let flags = Flags::parse();
    init_logging(flags.verbosity);
    match &flags.command {
        Some(Command::RuntimeInfo(info)) => run_runtime_info(&info.runtime),
        None => run_agent(&flags),
    }
}

fn init_logging(verbosity: u8) {
    let mut builder = env_logger::Builder::new();
    builder.filter_level(log_filter(verbosity));
    if let Ok(spec) = std::env::var("RUST_LOG") {
        builder.parse_filters(&spec);
    }
    builder.format_timestamp_millis().init();
}

fn run_runtime_info(flags: &RuntimeFlags) -> ExitCode {
    let result = flags.resolve().and_then(|(endpoint, options)| {
        let (runtime, _images) = cri::connect(&endpoint, &options);
        runtime_info::report(&runtime)
    });
    match result {
        Ok(text) => {
            print!("{text}");
            ExitCode::SUCCESS
        }
        Err(err) => {
            eprintln!("litelet runtime-info: {err}");
            ExitCode::FAILURE
        }
    }
}

fn run_agent(flags: &Flags) -> ExitCode {
    let shutdown = match process::install_shutdown_signals() {
        Ok(shutdown) => shutdown,
        Err(err) => {
            log::error!("cannot install signal handling: {err}");
            return ExitCode::FAILURE;
        }
    };
    process::protect_from_oom_killer();
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
    let (runtime, _images) = cri::connect(&endpoint, &options);
    if !wait_for_runtime(&runtime, &shutdown) {
        return ExitCode::SUCCESS;
    }
    // The sync loop and its sources arrive with the pod-worker issue; until then the
    // agent only holds its runtime connection and waits for shutdown.
    let _ = shutdown.recv();
    log::info!("litelet stopped; running containers are left to the runtime");
    ExitCode::SUCCESS
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
