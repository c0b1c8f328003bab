//! Generated code for the gRPC health protocol (`proto/grpc/health.proto`, package
//! `grpc.health.v1`): messages in `pb`, the client and server stubs in `grpc`.
//!
//! Used by the gRPC probe (`prober/grpc.rs`, attempt threads) and by tests that serve
//! the protocol on loopback. No logic lives here.

generated_proto!(generated, "grpc_health");

pub use generated::health as pb;
pub use generated::health_grpc as grpc;
