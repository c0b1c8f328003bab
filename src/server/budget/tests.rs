//! Budget decisions as tables, and the bookkeeping over real loopback sockets.

use std::net::TcpListener;

use super::*;

fn ip(last: u8) -> IpAddr {
    IpAddr::from([127, 0, 0, last])
}

fn limits() -> BudgetLimits {
    BudgetLimits {
        max_authorized: 4,
        max_users: 2,
        max_per_user: 1,
        max_unauthenticated: 3,
        max_per_client: 2,
        max_waiting: 2,
    }
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
fn class_budgets_cap_token_users_but_not_certificates() {
    let open = |all: usize, users: &[(&str, usize)]| Open {
        all,
        users: users.iter().map(|(_, n)| n).sum(),
        per_user: users.iter().map(|(u, n)| ((*u).to_owned(), *n)).collect(),
    };
    let user = |u: &str| Class::User(u.into());
    let cases: Vec<(&str, Open, Class, Result<(), Full>)> = vec![
        (
            "empty: a certificate",
            open(0, &[]),
            Class::Certificate,
            Ok(()),
        ),
        ("empty: a user", open(0, &[]), user("prom"), Ok(())),
        (
            "certificates may use every place users leave",
            open(3, &[("prom", 1)]),
            Class::Certificate,
            Ok(()),
        ),
        (
            "all taken",
            open(4, &[]),
            Class::Certificate,
            Err(Full::All(4)),
        ),
        (
            "all taken, a user",
            open(4, &[]),
            user("a"),
            Err(Full::All(4)),
        ),
        (
            "one user at its share",
            open(1, &[("prom", 1)]),
            user("prom"),
            Err(Full::User {
                user: "prom".into(),
                max: 1,
            }),
        ),
        (
            "another user still fits",
            open(1, &[("prom", 1)]),
            user("ms"),
            Ok(()),
        ),
        (
            "users at their class share",
            open(2, &[("a", 1), ("b", 1)]),
            user("c"),
            Err(Full::Users(2)),
        ),
        (
            "a certificate when users are at their share",
            open(2, &[("a", 1), ("b", 1)]),
            Class::Certificate,
            Ok(()),
        ),
    ];
    for (name, open, class, want) in cases {
        assert_eq!(class_room(&open, &class, &limits()), want, "{name}");
    }
}

struct Sockets {
    listener: TcpListener,
}

impl Sockets {
    fn new() -> Sockets {
        Sockets {
            listener: TcpListener::bind("127.0.0.1:0").unwrap(),
        }
    }

    fn one(&self) -> TcpStream {
        TcpStream::connect(self.listener.local_addr().unwrap()).unwrap()
    }
}

fn started(admission: Admission) -> Admitted {
    match admission {
        Admission::Started(_, admitted) => admitted,
        Admission::Waiting { .. } => panic!("expected a start, the socket waits"),
    }
}

#[test]
fn an_address_beyond_its_share_waits_and_starts_when_a_place_frees() {
    let sockets = Sockets::new();
    let budget = Budget::new(limits()).unwrap();
    let a = started(budget.admit(ip(9), sockets.one()).unwrap());
    let b = started(budget.admit(ip(9), sockets.one()).unwrap());
    assert!(matches!(
        budget.admit(ip(9), sockets.one()).unwrap(),
        Admission::Waiting { dropped: None }
    ));
    // Another address is not held up by the first one's queue.
    let other = started(budget.admit(ip(1), sockets.one()).unwrap());
    assert_eq!(budget.open().0, 3);
    assert_eq!(budget.open().1, 1);
    let now = Instant::now();
    let patience = Duration::from_secs(5);
    assert!(budget.due(now, patience).started.is_empty(), "no place yet");
    // One of the address's pending connections authorizes: the waiting one starts.
    let mut a = a.ticket;
    a.authorized(Class::Certificate).unwrap();
    let due = budget.due(now, patience);
    assert_eq!(due.started.len(), 1);
    assert_eq!(budget.open().1, 0);
    drop((a, b, other, due));
    let (pending, waiting, open) = budget.open();
    assert_eq!((pending, waiting, open), (0, 0, Open::default()));
    assert_eq!(budget.lock().threads, 0);
}

#[test]
fn waiting_sockets_expire_and_a_full_waiting_room_drops_the_busiest_address() {
    let sockets = Sockets::new();
    let budget = Budget::new(BudgetLimits {
        max_per_client: 1,
        ..limits()
    })
    .unwrap();
    let _first = started(budget.admit(ip(9), sockets.one()).unwrap());
    let _second = started(budget.admit(ip(8), sockets.one()).unwrap());
    for _ in 0..2 {
        budget.admit(ip(9), sockets.one()).unwrap();
    }
    match budget.admit(ip(8), sockets.one()).unwrap() {
        Admission::Waiting { dropped } => assert_eq!(dropped, Some(ip(9))),
        Admission::Started(..) => panic!("its address has its share"),
    }
    assert_eq!(budget.open().1, 2);
    let later = Instant::now() + Duration::from_secs(6);
    let due = budget.due(later, Duration::from_secs(5));
    assert_eq!((due.expired, due.started.len()), (2, 0));
}

#[test]
fn a_full_pending_budget_evicts_the_busiest_address_and_classes_release() {
    let sockets = Sockets::new();
    let budget = Budget::new(limits()).unwrap();
    let _f1 = started(budget.admit(ip(9), sockets.one()).unwrap());
    let _f2 = started(budget.admit(ip(9), sockets.one()).unwrap());
    let lone = started(budget.admit(ip(1), sockets.one()).unwrap());
    let newcomer = budget.admit(ip(2), sockets.one()).unwrap();
    let newcomer = started(newcomer);
    assert_eq!(newcomer.evicted, Some(ip(9)), "the flood's oldest goes");
    let mut lone = lone.ticket;
    lone.authorized(Class::User("prom".into())).unwrap();
    let mut again = newcomer.ticket;
    assert_eq!(
        again.authorized(Class::User("prom".into())),
        Err(Full::User {
            user: "prom".into(),
            max: 1
        })
    );
    again.authorized(Class::Certificate).unwrap();
    let (_, _, open) = budget.open();
    assert_eq!((open.all, open.users), (2, 1));
    drop(lone);
    let (_, _, open) = budget.open();
    assert_eq!((open.all, open.users), (1, 0));
    assert!(open.per_user.is_empty());
}
