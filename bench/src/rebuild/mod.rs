//! `eligibility-bench rebuild`: what a restart costs, side by side with what reading the
//! topics costs, each in a process of its own on the same topics:
//!
//! 1. the floor (`floor.rs`): read, decode, keep the latest value per key;
//! 2. the job, 1 worker, into an empty JSONL sink (the rebuild writes every pair);
//! 3. the job again into that now-exact sink (the quiet restart: must write nothing);
//! 4. the job, 2 workers in one process, into an empty sink;
//! 5. the job, 2 workers, again into that sink (a deploy's restart: must write nothing);
//! 6. the job, 2 processes of 1 worker, into an empty sink.
//!
//! The final pairs of 2, 4 and 6 must be equal and 3 and 5 must write none, or the run fails
//! (after printing its table). With `rounds` above one, the six runs repeat in that order
//! round after round (so a slow spell of the machine falls on every kind alike), and each
//! kind reports its median wall time and its highest peak.
//!
//! Each run also reports its CPU time, and the broker's when it runs on this machine
//! (`broker_cpu`): what the 1-worker run kept busy bounds what 2 workers can gain on this
//! machine's cores (`Ratios::two_workers_bound`).

pub mod config;
pub mod floor;
pub mod job;
pub mod topics;

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context};
use generate::MarketplaceSpec;
use serde::{Deserialize, Serialize};

pub use self::config::Topics;
use self::floor::FloorOutput;
use self::job::{FoldedLog, JobDir};
use crate::broker_cpu::LocalBroker;
use crate::format::{format_ratio, mib};
use crate::process::{run_measured, run_measured_together, ProcessFigures};
use crate::report::Machine;

/// Where the topics come from.
#[derive(Clone, Debug)]
pub enum TopicSource {
    /// Generated from this spec and produced into topics named by it, unless already there.
    Generate {
        marketplace: MarketplaceSpec,
        partitions: i32,
    },
    /// Topics that already hold a marketplace.
    Existing(Topics),
}

#[derive(Clone, Debug)]
pub struct RebuildOptions {
    pub brokers: String,
    pub source: TopicSource,
    /// The bench's own binary, which runs the floor.
    pub exe: PathBuf,
    /// The `eligibility` binary measured.
    pub engine: PathBuf,
    /// Where the event log, configs, change logs and stderr files go.
    pub dir: PathBuf,
    /// Keep the change logs and stderr files in `dir` (else they are removed).
    pub keep: bool,
    /// Also run the 2-process cluster.
    pub processes: bool,
    /// How many times each run is made (at least once).
    pub rounds: usize,
}

/// Which of the runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunKind {
    Floor,
    Rebuild,
    QuietRestart,
    TwoWorkers,
    QuietRestartTwoWorkers,
    TwoProcesses,
}

impl RunKind {
    pub fn label(self) -> &'static str {
        match self {
            RunKind::Floor => "floor: read, decode, keep the latest per key",
            RunKind::Rebuild => "job, 1 worker, into an empty sink",
            RunKind::QuietRestart => "job, 1 worker, restart into the exact sink",
            RunKind::TwoWorkers => "job, 2 workers, into an empty sink",
            RunKind::QuietRestartTwoWorkers => "job, 2 workers, restart into the exact sink",
            RunKind::TwoProcesses => "job, 2 processes × 1 worker, into an empty sink",
        }
    }

    /// A restart into the sink a rebuild has just made exact: it must write nothing.
    pub fn is_quiet_restart(self) -> bool {
        matches!(self, RunKind::QuietRestart | RunKind::QuietRestartTwoWorkers)
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RebuildRun {
    pub kind: RunKind,
    /// Wall time until the last process ended; peak RSS summed over the processes.
    pub process: ProcessFigures,
    /// Each process of a cluster run, in process order.
    pub members: Vec<ProcessFigures>,
    /// Lines this run appended to the change log (none for the floor).
    pub pairs_written: Option<u64>,
    /// The change log's final state after this run.
    pub state: Option<FoldedLog>,
    /// Each round's wall time, in round order (`process` holds the median's figures).
    #[serde(default)]
    pub walls: Vec<f64>,
    /// CPU time the broker spent during this run, when it runs on this machine.
    #[serde(default)]
    pub broker_cpu_seconds: Option<f64>,
}

impl RebuildRun {
    /// CPU time of the run's processes and of the local broker, if known.
    pub fn cpu_seconds(&self) -> f64 {
        self.process.cpu_seconds + self.broker_cpu_seconds.unwrap_or(0.0)
    }
}

/// The goals' ratios (issue 25), each `None` when a run it needs was not made.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Ratios {
    /// (wall, peak RSS) over the floor's.
    pub rebuild_vs_floor: Option<(f64, f64)>,
    pub restart_vs_floor: Option<(f64, f64)>,
    /// 2 workers over 1 worker, both into an empty sink.
    pub two_workers_vs_one: Option<(f64, f64)>,
    /// 2 workers over 1 worker, both restarting into the exact sink.
    #[serde(default)]
    pub restart_two_workers_vs_one: Option<(f64, f64)>,
    /// 2 processes of 1 worker over 1 process of 2 workers (peak: summed over processes).
    pub two_processes_vs_two_workers: Option<(f64, f64)>,
    /// Peak RSS over the products the floor kept.
    pub rebuild_bytes_per_product: Option<f64>,
    pub restart_bytes_per_product: Option<f64>,
    #[serde(default)]
    pub restart_two_workers_bytes_per_product: Option<f64>,
    /// The least `two_workers_vs_one` can be on this machine: the 1-worker run's CPU time
    /// (job and local broker) spread over every core for its whole wall time, over that
    /// wall time. Two workers do at least the one worker's work, and no more cores exist.
    #[serde(default)]
    pub two_workers_bound: Option<f64>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RebuildReport {
    pub machine: Machine,
    pub topics: Topics,
    /// The marketplace the topics were generated from, when they were.
    pub marketplace: Option<MarketplaceSpec>,
    /// Whether this run produced the topics (else an earlier one had).
    pub produced_now: bool,
    pub floor: FloorOutput,
    pub runs: Vec<RebuildRun>,
    pub ratios: Ratios,
    /// The empty-sink runs all ended with the same pairs.
    pub outputs_agree: bool,
    /// What the quiet restart wrote: 0 when the restart is exact.
    pub quiet_restart_writes: u64,
    /// The bench's own peak: the least any figure can be (`process.rs`).
    pub bench_peak_rss_bytes: u64,
}

/// Runs every measurement; a report comes back also when an invariant fails, with the
/// failure to raise after printing it.
pub fn run(options: &RebuildOptions) -> anyhow::Result<(RebuildReport, Option<String>)> {
    std::fs::create_dir_all(&options.dir).with_context(|| format!("cannot create {}", options.dir.display()))?;
    let (topics, marketplace, produced_now) = match &options.source {
        TopicSource::Existing(topics) => (topics.clone(), None, false),
        TopicSource::Generate {
            marketplace,
            partitions,
        } => {
            let (topics, produced) = topics::ensure_produced(
                &options.engine,
                &options.brokers,
                marketplace,
                *partitions,
                &options.dir,
            )?;
            (topics, Some(marketplace.clone()), produced)
        }
    };
    eprintln!(
        "rebuild: topics {}, {}, {}",
        topics.products, topics.campaigns, topics.categories
    );

    let broker = LocalBroker::find();
    match broker {
        Some(_) => eprintln!("rebuild: the broker runs on this machine; its CPU time is counted"),
        None => eprintln!("rebuild: no single local broker found; only the job's CPU time is counted"),
    }
    let mut rounds = Vec::new();
    let mut last = None;
    for round in 1..=options.rounds.max(1) {
        if options.rounds > 1 {
            eprintln!("rebuild: round {round} of {}", options.rounds);
        }
        let (floor, runs, dirs) = run_round(options, &topics, broker)?;
        rounds.push(runs);
        last = Some((floor, dirs));
    }
    let (floor, dirs) = last.expect("at least one round");
    let mut runs = combine(rounds);

    // Folded after every run, so the bench's own peak stays below every figure above.
    eprintln!("rebuild: comparing the change logs");
    let mut states = Vec::new();
    for (run, dir) in runs
        .iter_mut()
        .filter(|run| run.kind != RunKind::Floor && !run.kind.is_quiet_restart())
        .zip(&dirs)
    {
        let state = job::fold(&dir.changes)?;
        run.state = Some(state);
        states.push((run.kind, state));
    }
    let rebuilt = states.first().map(|(_, state)| *state);
    for restart in runs.iter_mut().filter(|run| run.kind.is_quiet_restart()) {
        restart.state = rebuilt;
    }
    let outputs_agree = states.windows(2).all(|pair| pair[0].1 == pair[1].1);
    let quiet_restart_writes = runs
        .iter()
        .filter(|run| run.kind.is_quiet_restart())
        .filter_map(|run| run.pairs_written)
        .sum();
    let mut failure = None;
    if !outputs_agree {
        failure = Some(format!(
            "the runs into an empty sink ended with different pairs: {states:?}"
        ));
    } else if quiet_restart_writes > 0 {
        failure = Some(format!(
            "the quiet restarts wrote {quiet_restart_writes} pairs into sinks that held them all"
        ));
    } else if rebuilt.is_none_or(|state| state.pairs == 0) {
        failure = Some("the rebuild wrote no pairs".into());
    }
    if !options.keep {
        for dir in &dirs {
            std::fs::remove_dir_all(&dir.dir).ok();
        }
    }
    let ratios = ratios(&runs, floor.products, Machine::current().cores);
    let report = RebuildReport {
        machine: Machine::current(),
        topics,
        marketplace,
        produced_now,
        floor,
        runs,
        ratios,
        outputs_agree,
        quiet_restart_writes,
        bench_peak_rss_bytes: crate::measure::peak_resident_bytes(),
    };
    Ok((report, failure))
}

/// One round: the floor, then each job run; the job folders hold this round's change logs.
fn run_round(
    options: &RebuildOptions,
    topics: &Topics,
    broker: Option<LocalBroker>,
) -> anyhow::Result<(FloorOutput, Vec<RebuildRun>, Vec<JobDir>)> {
    eprintln!("rebuild: the floor");
    let mut floor_command = Command::new(&options.exe);
    floor_command.args(["floor", "--brokers", &options.brokers]);
    floor_command.args(["--products-topic", &topics.products]);
    floor_command.args(["--campaigns-topic", &topics.campaigns]);
    floor_command.args(["--categories-topic", &topics.categories]);
    let broker_before = broker.and_then(|broker| broker.cpu_seconds());
    let finished = run_measured(floor_command)?;
    let broker_cpu_seconds = broker_spent(broker, broker_before);
    let floor: FloorOutput = serde_json::from_slice(&finished.stdout).context("the floor printed no results")?;
    let mut runs = vec![RebuildRun {
        kind: RunKind::Floor,
        process: finished.figures,
        members: vec![finished.figures],
        pairs_written: None,
        state: None,
        walls: Vec::new(),
        broker_cpu_seconds,
    }];

    let one = JobDir::create(options.dir.join("one-worker"), &options.brokers, topics)?;
    let workers = |n: usize| vec!["--workers".to_owned(), n.to_string()];
    runs.push(run_job(options, &one, RunKind::Rebuild, &workers(1), broker)?);
    runs.push(run_job(options, &one, RunKind::QuietRestart, &workers(1), broker)?);
    let two = JobDir::create(options.dir.join("two-workers"), &options.brokers, topics)?;
    runs.push(run_job(options, &two, RunKind::TwoWorkers, &workers(2), broker)?);
    runs.push(run_job(
        options,
        &two,
        RunKind::QuietRestartTwoWorkers,
        &workers(2),
        broker,
    )?);
    let mut dirs = vec![one, two];
    if options.processes {
        let cluster = JobDir::create(options.dir.join("two-processes"), &options.brokers, topics)?;
        runs.push(run_job(options, &cluster, RunKind::TwoProcesses, &workers(1), broker)?);
        dirs.push(cluster);
    }
    Ok((floor, runs, dirs))
}

/// The broker's CPU time since `before`, if it is known at both ends.
fn broker_spent(broker: Option<LocalBroker>, before: Option<f64>) -> Option<f64> {
    Some(broker?.cpu_seconds()? - before?)
}

/// Each kind's runs over the rounds as one: the figures of its median wall time, with the
/// highest peak of any round and the most pairs any round wrote (a quiet restart must
/// write none in every round).
fn combine(rounds: Vec<Vec<RebuildRun>>) -> Vec<RebuildRun> {
    let Some(first) = rounds.first() else {
        return Vec::new();
    };
    let kinds: Vec<RunKind> = first.iter().map(|run| run.kind).collect();
    kinds
        .into_iter()
        .map(|kind| {
            let mut of_kind: Vec<&RebuildRun> = rounds.iter().flatten().filter(|run| run.kind == kind).collect();
            let walls: Vec<f64> = of_kind.iter().map(|run| run.process.wall_seconds).collect();
            let peak = of_kind.iter().map(|run| run.process.peak_rss_bytes).max().unwrap_or(0);
            let pairs_written = of_kind.iter().filter_map(|run| run.pairs_written).max();
            of_kind.sort_by(|a, b| a.process.wall_seconds.total_cmp(&b.process.wall_seconds));
            let median = of_kind[(of_kind.len() - 1) / 2];
            RebuildRun {
                kind,
                process: ProcessFigures {
                    peak_rss_bytes: peak,
                    ..median.process
                },
                members: median.members.clone(),
                pairs_written,
                state: None,
                walls,
                broker_cpu_seconds: median.broker_cpu_seconds,
            }
        })
        .collect()
}

/// Runs the job in `dir` (one process, or two for `TwoProcesses`) with `extra` options.
fn run_job(
    options: &RebuildOptions,
    dir: &JobDir,
    kind: RunKind,
    extra: &[String],
    broker: Option<LocalBroker>,
) -> anyhow::Result<RebuildRun> {
    eprintln!("rebuild: {}", kind.label());
    let before = job::lines(&dir.changes)?;
    let name = format!("{kind:?}").to_lowercase();
    let mut commands = Vec::new();
    let mut stderr = Vec::new();
    if kind == RunKind::TwoProcesses {
        let hostfile = dir.hostfile(2)?;
        for process in 0..2 {
            let member = format!("{name}-{process}");
            let mut cluster = extra.to_vec();
            cluster.extend([
                "--processes".into(),
                "2".into(),
                "--process".into(),
                process.to_string(),
            ]);
            cluster.extend(["--hostfile".into(), hostfile.display().to_string()]);
            commands.push(dir.command(&options.engine, &member, &cluster)?);
            stderr.push(dir.stderr(&member));
        }
    } else {
        commands.push(dir.command(&options.engine, &name, extra)?);
        stderr.push(dir.stderr(&name));
    }
    let broker_before = broker.and_then(|broker| broker.cpu_seconds());
    let members = match run_measured_together(commands) {
        Ok(members) => members,
        Err(error) => {
            let tails: Vec<String> = stderr.iter().map(|path| job::stderr_tail(path)).collect();
            bail!("{error:#}\n{}", tails.join("\n--\n"));
        }
    };
    let broker_cpu_seconds = broker_spent(broker, broker_before);
    let after = job::lines(&dir.changes)?;
    let process = ProcessFigures {
        wall_seconds: members.iter().map(|m| m.wall_seconds).fold(0.0, f64::max),
        peak_rss_bytes: members.iter().map(|m| m.peak_rss_bytes).sum(),
        floor_rss_bytes: members.iter().map(|m| m.floor_rss_bytes).max().unwrap_or(0),
        cpu_seconds: members.iter().map(|m| m.cpu_seconds).sum(),
    };
    Ok(RebuildRun {
        kind,
        process,
        members,
        pairs_written: Some(after.saturating_sub(before)),
        state: None,
        walls: Vec::new(),
        broker_cpu_seconds,
    })
}

fn ratios(runs: &[RebuildRun], products: u64, cores: usize) -> Ratios {
    let of = |kind| runs.iter().find(|run| run.kind == kind).map(|run| run.process);
    let versus = |a, b| Some(of(a)?.versus(&of(b)?));
    let per_product = |kind| Some(of(kind)?.peak_rss_bytes as f64 / products.max(1) as f64);
    Ratios {
        rebuild_vs_floor: versus(RunKind::Rebuild, RunKind::Floor),
        restart_vs_floor: versus(RunKind::QuietRestart, RunKind::Floor),
        two_workers_vs_one: versus(RunKind::TwoWorkers, RunKind::Rebuild),
        restart_two_workers_vs_one: versus(RunKind::QuietRestartTwoWorkers, RunKind::QuietRestart),
        two_processes_vs_two_workers: versus(RunKind::TwoProcesses, RunKind::TwoWorkers),
        rebuild_bytes_per_product: per_product(RunKind::Rebuild),
        restart_bytes_per_product: per_product(RunKind::QuietRestart),
        restart_two_workers_bytes_per_product: per_product(RunKind::QuietRestartTwoWorkers),
        two_workers_bound: runs
            .iter()
            .find(|run| run.kind == RunKind::Rebuild)
            .map(|one| one.cpu_seconds() / (cores.max(1) as f64 * one.process.wall_seconds.max(1e-9))),
    }
}

impl RebuildReport {
    pub fn run(&self, kind: RunKind) -> Option<&RebuildRun> {
        self.runs.iter().find(|run| run.kind == kind)
    }

    /// Each run's wall time and peak RSS against the floor's, as bars.
    pub fn plot(&self, path: &Path) -> anyhow::Result<()> {
        let short = |kind: RunKind| match kind {
            RunKind::Floor => "floor",
            RunKind::Rebuild => "rebuild",
            RunKind::QuietRestart => "quiet restart",
            RunKind::TwoWorkers => "2 workers",
            RunKind::QuietRestartTwoWorkers => "quiet restart, 2 workers",
            RunKind::TwoProcesses => "2 processes",
        };
        let groups: Vec<crate::plot::BarGroup> = self
            .runs
            .iter()
            .map(|run| {
                let figures = vec![run.process.wall_seconds, run.process.peak_rss_bytes as f64];
                (short(run.kind).to_owned(), figures)
            })
            .collect();
        let products = self.floor.products;
        crate::plot::ratio_bars(
            path,
            &format!("Kafka rebuild of {products} products against the floor"),
            &["wall time", "peak RSS"],
            &groups,
        )
    }

    pub fn to_markdown(&self) -> String {
        let floor = &self.floor;
        let mut out = String::new();
        let _ = writeln!(
            out,
            "#### Kafka rebuild\n\n{} records in {} partitions ({} products, {} campaigns, {} categories kept; {} rejected by the decoder), topics `{}`, `{}`, `{}`. Each run is a process of its own (a cluster: two), wall time from spawn to exit and peak RSS its `ru_maxrss` (a cluster's: the sum); each job run is `eligibility run --stop-at-end` into a JSONL sink. No figure can be below the bench's own peak, {:.0} MiB.\n",
            floor.records,
            floor.partitions,
            floor.products,
            floor.campaigns,
            floor.categories,
            floor.rejected,
            self.topics.products,
            self.topics.campaigns,
            self.topics.categories,
            mib(self.bench_peak_rss_bytes),
        );
        let rounds = self.runs.first().map_or(1, |run| run.walls.len().max(1));
        if rounds > 1 {
            let _ = writeln!(
                out,
                "{rounds} rounds of every run, in turn: wall is each run's median (its range in brackets), peak RSS its highest.\n"
            );
        }
        let _ = writeln!(
            out,
            "| run | wall s | peak RSS MiB | peak RSS B/product | CPU s: job + broker | cores busy | pairs written | pairs at the end |"
        );
        let _ = writeln!(out, "|---|---:|---:|---:|---:|---:|---:|---:|");
        for run in &self.runs {
            let count = |value: Option<u64>| value.map_or("–".to_owned(), |v| v.to_string());
            let mut peak = format!("{:.0}", mib(run.process.peak_rss_bytes));
            if run.members.len() > 1 {
                let each: Vec<String> = run
                    .members
                    .iter()
                    .map(|m| format!("{:.0}", mib(m.peak_rss_bytes)))
                    .collect();
                peak = format!("{peak} ({})", each.join(" + "));
            }
            let mut wall = format!("{:.2}", run.process.wall_seconds);
            if run.walls.len() > 1 {
                let (low, high) = run
                    .walls
                    .iter()
                    .fold((f64::MAX, f64::MIN), |(low, high), w| (low.min(*w), high.max(*w)));
                wall = format!("{wall} ({low:.1}–{high:.1})");
            }
            let broker = run
                .broker_cpu_seconds
                .map_or("?".to_owned(), |seconds| format!("{seconds:.1}"));
            let _ = writeln!(
                out,
                "| {} | {wall} | {peak} | {:.0} | {:.1} + {broker} | {:.2} | {} | {} |",
                run.kind.label(),
                run.process.peak_rss_bytes as f64 / floor.products.max(1) as f64,
                run.process.cpu_seconds,
                run.cpu_seconds() / run.process.wall_seconds.max(1e-9),
                count(run.pairs_written),
                count(run.state.map(|state| state.pairs)),
            );
        }
        let ratios = &self.ratios;
        let _ = writeln!(out, "\n| ratio | wall | peak RSS | goal (issue 25) |");
        let _ = writeln!(out, "|---|---:|---:|---|");
        let rows = [
            ("rebuild / floor", ratios.rebuild_vs_floor, 2.0),
            ("quiet restart / floor", ratios.restart_vs_floor, 2.0),
            ("2 workers / 1 worker", ratios.two_workers_vs_one, 0.6),
            (
                "quiet restart, 2 workers / 1 worker",
                ratios.restart_two_workers_vs_one,
                0.6,
            ),
            (
                "2 processes × 1 / 1 process × 2",
                ratios.two_processes_vs_two_workers,
                1.15,
            ),
        ];
        for (label, ratio, goal) in rows {
            let Some((wall, rss)) = ratio else { continue };
            let _ = writeln!(
                out,
                "| {label} | {} | {} | wall ≤ {goal}×: {} |",
                format_ratio(wall),
                format_ratio(rss),
                met(wall <= goal)
            );
        }
        for (label, bytes) in [
            ("peak RSS per product, rebuild", ratios.rebuild_bytes_per_product),
            ("peak RSS per product, quiet restart", ratios.restart_bytes_per_product),
            (
                "peak RSS per product, quiet restart, 2 workers",
                ratios.restart_two_workers_bytes_per_product,
            ),
        ] {
            let Some(bytes) = bytes else { continue };
            let _ = writeln!(out, "| {label} | | {bytes:.0} B | ≤ 200 B: {} |", met(bytes <= 200.0));
        }
        if let Some(bound) = ratios.two_workers_bound {
            let _ = writeln!(
                out,
                "\nThe least 2 workers / 1 worker can be on this machine's {} cores is {}: the 1-worker run's CPU time (job and broker) spread over every core for its whole run, over its wall time (median run's figures).",
                self.machine.cores,
                format_ratio(bound),
            );
        }
        let _ = writeln!(
            out,
            "\nOutputs: the runs into an empty sink {}; the quiet restarts wrote {} pairs.",
            if self.outputs_agree {
                "ended with the same pairs"
            } else {
                "**ended with different pairs**"
            },
            self.quiet_restart_writes
        );
        out
    }
}

fn met(yes: bool) -> &'static str {
    if yes {
        "met"
    } else {
        "not met"
    }
}

/// The default folder of a run's files.
pub fn default_dir() -> PathBuf {
    std::env::temp_dir().join(format!("eligibility-bench-rebuild-{}", std::process::id()))
}

/// Removes `dir` if this run made it and nothing is left in it worth keeping.
pub fn remove_if_empty(dir: &Path) {
    std::fs::remove_dir(dir).ok();
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(kind: RunKind, wall_seconds: f64, peak_rss_bytes: u64, pairs_written: Option<u64>) -> RebuildRun {
        let process = ProcessFigures {
            wall_seconds,
            peak_rss_bytes,
            floor_rss_bytes: 0,
            cpu_seconds: wall_seconds,
        };
        RebuildRun {
            kind,
            process,
            members: vec![process],
            pairs_written,
            state: None,
            walls: Vec::new(),
            broker_cpu_seconds: Some(wall_seconds / 10.0),
        }
    }

    #[test]
    fn rounds_combine_into_the_median_wall_the_highest_peak_and_the_most_writes() {
        let rounds = vec![
            vec![
                run(RunKind::Floor, 20.0, 5, None),
                run(RunKind::QuietRestart, 40.0, 9, Some(0)),
            ],
            vec![
                run(RunKind::Floor, 18.0, 7, None),
                run(RunKind::QuietRestart, 30.0, 8, Some(3)),
            ],
            vec![
                run(RunKind::Floor, 25.0, 6, None),
                run(RunKind::QuietRestart, 35.0, 8, Some(0)),
            ],
        ];
        let combined = combine(rounds);
        assert_eq!(combined.len(), 2);
        let floor = &combined[0];
        assert_eq!(floor.kind, RunKind::Floor);
        assert_eq!(floor.process.wall_seconds, 20.0);
        assert_eq!(floor.process.peak_rss_bytes, 7, "the highest peak of any round");
        assert_eq!(floor.walls, vec![20.0, 18.0, 25.0], "in round order");
        assert_eq!(floor.pairs_written, None);
        let restart = &combined[1];
        assert_eq!(restart.process.wall_seconds, 35.0);
        assert_eq!(restart.members[0].wall_seconds, 35.0, "the median round's processes");
        assert_eq!(restart.pairs_written, Some(3), "one round that wrote is enough to fail");
    }

    #[test]
    fn the_two_worker_bound_spreads_the_one_worker_cpu_over_every_core() {
        let mut one = run(RunKind::Rebuild, 30.0, 100, Some(1));
        one.process.cpu_seconds = 32.0;
        one.broker_cpu_seconds = Some(2.0);
        let two = run(RunKind::TwoWorkers, 20.0, 100, Some(1));
        let ratios = ratios(&[one.clone(), two], 10, 2);
        assert_eq!(ratios.two_workers_bound, Some(34.0 / 60.0));
        assert_eq!(ratios.two_workers_vs_one.map(|(wall, _)| wall), Some(20.0 / 30.0));
        one.broker_cpu_seconds = None;
        assert_eq!(super::ratios(&[one], 10, 4).two_workers_bound, Some(32.0 / 120.0));
        assert_eq!(super::ratios(&[], 10, 2).two_workers_bound, None);
    }

    #[test]
    fn two_workers_restarting_are_compared_with_one_restarting_not_with_a_rebuild() {
        let runs = [
            run(RunKind::Rebuild, 30.0, 100, Some(1)),
            run(RunKind::QuietRestart, 28.0, 190, Some(0)),
            run(RunKind::TwoWorkers, 20.0, 180, Some(1)),
            run(RunKind::QuietRestartTwoWorkers, 21.0, 210, Some(0)),
        ];
        let ratios = ratios(&runs, 10, 2);
        assert_eq!(ratios.restart_two_workers_vs_one, Some((21.0 / 28.0, 210.0 / 190.0)));
        assert_eq!(ratios.restart_two_workers_bytes_per_product, Some(21.0));
        assert_eq!(ratios.two_workers_vs_one, Some((20.0 / 30.0, 180.0 / 100.0)));
        assert!(RunKind::QuietRestartTwoWorkers.is_quiet_restart() && !RunKind::TwoWorkers.is_quiet_restart());
    }

    #[test]
    fn one_round_is_reported_as_it_ran() {
        let combined = combine(vec![vec![run(RunKind::Rebuild, 12.5, 100, Some(42))]]);
        assert_eq!(combined[0].process.wall_seconds, 12.5);
        assert_eq!(combined[0].process.peak_rss_bytes, 100);
        assert_eq!(combined[0].walls, vec![12.5]);
    }
}
