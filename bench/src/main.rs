//! `eligibility-bench`: run the side-by-side benchmark, print and save its results; and
//! the hidden commands its child processes run.

use std::io::Write;
use std::process::ExitCode;

use anyhow::Context;
use bench::args::{
    BenchArgs, BenchChildArgs, BenchFileBaselineArgs, Cli, FloorArgs, PlotRebuildArgs, RebuildArgs, Subcommands,
    WindowArgs,
};
use bench::{child, file_mode, plot, rebuild, sweep};
use clap::Parser;

// The same allocator as the `eligibility` binary, so the in-process engine runs measure
// what production runs.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(&cli.log));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .init();
    let result = match &cli.command {
        None => run(&cli.bench),
        Some(Subcommands::Rebuild(args)) => run_rebuild(args),
        Some(Subcommands::Window(args)) => run_window(args),
        Some(Subcommands::Floor(args)) => run_floor(args),
        Some(Subcommands::PlotRebuild(args)) => plot_rebuild(args),
        Some(Subcommands::Child(args)) => run_child(args),
        Some(Subcommands::FileBaseline(args)) => run_file_baseline(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: &BenchArgs) -> anyhow::Result<()> {
    if !args.sweep.is_empty() {
        return sweep::run(args);
    }
    let options = args.options()?;
    let report = bench::run(&options);
    if args.work_dir.is_none() {
        if let Some(file_mode) = &options.file_mode {
            // Only the folder made for this run, and only once its files are gone.
            std::fs::remove_dir(&file_mode.dir).ok();
        }
    }
    let report = report?;
    print_and_write(
        &report.to_markdown(),
        &report,
        args.markdown.as_deref(),
        args.json.as_deref(),
    )?;
    if let Some(dir) = &args.plots {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        plot::run_plots(&report, dir)?;
    }
    Ok(())
}

/// `eligibility-bench rebuild`: the tables on stdout, the failed invariant (if any) after.
fn run_rebuild(args: &RebuildArgs) -> anyhow::Result<()> {
    let options = args.options()?;
    let result = rebuild::run(&options);
    if args.work_dir.is_none() && !args.keep {
        rebuild::remove_if_empty(&options.dir);
    }
    let (report, failure) = result?;
    print_and_write(
        &report.to_markdown(),
        &report,
        args.markdown.as_deref(),
        args.json.as_deref(),
    )?;
    if let Some(path) = &args.plot {
        report.plot(path)?;
    }
    match failure {
        Some(failure) => anyhow::bail!(failure),
        None => Ok(()),
    }
}

/// Prints a report's tables, and writes them and the report as JSON where asked.
fn print_and_write(
    markdown: &str,
    report: &impl serde::Serialize,
    markdown_path: Option<&std::path::Path>,
    json_path: Option<&std::path::Path>,
) -> anyhow::Result<()> {
    println!("{markdown}");
    if let Some(path) = markdown_path {
        std::fs::write(path, markdown).with_context(|| format!("cannot write {}", path.display()))?;
    }
    if let Some(path) = json_path {
        let json = serde_json::to_string_pretty(report)?;
        std::fs::write(path, json).with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(())
}

/// `eligibility-bench window`: a scheduled opening against an edit of `active`.
fn run_window(args: &WindowArgs) -> anyhow::Result<()> {
    let report = bench::window::run(&args.options())?;
    print_and_write(
        &report.to_markdown(),
        &report,
        args.markdown.as_deref(),
        args.json.as_deref(),
    )
}

/// `eligibility-bench plot-rebuild`: the plot of a report written earlier.
fn plot_rebuild(args: &PlotRebuildArgs) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(&args.json).with_context(|| format!("cannot read {}", args.json.display()))?;
    let report: rebuild::RebuildReport = serde_json::from_str(&text)?;
    report.plot(&args.plot)
}

/// `eligibility-bench floor`: what it read, as JSON on stdout.
fn run_floor(args: &FloorArgs) -> anyhow::Result<()> {
    let output = rebuild::floor::run(&args.brokers, &args.topics())?;
    eprintln!(
        "floor: {} records ({} rejected) from {} partitions, {} keys kept, {:.2} s",
        output.records,
        output.rejected,
        output.partitions,
        output.keys(),
        output.seconds
    );
    let mut stdout = std::io::stdout().lock();
    serde_json::to_writer(&mut stdout, &output)?;
    writeln!(stdout)?;
    Ok(())
}

/// `eligibility-bench child`: one implementation, its results as JSON on stdout.
fn run_child(args: &BenchChildArgs) -> anyhow::Result<()> {
    let task: child::ChildTask = serde_json::from_str(&args.task).context("a malformed bench task")?;
    let output = child::run(&task)?;
    let mut stdout = std::io::stdout().lock();
    serde_json::to_writer(&mut stdout, &output)?;
    stdout.flush()?;
    Ok(())
}

/// `eligibility-bench file-baseline`: the hand-written file mode.
fn run_file_baseline(args: &BenchFileBaselineArgs) -> anyhow::Result<()> {
    file_mode::baseline::run(&args.input, &args.output, &args.dead_letter, args.batch_size)
}
