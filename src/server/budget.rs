//! Connection budgets of the node API port: clients that never authenticate cannot
//! take the connections `kubectl logs`/`exec`/`port-forward` (through the API server)
//! and metrics scrapes need, and the API server itself is never capped below what
//! the node can hold.
//!
//! A connection starts *pending* (TLS handshake, first request head, authentication
//! and authorization) in a small budget of its own (`max_unauthenticated`), with at
//! most `max_per_client` pending from one address. A newcomer beyond that per-address
//! share is not refused: its socket *waits* (no thread, only the file descriptor) until
//! a pending connection of its address finishes, or is closed after the patience of an
//! unauthenticated connection. So the API server, which opens one connection per
//! `kubectl logs -f` and may open a hundred in a second, is served in waves of
//! `max_per_client` handshakes, while a flood from one address only delays itself.
//! When the pending budget is full, the oldest pending connection of the address with
//! the most is shut down for the newcomer ([`pick_victim`], pure); the same rule
//! trims the waiting room when it is full.
//!
//! The first request that is authenticated *and* authorized moves the connection to
//! the authorized budget of its class ([`Class`], [`class_room`], pure): a client
//! certificate the cluster's client CA signed (the API server, cluster admins) may use
//! all `max_authorized` places; bearer-token and anonymous users (any pod's service
//! account can get a token) share at most `max_users` of them, `max_per_user` each. A
//! class that is full answers 503 and closes.
//!
//! Called by the `srv-api` accept thread ([`Budget::admit`], [`Budget::due`]) and the
//! `srv-conn` threads (their [`Ticket`], released on drop). One mutex, held for
//! bookkeeping only; an eviction is a `shutdown(2)` of the victim's socket, which
//! wakes its thread from any read; a freed pending place wakes the accept thread
//! through a socket pair ([`Budget::wake_fd`]).

use std::collections::{HashMap, VecDeque};
use std::io::{Read, Write};
use std::net::{IpAddr, Shutdown, TcpStream};
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// The sizes of the budgets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BudgetLimits {
    /// Authorized connections open at once, every class together.
    pub max_authorized: usize,
    /// Authorized connections of bearer-token and anonymous users together.
    pub max_users: usize,
    /// Authorized connections of one bearer-token user (or of anonymous).
    pub max_per_user: usize,
    /// Connections still in the TLS handshake, the first request or its checks.
    pub max_unauthenticated: usize,
    /// Pending connections from one client address; more wait their turn.
    pub max_per_client: usize,
    /// Sockets waiting for a pending place of their address.
    pub max_waiting: usize,
}

/// Who an authorized connection belongs to, for its class budget.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Class {
    /// A client certificate verified against `--client-ca-file`: the API server's
    /// kubelet client and cluster admins.
    Certificate,
    /// A bearer-token user (TokenReview) or `system:anonymous`, by user name.
    User(String),
}

/// Why a new connection is closed at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    #[error("{0} connection threads already")]
    Threads(usize),
    #[error("no pending connections allowed")]
    NoPending,
    #[error("cannot keep a handle on the socket")]
    Socket,
}

/// Why a connection cannot move to the authorized budget.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Full {
    #[error("{0} authorized connections open already")]
    All(usize),
    #[error("{0} connections of token and anonymous users open already")]
    Users(usize),
    #[error("{max} connections of user {user} open already")]
    User { user: String, max: usize },
}

/// Authorized connections open now, by class.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Open {
    pub all: usize,
    /// Token and anonymous users together.
    pub users: usize,
    pub per_user: HashMap<String, usize>,
}

/// Whether one more connection of `class` fits (pure).
pub fn class_room(open: &Open, class: &Class, limits: &BudgetLimits) -> Result<(), Full> {
    if open.all >= limits.max_authorized {
        return Err(Full::All(limits.max_authorized));
    }
    let Class::User(user) = class else {
        return Ok(());
    };
    if open.users >= limits.max_users {
        return Err(Full::Users(limits.max_users));
    }
    if open.per_user.get(user).copied().unwrap_or(0) >= limits.max_per_user {
        return Err(Full::User {
            user: user.clone(),
            max: limits.max_per_user,
        });
    }
    Ok(())
}

/// Which connection to evict for a newcomer: the oldest of the address with the most
/// (the oldest overall on a tie). `addrs` is oldest first; None when it is empty.
pub fn pick_victim(addrs: &[IpAddr]) -> Option<usize> {
    let mut counts: HashMap<IpAddr, usize> = HashMap::new();
    for addr in addrs {
        *counts.entry(*addr).or_default() += 1;
    }
    let most = counts.values().copied().max()?;
    addrs.iter().position(|addr| counts[addr] == most)
}

struct Pending {
    id: u64,
    addr: IpAddr,
    /// A second handle on the socket, to shut it down on eviction.
    socket: TcpStream,
}

struct Waiting {
    addr: IpAddr,
    socket: TcpStream,
    since: Instant,
}

#[derive(Default)]
struct State {
    next_id: u64,
    /// Pending connections, oldest first.
    pending: Vec<Pending>,
    /// Sockets waiting for a pending place of their address, oldest first.
    waiting: VecDeque<Waiting>,
    open: Open,
    /// Connection threads alive: pending and authorized, plus evicted ones ending.
    threads: usize,
}

impl State {
    fn pending_from(&self, addr: IpAddr) -> usize {
        self.pending.iter().filter(|p| p.addr == addr).count()
    }
}

/// The budgets of one listener.
pub struct Budget {
    limits: BudgetLimits,
    state: Mutex<State>,
    /// Written when a pending place frees while sockets wait; the accept loop polls
    /// the other end.
    wake_tx: UnixStream,
    wake_rx: UnixStream,
}

/// A connection's place in a budget; dropping it (the thread ending) frees it.
pub struct Ticket {
    budget: Arc<Budget>,
    id: u64,
    class: Option<Class>,
}

/// A connection let in as pending.
#[derive(Debug)]
pub struct Admitted {
    pub ticket: Ticket,
    /// The address whose pending connection was shut down to make room, if any.
    pub evicted: Option<IpAddr>,
}

/// What [`Budget::admit`] did with a new socket.
#[derive(Debug)]
pub enum Admission {
    /// Pending now: start its thread.
    Started(TcpStream, Admitted),
    /// Its address has its share of pending connections: the budget holds the socket
    /// until one finishes ([`Budget::due`]); `dropped` is an older waiting socket
    /// closed to make room, if the waiting room was full.
    Waiting { dropped: Option<IpAddr> },
}

/// What [`Budget::due`] found.
#[derive(Debug, Default)]
pub struct Due {
    /// Waiting sockets whose address has room now, pending from here on.
    pub started: Vec<(TcpStream, Admitted)>,
    /// Waiting sockets closed after their patience ran out.
    pub expired: usize,
}

impl std::fmt::Debug for Ticket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ticket")
            .field("id", &self.id)
            .field("class", &self.class)
            .finish()
    }
}

impl Budget {
    pub fn new(limits: BudgetLimits) -> std::io::Result<Arc<Budget>> {
        let (wake_tx, wake_rx) = UnixStream::pair()?;
        wake_tx.set_nonblocking(true)?;
        wake_rx.set_nonblocking(true)?;
        Ok(Arc::new(Budget {
            limits,
            state: Mutex::new(State::default()),
            wake_tx,
            wake_rx,
        }))
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // The state is counters and lists, consistent after every statement: a panic
        // elsewhere while holding the lock leaves nothing half-done.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Most connection threads at once: both budgets, plus room for evicted
    /// connections that are still ending.
    fn max_threads(&self) -> usize {
        self.limits.max_authorized + 2 * self.limits.max_unauthenticated.max(1)
    }

    /// The accept loop polls this; it is readable when waiting sockets may start.
    pub fn wake_fd(&self) -> BorrowedFd<'_> {
        self.wake_rx.as_fd()
    }

    fn wake(&self) {
        // A full pipe already holds a wake-up; nothing else can fail that matters.
        let _ = (&self.wake_tx).write(&[1]);
    }

    /// Admits a new connection from `addr` as pending (evicting another when that
    /// budget is full), or keeps its socket waiting when its address has its share.
    pub fn admit(self: &Arc<Self>, addr: IpAddr, socket: TcpStream) -> Result<Admission, Refused> {
        let mut state = self.lock();
        if state.threads >= self.max_threads() {
            return Err(Refused::Threads(state.threads));
        }
        if self.limits.max_unauthenticated == 0 || self.limits.max_per_client == 0 {
            return Err(Refused::NoPending);
        }
        if state.pending_from(addr) >= self.limits.max_per_client {
            let dropped = self.wait(&mut state, addr, socket);
            return Ok(Admission::Waiting { dropped });
        }
        let admitted = self.start_pending(&mut state, addr, &socket)?;
        Ok(Admission::Started(socket, admitted))
    }

    /// Puts `socket` in the waiting room; when it is full, the oldest waiting socket
    /// of the address with the most goes. Returns that address.
    fn wait(&self, state: &mut State, addr: IpAddr, socket: TcpStream) -> Option<IpAddr> {
        let mut dropped = None;
        if state.waiting.len() >= self.limits.max_waiting.max(1) {
            let addrs: Vec<IpAddr> = state.waiting.iter().map(|w| w.addr).collect();
            if let Some(gone) = pick_victim(&addrs).and_then(|i| state.waiting.remove(i)) {
                dropped = Some(gone.addr);
            }
        }
        state.waiting.push_back(Waiting {
            addr,
            socket,
            since: Instant::now(),
        });
        dropped
    }

    fn start_pending(
        self: &Arc<Self>,
        state: &mut State,
        addr: IpAddr,
        socket: &TcpStream,
    ) -> Result<Admitted, Refused> {
        let handle = socket.try_clone().map_err(|_| Refused::Socket)?;
        let mut evicted = None;
        if state.pending.len() >= self.limits.max_unauthenticated {
            let addrs: Vec<IpAddr> = state.pending.iter().map(|p| p.addr).collect();
            if let Some(i) = pick_victim(&addrs) {
                let victim = state.pending.remove(i);
                let _ = victim.socket.shutdown(Shutdown::Both);
                evicted = Some(victim.addr);
            }
        }
        state.next_id += 1;
        let id = state.next_id;
        state.pending.push(Pending {
            id,
            addr,
            socket: handle,
        });
        state.threads += 1;
        Ok(Admitted {
            ticket: Ticket {
                budget: self.clone(),
                id,
                class: None,
            },
            evicted,
        })
    }

    /// Called by the accept loop when woken and at each poll timeout: waiting sockets
    /// older than `patience` are closed, and those whose address has room now become
    /// pending (oldest first).
    pub fn due(self: &Arc<Self>, now: Instant, patience: Duration) -> Due {
        let mut drain = [0u8; 64];
        while matches!((&self.wake_rx).read(&mut drain), Ok(n) if n > 0) {}
        let mut state = self.lock();
        let mut due = Due::default();
        let before = state.waiting.len();
        state
            .waiting
            .retain(|w| now.saturating_duration_since(w.since) < patience);
        due.expired = before - state.waiting.len();
        let mut kept = VecDeque::with_capacity(state.waiting.len());
        while let Some(w) = state.waiting.pop_front() {
            let room = state.threads < self.max_threads()
                && state.pending_from(w.addr) < self.limits.max_per_client;
            if !room {
                kept.push_back(w);
                continue;
            }
            match self.start_pending(&mut state, w.addr, &w.socket) {
                Ok(admitted) => due.started.push((w.socket, admitted)),
                Err(_) => due.expired += 1,
            }
        }
        state.waiting = kept;
        due
    }

    /// True while sockets wait for their turn (they expire, so the accept loop must
    /// look at them on a timer).
    pub fn has_waiting(&self) -> bool {
        !self.lock().waiting.is_empty()
    }

    /// Pending and waiting connections, and the authorized ones by class, now.
    pub fn open(&self) -> (usize, usize, Open) {
        let state = self.lock();
        (state.pending.len(), state.waiting.len(), state.open.clone())
    }

    /// Ends a pending connection's claim; wakes the accept loop if sockets wait.
    fn leave_pending(&self, state: &mut State, id: u64) {
        state.pending.retain(|p| p.id != id);
        if !state.waiting.is_empty() {
            self.wake();
        }
    }
}

impl Ticket {
    /// True once [`Ticket::authorized`] succeeded.
    pub fn is_authorized(&self) -> bool {
        self.class.is_some()
    }

    /// Moves the connection to the authorized budget of `class` (once; later calls
    /// are free).
    pub fn authorized(&mut self, class: Class) -> Result<(), Full> {
        if self.class.is_some() {
            return Ok(());
        }
        let budget = self.budget.clone();
        let mut state = budget.lock();
        class_room(&state.open, &class, &budget.limits)?;
        budget.leave_pending(&mut state, self.id);
        state.open.all += 1;
        if let Class::User(user) = &class {
            state.open.users += 1;
            *state.open.per_user.entry(user.clone()).or_default() += 1;
        }
        self.class = Some(class);
        Ok(())
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let budget = self.budget.clone();
        let mut state = budget.lock();
        match self.class.take() {
            None => budget.leave_pending(&mut state, self.id),
            Some(class) => {
                let open = &mut state.open;
                open.all = open.all.saturating_sub(1);
                if let Class::User(user) = class {
                    open.users = open.users.saturating_sub(1);
                    if let Some(n) = open.per_user.get_mut(&user) {
                        *n = n.saturating_sub(1);
                        if *n == 0 {
                            open.per_user.remove(&user);
                        }
                    }
                }
            }
        }
        state.threads = state.threads.saturating_sub(1);
    }
}

#[cfg(test)]
mod tests;
