//! The systemd driver's D-Bus backend (`DbusUnits`) against a stand-in systemd on a
//! private `dbus-daemon`: a second connection that owns `org.freedesktop.systemd1`,
//! answers the Manager methods as systemd does and announces each job's end with
//! `JobRemoved`. No systemd is needed; the real one is exercised in the VM scenario.
//! Only the current owner of `org.freedesktop.systemd1` ends a job: another user's
//! `JobRemoved(…, "failed")` addressed to litelet's connection changes nothing, and a
//! restarted systemd (a new connection owning the name) is followed.

use crate::support;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::support::dbus_daemon::DbusDaemon;
use litelet::cgroups::systemd::bus::DbusUnits;
use litelet::cgroups::systemd::{SystemdError, SystemdUnits};
use litelet::dbus::{Connection, Message, MessageKind, Value};

const MANAGER: &str = "org.freedesktop.systemd1.Manager";

/// Method calls received: (member, body), in order.
type CallLog = Arc<Mutex<Vec<(String, Vec<Value>)>>>;

/// A job of a `slow-*` unit waiting to end: (caller's unique name, job path, job id).
type Pending = Arc<Mutex<Option<(String, String, u32)>>>;

/// The stand-in and the calls it received.
struct FakeSystemd {
    calls: CallLog,
    stop: Arc<AtomicBool>,
    /// The job of a `slow-*` unit, until [`FakeSystemd::end_slow_job`].
    pending: Pending,
    end_slow: crossbeam_channel::Sender<()>,
    thread: Option<JoinHandle<()>>,
}

impl FakeSystemd {
    /// Serves on the bus at `address`. Units named `fail-*` end their job with
    /// "failed", `hang-*` never end it, `slow-*` end it ("done") when the test says;
    /// `existing` units are already loaded.
    fn start(address: &str, existing: &[&str]) -> FakeSystemd {
        let mut conn = Connection::open(address).expect("connect the stand-in");
        conn.serve_calls();
        let reply = conn
            .call(
                Message::method_call(
                    "org.freedesktop.DBus",
                    "/org/freedesktop/DBus",
                    "org.freedesktop.DBus",
                    "RequestName",
                )
                .arg(Value::str("org.freedesktop.systemd1"))
                .arg(Value::U32(4)),
                Duration::from_secs(5),
            )
            .expect("RequestName");
        assert_eq!(reply.body, vec![Value::U32(1)], "primary owner");
        let calls: CallLog = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let mut loaded: BTreeSet<String> = existing.iter().map(|s| s.to_string()).collect();
        let (log, quit) = (calls.clone(), stop.clone());
        let pending: Pending = Arc::default();
        let slow = pending.clone();
        let (end_slow, slow_ends) = crossbeam_channel::unbounded::<()>();
        let thread = std::thread::spawn(move || {
            let mut job = 0u32;
            while !quit.load(Ordering::Relaxed) {
                let Some(call) = conn
                    .next_message(Duration::from_millis(50))
                    .expect("stand-in receive")
                else {
                    continue;
                };
                if call.kind != MessageKind::MethodCall {
                    continue;
                }
                let member = call.member.clone().unwrap_or_default();
                log.lock()
                    .unwrap()
                    .push((member.clone(), call.body.clone()));
                let unit = call
                    .body
                    .first()
                    .and_then(|v| v.as_str().ok())
                    .unwrap_or("")
                    .to_owned();
                let mut end_job = |conn: &mut Connection, unit: &str| {
                    job += 1;
                    let path = format!("/org/freedesktop/systemd1/job/{job}");
                    // Another job's end comes first: the caller must wait for its own.
                    emit_job_removed(
                        conn,
                        job + 1000,
                        "/org/freedesktop/systemd1/job/x",
                        "other.slice",
                        "done",
                    );
                    conn.send(&Message::method_return(&call).arg(Value::ObjectPath(path.clone())))
                        .expect("reply");
                    let result = if unit.starts_with("fail-") {
                        "failed"
                    } else {
                        "done"
                    };
                    if unit.starts_with("slow-") {
                        let caller = call.sender.clone().unwrap_or_default();
                        *slow.lock().unwrap() = Some((caller, path.clone(), job));
                        // Ended by the test, or by the stand-in's drop.
                        let _ = slow_ends.recv();
                    }
                    if !unit.starts_with("hang-") {
                        emit_job_removed(conn, job, &path, unit, result);
                    }
                };
                match member.as_str() {
                    "Subscribe" => {
                        conn.send(&Message::method_return(&call)).expect("reply");
                    }
                    "StartTransientUnit" if loaded.contains(&unit) => {
                        conn.send(&Message::error(
                            &call,
                            "org.freedesktop.systemd1.UnitExists",
                            &format!("Unit {unit} already exists."),
                        ))
                        .expect("reply");
                    }
                    "StartTransientUnit" => {
                        loaded.insert(unit.clone());
                        end_job(&mut conn, &unit);
                    }
                    "SetUnitProperties" => {
                        conn.send(&Message::method_return(&call)).expect("reply");
                    }
                    "StopUnit" if !loaded.contains(&unit) => {
                        conn.send(&Message::error(
                            &call,
                            "org.freedesktop.systemd1.NoSuchUnit",
                            &format!("Unit {unit} not loaded."),
                        ))
                        .expect("reply");
                    }
                    "StopUnit" => {
                        loaded.remove(&unit);
                        end_job(&mut conn, &unit);
                    }
                    _ => {
                        conn.send(&Message::error(
                            &call,
                            "org.freedesktop.DBus.Error.UnknownMethod",
                            "unknown",
                        ))
                        .expect("reply");
                    }
                }
            }
        });
        FakeSystemd {
            calls,
            stop,
            pending,
            end_slow,
            thread: Some(thread),
        }
    }

    /// The job of a `slow-*` unit once it was started: (caller, job path, job id).
    fn slow_job(&self) -> Option<(String, String, u32)> {
        self.pending.lock().unwrap().clone()
    }

    /// Ends the `slow-*` unit's job ("done").
    fn end_slow_job(&self) {
        self.end_slow.send(()).expect("the stand-in's thread");
    }

    fn calls(&self) -> Vec<(String, Vec<Value>)> {
        self.calls.lock().unwrap().clone()
    }

    fn members(&self) -> Vec<String> {
        self.calls().into_iter().map(|(m, _)| m).collect()
    }
}

impl Drop for FakeSystemd {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // A slow job still waiting ends with the channel.
        drop(std::mem::replace(
            &mut self.end_slow,
            crossbeam_channel::unbounded().0,
        ));
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn emit_job_removed(conn: &mut Connection, id: u32, job: &str, unit: &str, result: &str) {
    conn.send(
        &Message::signal("/org/freedesktop/systemd1", MANAGER, "JobRemoved")
            .arg(Value::U32(id))
            .arg(Value::ObjectPath(job.into()))
            .arg(Value::str(unit))
            .arg(Value::str(result)),
    )
    .expect("emit JobRemoved");
}

fn setup(test: &str, existing: &[&str]) -> Option<(DbusDaemon, FakeSystemd, DbusUnits)> {
    let bus = DbusDaemon::start(test)?;
    let systemd = FakeSystemd::start(bus.address(), existing);
    let units = DbusUnits::open(Some(bus.address().to_owned()))
        .expect("connect")
        .with_job_timeout(Duration::from_millis(800));
    Some((bus, systemd, units))
}

fn props() -> Vec<(&'static str, Value)> {
    vec![
        ("Description", Value::str("pods")),
        ("Wants", Value::array("s", vec![Value::str("-.slice")])),
        ("DefaultDependencies", Value::Bool(false)),
        ("MemoryMax", Value::U64(64 << 20)),
    ]
}

#[test]
fn starting_a_slice_sends_its_properties_and_waits_for_its_own_job() {
    let Some((_bus, systemd, units)) = setup(
        "starting_a_slice_sends_its_properties_and_waits_for_its_own_job",
        &[],
    ) else {
        return;
    };
    units.start_slice("kubepods.slice", props()).expect("start");
    let calls = systemd.calls();
    assert_eq!(systemd.members(), ["Subscribe", "StartTransientUnit"]);
    assert_eq!(
        calls[1].1,
        vec![
            Value::str("kubepods.slice"),
            Value::str("replace"),
            Value::properties(props()),
            Value::array("(sa(sv))", vec![]),
        ]
    );
}

#[test]
fn a_failed_or_endless_job_is_an_error_naming_the_unit() {
    let Some((_bus, _systemd, units)) =
        setup("a_failed_or_endless_job_is_an_error_naming_the_unit", &[])
    else {
        return;
    };
    let err = units.start_slice("fail-x.slice", props()).unwrap_err();
    assert!(
        matches!(&err, SystemdError::JobFailed { unit, result } if unit == "fail-x.slice" && result == "failed"),
        "{err}"
    );
    let started = std::time::Instant::now();
    let err = units.start_slice("hang-x.slice", props()).unwrap_err();
    assert!(matches!(err, SystemdError::JobTimeout { .. }), "{err}");
    assert!(started.elapsed() < Duration::from_secs(5));
    // The connection still works afterwards.
    units
        .start_slice("ok.slice", props())
        .expect("start after errors");
}

#[test]
fn an_existing_unit_gets_its_resource_properties_set_instead() {
    let Some((_bus, systemd, units)) = setup(
        "an_existing_unit_gets_its_resource_properties_set_instead",
        &["kubepods.slice"],
    ) else {
        return;
    };
    units.start_slice("kubepods.slice", props()).expect("start");
    let calls = systemd.calls();
    assert_eq!(
        systemd.members(),
        ["Subscribe", "StartTransientUnit", "SetUnitProperties"]
    );
    assert_eq!(
        calls[2].1,
        vec![
            Value::str("kubepods.slice"),
            Value::Bool(true),
            Value::properties(vec![("MemoryMax", Value::U64(64 << 20))]),
        ]
    );
}

#[test]
fn stopping_waits_for_the_job_and_an_unknown_unit_is_already_stopped() {
    let Some((_bus, systemd, units)) = setup(
        "stopping_waits_for_the_job_and_an_unknown_unit_is_already_stopped",
        &["kubepods-podx.slice"],
    ) else {
        return;
    };
    units.stop_unit("kubepods-podx.slice").expect("stop");
    units.stop_unit("kubepods-podx.slice").expect("stop again");
    units
        .set_properties("kubepods.slice", vec![("CPUWeight", Value::U64(10))])
        .expect("set");
    assert_eq!(
        systemd.members(),
        ["Subscribe", "StopUnit", "StopUnit", "SetUnitProperties"]
    );
}

#[test]
fn a_job_removed_another_user_forges_does_not_end_the_job() {
    let Some(bus) = DbusDaemon::start("a_job_removed_another_user_forges_does_not_end_the_job")
    else {
        return;
    };
    let systemd = FakeSystemd::start(bus.address(), &[]);
    let units = DbusUnits::open(Some(bus.address().to_owned())).expect("connect");
    std::thread::scope(|scope| {
        let starting = scope.spawn(|| units.start_slice("slow-x.slice", props()));
        let mut job = None;
        assert!(
            support::wait_until(Duration::from_secs(10), || {
                job = systemd.slow_job();
                job.is_some()
            }),
            "the slice's job never started"
        );
        let (litelet, path, id) = job.expect("the job");
        // A local user sends the job's end, failed, to litelet's connection.
        bus.forge_signal(
            &litelet,
            "/org/freedesktop/systemd1",
            "org.freedesktop.systemd1.Manager.JobRemoved",
            &[
                &format!("uint32:{id}"),
                &format!("objpath:{path}"),
                "string:slow-x.slice",
                "string:failed",
            ],
        );
        systemd.end_slow_job();
        let started = starting.join().expect("start_slice thread");
        assert!(started.is_ok(), "{started:?}");
    });
}

#[test]
fn a_restarted_systemd_is_followed() {
    let Some((bus, systemd, units)) = setup("a_restarted_systemd_is_followed", &[]) else {
        return;
    };
    units.start_slice("a.slice", props()).expect("start");
    drop(systemd);
    let mut observer = Connection::open(bus.address()).expect("connect observer");
    assert!(
        support::wait_until(Duration::from_secs(5), || observer
            .get_name_owner("org.freedesktop.systemd1")
            .is_err()),
        "the stand-in never left"
    );
    let restarted = FakeSystemd::start(bus.address(), &[]);
    units
        .start_slice("b.slice", props())
        .expect("start with the restarted systemd");
    assert_eq!(restarted.members(), ["StartTransientUnit"]);
}
