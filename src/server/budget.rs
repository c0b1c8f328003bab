//! Connection budgets of the node API port, so that clients who never authenticate
//! cannot take the connections `kubectl logs`/`exec` and metrics scrapes need.
//!
//! Two budgets: a small one for connections that have not authenticated yet (TLS
//! handshake, first request head, authentication), with at most `max_per_client` from
//! one address, and the main one for authenticated connections. A connection starts
//! in the first and moves to the second when its first request authenticates
//! ([`Ticket::authenticated`]); a full main budget refuses it then (503). When the
//! unauthenticated budget is full a newcomer is not refused: the oldest connection of
//! the address holding the most unauthenticated connections is shut down instead
//! ([`pick_victim`], pure), so a flood from a few addresses evicts itself while a
//! client with one connection in progress (the API server) keeps its place. Each
//! unauthenticated connection also has a short deadline (`Limits::unauthenticated_timeout`).
//!
//! Called by the `srv-api` accept thread ([`Budget::admit`]) and the `srv-conn`
//! threads (their [`Ticket`], released on drop). One mutex, held for bookkeeping
//! only; the eviction is a `shutdown(2)` of the victim's socket, which wakes its
//! thread from any read.

use std::collections::HashMap;
use std::net::{IpAddr, Shutdown, TcpStream};
use std::sync::{Arc, Mutex, MutexGuard};

/// The sizes of the budgets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BudgetLimits {
    /// Authenticated connections open at once.
    pub max_authenticated: usize,
    /// Connections still in the TLS handshake, the first request or authentication.
    pub max_unauthenticated: usize,
    /// Unauthenticated connections from one client address.
    pub max_per_client: usize,
}

/// Why a new connection is closed at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    #[error("{0} unauthenticated connections from this address already")]
    PerClient(usize),
    #[error("{0} connection threads already")]
    Threads(usize),
    #[error("cannot keep a handle on the socket")]
    Socket,
}

/// Why a connection cannot move to the authenticated budget.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0} authenticated connections open already")]
pub struct Full(pub usize);

struct Pending {
    id: u64,
    addr: IpAddr,
    /// A second handle on the socket, to shut it down on eviction.
    socket: TcpStream,
}

#[derive(Default)]
struct State {
    next_id: u64,
    /// Unauthenticated connections, oldest first.
    pending: Vec<Pending>,
    authenticated: usize,
    /// Connection threads alive: the above plus evicted ones still ending.
    threads: usize,
}

/// The budgets of one listener.
pub struct Budget {
    limits: BudgetLimits,
    state: Mutex<State>,
}

/// A connection's place in a budget; dropping it (the thread ending) frees it.
pub struct Ticket {
    budget: Arc<Budget>,
    id: u64,
    authenticated: bool,
}

/// What [`Budget::admit`] did.
#[derive(Debug)]
pub struct Admitted {
    pub ticket: Ticket,
    /// The address whose connection was shut down to make room, if any.
    pub evicted: Option<IpAddr>,
}

impl std::fmt::Debug for Ticket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ticket")
            .field("id", &self.id)
            .field("authenticated", &self.authenticated)
            .finish()
    }
}

/// Which pending connection to evict for a newcomer: the oldest of the address with
/// the most pending connections (the oldest overall on a tie). `pending` is oldest
/// first; None when it is empty.
pub fn pick_victim(pending: &[IpAddr]) -> Option<usize> {
    let mut counts: HashMap<IpAddr, usize> = HashMap::new();
    for addr in pending {
        *counts.entry(*addr).or_default() += 1;
    }
    let most = counts.values().copied().max()?;
    pending.iter().position(|addr| counts[addr] == most)
}

impl Budget {
    pub fn new(limits: BudgetLimits) -> Arc<Budget> {
        Arc::new(Budget {
            limits,
            state: Mutex::new(State::default()),
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // The state is a few counters, consistent after every statement: a panic
        // elsewhere while holding the lock leaves nothing half-done.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Most connection threads at once: both budgets, plus room for evicted
    /// connections that are still ending.
    fn max_threads(&self) -> usize {
        self.limits.max_authenticated + 2 * self.limits.max_unauthenticated.max(1)
    }

    /// Admits a new connection from `addr` as unauthenticated, evicting another one
    /// when that budget is full.
    pub fn admit(self: &Arc<Self>, addr: IpAddr, socket: &TcpStream) -> Result<Admitted, Refused> {
        let mut state = self.lock();
        if state.threads >= self.max_threads() {
            return Err(Refused::Threads(state.threads));
        }
        let mine = state.pending.iter().filter(|p| p.addr == addr).count();
        if mine >= self.limits.max_per_client || self.limits.max_unauthenticated == 0 {
            return Err(Refused::PerClient(mine));
        }
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
                authenticated: false,
            },
            evicted,
        })
    }

    /// Unauthenticated and authenticated connections open now.
    pub fn open(&self) -> (usize, usize) {
        let state = self.lock();
        (state.pending.len(), state.authenticated)
    }
}

impl Ticket {
    /// True once [`Ticket::authenticated`] succeeded.
    pub fn is_authenticated(&self) -> bool {
        self.authenticated
    }

    /// Moves the connection to the authenticated budget (once; later calls are free).
    pub fn authenticated(&mut self) -> Result<(), Full> {
        if self.authenticated {
            return Ok(());
        }
        let max = self.budget.limits.max_authenticated;
        let mut state = self.budget.lock();
        if state.authenticated >= max {
            return Err(Full(max));
        }
        state.pending.retain(|p| p.id != self.id);
        state.authenticated += 1;
        self.authenticated = true;
        Ok(())
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut state = self.budget.lock();
        if self.authenticated {
            state.authenticated = state.authenticated.saturating_sub(1);
        } else {
            state.pending.retain(|p| p.id != self.id);
        }
        state.threads = state.threads.saturating_sub(1);
    }
}

#[cfg(test)]
mod tests {
    use std::net::TcpListener;

    use super::*;

    fn ip(last: u8) -> IpAddr {
        IpAddr::from([127, 0, 0, last])
    }

    #[test]
    fn the_victim_is_the_oldest_of_the_busiest_address() {
        let cases: &[(&str, &[u8], Option<usize>)] = &[
            ("empty", &[], None),
            ("one each: the oldest", &[3, 1, 2], Some(0)),
            ("the flood, not the lone client", &[1, 2, 2, 3, 2], Some(1)),
            ("a tie: the oldest of either", &[4, 5, 5, 4], Some(0)),
        ];
        for (name, pending, want) in cases {
            let pending: Vec<IpAddr> = pending.iter().map(|b| ip(*b)).collect();
            assert_eq!(pick_victim(&pending), *want, "{name}");
        }
    }

    #[test]
    fn budgets_admit_evict_promote_and_release() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let socket = || TcpStream::connect(addr).unwrap();
        let budget = Budget::new(BudgetLimits {
            max_authenticated: 1,
            max_unauthenticated: 3,
            max_per_client: 2,
        });
        let flood: Vec<TcpStream> = (0..3).map(|_| socket()).collect();
        let a = budget.admit(ip(9), &flood[0]).unwrap();
        let b = budget.admit(ip(9), &flood[1]).unwrap();
        assert_eq!(
            budget.admit(ip(9), &flood[2]).unwrap_err(),
            Refused::PerClient(2)
        );
        let mut c = budget.admit(ip(1), &socket()).unwrap();
        assert_eq!(c.evicted, None);
        let d = budget.admit(ip(2), &socket()).unwrap();
        assert_eq!(d.evicted, Some(ip(9)), "the flood's oldest goes");
        assert_eq!(budget.open(), (3, 0));
        c.ticket.authenticated().unwrap();
        assert_eq!(budget.open(), (2, 1));
        let mut d = d.ticket;
        assert_eq!(d.authenticated().unwrap_err(), Full(1));
        drop((a, b, d));
        assert_eq!(budget.open(), (0, 1));
        drop(c);
        assert_eq!(budget.open(), (0, 0));
        assert_eq!(budget.lock().threads, 0);
    }
}
