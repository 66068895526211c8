//! Turns the samples of a run into the markdown table, the raw JSON and the
//! chart under `bench/results/`. Every figure is also a ratio to plain
//! routing's median from the same run.

use std::{collections::BTreeMap, fmt::Write as _, path::PathBuf};

use anyhow::Context as _;
use serde::Serialize;
use serde_json::json;

use super::{paths::Path, stats::Summary, workloads::Metric};

#[derive(Clone, Debug, Serialize)]
pub struct Sample {
    pub round: usize,
    pub path: String,
    pub metric: Metric,
    pub value: f64,
}

pub struct Run {
    pub paths: Vec<Path>,
    pub samples: Vec<Sample>,
    pub notes: Vec<String>,
    pub rounds: usize,
    pub secs: u64,
    pub quick: bool,
}

impl Run {
    pub fn summary(&self, path: &str, metric: Metric) -> Option<Summary> {
        let values: Vec<f64> = self
            .samples
            .iter()
            .filter(|s| s.path == path && s.metric == metric)
            .map(|s| s.value)
            .collect();
        Summary::of(&values)
    }

    /// This path's value over plain routing's in the same round, for each
    /// round that measured both. Pairing by round cancels the machine's
    /// slow drift, which on a shared VM is larger than the differences
    /// between the paths.
    pub fn round_ratios(&self, path: &str, metric: Metric) -> Vec<f64> {
        let routing = Path::Routing.label();
        let value = |label: &str, round: usize| {
            self.samples
                .iter()
                .find(|s| s.path == label && s.metric == metric && s.round == round)
                .map(|s| s.value)
        };
        (0..self.rounds)
            .filter_map(|round| {
                let base = value(&routing, round)?;
                let this = value(path, round)?;
                (base != 0.0).then(|| this / base)
            })
            .collect()
    }

    /// The median of [`Run::round_ratios`].
    pub fn ratio(&self, path: &str, metric: Metric) -> Option<f64> {
        Summary::of(&self.round_ratios(path, metric)).map(|s| s.median)
    }

    pub fn markdown(&self) -> String {
        let mut t = String::from("| path |");
        for m in Metric::ALL {
            let _ = write!(t, " {} |", m.label());
        }
        t.push_str("\n| --- |");
        t.push_str(&" ---: |".repeat(Metric::ALL.len()));
        t.push('\n');
        for path in &self.paths {
            let label = path.label();
            let _ = write!(t, "| {label} |");
            for m in Metric::ALL {
                let Some(s) = self.summary(&label, m) else {
                    t.push_str(" - |");
                    continue;
                };
                let _ = write!(t, " {} ±{:.0}%", fmt_value(s.median), s.spread_pct());
                match self.ratio(&label, m) {
                    Some(r) => {
                        let _ = write!(t, " ({r:.2}×) |");
                    }
                    None => t.push_str(" |"),
                }
            }
            t.push('\n');
        }
        t.push('\n');
        let _ = writeln!(
            t,
            "Median of {} round(s) of {} s per workload; ±: half the min-max range; (×): median over the rounds of the ratio to plain routing measured in the same round.",
            self.rounds, self.secs
        );
        for note in &self.notes {
            let _ = writeln!(t, "- {note}");
        }
        t
    }

    pub fn json(&self) -> serde_json::Value {
        let mut summary = Vec::new();
        for path in &self.paths {
            let label = path.label();
            let mut metrics = BTreeMap::new();
            for m in Metric::ALL {
                if let Some(s) = self.summary(&label, m) {
                    metrics.insert(
                        format!("{m:?}"),
                        json!({"median": s.median, "min": s.min, "max": s.max,
                               "rounds": s.rounds, "ratio_to_routing": self.ratio(&label, m),
                               "round_ratios": self.round_ratios(&label, m)}),
                    );
                }
            }
            summary.push(json!({"path": label, "metrics": metrics}));
        }
        json!({
            "machine": machine(),
            "config": {"rounds": self.rounds, "secs_per_workload": self.secs, "quick": self.quick},
            "notes": self.notes,
            "summary": summary,
            "samples": self.samples,
        })
    }

    /// The file name stem: `datapath`, or `datapath-quick`.
    pub fn stem(&self) -> &'static str {
        if self.quick {
            "datapath-quick"
        } else {
            "datapath"
        }
    }

    /// Writes `datapath{-quick}.{md,json}`; returns the files written.
    pub fn write(&self, dir: &std::path::Path) -> anyhow::Result<Vec<PathBuf>> {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let stem = self.stem();
        let md = dir.join(format!("{stem}.md"));
        let js = dir.join(format!("{stem}.json"));
        let machine = machine();
        let header = format!(
            "# ssh-fwd datapath benchmark\n\n{} CPUs, kernel {}\n\n",
            machine["cpus"],
            machine["kernel"].as_str().unwrap_or("?")
        );
        std::fs::write(&md, header + &self.markdown())?;
        std::fs::write(&js, serde_json::to_string_pretty(&self.json())?)?;
        Ok(vec![md, js])
    }
}

fn fmt_value(v: f64) -> String {
    match v.abs() {
        x if x >= 1000.0 => format!("{v:.0}"),
        x if x >= 100.0 => format!("{v:.1}"),
        _ => format!("{v:.2}"),
    }
}

fn machine() -> serde_json::Value {
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let cpus = std::thread::available_parallelism().map_or(0, usize::from);
    json!({"kernel": kernel.trim(), "cpus": cpus})
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 3-round run of plain routing and the proxy, one metric.
    fn run_of(metric: Metric, samples: &[(Path, usize, f64)], notes: Vec<String>) -> Run {
        Run {
            paths: vec![Path::Routing, Path::Proxy],
            samples: samples
                .iter()
                .map(|&(path, round, value)| Sample {
                    round,
                    path: path.label(),
                    metric,
                    value,
                })
                .collect(),
            notes,
            rounds: 3,
            secs: 1,
            quick: false,
        }
    }

    #[test]
    fn ratios_are_to_plain_routing_in_the_same_run() {
        let run = run_of(
            Metric::Gbps1,
            &[
                (Path::Routing, 0, 10.0),
                (Path::Routing, 1, 12.0),
                (Path::Routing, 2, 11.0),
                (Path::Proxy, 0, 5.5),
            ],
            vec!["IPVS: not measured".into()],
        );
        // Paired with routing's round 0 (10.0), not with its median (11.0).
        assert_eq!(run.ratio(&Path::Proxy.label(), Metric::Gbps1), Some(0.55));
        let md = run.markdown();
        assert!(
            md.contains("| userspace proxy | 5.50 ±0% (0.55×) |"),
            "{md}"
        );
        assert!(md.contains("| plain routing | 11.00 ±9% (1.00×) |"), "{md}");
        assert!(md.contains("- IPVS: not measured"));
    }

    #[test]
    fn ratios_pair_rounds_so_drift_of_the_machine_cancels() {
        // The machine got three times faster in round 1: the path is 10%
        // ahead in two rounds of three, which the medians alone (20 vs 19)
        // would turn into 5% behind.
        let run = run_of(
            Metric::SetupPerSec,
            &[
                (Path::Routing, 0, 10.0),
                (Path::Routing, 1, 30.0),
                (Path::Routing, 2, 20.0),
                (Path::Proxy, 0, 11.0),
                (Path::Proxy, 1, 33.0),
                (Path::Proxy, 2, 19.0),
            ],
            vec![],
        );
        let label = Path::Proxy.label();
        assert_eq!(
            run.round_ratios(&label, Metric::SetupPerSec),
            [1.1, 1.1, 0.95]
        );
        assert_eq!(run.ratio(&label, Metric::SetupPerSec), Some(1.1));
    }
}
