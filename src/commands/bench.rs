//! `eligibility bench`: run the side-by-side benchmark, print and save its results; and
//! the hidden commands its child processes run.

use std::io::Write;

use anyhow::Context;

use crate::bench::file_mode::{self, FileModeOptions};
use crate::bench::workload::WorkloadSpec;
use crate::bench::{self, child, plot, sweep, BenchOptions};
use crate::cli::{BenchArgs, BenchChildArgs, BenchFileBaselineArgs};
use crate::generate::MarketplaceSpec;

pub fn run(args: &BenchArgs) -> anyhow::Result<()> {
    if !args.sweep.is_empty() {
        return sweep::run(args);
    }
    let options = options(args)?;
    let report = bench::run(&options);
    if args.work_dir.is_none() {
        if let Some(file_mode) = &options.file_mode {
            // Only the folder made for this run, and only once its files are gone.
            std::fs::remove_dir(&file_mode.dir).ok();
        }
    }
    let report = report?;
    let markdown = report.to_markdown();
    println!("{markdown}");
    if let Some(path) = &args.markdown {
        std::fs::write(path, &markdown).with_context(|| format!("cannot write {}", path.display()))?;
    }
    if let Some(path) = &args.json {
        let json = serde_json::to_string_pretty(&report)?;
        std::fs::write(path, json).with_context(|| format!("cannot write {}", path.display()))?;
    }
    if let Some(dir) = &args.plots {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        plot::run_plots(&report, dir)?;
    }
    Ok(())
}

/// `eligibility bench-child`: one implementation, its results as JSON on stdout.
pub fn run_child(args: &BenchChildArgs) -> anyhow::Result<()> {
    let task: child::ChildTask = serde_json::from_str(&args.task).context("a malformed bench task")?;
    let output = child::run(&task)?;
    let mut stdout = std::io::stdout().lock();
    serde_json::to_writer(&mut stdout, &output)?;
    stdout.flush()?;
    Ok(())
}

/// `eligibility bench-file-baseline`: the hand-written file mode.
pub fn run_file_baseline(args: &BenchFileBaselineArgs) -> anyhow::Result<()> {
    file_mode::baseline::run(&args.input, &args.output, &args.dead_letter, args.batch_size)
}

/// The bench's options from the command line, with the `--scale` preset applied.
pub fn options(args: &BenchArgs) -> anyhow::Result<BenchOptions> {
    let (products, sellers, categories, brands, campaigns) = if args.scale {
        (10_000_000, 50_000, 5_000, 10_000, 500)
    } else {
        (
            args.products,
            args.sellers,
            args.categories,
            args.brands,
            args.campaigns,
        )
    };
    let marketplace = MarketplaceSpec {
        products,
        sellers,
        categories,
        brands,
        campaigns,
        seed: args.seed,
        ..MarketplaceSpec::default()
    };
    let file_mode = (!args.no_file_mode).then(|| FileModeOptions {
        marketplace: MarketplaceSpec {
            updates: args.file_updates,
            ..marketplace.clone()
        },
        batch_size: args.file_batch_size,
        workers: args.workers.clone(),
        dir: args
            .work_dir
            .clone()
            .unwrap_or_else(|| std::env::temp_dir().join(format!("eligibility-bench-{}", std::process::id()))),
    });
    Ok(BenchOptions {
        workload: WorkloadSpec {
            marketplace,
            load_batch_size: args.load_batch_size,
            update_batch_sizes: args.batch_sizes.clone(),
            updates_per_round: args.updates_per_batch_size,
            new_campaign_share: args.new_campaign_share,
        },
        workers: args.workers.clone(),
        json_feed: !args.no_json_feed,
        baseline_budget: args.baseline_budget,
        baselines: !args.no_baselines,
        exe: std::env::current_exe().context("cannot find the bench's own binary")?,
        file_mode,
    })
}
