//! The measured rows, the comparison with the raw baseline and the tables (BENCHMARKS.md).
//!
//! The rule that keeps a noisy machine from producing a ratio: in each layout the raw consumer
//! runs before the first sink and again after every sink, so each sink run is bracketed by two
//! raw repetitions. A sink's ratios use the mean of its two; a ratio is refused (printed as
//! `refused`) when its two raw figures differ by more than the tolerance, relative to the
//! smaller: the machine changed under the measurement.

use serde_json::{Value, json};

/// One measured run: the raw consumer or the sink in one mode.
#[derive(Debug, Clone, Default)]
pub struct Row {
    pub name: String,
    pub records: u64,
    pub bytes: u64,
    pub seconds: f64,
    /// From the first consumed record until every record's append was acknowledged: the drain
    /// without the wait for the checkpoint that makes the last rows visible.
    pub appended_seconds: Option<f64>,
    pub cpu_s: f64,
    pub peak_rss: u64,
    pub checkpoints: Option<f64>,
    pub checkpoint_p50: Option<f64>,
    pub checkpoint_p99: Option<f64>,
    pub latency: Option<Latency>,
    pub emulator_cpu_s: Option<f64>,
    pub exact: Option<bool>,
    pub not_measured: Option<String>,
    /// Pinned layout: the share of the measured core's time, over the run, spent on anything
    /// but the measured process (other users' work, interrupts, steal), in percent.
    pub core_others_pct: Option<f64>,
    /// User/system split, per-thread CPU and switches, CPU at the first consumed record and
    /// at the last acknowledged append, `perf stat` counts (`threads.rs`; JSON only).
    pub cpu_detail: Option<Value>,
}

#[derive(Debug, Clone)]
pub struct Latency {
    pub rate: u64,
    pub records: u64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    pub checkpoint_p50: Option<f64>,
    pub checkpoint_p99: Option<f64>,
}

impl Row {
    pub fn records_per_s(&self) -> f64 {
        self.records as f64 / self.seconds.max(1e-9)
    }
    pub fn mb_per_s(&self) -> f64 {
        self.bytes as f64 / 1e6 / self.seconds.max(1e-9)
    }
    pub fn appended_records_per_s(&self) -> Option<f64> {
        self.appended_seconds
            .map(|s| self.records as f64 / s.max(1e-9))
    }
    pub fn appended_mb_per_s(&self) -> Option<f64> {
        self.appended_seconds
            .map(|s| self.bytes as f64 / 1e6 / s.max(1e-9))
    }
    pub fn cpu_per_gb(&self) -> f64 {
        self.cpu_s / (self.bytes as f64 / 1e9).max(1e-12)
    }
}

/// The raw baseline of one sink run: the two repetitions around it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Baseline {
    pub records_per_s: f64,
    pub cpu_per_gb: f64,
    /// |a − b| / min(a, b) of the two repetitions' records/s and CPU-s/GB.
    pub rate_moved: f64,
    pub cpu_moved: f64,
}

fn moved(a: f64, b: f64) -> f64 {
    (a - b).abs() / a.min(b).max(1e-12)
}

impl Baseline {
    pub fn around(before: &Row, after: &Row) -> Option<Baseline> {
        if before.not_measured.is_some() || after.not_measured.is_some() {
            return None;
        }
        let (r1, r2) = (before.records_per_s(), after.records_per_s());
        let (c1, c2) = (before.cpu_per_gb(), after.cpu_per_gb());
        Some(Baseline {
            records_per_s: (r1 + r2) / 2.0,
            cpu_per_gb: (c1 + c2) / 2.0,
            rate_moved: moved(r1, r2),
            cpu_moved: moved(c1, c2),
        })
    }
}

/// The ratios of a sink run to its baseline; `None` where the rule refuses one.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Ratios {
    /// Visible records/s ÷ raw records/s.
    pub visible: Option<f64>,
    /// Appended records/s ÷ raw records/s (the drain without the last checkpoint's wait).
    pub appended: Option<f64>,
    /// Sink CPU-s/GB ÷ raw CPU-s/GB.
    pub cpu: Option<f64>,
}

pub fn ratios(sink: &Row, base: Option<&Baseline>, tolerance: f64) -> Ratios {
    let Some(base) = base else {
        return Ratios::default();
    };
    if sink.not_measured.is_some() {
        return Ratios::default();
    }
    let rate_ok = base.rate_moved <= tolerance;
    let cpu_ok = base.cpu_moved <= tolerance;
    Ratios {
        visible: rate_ok.then(|| sink.records_per_s() / base.records_per_s),
        appended: sink
            .appended_records_per_s()
            .filter(|_| rate_ok)
            .map(|r| r / base.records_per_s),
        cpu: cpu_ok.then(|| sink.cpu_per_gb() / base.cpu_per_gb),
    }
}

/// The runs of one layout in order: raw, sink, raw, sink, …, raw.
#[derive(Debug, Clone)]
pub struct LayoutRuns {
    pub layout: String,
    pub raws: Vec<Row>,
    pub sinks: Vec<Row>,
    pub load_before: String,
    pub load_after: String,
}

impl LayoutRuns {
    pub fn baseline(&self, sink: usize) -> Option<Baseline> {
        Baseline::around(self.raws.get(sink)?, self.raws.get(sink + 1)?)
    }
}

fn ratio_cell(r: Option<f64>, measured: bool) -> String {
    match (r, measured) {
        (Some(r), _) => format!("{r:.2}"),
        (None, true) => "refused".into(),
        (None, false) => "-".into(),
    }
}

pub const HEADER: &str = "| run | records | MB | MB/s | appended MB/s | × raw | appended × raw | CPU-s/GB | CPU × raw | raw moved rate / CPU | peak RSS MiB | checkpoints | checkpoint p50/p99 ms | visible p50/p99 ms | core to others |";

/// The table of one layout (Markdown).
pub fn render(runs: &LayoutRuns, tolerance: f64) -> String {
    let ms = |s: Option<f64>| s.map_or("-".to_string(), |s| format!("{:.0}", s * 1000.0));
    let pct = |p: Option<f64>| p.map_or("-".to_string(), |p| format!("{p:.0} %"));
    let mut out = String::new();
    out.push_str(HEADER);
    out.push('\n');
    out.push_str("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    let mut push = |r: &Row, base: Option<Baseline>, is_sink: bool| {
        if let Some(why) = &r.not_measured {
            let short: String = why.chars().take(120).collect();
            out.push_str(&format!(
                "| {} | not measured: {} | | | | | | | | | | | | | |\n",
                r.name,
                short.replace('|', "/")
            ));
            return;
        }
        let q = ratios(r, base.as_ref(), tolerance);
        let has_base = is_sink && base.is_some();
        let moved = base.filter(|_| is_sink).map_or("-".into(), |b| {
            format!(
                "{:.0} % / {:.0} %",
                b.rate_moved * 100.0,
                b.cpu_moved * 100.0
            )
        });
        let latency = r
            .latency
            .as_ref()
            .map_or("-".into(), |l| format!("{:.0} / {:.0}", l.p50_ms, l.p99_ms));
        out.push_str(&format!(
            "| {} | {} | {:.0} | {:.1} | {} | {} | {} | {:.2} | {} | {} | {:.0} | {} | {} / {} | {} | {} |\n",
            r.name,
            r.records,
            r.bytes as f64 / 1e6,
            r.mb_per_s(),
            r.appended_mb_per_s()
                .map_or("-".into(), |v| format!("{v:.1}")),
            ratio_cell(q.visible, has_base),
            ratio_cell(q.appended, has_base && r.appended_seconds.is_some()),
            r.cpu_per_gb(),
            ratio_cell(q.cpu, has_base),
            moved,
            r.peak_rss as f64 / (1024.0 * 1024.0),
            r.checkpoints.map_or("-".into(), |c| format!("{c:.0}")),
            ms(r.checkpoint_p50),
            ms(r.checkpoint_p99),
            latency,
            pct(r.core_others_pct),
        ));
    };
    for (i, raw) in runs.raws.iter().enumerate() {
        push(raw, None, false);
        if let Some(sink) = runs.sinks.get(i) {
            push(sink, runs.baseline(i), true);
        }
    }
    out
}

/// The whole report: each layout's load, table and rule.
pub fn render_all(all: &[LayoutRuns], tolerance: f64) -> String {
    let mut out = String::new();
    for runs in all {
        out.push_str(&format!(
            "### {} (load before: {}; after: {})\n\n",
            runs.layout, runs.load_before, runs.load_after
        ));
        out.push_str(&render(runs, tolerance));
        out.push('\n');
    }
    out.push_str(&format!(
        "Each sink run is compared with the mean of the raw runs just before and after it; a ratio is refused when those two differ by more than {:.0} % (records/s for the throughput ratios, CPU-s/GB for the CPU ratio).\n",
        tolerance * 100.0
    ));
    out
}

fn row_json(r: &Row, base: Option<&Baseline>, tolerance: f64) -> Value {
    if let Some(why) = &r.not_measured {
        return json!({ "name": r.name, "not_measured": why });
    }
    let q = ratios(r, base, tolerance);
    json!({
        "name": r.name,
        "records": r.records,
        "bytes": r.bytes,
        "seconds": r.seconds,
        "records_per_s": r.records_per_s(),
        "mb_per_s": r.mb_per_s(),
        "appended_seconds": r.appended_seconds,
        "appended_mb_per_s": r.appended_mb_per_s(),
        "ratio_to_raw": q.visible,
        "appended_ratio_to_raw": q.appended,
        "cpu_ratio_to_raw": q.cpu,
        "raw_baseline": base.map(|b| json!({
            "records_per_s": b.records_per_s,
            "cpu_seconds_per_gb": b.cpu_per_gb,
            "rate_moved": b.rate_moved,
            "cpu_moved": b.cpu_moved,
        })),
        "cpu_seconds": r.cpu_s,
        "cpu_seconds_per_gb": r.cpu_per_gb(),
        "peak_rss_bytes": r.peak_rss,
        "checkpoints_committed": r.checkpoints,
        "checkpoint_p50_s": r.checkpoint_p50,
        "checkpoint_p99_s": r.checkpoint_p99,
        "emulator_cpu_seconds": r.emulator_cpu_s,
        "visible_rows_exact": r.exact,
        "core_to_others_pct": r.core_others_pct,
        "cpu_detail": r.cpu_detail,
        "latency": r.latency.as_ref().map(|l| json!({
            "rate_per_s": l.rate,
            "records": l.records,
            "p50_ms": l.p50_ms,
            "p99_ms": l.p99_ms,
            "max_ms": l.max_ms,
            "checkpoint_p50_s": l.checkpoint_p50,
            "checkpoint_p99_s": l.checkpoint_p99,
        })),
    })
}

/// One layout's runs for `results.json`, in the order they ran.
pub fn layout_json(runs: &LayoutRuns, tolerance: f64) -> Value {
    let mut rows = Vec::new();
    for (i, raw) in runs.raws.iter().enumerate() {
        rows.push(row_json(raw, None, tolerance));
        if let Some(sink) = runs.sinks.get(i) {
            rows.push(row_json(sink, runs.baseline(i).as_ref(), tolerance));
        }
    }
    json!({
        "layout": runs.layout,
        "loadavg_before": runs.load_before,
        "loadavg_after": runs.load_after,
        "results": rows,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(records_per_s: f64, cpu_per_gb: f64) -> Row {
        Row {
            name: "raw consumer".into(),
            records: 1_000_000,
            bytes: 1_000_000_000,
            seconds: 1_000_000.0 / records_per_s,
            cpu_s: cpu_per_gb,
            ..Row::default()
        }
    }

    fn sink() -> Row {
        Row {
            name: "sink exactly_once".into(),
            records: 1_000_000,
            bytes: 1_000_000_000,
            seconds: 4.0,
            appended_seconds: Some(2.0),
            cpu_s: 2.0,
            ..Row::default()
        }
    }

    #[test]
    fn ratios_use_the_mean_of_the_two_raw_runs_around_the_sink() {
        let base = Baseline::around(&raw(900_000.0, 0.9), &raw(1_000_000.0, 1.1)).unwrap();
        assert!((base.rate_moved - 1.0 / 9.0).abs() < 1e-9);
        assert!((base.cpu_moved - 0.2 / 0.9).abs() < 1e-9);
        let q = ratios(&sink(), Some(&base), 0.25);
        assert!((q.visible.unwrap() - 250_000.0 / 950_000.0).abs() < 1e-9);
        assert!((q.appended.unwrap() - 500_000.0 / 950_000.0).abs() < 1e-9);
        assert!((q.cpu.unwrap() - 2.0).abs() < 1e-9);
    }

    #[test]
    fn a_ratio_is_refused_when_its_raw_baseline_moved_more_than_the_tolerance() {
        // throughput moved 20 %, CPU-s/GB 5 %: the throughput ratios go, the CPU ratio stays
        let base = Baseline::around(&raw(1_000_000.0, 1.0), &raw(1_200_000.0, 1.05)).unwrap();
        let q = ratios(&sink(), Some(&base), 0.15);
        assert_eq!((q.visible, q.appended), (None, None));
        assert!(q.cpu.is_some());
        // exactly at the tolerance is kept
        let base = Baseline::around(&raw(1_000_000.0, 1.0), &raw(1_150_000.0, 1.0)).unwrap();
        assert!(ratios(&sink(), Some(&base), 0.15).visible.is_some());
        // CPU moved too much: only the CPU ratio goes
        let base = Baseline::around(&raw(1_000_000.0, 1.0), &raw(1_000_000.0, 1.5)).unwrap();
        let q = ratios(&sink(), Some(&base), 0.15);
        assert!(q.visible.is_some() && q.cpu.is_none());
    }

    #[test]
    fn the_table_prints_refused_where_the_rule_refuses() {
        let runs = LayoutRuns {
            layout: "pinned".into(),
            raws: vec![raw(1_000_000.0, 1.0), raw(1_500_000.0, 1.0)],
            sinks: vec![sink()],
            load_before: "0.5".into(),
            load_after: "0.6".into(),
        };
        let table = render(&runs, 0.15);
        let line = table
            .lines()
            .find(|l| l.starts_with("| sink exactly_once"))
            .unwrap();
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        // run, records, MB, MB/s, appended MB/s, × raw, appended × raw, CPU-s/GB, CPU × raw
        assert_eq!(cells[6], "refused");
        assert_eq!(cells[7], "refused");
        assert_eq!(cells[9], "2.00");
        assert_eq!(cells[10], "50 % / 0 %");
        // a raw row has no ratio
        let raw_line = table.lines().find(|l| l.starts_with("| raw")).unwrap();
        assert!(raw_line.contains("| - | - |"));
    }

    #[test]
    fn a_sink_without_a_second_raw_run_gets_no_ratio() {
        let runs = LayoutRuns {
            layout: "unpinned".into(),
            raws: vec![raw(1_000_000.0, 1.0)],
            sinks: vec![sink()],
            load_before: String::new(),
            load_after: String::new(),
        };
        assert!(runs.baseline(0).is_none());
        assert_eq!(ratios(&sink(), None, 0.15), Ratios::default());
    }
}
