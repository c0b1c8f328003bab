//! litelet: a Kubernetes node agent (kubelet) for small machines.
//!
//! A synchronous, threaded daemon: every long-lived activity is an OS thread, threads
//! talk over crossbeam channels, the runtime is reached over blocking gRPC. See
//! `docs/ARCHITECTURE.md` for the map of threads, channels and modules.

/// Includes what `build.rs` generated from one proto folder (`OUT_DIR/<dir>/mod.rs`)
/// as the private module `$module`, with the lints generated code does not follow
/// turned off there alone.
macro_rules! generated_proto {
    ($module:ident, $dir:literal) => {
        #[allow(
            renamed_and_removed_lints,
            clippy::all,
            clippy::pedantic,
            missing_docs,
            unused_qualifications,
            unused_results,
            non_camel_case_types,
            non_snake_case,
            unreachable_pub
        )]
        mod $module {
            include!(concat!(env!("OUT_DIR"), "/", $dir, "/mod.rs"));
        }
    };
}

pub mod admission;
pub mod agent;
pub mod api;
pub mod backoff;
pub mod blocking;
pub mod certificate;
pub mod cgroups;
pub mod config;
pub mod credentialprovider;
pub mod cri;
pub mod dbus;
pub mod devicemanager;
pub mod events;
pub mod eviction;
pub mod fsutil;
pub mod fswalk;
pub mod images;
pub mod kernel_tunables;
pub mod kubelet;
pub mod log_format;
pub mod logs;
pub mod metrics;
pub mod node;
pub mod nodeshutdown;
pub mod pleg;
pub mod pod_workers;
pub mod poddata;
pub mod podresources;
pub mod probe;
pub mod prober;
pub mod process;
pub mod runtime;
pub mod runtime_class;
pub mod runtime_info;
pub mod server;
pub mod sources;
pub mod stats;
pub mod status;
pub mod userns;
pub mod volumes;
