//! `/healthz`: "ok" while the sync loop turns and the PLEG relists, else 500 with the
//! failing checks, in upstream's format (`[+]name ok` / `[-]name failed: reason
//! withheld` with `?verbose`, then `healthz check failed`). The decision is the pure
//! [`health_report`]; [`serve`] gathers its inputs.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant, SystemTime};

use crate::runtime::state::PlegUnhealthy;
use crate::server::http::{Request, Response};
use crate::server::Shared;

/// Everything the health decision looks at.
#[derive(Clone, Debug)]
pub struct HealthInput {
    /// Unix seconds now.
    pub now: u64,
    /// Unix seconds of the sync loop's last turn; 0 before its first.
    pub heartbeat: u64,
    pub threshold: Duration,
    /// The PLEG check's outcome.
    pub pleg: Result<(), PlegUnhealthy>,
}

/// (healthy, body) for the input; `verbose` lists passing checks too.
pub fn health_report(input: &HealthInput, verbose: bool) -> (bool, String) {
    // Not started yet (heartbeat 0): upstream reports healthy until the loop first turns.
    let syncloop_ok = input.heartbeat == 0
        || input.now.saturating_sub(input.heartbeat) <= input.threshold.as_secs();
    let checks: [(&str, bool); 3] = [
        ("ping", true),
        ("syncloop", syncloop_ok),
        ("pleg", input.pleg.is_ok()),
    ];
    let healthy = checks.iter().all(|(_, ok)| *ok);
    if healthy && !verbose {
        return (true, "ok".into());
    }
    let mut body = String::new();
    for (name, ok) in checks {
        if ok {
            body.push_str(&format!("[+]{name} ok\n"));
        } else {
            body.push_str(&format!("[-]{name} failed: reason withheld\n"));
        }
    }
    body.push_str(if healthy {
        "healthz check passed\n"
    } else {
        "healthz check failed\n"
    });
    (healthy, body)
}

#[inline(never)]
pub fn serve(shared: &Shared, req: &Request) -> Response {
    let now = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let input = HealthInput {
        now,
        heartbeat: shared.ctx.heartbeat.load(Ordering::Relaxed),
        threshold: shared.config.sync_loop_threshold,
        pleg: shared.ctx.pleg.check(Instant::now(), shared.ctx.started),
    };
    let (healthy, body) = health_report(&input, req.param("verbose").is_some());
    if let Err(reason) = &input.pleg {
        log::warn!("healthz: {reason}");
    }
    Response::text(if healthy { 200 } else { 500 }, body)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input(heartbeat: u64, pleg: Result<(), PlegUnhealthy>) -> HealthInput {
        HealthInput {
            now: 1000,
            heartbeat,
            threshold: Duration::from_secs(300),
            pleg,
        }
    }

    #[test]
    fn report_table() {
        assert_eq!(
            health_report(&input(990, Ok(())), false),
            (true, "ok".into())
        );
        assert!(health_report(&input(0, Ok(())), false).0);
        let (ok, body) = health_report(&input(600, Ok(())), false);
        assert!(!ok);
        assert!(body.contains("[-]syncloop failed"), "{body}");
        assert!(body.ends_with("healthz check failed\n"));
        let stale = PlegUnhealthy {
            since: Duration::from_secs(200),
            threshold: Duration::from_secs(180),
        };
        let (ok, body) = health_report(&input(990, Err(stale)), false);
        assert!(!ok);
        assert!(
            body.contains("[+]syncloop ok") && body.contains("[-]pleg failed"),
            "{body}"
        );
        assert!(!body.contains("last seen"), "reasons are withheld");
        let (ok, body) = health_report(&input(990, Ok(())), true);
        assert!(
            ok && body.contains("[+]ping ok") && body.contains("passed"),
            "{body}"
        );
    }
}
