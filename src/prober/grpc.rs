//! gRPC probes (upstream `pkg/probe/grpc`): one `grpc.health.v1.Health/Check` call,
//! healthy only when the answer is SERVING.
//!
//! Runs on `probe-N` attempt threads. One grpcio environment with a single
//! completion-queue thread (`probe-grpc`) is created the first time a gRPC probe runs
//! and shared afterwards; each attempt opens its own plaintext channel (no TLS, as
//! upstream) and drops it after the call. The call's deadline is the probe's timeout,
//! which also bounds connecting. Every outcome other than SERVING is a failure.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use grpcio::{CallOption, ChannelBuilder, Environment, RpcStatusCode};

use super::grpc_health::{grpc::HealthClient, pb};
use super::{Attempt, PROBE_USER_AGENT};

/// Runs gRPC health checks; the environment is made on first use.
#[derive(Default)]
pub struct GrpcProber {
    env: OnceLock<Arc<Environment>>,
}

impl GrpcProber {
    fn env(&self) -> Arc<Environment> {
        self.env
            .get_or_init(|| {
                Arc::new(
                    grpcio::EnvBuilder::new()
                        .cq_count(1)
                        .name_prefix("probe-grpc")
                        .build(),
                )
            })
            .clone()
    }

    /// Checks `service` ("" for the whole server) at `host:port` within `timeout`.
    pub fn probe(&self, host: &str, port: u16, service: &str, timeout: Duration) -> Attempt {
        let addr = if host.contains(':') && !host.starts_with('[') {
            format!("[{host}]:{port}")
        } else {
            format!("{host}:{port}")
        };
        let channel = ChannelBuilder::new(self.env())
            .primary_user_agent(PROBE_USER_AGENT)
            .connect(&addr);
        let client = HealthClient::new(channel);
        let request = pb::HealthCheckRequest {
            service: service.to_owned(),
            ..Default::default()
        };
        match client.check_opt(&request, CallOption::default().timeout(timeout)) {
            Ok(response) => match response.status.enum_value() {
                Ok(pb::health_check_response::ServingStatus::SERVING) => {
                    Attempt::Success("service healthy".into())
                }
                Ok(other) => {
                    Attempt::Failure(format!("service unhealthy (responded with {other:?})"))
                }
                Err(n) => Attempt::Failure(format!("service unhealthy (responded with {n})")),
            },
            Err(grpcio::Error::RpcFailure(status)) => {
                let message = status.message();
                Attempt::Failure(match status.code() {
                    RpcStatusCode::UNIMPLEMENTED => format!(
                        "this server does not implement the grpc health protocol \
                         (grpc.health.v1.Health): {message}"
                    ),
                    RpcStatusCode::DEADLINE_EXCEEDED => {
                        format!("timeout: health rpc to {addr} did not complete within {timeout:?}")
                    }
                    RpcStatusCode::UNAVAILABLE => {
                        format!("failed to connect service at {addr:?}: {message}")
                    }
                    code => format!("health rpc probe failed: {code:?}: {message}"),
                })
            }
            Err(err) => Attempt::Failure(format!("health rpc probe failed: {err}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prober::grpc_health::grpc::{create_health, Health};
    use grpcio::{RpcContext, RpcStatus, ServerBuilder, ServerCredentials, UnarySink};
    use pb::health_check_response::ServingStatus;

    /// SERVING for "", NOT_SERVING for "down", NOT_FOUND for anything else.
    #[derive(Clone)]
    struct Fake;

    impl Health for Fake {
        fn check(
            &mut self,
            ctx: RpcContext,
            req: pb::HealthCheckRequest,
            sink: UnarySink<pb::HealthCheckResponse>,
        ) {
            let status = match req.service.as_str() {
                "" => ServingStatus::SERVING,
                "down" => ServingStatus::NOT_SERVING,
                _ => {
                    let status =
                        RpcStatus::with_message(RpcStatusCode::NOT_FOUND, "unknown".into());
                    ctx.spawn(async move {
                        let _ = sink.fail(status).await;
                    });
                    return;
                }
            };
            let response = pb::HealthCheckResponse {
                status: status.into(),
                ..Default::default()
            };
            ctx.spawn(async move {
                let _ = sink.success(response).await;
            });
        }
    }

    fn server(with_health: bool) -> (grpcio::Server, u16) {
        let env = Arc::new(Environment::new(1));
        let mut builder = ServerBuilder::new(env);
        if with_health {
            builder = builder.register_service(create_health(Fake));
        }
        let mut server = builder.build().unwrap();
        let port = server
            .add_listening_port("127.0.0.1:0", ServerCredentials::insecure())
            .unwrap();
        server.start();
        (server, port)
    }

    const T: Duration = Duration::from_secs(5);

    #[test]
    fn serving_not_serving_and_unknown_service() {
        let (_server, port) = server(true);
        let prober = GrpcProber::default();
        assert_eq!(
            prober.probe("127.0.0.1", port, "", T),
            Attempt::Success("service healthy".into())
        );
        assert_eq!(
            prober.probe("127.0.0.1", port, "down", T),
            Attempt::Failure("service unhealthy (responded with NOT_SERVING)".into())
        );
        let got = prober.probe("127.0.0.1", port, "other", T);
        assert!(
            matches!(got, Attempt::Failure(ref m) if m.contains("NOT_FOUND")),
            "{got:?}"
        );
    }

    #[test]
    fn unimplemented_and_closed_port() {
        let (server, port) = server(false);
        let prober = GrpcProber::default();
        let got = prober.probe("127.0.0.1", port, "", T);
        assert!(
            matches!(got, Attempt::Failure(ref m) if m.starts_with("this server does not implement")),
            "{got:?}"
        );
        drop(server);
        let closed = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let got = prober.probe("127.0.0.1", closed, "", T);
        assert!(
            matches!(got, Attempt::Failure(ref m) if m.starts_with("failed to connect")),
            "{got:?}"
        );
    }

    #[test]
    fn silent_server_costs_the_timeout() {
        // Accepts TCP but never speaks HTTP/2.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let got = GrpcProber::default().probe("127.0.0.1", port, "", Duration::from_millis(300));
        assert!(
            matches!(got, Attempt::Failure(ref m) if m.starts_with("timeout:")),
            "{got:?}"
        );
        drop(listener);
    }
}
