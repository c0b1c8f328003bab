//! The CRI (Container Runtime Interface) v1: generated wire types and blocking clients.
//!
//! `pb` holds the messages generated from `proto/cri/api.proto` at build time and
//! `grpc` the generated service stubs (client and server traits; the fake runtime in
//! tests implements the server side). Every other part of litelet talks to the
//! runtime through [`RuntimeClient`] and [`ImageClient`], which share one gRPC channel,
//! put a deadline on every call and map failures to [`CriError`]. The one stream
//! litelet reads, the container events, has its reader thread in [`events`].

generated_proto!(generated, "cri");

mod cancellable;
pub mod cgroup_driver;
mod client;
mod endpoint;
mod error;
pub mod events;
mod listing;

pub use cancellable::POLL as CANCEL_POLL;
pub use client::{connect, ConnectOptions, ImageClient, RuntimeClient};
pub use endpoint::Endpoint;
pub use error::{Cause, CriError};
pub use generated::api as pb;
pub use generated::api_grpc as grpc;
pub use listing::{
    ListedContainer, ListedSandbox, POD_NAMESPACE_LABEL, POD_NAME_LABEL, POD_UID_LABEL,
};

/// The CRI API version litelet speaks.
pub const CRI_API_VERSION: &str = "v1";
