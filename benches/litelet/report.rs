//! Results: one row per measured number, with its target when the issue sets one;
//! printed as a table and written as JSON.

use std::time::Duration;

use serde_json::{json, Value};

/// A target a row must stay under.
#[derive(Clone, Copy, Debug)]
pub struct Target(pub f64);

#[derive(Clone, Debug)]
pub struct Row {
    pub scenario: String,
    pub metric: String,
    pub value: f64,
    pub unit: &'static str,
    pub target: Option<Target>,
}

impl Row {
    pub fn new(scenario: &str, metric: &str, value: f64, unit: &'static str) -> Row {
        Row {
            scenario: scenario.to_owned(),
            metric: metric.to_owned(),
            value,
            unit,
            target: None,
        }
    }

    /// Milliseconds from a duration.
    pub fn ms(scenario: &str, metric: &str, d: Duration) -> Row {
        Row::new(scenario, metric, d.as_secs_f64() * 1000.0, "ms")
    }

    pub fn under(mut self, target: f64) -> Row {
        self.target = Some(Target(target));
        self
    }

    /// "pass", "MISS", or "" without a target.
    pub fn verdict(&self) -> &'static str {
        match self.target {
            Some(Target(t)) if self.value < t => "pass",
            Some(_) => "MISS",
            None => "",
        }
    }

    fn to_json(&self) -> Value {
        json!({
            "scenario": self.scenario,
            "metric": self.metric,
            "value": (self.value * 1000.0).round() / 1000.0,
            "unit": self.unit,
            "target_under": self.target.map(|t| t.0),
            "verdict": self.verdict(),
        })
    }
}

/// Percentile `p` (0..=100) of `values`, nearest rank; None when empty.
pub fn percentile(values: &[Duration], p: f64) -> Option<Duration> {
    if values.is_empty() {
        return None;
    }
    let mut sorted = values.to_vec();
    sorted.sort();
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

/// p50, p99 and max rows for a set of latencies (nothing when the set is empty).
pub fn latency_rows(
    scenario: &str,
    what: &str,
    values: &[Duration],
    p99_target_ms: Option<f64>,
) -> Vec<Row> {
    let (Some(p50), Some(p99), Some(max)) = (
        percentile(values, 50.0),
        percentile(values, 99.0),
        values.iter().max().copied(),
    ) else {
        return vec![Row::new(scenario, &format!("{what}: no samples"), 0.0, "")];
    };
    let n = values.len();
    let mut p99_row = Row::ms(scenario, &format!("{what} p99 (n={n})"), p99);
    if let Some(t) = p99_target_ms {
        p99_row = p99_row.under(t);
    }
    vec![
        Row::ms(scenario, &format!("{what} p50 (n={n})"), p50),
        p99_row,
        Row::ms(scenario, &format!("{what} max"), max),
    ]
}

pub fn print_table(rows: &[Row]) {
    let width = rows
        .iter()
        .map(|r| r.scenario.len() + r.metric.len() + 3)
        .max()
        .unwrap_or(20);
    println!();
    let header = "scenario / metric";
    println!(
        "{header:<width$} {:>12} {:<5} {:>10} verdict",
        "value", "unit", "target <"
    );
    println!("{}", "-".repeat(width + 40));
    for r in rows {
        let name = format!("{} / {}", r.scenario, r.metric);
        let target = r.target.map(|t| format!("{}", t.0)).unwrap_or_default();
        println!(
            "{name:<width$} {:>12.2} {:<5} {target:>10} {}",
            r.value,
            r.unit,
            r.verdict()
        );
    }
    println!();
}

pub fn to_json(rows: &[Row], machine: Value, seconds: f64) -> Value {
    json!({
        "machine": machine,
        "wall_seconds": seconds.round(),
        "rows": rows.iter().map(Row::to_json).collect::<Vec<_>>(),
    })
}
