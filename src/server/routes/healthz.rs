//! `/healthz`: "ok" while the sync loop turns and the PLEG relists, else 500 with the
//! failing checks, in upstream's format (`[+]name ok` / `[-]name failed: reason
//! withheld` with `?verbose`, then `healthz check failed`). The decision is the pure
//! [`health_report`]; [`serve`] gathers its inputs. `/metrics/slis` ([`slis`]) serves
//! the same checks as upstream's SLI series: `kubernetes_healthcheck{name,type}` (1 or
//! 0 now) and `kubernetes_healthchecks_total{name,status,type}` (every check run, by
//! `/healthz` or a scrape).

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant, SystemTime};

use std::fmt::Write as _;

use crate::metrics;
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

/// Each check and whether it passes (pure).
pub fn checks(input: &HealthInput) -> [(&'static str, bool); 3] {
    // Not started yet (heartbeat 0): upstream reports healthy until the loop first turns.
    let syncloop_ok = input.heartbeat == 0
        || input.now.saturating_sub(input.heartbeat) <= input.threshold.as_secs();
    [
        ("ping", true),
        ("syncloop", syncloop_ok),
        ("pleg", input.pleg.is_ok()),
    ]
}

/// (healthy, body) for the input; `verbose` lists passing checks too.
pub fn health_report(input: &HealthInput, verbose: bool) -> (bool, String) {
    let checks = checks(input);
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

fn input(shared: &Shared) -> HealthInput {
    let now = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    HealthInput {
        now,
        heartbeat: shared.ctx.heartbeat.load(Ordering::Relaxed),
        threshold: shared.config.sync_loop_threshold,
        pleg: shared.ctx.pleg.check(Instant::now(), shared.ctx.started),
    }
}

/// Counts each check's outcome (`kubernetes_healthchecks_total`).
fn count(checks: &[(&'static str, bool)]) {
    for (name, ok) in checks {
        let status = if *ok { "success" } else { "error" };
        metrics::HEALTHCHECKS.inc(&[name, status, "healthz"]);
    }
}

#[inline(never)]
pub fn serve(shared: &Shared, req: &Request) -> Response {
    let input = input(shared);
    count(&checks(&input));
    let (healthy, body) = health_report(&input, req.param("verbose").is_some());
    if let Err(reason) = &input.pleg {
        log::warn!("healthz: {reason}");
    }
    Response::text(if healthy { 200 } else { 500 }, body)
}

/// `/metrics/slis`: the checks as upstream's SLI series.
#[inline(never)]
pub fn slis(shared: &Shared) -> Response {
    let checks = checks(&input(shared));
    count(&checks);
    let mut out = String::from(
        "# HELP kubernetes_healthcheck This metric records the result of a single healthcheck.\n\
         # TYPE kubernetes_healthcheck gauge\n",
    );
    for (name, ok) in checks {
        let _ = writeln!(
            out,
            "kubernetes_healthcheck{{name=\"{name}\",type=\"healthz\"}} {}",
            u8::from(ok)
        );
    }
    metrics::HEALTHCHECKS.render(&mut out);
    Response::new(200, "text/plain; version=0.0.4; charset=utf-8", out)
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
