//! The Kubernetes API as litelet sees it: wire types (serde) for the objects litelet
//! reads and writes, and `Quantity`. Only this module knows the JSON shape of API
//! objects; the rest of litelet works with these types.

pub mod affinity;
pub mod base64;
pub mod certs;
pub mod client;
pub mod configmap;
pub mod csr;
pub mod error;
pub mod event;
pub mod kubeconfig;
pub mod lease;
pub mod meta;
pub mod node;
pub mod node_patch;
pub mod patch;
pub mod paths;
pub mod persistent_volume;
pub mod pod;
pub mod quantity;
pub mod ratelimit;
pub mod reachability;
pub mod reflector;
pub mod request_threads;
pub mod review;
pub mod runtime_class;
pub mod service;
pub mod stats;
pub mod storage;
pub mod token;
pub mod watch;
pub mod x509;

pub use client::{
    ApiClient, ClientConfig, DeleteOptions, ListOptions, PatchType, RetryPolicy, Unread,
    WatchOptions,
};
pub use error::ApiError;
pub use stats::{RequestStats, Verb};
pub use watch::WatchStream;
