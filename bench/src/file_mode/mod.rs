//! The end-to-end file mode, side by side: `eligibility run` on 1 and 2 workers against
//! the hand-written file-mode baseline (`baseline`), each a child process on the same
//! generated event log, with its wall time and peak RSS. Their change logs and dead-letter
//! logs must be byte-identical, or the bench fails.

pub mod baseline;
pub mod compare;

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{bail, Context};
use serde::{Deserialize, Serialize};

use super::child::{self, ChildTask};
use super::format::{format_ratio, mib};
use super::process::{run_measured, ProcessFigures};
use generate::MarketplaceSpec;

/// What the file-mode comparison runs on.
#[derive(Clone, Debug)]
pub struct FileModeOptions {
    /// The event log's marketplace, updates and malformed share included.
    pub marketplace: MarketplaceSpec,
    pub batch_size: u64,
    /// Engine worker counts, e.g. `[1, 2]`.
    pub workers: Vec<usize>,
    /// The `eligibility` binary whose `run --input` is measured.
    pub engine: PathBuf,
    /// Where the log and the outputs go; emptied of them afterwards.
    pub dir: PathBuf,
}

/// One file-mode process.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct FileRun {
    pub name: String,
    /// `None` for the hand-written baseline.
    pub workers: Option<usize>,
    pub process: ProcessFigures,
    /// This run's wall time and peak RSS over the hand-written baseline's.
    pub wall_vs_baseline: f64,
    pub peak_rss_vs_baseline: f64,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct FileModeReport {
    pub products: u64,
    pub campaigns: u64,
    pub updates: u64,
    pub batch_size: u64,
    pub log_bytes: u64,
    pub change_log_bytes: u64,
    pub dead_letter_bytes: u64,
    /// Every engine run's change log and dead letters were byte-identical to the baseline's.
    pub outputs_identical: bool,
    /// The baseline first, then the engine by workers.
    pub runs: Vec<FileRun>,
    /// Engine on 2 workers over engine on 1: wall time and peak RSS.
    pub two_workers_vs_one: Option<(f64, f64)>,
}

/// Where a file-mode child's stderr goes, to be shown if it fails.
const STDERR_FILE: &str = "stderr.txt";

/// A run's two output files.
struct Outputs {
    changes: PathBuf,
    dead_letters: PathBuf,
}

impl Outputs {
    fn in_dir(dir: &Path, name: &str) -> Outputs {
        Outputs {
            changes: dir.join(format!("{name}.changes.jsonl")),
            dead_letters: dir.join(format!("{name}.dead-letters.jsonl")),
        }
    }

    fn remove(&self) {
        std::fs::remove_file(&self.changes).ok();
        std::fs::remove_file(&self.dead_letters).ok();
    }
}

/// Generates the log, runs every process on it, and checks their outputs agree.
pub fn run(exe: &Path, options: &FileModeOptions) -> anyhow::Result<FileModeReport> {
    std::fs::create_dir_all(&options.dir).with_context(|| format!("cannot create {}", options.dir.display()))?;
    let log = options.dir.join("events.jsonl");
    eprintln!("file mode: writing the event log");
    child::spawn(
        exe,
        &ChildTask::EventLog {
            marketplace: options.marketplace.clone(),
            path: log.clone(),
        },
    )?;
    let batch_size = options.batch_size.to_string();
    eprintln!("file mode: running the hand-written baseline");
    let reference = Outputs::in_dir(&options.dir, "hand-written");
    let mut command = Command::new(exe);
    command.arg("file-baseline");
    command.args(["--batch-size", &batch_size]);
    let base = run_file_mode(command, &log, &reference, &options.dir)?;
    let mut runs = vec![file_run("hand-written incremental".into(), None, base, base)];
    for &workers in &options.workers {
        let name = format!("engine, {workers} worker(s)");
        eprintln!("file mode: running {name}");
        let outputs = Outputs::in_dir(&options.dir, &format!("engine-{workers}"));
        let mut command = Command::new(&options.engine);
        command.args(["run", "--log", "warn", "--progress-secs", "0"]);
        command.args(["--batch-size", &batch_size, "--workers", &workers.to_string()]);
        let figures = run_file_mode(command, &log, &outputs, &options.dir)?;
        compare::identical(&reference.changes, &outputs.changes)?;
        compare::identical(&reference.dead_letters, &outputs.dead_letters)?;
        outputs.remove();
        runs.push(file_run(name, Some(workers), figures, base));
    }
    let size = |path: &Path| std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
    let report = FileModeReport {
        products: options.marketplace.products,
        campaigns: options.marketplace.campaigns,
        updates: options.marketplace.updates,
        batch_size: options.batch_size,
        log_bytes: size(&log),
        change_log_bytes: size(&reference.changes),
        dead_letter_bytes: size(&reference.dead_letters),
        outputs_identical: true,
        two_workers_vs_one: two_workers_vs_one(&runs),
        runs,
    };
    reference.remove();
    std::fs::remove_file(&log).ok();
    std::fs::remove_file(options.dir.join(STDERR_FILE)).ok();
    Ok(report)
}

/// Runs a file-mode `command` on `log`, its stderr kept in a file shown if it fails.
fn run_file_mode(mut command: Command, log: &Path, outputs: &Outputs, dir: &Path) -> anyhow::Result<ProcessFigures> {
    command.arg("--input").arg(log);
    command.arg("--output").arg(&outputs.changes);
    command.arg("--dead-letter").arg(&outputs.dead_letters);
    let stderr_path = dir.join(STDERR_FILE);
    let stderr = std::fs::File::create(&stderr_path).context("cannot create a file for a child's stderr")?;
    command.stderr(Stdio::from(stderr));
    match run_measured(command) {
        Ok(finished) => Ok(finished.figures),
        Err(error) => {
            let stderr = std::fs::read_to_string(&stderr_path).unwrap_or_default();
            bail!("{error:#}\n{stderr}")
        }
    }
}

fn file_run(name: String, workers: Option<usize>, process: ProcessFigures, base: ProcessFigures) -> FileRun {
    let (wall_vs_baseline, peak_rss_vs_baseline) = process.versus(&base);
    FileRun {
        name,
        workers,
        wall_vs_baseline,
        peak_rss_vs_baseline,
        process,
    }
}

fn two_workers_vs_one(runs: &[FileRun]) -> Option<(f64, f64)> {
    let on = |workers| runs.iter().find(|run| run.workers == Some(workers));
    Some(on(2)?.process.versus(&on(1)?.process))
}

impl FileModeReport {
    pub fn to_markdown(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "#### file mode\n\n`eligibility run` against the hand-written file-mode baseline on one event log: {} products, {} campaigns, {} updates, batch {} ({:.0} MiB in, {:.0} MiB of changes, {:.0} KiB of dead letters, byte-identical in every run). Wall time and peak RSS (`ru_maxrss`) of each whole process.\n",
            self.products,
            self.campaigns,
            self.updates,
            self.batch_size,
            mib(self.log_bytes),
            mib(self.change_log_bytes),
            self.dead_letter_bytes as f64 / 1024.0,
        );
        let _ = writeln!(
            out,
            "| run | wall s | peak RSS MiB | wall vs hand-written | peak RSS vs hand-written |"
        );
        let _ = writeln!(out, "|---|---:|---:|---:|---:|");
        for run in &self.runs {
            let _ = writeln!(
                out,
                "| {} | {:.2} | {:.0} | {} | {} |",
                run.name,
                run.process.wall_seconds,
                mib(run.process.peak_rss_bytes),
                format_ratio(run.wall_vs_baseline),
                format_ratio(run.peak_rss_vs_baseline)
            );
        }
        if let Some((wall, rss)) = self.two_workers_vs_one {
            let _ = writeln!(
                out,
                "\nEngine, 2 workers over 1: wall {}, peak RSS {}.",
                format_ratio(wall),
                format_ratio(rss)
            );
        }
        let _ = writeln!(out);
        out
    }
}
