//! Which incoming messages a connection hands on, judged by the header alone, before
//! the body is decoded.
//!
//! A match rule's `sender=` only filters broadcasts: the bus delivers a signal
//! addressed to a connection's unique name whatever the rules say, and its default
//! policy lets any local user send one. So the bus's routing is not trusted: a
//! [`SignalMatch`] names the bus name whose owner alone may send the signal
//! (`org.freedesktop.login1`), and [`Subscriptions`] keeps each such name's current
//! owner (a unique name, from `GetNameOwner`, then the bus's `NameOwnerChanged`). A
//! signal is kept only when its sender is that owner and its path, interface, member
//! and signature are the ones subscribed. `NameOwnerChanged` itself is believed only
//! from the bus, whose messages carry the sender `org.freedesktop.DBus` (the bus
//! writes every sender field, and no peer may own that name). Method calls are kept
//! only on a connection that serves them; replies go to the call that waits.
//!
//! Pure data; the connection (`conn.rs`) asks [`Subscriptions::route`] for each message.

use std::collections::BTreeMap;

use super::message::{Message, MessageKind};
use super::value::Value;
use super::{BUS_INTERFACE, BUS_NAME, BUS_PATH};

/// A signal to receive: `interface.member` emitted on `path` with a body of
/// `signature`, sent by whoever owns the bus name `sender` at the time (a
/// well-known name such as `org.freedesktop.systemd1`; the bus itself is
/// `org.freedesktop.DBus`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SignalMatch {
    pub sender: String,
    pub path: String,
    pub interface: String,
    pub member: String,
    pub signature: String,
}

impl SignalMatch {
    pub fn new(
        sender: &str,
        path: &str,
        interface: &str,
        member: &str,
        signature: &str,
    ) -> SignalMatch {
        SignalMatch {
            sender: sender.to_owned(),
            path: path.to_owned(),
            interface: interface.to_owned(),
            member: member.to_owned(),
            signature: signature.to_owned(),
        }
    }

    /// The bus match rule, so that the bus routes the owner's broadcasts here.
    pub fn rule(&self) -> String {
        format!(
            "type='signal',sender='{}',path='{}',interface='{}',member='{}'",
            self.sender, self.path, self.interface, self.member
        )
    }

    fn names(&self, msg: &Message) -> bool {
        msg.path.as_deref() == Some(&self.path)
            && msg.interface.as_deref() == Some(&self.interface)
            && msg.member.as_deref() == Some(&self.member)
    }
}

/// The match rule for the bus's announcements of `name` changing owner.
pub fn owner_rule(name: &str) -> String {
    format!(
        "type='signal',sender='{BUS_NAME}',path='{BUS_PATH}',interface='{BUS_INTERFACE}',\
         member='NameOwnerChanged',arg0='{name}'"
    )
}

/// Why a message was dropped unread.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Dropped {
    /// No subscription names its path, interface and member.
    Unsubscribed,
    /// A subscription names it, but the sender does not own `name` now.
    NotOwner { name: String },
    /// A subscription names it, with another body signature.
    Signature { expected: String },
    /// A method call, on a connection that serves none.
    Call,
}

impl std::fmt::Display for Dropped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Dropped::Unsubscribed => write!(f, "not subscribed"),
            Dropped::NotOwner { name } => write!(f, "the sender does not own {name}"),
            Dropped::Signature { expected } => write!(f, "the body is not {expected:?}"),
            Dropped::Call => write!(f, "this connection serves no method calls"),
        }
    }
}

/// What to do with a message whose header has been read.
#[derive(Debug, PartialEq, Eq)]
pub enum Route {
    /// A method return or error: for the call waiting on its serial.
    Reply,
    /// Decode it and keep it for the reader.
    Keep,
    /// The bus says a followed name changed owner: decode it and apply it, and keep
    /// it too when subscribed.
    OwnerChange { keep: bool },
    /// Drop it, unread.
    Drop(Dropped),
}

/// The subscriptions of one connection and the owners of the names they trust.
#[derive(Debug, Default)]
pub struct Subscriptions {
    matches: Vec<SignalMatch>,
    /// Followed bus name → its owner's unique name (None while nobody owns it).
    owners: BTreeMap<String, Option<String>>,
    serves_calls: bool,
}

impl Subscriptions {
    /// Whether the owner of `name` is followed already.
    pub fn follows(&self, name: &str) -> bool {
        self.owners.contains_key(name)
    }

    /// Follows `name`, with `owner` as its owner now.
    pub fn set_owner(&mut self, name: &str, owner: Option<String>) {
        self.owners.insert(name.to_owned(), owner);
    }

    /// The owner of a followed name.
    pub fn owner(&self, name: &str) -> Option<&str> {
        self.owners.get(name).and_then(Option::as_deref)
    }

    pub fn add(&mut self, signal: SignalMatch) {
        if !self.matches.contains(&signal) {
            self.matches.push(signal);
        }
    }

    /// Keeps incoming method calls from now on.
    pub fn serve_calls(&mut self) {
        self.serves_calls = true;
    }

    /// Where a message goes, from its header and its body's signature.
    pub fn route(&self, msg: &Message, signature: &str) -> Route {
        match msg.kind {
            MessageKind::MethodReturn | MessageKind::Error => Route::Reply,
            MessageKind::MethodCall if self.serves_calls => Route::Keep,
            MessageKind::MethodCall => Route::Drop(Dropped::Call),
            MessageKind::Signal => {
                let wanted = self.wanted(msg, signature);
                if is_owner_change(msg, signature) {
                    return Route::OwnerChange {
                        keep: wanted.is_ok(),
                    };
                }
                match wanted {
                    Ok(()) => Route::Keep,
                    Err(why) => Route::Drop(why),
                }
            }
        }
    }

    fn wanted(&self, msg: &Message, signature: &str) -> Result<(), Dropped> {
        let mut why = Dropped::Unsubscribed;
        for m in self.matches.iter().filter(|m| m.names(msg)) {
            if m.signature != signature {
                why = Dropped::Signature {
                    expected: m.signature.clone(),
                };
            } else if msg.sender.is_some() && msg.sender.as_deref() == self.owner(&m.sender) {
                return Ok(());
            } else {
                why = Dropped::NotOwner {
                    name: m.sender.clone(),
                };
            }
        }
        Err(why)
    }

    /// Applies the bus's `NameOwnerChanged(name, old, new)` (decoded) to a followed
    /// name; other names are left alone.
    pub fn apply_owner_change(&mut self, body: &[Value]) {
        let [Value::Str(name), Value::Str(_), Value::Str(new)] = body else {
            return;
        };
        if let Some(owner) = self.owners.get_mut(name) {
            *owner = (!new.is_empty()).then(|| new.clone());
        }
    }
}

/// Whether a message is the bus's own `NameOwnerChanged`.
fn is_owner_change(msg: &Message, signature: &str) -> bool {
    msg.kind == MessageKind::Signal
        && msg.sender.as_deref() == Some(BUS_NAME)
        && msg.path.as_deref() == Some(BUS_PATH)
        && msg.interface.as_deref() == Some(BUS_INTERFACE)
        && msg.member.as_deref() == Some("NameOwnerChanged")
        && signature == "sss"
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOGIN1: &str = "org.freedesktop.login1";

    fn shutdown_signal() -> SignalMatch {
        SignalMatch::new(
            LOGIN1,
            "/org/freedesktop/login1",
            "org.freedesktop.login1.Manager",
            "PrepareForShutdown",
            "b",
        )
    }

    fn signal(sender: &str, path: &str, member: &str) -> Message {
        let mut m = Message::signal(path, "org.freedesktop.login1.Manager", member);
        m.sender = Some(sender.into());
        m
    }

    fn owner_changed(sender: &str, name: &str, old: &str, new: &str) -> (Message, Vec<Value>) {
        let mut m = Message::signal(BUS_PATH, BUS_INTERFACE, "NameOwnerChanged");
        m.sender = Some(sender.into());
        (m, vec![Value::str(name), Value::str(old), Value::str(new)])
    }

    fn subscribed() -> Subscriptions {
        let mut subs = Subscriptions::default();
        subs.set_owner(LOGIN1, Some(":1.5".into()));
        subs.add(shutdown_signal());
        subs
    }

    #[test]
    fn only_the_owner_on_the_subscribed_path_member_and_signature_is_kept() {
        let subs = subscribed();
        let login1 = "/org/freedesktop/login1";
        let cases = [
            (":1.5", login1, "PrepareForShutdown", "b", Route::Keep),
            (
                ":1.9",
                login1,
                "PrepareForShutdown",
                "b",
                Route::Drop(Dropped::NotOwner {
                    name: LOGIN1.into(),
                }),
            ),
            (
                ":1.5",
                "/elsewhere",
                "PrepareForShutdown",
                "b",
                Route::Drop(Dropped::Unsubscribed),
            ),
            (
                ":1.5",
                login1,
                "PrepareForSleep",
                "b",
                Route::Drop(Dropped::Unsubscribed),
            ),
            (
                ":1.5",
                login1,
                "PrepareForShutdown",
                "ay",
                Route::Drop(Dropped::Signature {
                    expected: "b".into(),
                }),
            ),
            (
                BUS_NAME,
                login1,
                "PrepareForShutdown",
                "b",
                Route::Drop(Dropped::NotOwner {
                    name: LOGIN1.into(),
                }),
            ),
        ];
        for (sender, path, member, sig, expected) in cases {
            assert_eq!(
                subs.route(&signal(sender, path, member), sig),
                expected,
                "{sender} {path} {member} {sig}"
            );
        }
        let mut anonymous = signal(":1.5", login1, "PrepareForShutdown");
        anonymous.sender = None;
        assert!(matches!(subs.route(&anonymous, "b"), Route::Drop(_)));
    }

    #[test]
    fn a_new_owner_is_followed_and_the_old_one_is_no_longer_believed() {
        let mut subs = subscribed();
        let (change, body) = owner_changed(BUS_NAME, LOGIN1, ":1.5", ":1.7");
        assert_eq!(
            subs.route(&change, "sss"),
            Route::OwnerChange { keep: false }
        );
        subs.apply_owner_change(&body);
        let login1 = "/org/freedesktop/login1";
        let shutdown = |sender| signal(sender, login1, "PrepareForShutdown");
        assert_eq!(subs.route(&shutdown(":1.7"), "b"), Route::Keep);
        assert!(matches!(subs.route(&shutdown(":1.5"), "b"), Route::Drop(_)));
        // The name left: nobody's signal counts until someone owns it again.
        subs.apply_owner_change(&owner_changed(BUS_NAME, LOGIN1, ":1.7", "").1);
        assert_eq!(subs.owner(LOGIN1), None);
        assert!(matches!(subs.route(&shutdown(":1.7"), "b"), Route::Drop(_)));
        // Another name's news changes nothing here.
        subs.apply_owner_change(&owner_changed(BUS_NAME, "org.example.X", "", ":1.8").1);
        assert!(!subs.follows("org.example.X"));
    }

    #[test]
    fn owner_news_is_believed_only_from_the_bus() {
        let subs = subscribed();
        let (forged, _) = owner_changed(":1.9", LOGIN1, ":1.5", ":1.9");
        assert_eq!(
            subs.route(&forged, "sss"),
            Route::Drop(Dropped::Unsubscribed)
        );
    }

    #[test]
    fn method_calls_are_kept_only_when_served_and_replies_go_to_the_caller() {
        let mut subs = subscribed();
        let call = Message::method_call(":1.2", "/", "org.example.I", "M");
        assert_eq!(subs.route(&call, ""), Route::Drop(Dropped::Call));
        subs.serve_calls();
        assert_eq!(subs.route(&call, ""), Route::Keep);
        assert_eq!(subs.route(&Message::method_return(&call), ""), Route::Reply);
    }

    #[test]
    fn the_rules_name_the_trusted_sender_and_follow_its_owner() {
        assert_eq!(
            shutdown_signal().rule(),
            "type='signal',sender='org.freedesktop.login1',path='/org/freedesktop/login1',\
             interface='org.freedesktop.login1.Manager',member='PrepareForShutdown'"
        );
        assert!(
            owner_rule(LOGIN1).ends_with("member='NameOwnerChanged',arg0='org.freedesktop.login1'")
        );
    }
}
