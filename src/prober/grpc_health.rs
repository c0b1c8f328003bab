//! Generated code for the gRPC health protocol (`proto/grpc/health.proto`, package
//! `grpc.health.v1`): messages in `pb`, the client and server stubs in `grpc`.
//!
//! Used by the gRPC probe (`prober/grpc.rs`, attempt threads) and by tests that serve
//! the protocol on loopback. No logic lives here.

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
mod generated {
    include!(concat!(env!("OUT_DIR"), "/grpc_health/mod.rs"));
}

pub use generated::health as pb;
pub use generated::health_grpc as grpc;
