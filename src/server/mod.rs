//! The node's HTTP API (upstream kubelet server): `/healthz` on a loopback port, and
//! on the TLS port `/pods`, `/metrics`, `/metrics/cadvisor`, `/metrics/resource`,
//! `/metrics/probes`, `/stats/summary`, `/configz`, `/containerLogs`, `/exec`,
//! `/attach`, `/portForward` and `/run`, behind x509/token authentication and
//! SubjectAccessReview authorization.
//!
//! Shape: synchronous, no async runtime. Each listener has an accept thread
//! (`srv-api`, `srv-healthz`) that sleeps in `poll` until a connection, a freed place
//! or shutdown (a [`crate::process::ShutdownFd`]) needs it, and each accepted connection gets its own `srv-conn` thread while its budget
//! allows ([`budget`] on the API port: a small budget for connections still in their
//! handshake and first request, with a per-address share beyond which sockets wait
//! their turn; authorized connections by class, the API server's client certificate
//! able to use them all; a connection is closed after a 401 or 403). Threads per
//! connection fit this server better than a fixed pool: log follows and exec streams
//! hold a connection for hours, which would starve a fixed pool, and idle costs
//! nothing. A held stream's thread gives its unused stack pages back before it settles
//! into its loop, so a thousand streams cost tens of MiB (`make bench`, "streams").
//! HTTP framing is `httparse`; TLS is rustls (the ring provider ureq already brings).
//!
//! Inputs ([`ServerContext`]): the sync loop heartbeat, PLEG health, the published
//! desired pods, the CRI client and the PLEG's runtime status cache, the status
//! manager, usage samples and an optional API client (for TokenReview and
//! SubjectAccessReview). The server only reads them; it never sends to the sync loop,
//! so a slow client cannot slow litelet down.

pub mod auth;
pub mod authz;
pub mod budget;
mod cache;
pub mod conn;
pub mod http;
pub mod routes;
pub mod tls;
pub mod transport;
/// The DER reading lives with the wire types (the certificate bootstrap reads it too).
pub use crate::api::x509;

use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::Receiver;
use nix::poll::{PollFd, PollFlags, PollTimeout};

use crate::api::ApiClient;
use crate::cri::RuntimeClient;
use crate::kubelet::snapshot::PodSnapshot;
use crate::metrics;
use crate::pleg::PlegHealth;
use crate::pod_workers::stack::StackTop;
use crate::process::ShutdownFd;
use crate::runtime::cache::PodStatusCache;
use crate::status::manager::StatusManager;
use auth::{Authenticator, TokenCacheTtl};
use authz::{AuthorizationMode, Authorizer, AuthzCacheTtl};
use budget::{Admission, Budget, BudgetLimits, Ticket};
use conn::Kind;
use tls::{ClientCertCheck, TlsSettings};

/// Limits that keep one client from exhausting the node.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Authorized connections open on the API port, every class together; a
    /// connection authorized beyond its class's share gets a 503 and is closed.
    /// Bearer-token and anonymous users share a quarter of it (see
    /// [`Limits::budget_limits`]); the API server's client certificate may use it all.
    pub max_connections: usize,
    /// API connections that have not been authorized yet (TLS handshake, first
    /// request head, authentication); beyond it the oldest of the busiest address is
    /// closed.
    pub max_unauthenticated_connections: usize,
    /// Pending API connections from one client address; more wait their turn for up
    /// to `unauthenticated_timeout`.
    pub max_unauthenticated_per_client: usize,
    /// Budget of an unauthenticated connection: the TLS handshake and its first
    /// request head together (and the longest a socket waits for its turn).
    pub unauthenticated_timeout: Duration,
    /// Open connections on the healthz port.
    pub max_healthz_connections: usize,
    pub max_header_bytes: usize,
    pub max_body_bytes: usize,
    /// Budget of a TLS handshake and of each request head.
    pub header_timeout: Duration,
    /// How long a kept-alive connection may wait for its next request.
    pub idle_timeout: Duration,
    /// How long one write may block on a client that does not read.
    pub write_timeout: Duration,
    /// Longest a log follow may last.
    pub max_log_stream: Duration,
    /// Longest a log request without follow may stream.
    pub max_log_read: Duration,
    /// Most bytes one log request sends (a smaller `limitBytes` wins).
    pub max_log_bytes: u64,
    /// An exec/attach/port-forward stream with no traffic this long is closed
    /// (`streamingConnectionIdleTimeout`); zero means never.
    pub stream_idle_timeout: Duration,
}

/// Authorized connections when memory cannot be read (and the floor of the sizing).
pub const MIN_MAX_CONNECTIONS: usize = 256;
/// The ceiling of the memory-sized default.
pub const MAX_MAX_CONNECTIONS: usize = 8192;
/// Memory per authorized connection in the default sizing: a held stream costs
/// about 50 KiB, a fortieth of it (BENCHMARKS.md, "streams"), so the budget at its
/// full size uses about 2.5% of the machine's memory.
pub const MEMORY_PER_CONNECTION: u64 = 2 << 20;
/// File descriptors one connection may hold: its socket, and a log file with its
/// folder or the runtime's socket, each twice while proxying.
pub const FILES_PER_CONNECTION: u64 = 4;
/// Descriptors kept for the rest of litelet.
pub const FILES_RESERVED: u64 = 512;
pub const DEFAULT_MAX_UNAUTHENTICATED_CONNECTIONS: usize = 32;
pub const DEFAULT_MAX_UNAUTHENTICATED_PER_CLIENT: usize = 8;

/// The default of `--server-max-connections`: one per [`MEMORY_PER_CONNECTION`] of
/// `memory_bytes` (unknown: the floor), within
/// [`MIN_MAX_CONNECTIONS`]..=[`MAX_MAX_CONNECTIONS`] (pure). The server lowers it
/// further when the open files limit cannot hold that many.
pub fn default_max_connections(memory_bytes: Option<u64>) -> usize {
    let sized = memory_bytes.map_or(MIN_MAX_CONNECTIONS as u64, |m| {
        (m / MEMORY_PER_CONNECTION).clamp(MIN_MAX_CONNECTIONS as u64, MAX_MAX_CONNECTIONS as u64)
    });
    usize::try_from(sized).unwrap_or(MIN_MAX_CONNECTIONS)
}

impl Limits {
    /// The budgets of the API port (pure): token and anonymous users share a quarter
    /// of the authorized places, one user at most a quarter of that (and at least 8);
    /// up to 32 sockets per pending place may wait.
    pub fn budget_limits(&self) -> BudgetLimits {
        let max_users = (self.max_connections / 4).max(1);
        BudgetLimits {
            max_authorized: self.max_connections,
            max_users,
            max_per_user: (max_users / 4).max(8).min(max_users),
            max_unauthenticated: self.max_unauthenticated_connections,
            max_per_client: self.max_unauthenticated_per_client,
            max_waiting: self.max_unauthenticated_connections.saturating_mul(32),
        }
    }
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_connections: MIN_MAX_CONNECTIONS,
            max_unauthenticated_connections: DEFAULT_MAX_UNAUTHENTICATED_CONNECTIONS,
            max_unauthenticated_per_client: DEFAULT_MAX_UNAUTHENTICATED_PER_CLIENT,
            unauthenticated_timeout: Duration::from_secs(5),
            max_healthz_connections: 8,
            // Go's http.DefaultMaxHeaderBytes, which upstream's node server keeps.
            max_header_bytes: 1 << 20,
            max_body_bytes: 64 * 1024,
            header_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            write_timeout: Duration::from_secs(30),
            max_log_stream: Duration::from_secs(4 * 3600),
            max_log_read: Duration::from_secs(10 * 60),
            max_log_bytes: 1 << 30,
            stream_idle_timeout: DEFAULT_STREAM_IDLE_TIMEOUT,
        }
    }
}

/// Upstream's default `streamingConnectionIdleTimeout`.
pub const DEFAULT_STREAM_IDLE_TIMEOUT: Duration = Duration::from_secs(4 * 3600);

/// How the server is set up (from flags).
#[derive(Clone, Debug)]
pub struct ServerConfig {
    /// `--address` and `--port` of the node API; port 0 picks a free one (tests).
    pub address: IpAddr,
    pub port: u16,
    /// `--healthz-bind-address` and `--healthz-port`; `None` disables healthz.
    pub healthz_address: IpAddr,
    pub healthz_port: Option<u16>,
    pub node_name: String,
    pub tls: TlsSettings,
    pub anonymous_auth: bool,
    pub authorization_mode: AuthorizationMode,
    pub token_cache: TokenCacheTtl,
    pub authz_cache: AuthzCacheTtl,
    pub limits: Limits,
    /// `/healthz` fails when the sync loop has not turned for this long
    /// (upstream: twice the sync frequency, at least 5 min).
    pub sync_loop_threshold: Duration,
    /// Root of the pod log directories, for relative CRI log paths.
    pub pod_logs_dir: PathBuf,
    /// The `/configz` document, rendered by the config layer (the server does not
    /// know flags); `None` answers 404 like a node without the endpoint.
    pub configz: Option<Arc<serde_json::Value>>,
    /// The serving pair when the caller holds it (to replace it while the server
    /// runs); `None` loads it from `tls` at start.
    pub serving: Option<tls::ServingCert>,
}

impl ServerConfig {
    /// Defaults for a node; flags fill in the rest.
    pub fn new(node_name: &str, root_dir: PathBuf) -> ServerConfig {
        ServerConfig {
            address: IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            port: 10250,
            healthz_address: IpAddr::V4(Ipv4Addr::LOCALHOST),
            healthz_port: Some(10248),
            node_name: node_name.to_owned(),
            tls: TlsSettings {
                root_dir,
                host_names: vec![node_name.to_owned()],
                ..Default::default()
            },
            anonymous_auth: false,
            authorization_mode: AuthorizationMode::Webhook,
            token_cache: TokenCacheTtl::default(),
            authz_cache: AuthzCacheTtl::default(),
            limits: Limits::default(),
            sync_loop_threshold: Duration::from_secs(300),
            pod_logs_dir: PathBuf::from("/var/log/pods"),
            configz: None,
            serving: None,
        }
    }
}

/// What the server reads from the rest of litelet.
#[derive(Clone)]
pub struct ServerContext {
    /// Unix seconds of the sync loop's last turn (0 before the first).
    pub heartbeat: Arc<AtomicU64>,
    pub pleg: PlegHealth,
    /// When litelet started (PLEG health counts from here before the first relist).
    pub started: Instant,
    pub pods: PodSnapshot,
    pub runtime: RuntimeClient,
    /// Fresher pod statuses than the pods' own (static pods have no other).
    pub status: Option<StatusManager>,
    /// For TokenReview and SubjectAccessReview; None in standalone mode.
    pub api: Option<ApiClient>,
    /// The `stats` thread's samples for `/stats/summary` and `/metrics/resource`;
    /// None when no sampler runs (those paths then answer 503).
    pub stats: Option<crate::stats::StatsStore>,
    /// The prober's attempt counters for `/metrics/probes`; None without a prober
    /// (the path then answers 503).
    pub probes: Option<crate::prober::ProbeMetrics>,
    /// The PLEG's runtime status cache: a log follow learns there, without a CRI
    /// call, that its container stopped. None falls back to CRI ContainerStatus.
    pub runtime_cache: Option<PodStatusCache>,
}

/// A start-up failure of the server.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("node server tls: {0}")]
    Tls(#[from] tls::TlsError),
    #[error("bind {addr}: {source}")]
    Bind { addr: SocketAddr, source: io::Error },
    #[error("spawn {name}: {source}")]
    Spawn {
        name: &'static str,
        source: io::Error,
    },
}

impl From<ServerError> for io::Error {
    fn from(e: ServerError) -> io::Error {
        match e {
            ServerError::Bind { ref source, .. } | ServerError::Spawn { ref source, .. } => {
                io::Error::new(source.kind(), e.to_string())
            }
            other => io::Error::other(other.to_string()),
        }
    }
}

/// State every connection thread reads.
pub struct Shared {
    pub config: ServerConfig,
    pub ctx: ServerContext,
    pub authn: Authenticator,
    pub authz: Authorizer,
    pub tls: Option<Arc<rustls::ServerConfig>>,
    /// Set when shutdown begins; streams and keep-alive loops check it.
    pub stopping: AtomicBool,
}

/// A running server: its bound addresses and threads.
pub struct ServerHandle {
    pub api_addr: SocketAddr,
    pub healthz_addr: Option<SocketAddr>,
    pub threads: Vec<JoinHandle<()>>,
}

/// Starts the node server (see [`start`]) and returns its accept threads.
pub fn spawn(
    config: ServerConfig,
    context: ServerContext,
    shutdown: Receiver<()>,
) -> io::Result<Vec<JoinHandle<()>>> {
    Ok(start(config, context, shutdown)?.threads)
}

/// Binds both listeners, loads or makes the serving certificate and starts the
/// accept threads; they stop when `shutdown` disconnects.
pub fn start(
    mut config: ServerConfig,
    context: ServerContext,
    shutdown: Receiver<()>,
) -> Result<ServerHandle, ServerError> {
    fit_open_files(&mut config.limits);
    metrics::NODE_NAME.set(&[&config.node_name], 1.0);
    metrics::NODE_CONFIG_ERROR.set(&[], 0.0);
    let clients = match &config.tls.client_ca_file {
        Some(path) => Some(ClientCertCheck::from_file(path)?),
        None => None,
    };
    let serving = match &config.serving {
        Some(serving) => serving.clone(),
        None => {
            let (chain, key) = tls::serving_pair(&config.tls)?;
            tls::ServingCert::new(chain, key)?
        }
    };
    let tls_config = tls::server_config_with(&serving, clients.as_ref(), &config.tls.policy)?;
    for warning in config.tls.policy.warnings() {
        log::warn!("node server: {warning}");
    }
    if config.authorization_mode == AuthorizationMode::Webhook && context.api.is_none() {
        log::warn!("node server: webhook authorization without an API server denies every request");
    }
    let authn = Authenticator::new(
        clients,
        context.api.clone(),
        config.anonymous_auth,
        config.token_cache,
    );
    let authz = Authorizer::new(
        config.authorization_mode,
        context.api.clone(),
        &config.node_name,
        config.authz_cache,
    );
    let bind = |addr: SocketAddr| {
        TcpListener::bind(addr).map_err(|source| ServerError::Bind { addr, source })
    };
    let api_listener = bind(SocketAddr::new(config.address, config.port))?;
    let healthz_listener = match config.healthz_port {
        Some(port) => Some(bind(SocketAddr::new(config.healthz_address, port))?),
        None => None,
    };
    let api_addr = api_listener
        .local_addr()
        .map_err(|source| ServerError::Bind {
            addr: SocketAddr::new(config.address, config.port),
            source,
        })?;
    let healthz_addr = healthz_listener.as_ref().and_then(|l| l.local_addr().ok());
    let limits = config.limits;
    let shared = Arc::new(Shared {
        config,
        ctx: context,
        authn,
        authz,
        tls: Some(tls_config),
        stopping: AtomicBool::new(false),
    });
    let stop = ShutdownFd::new(shutdown).map_err(|source| ServerError::Spawn {
        name: "stop-fd",
        source,
    })?;
    let mut threads = Vec::new();
    let start_loop = |name: &'static str, listener: TcpListener, admit: Admit| {
        let shared = shared.clone();
        let stop = stop.clone();
        // Essential: a dead accept loop would leave a node that looks alive to its
        // service manager but answers no one.
        crate::process::spawn_essential(name, 128 * 1024, move || {
            accept_loop(shared, listener, admit, &stop)
        })
        .map_err(|source| ServerError::Spawn { name, source })
    };
    let budget = Budget::new(limits.budget_limits()).map_err(|source| ServerError::Spawn {
        name: "srv-api",
        source,
    })?;
    threads.push(start_loop("srv-api", api_listener, Admit::Budget(budget))?);
    if let Some(listener) = healthz_listener {
        let slots = Admit::Slots {
            open: Arc::new(AtomicUsize::new(0)),
            max: limits.max_healthz_connections,
        };
        threads.push(start_loop("srv-healthz", listener, slots)?);
    }
    log::info!("node server listening on {api_addr} (healthz {healthz_addr:?})");
    Ok(ServerHandle {
        api_addr,
        healthz_addr,
        threads,
    })
}

/// Raises the open files limit and keeps `max_connections` within what it allows.
fn fit_open_files(limits: &mut Limits) {
    let Ok(files) = crate::process::raise_open_files_limit() else {
        return;
    };
    let fits = usize::try_from(files_allow(files)).unwrap_or(usize::MAX);
    if limits.max_connections > fits {
        log::warn!(
            "node server: {} connections need more than the open files limit ({files}) \
             allows; keeping {fits}",
            limits.max_connections
        );
        limits.max_connections = fits;
    }
}

/// Connections an open files limit leaves room for (pure).
fn files_allow(open_files: u64) -> u64 {
    (open_files.saturating_sub(FILES_RESERVED) / FILES_PER_CONNECTION).max(16)
}

/// The machine's memory as `/proc/meminfo` has it, for [`default_max_connections`].
pub fn memory_bytes() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    crate::stats::cgroup::parse_meminfo(&text).map(|(total, _, _)| total)
}

/// Releases a connection slot when the connection thread ends.
struct Slot(Arc<AtomicUsize>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// How a listener decides whether a new connection gets a thread.
enum Admit {
    /// The node API: [`budget::Budget`] (pending, waiting and authorized).
    Budget(Arc<Budget>),
    /// The loopback healthz port: at most `max` open, more closed at once.
    Slots { open: Arc<AtomicUsize>, max: usize },
}

/// A connection's claim on its listener's budget, released when its thread ends.
enum Claim {
    Ticket(Ticket),
    Slot(Slot),
}

/// Stack of a `srv-conn` thread. A handshake, a request and its CRI call touch well
/// under a quarter of it; a thread that settles into a long stream gives what it
/// touched back first (`pod_workers::stack`), so this is address space, not memory.
const CONN_STACK: usize = 512 * 1024;

thread_local! {
    /// The top of this `srv-conn` thread's stack, taken in its first frame.
    static STACK_TOP: std::cell::Cell<Option<StackTop>> = const { std::cell::Cell::new(None) };
}

/// Called by a handler about to hold its connection for long (a log follow, a
/// proxied stream): gives back the stack pages the handshake, request and runtime
/// calls touched below the caller's frame. A no-op off a connection thread.
pub(crate) fn settle_stack() {
    if let Some(top) = STACK_TOP.get() {
        top.release_unused();
    }
}

/// Accepts connections until shutdown; one thread per connection while the budget
/// allows.
fn accept_loop(shared: Arc<Shared>, listener: TcpListener, admit: Admit, stop: &ShutdownFd) {
    let server = match admit {
        Admit::Budget(_) => "api",
        Admit::Slots { .. } => "healthz",
    };
    let patience = shared.config.limits.unauthenticated_timeout;
    loop {
        let mut fds = vec![
            PollFd::new(listener.as_fd(), PollFlags::POLLIN),
            PollFd::new(stop.as_fd(), PollFlags::POLLIN),
        ];
        // Sockets in the waiting room expire after `patience`: look at them every
        // 200 ms while there are any. Otherwise nothing is due until a connection, a
        // freed place (the budget's wake fd) or shutdown.
        let mut timeout = PollTimeout::NONE;
        if let Admit::Budget(budget) = &admit {
            fds.push(PollFd::new(budget.wake_fd(), PollFlags::POLLIN));
            if budget.has_waiting() {
                timeout = PollTimeout::from(200u16);
            }
        }
        let woken = |fd: &PollFd| fd.revents().is_some_and(|r| !r.is_empty());
        let (ready, stopping) = match nix::poll::poll(&mut fds, timeout) {
            Ok(_) => (woken(&fds[0]), woken(&fds[1])),
            Err(nix::errno::Errno::EINTR) => (false, false),
            Err(err) => {
                log::error!("node server {server}: poll failed: {err}");
                std::thread::sleep(Duration::from_millis(200));
                (false, stop.is_set())
            }
        };
        drop(fds);
        if stopping {
            shared.stopping.store(true, Ordering::Relaxed);
            return;
        }
        if let Admit::Budget(budget) = &admit {
            start_due(&shared, budget, patience);
        }
        if !ready {
            continue;
        }
        let (socket, peer) = match listener.accept() {
            Ok(accepted) => accepted,
            Err(err) => {
                log::warn!("node server {server}: accept failed: {err}");
                // EMFILE and friends: back off instead of spinning.
                std::thread::sleep(Duration::from_millis(100));
                continue;
            }
        };
        admit_one(&shared, &admit, socket, peer);
    }
}

/// Starts the waiting sockets whose turn came and counts the expired ones.
fn start_due(shared: &Arc<Shared>, budget: &Arc<Budget>, patience: Duration) {
    let due = budget.due(Instant::now(), patience);
    if due.expired > 0 {
        metrics::HTTP_REJECTED_CONNECTIONS.add(&["api"], due.expired as f64);
        log::debug!(
            "node server api: closed {} connections that waited {patience:?} for their turn",
            due.expired
        );
    }
    for (socket, admitted) in due.started {
        spawn_conn(shared, Kind::Api, socket, Claim::Ticket(admitted.ticket));
    }
}

/// Gives a new connection its thread, a place in the waiting room, or closes it.
fn admit_one(shared: &Arc<Shared>, admit: &Admit, socket: TcpStream, peer: SocketAddr) {
    let refused = |why: &dyn std::fmt::Display, server: &str| {
        metrics::HTTP_REJECTED_CONNECTIONS.inc(&[server]);
        log::debug!("node server {server}: closing a new connection from {peer}: {why}");
    };
    match admit {
        Admit::Budget(budget) => match budget.admit(peer.ip(), socket) {
            Ok(Admission::Started(socket, admitted)) => {
                if let Some(addr) = admitted.evicted {
                    refused(
                        &format!("pending budget full, closed one from {addr}"),
                        "api",
                    );
                }
                spawn_conn(shared, Kind::Api, socket, Claim::Ticket(admitted.ticket));
            }
            Ok(Admission::Waiting { dropped }) => {
                if let Some(addr) = dropped {
                    refused(&format!("waiting room full, closed one from {addr}"), "api");
                }
            }
            Err(why) => refused(&why, "api"),
        },
        Admit::Slots { open, max } => {
            if open.fetch_add(1, Ordering::AcqRel) >= *max {
                open.fetch_sub(1, Ordering::AcqRel);
                refused(&format!("{max} connections open"), "healthz");
                return;
            }
            let slot = Claim::Slot(Slot(open.clone()));
            spawn_conn(shared, Kind::Healthz, socket, slot);
        }
    }
}

fn spawn_conn(shared: &Arc<Shared>, kind: Kind, socket: TcpStream, claim: Claim) {
    let shared = shared.clone();
    let spawned = std::thread::Builder::new()
        .name("srv-conn".into())
        .stack_size(CONN_STACK)
        .spawn(move || {
            STACK_TOP.set(Some(StackTop::here(CONN_STACK)));
            match claim {
                Claim::Ticket(ticket) => conn::serve(shared, kind, socket, Some(ticket)),
                Claim::Slot(slot) => {
                    let _slot = slot;
                    conn::serve(shared, kind, socket, None);
                }
            }
        });
    if let Err(err) = spawned {
        log::error!("node server: cannot start a connection thread: {err}");
    }
}
