//! `eligibility bench`: run the side-by-side benchmark, print and save its results.

use anyhow::Context;

use crate::bench::workload::WorkloadSpec;
use crate::bench::{self, plot, sweep, BenchOptions};
use crate::cli::BenchArgs;
use crate::generate::MarketplaceSpec;

pub fn run(args: &BenchArgs) -> anyhow::Result<()> {
    if !args.sweep.is_empty() {
        return sweep::run(args);
    }
    let options = options(args);
    let report = bench::run(&options)?;
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

/// The bench's options from the command line, with the `--scale` preset applied.
pub fn options(args: &BenchArgs) -> BenchOptions {
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
    BenchOptions {
        workload: WorkloadSpec {
            marketplace: MarketplaceSpec {
                products,
                sellers,
                categories,
                brands,
                campaigns,
                seed: args.seed,
                ..MarketplaceSpec::default()
            },
            load_batch_size: args.load_batch_size,
            update_batch_sizes: args.batch_sizes.clone(),
            updates_per_round: args.updates_per_batch_size,
            new_campaign_share: args.new_campaign_share,
        },
        workers: args.workers.clone(),
        json_feed: !args.no_json_feed,
        baseline_budget: args.baseline_budget,
        baselines: !args.no_baselines,
    }
}
