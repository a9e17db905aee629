//! The bench's command line: `eligibility-bench [options]`, and the hidden commands its
//! child processes run.

use std::path::PathBuf;

use anyhow::Context;
use clap::{Args, Parser, Subcommand};
use generate::MarketplaceSpec;

use crate::file_mode::FileModeOptions;
use crate::rebuild::{self, RebuildOptions, TopicSource, Topics};
use crate::tree::TreeOptions;
use crate::workload::WorkloadSpec;
use crate::BenchOptions;

#[derive(Parser, Debug)]
#[command(
    name = "eligibility-bench",
    version,
    args_conflicts_with_subcommands = true,
    about = "Measure the engine against per-pair recompute, per-campaign aggregation and a \
             hand-written incremental implementation, side by side."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Subcommands>,
    #[command(flatten)]
    pub bench: BenchArgs,
    /// Log filter (tracing's env-filter syntax); RUST_LOG overrides it.
    #[arg(long, global = true, default_value = "info")]
    pub log: String,
}

/// The Kafka rebuild bench, and (hidden) what the bench's own child processes run.
#[derive(Subcommand, Debug)]
pub enum Subcommands {
    /// Measure a restart: the job's rebuild from the Kafka topics against a plain consumer
    /// of the same topics (the floor), on 1 and 2 workers and on 2 processes.
    Rebuild(RebuildArgs),
    /// Measure a scheduled campaign opening and closing against an edit of `active` on the
    /// same campaign (issue 26), on 1 and 2 workers.
    Window(WindowArgs),
    /// The floor alone: read the topics, decode, keep the latest value per key; prints
    /// what it read as JSON.
    #[command(hide = true)]
    Floor(FloorArgs),
    /// Draw the plot of a rebuild report written earlier with `rebuild --json`.
    #[command(hide = true)]
    PlotRebuild(PlotRebuildArgs),
    /// One bench implementation in a process of its own.
    #[command(hide = true)]
    Child(BenchChildArgs),
    /// File mode written by hand, which the bench measures `eligibility run --input` against.
    #[command(hide = true)]
    FileBaseline(BenchFileBaselineArgs),
}

/// The generated marketplace's size, shared by the engine bench and the window bench.
#[derive(Args, Debug, Clone)]
pub struct MarketplaceArgs {
    /// Products in the marketplace (the initial load).
    #[arg(long, default_value_t = 1_000_000)]
    pub products: u64,
    #[arg(long, default_value_t = 5_000)]
    pub sellers: u64,
    #[arg(long, default_value_t = 1_000)]
    pub categories: u64,
    #[arg(long, default_value_t = 2_000)]
    pub brands: u64,
    /// Campaigns in the initial load (the window bench's: besides the one it measures).
    #[arg(long, default_value_t = 100)]
    pub campaigns: u64,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

impl MarketplaceArgs {
    pub fn spec(&self) -> MarketplaceSpec {
        MarketplaceSpec {
            products: self.products,
            sellers: self.sellers,
            categories: self.categories,
            brands: self.brands,
            campaigns: self.campaigns,
            seed: self.seed,
            ..MarketplaceSpec::default()
        }
    }
}

#[derive(Args, Debug, Clone)]
pub struct BenchArgs {
    #[command(flatten)]
    pub marketplace: MarketplaceArgs,
    /// The large preset: 10 million products, 50,000 sellers, 500 campaigns (overrides
    /// the size options).
    #[arg(long)]
    pub scale: bool,
    /// Engine worker counts to measure, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,2")]
    pub workers: Vec<usize>,
    /// Batch sizes of the product-update phase, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,10,100,1000,10000")]
    pub batch_sizes: Vec<usize>,
    /// Product updates per batch size.
    #[arg(long, default_value_t = 20_000)]
    pub updates_per_batch_size: usize,
    /// Events per batch (logical time) during the initial load.
    #[arg(long, default_value_t = 100_000)]
    pub load_batch_size: usize,
    /// Share of the products the new campaign reaches, in (0, 1].
    #[arg(long, default_value_t = 0.1)]
    pub new_campaign_share: f64,
    /// Time a baseline may spend on one phase before the rest is applied untimed.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    pub baseline_budget: std::time::Duration,
    /// Skip the engine runs fed event-log lines (JSON decode inside the timed region).
    #[arg(long)]
    pub no_json_feed: bool,
    /// Run the engine only.
    #[arg(long)]
    pub no_baselines: bool,
    /// Write the results as JSON here.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Write the result tables (Markdown) here, as well as to stdout.
    #[arg(long)]
    pub markdown: Option<PathBuf>,
    /// Draw the plots (PNG) into this directory.
    #[arg(long)]
    pub plots: Option<PathBuf>,
    /// Product counts, comma-separated: run the bench once per count, each in a process
    /// of its own (sellers scale along), and plot figures against products.
    #[arg(long, value_delimiter = ',')]
    pub sweep: Vec<u64>,
    /// Events after the initial load in the file-mode comparison's event log.
    #[arg(long, default_value_t = 100_000)]
    pub file_updates: u64,
    /// Lines per logical time in the file-mode comparison.
    #[arg(long, default_value_t = 10_000)]
    pub file_batch_size: u64,
    /// Skip the file-mode comparison (`eligibility run` against a hand-written equivalent).
    #[arg(long)]
    pub no_file_mode: bool,
    /// Folder for the file-mode event log and outputs [default: a new one in the temp dir].
    #[arg(long)]
    pub work_dir: Option<PathBuf>,
    /// Levels of the tree phase's category tree (at least 2).
    #[arg(long, default_value_t = 5)]
    pub tree_depth: u32,
    /// Children of each inner category in the tree phase.
    #[arg(long, default_value_t = generate::DEFAULT_TREE_FANOUT)]
    pub tree_fanout: u64,
    /// Share of the products the tree phase's moved subtree should hold, in (0, 1].
    #[arg(long, default_value_t = 0.05)]
    pub tree_move_share: f64,
    /// Skip the tree phase.
    #[arg(long, conflicts_with = "tree_only")]
    pub no_tree: bool,
    /// Run the tree phase only (no main phases, no file mode).
    #[arg(long)]
    pub tree_only: bool,
}

#[derive(Args, Debug, Clone)]
pub struct WindowArgs {
    #[command(flatten)]
    pub marketplace: MarketplaceArgs,
    /// Share of the products the measured campaign reaches, in (0, 1].
    #[arg(long, default_value_t = 1.0 / 3.0)]
    pub share: f64,
    /// Rounds of open, close, activate, deactivate.
    #[arg(long, default_value_t = 7)]
    pub rounds: usize,
    /// Worker counts, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,2")]
    pub workers: Vec<usize>,
    /// Write the results as JSON here.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Write the table (Markdown) here, as well as to stdout.
    #[arg(long)]
    pub markdown: Option<PathBuf>,
}

impl WindowArgs {
    pub fn options(&self) -> crate::window::WindowOptions {
        crate::window::WindowOptions {
            marketplace: self.marketplace.spec(),
            share: self.share,
            rounds: self.rounds,
            workers: self.workers.clone(),
        }
    }
}

#[derive(Args, Debug, Clone)]
pub struct RebuildArgs {
    /// Kafka bootstrap servers.
    #[arg(long, env = "KAFKA_BROKERS", default_value = "127.0.0.1:9092")]
    pub brokers: String,
    /// Products of the generated marketplace.
    #[arg(long, default_value_t = 1_000_000)]
    pub products: u64,
    #[arg(long, default_value_t = 5_000)]
    pub sellers: u64,
    #[arg(long, default_value_t = 500)]
    pub categories: u64,
    #[arg(long, default_value_t = 1_000)]
    pub brands: u64,
    #[arg(long, default_value_t = 500)]
    pub campaigns: u64,
    /// Levels of the category tree (`eligibility generate --tree-depth`).
    #[arg(long, default_value_t = 3)]
    pub tree_depth: u32,
    #[arg(long, default_value_t = generate::DEFAULT_TREE_FANOUT)]
    pub tree_fanout: u64,
    /// Share of malformed records, 0 to 1.
    #[arg(long, default_value_t = 0.001)]
    pub malformed: f64,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Issue 25's size: 10 million products, 50,000 sellers, 5,000 categories, 10,000
    /// brands, 500 campaigns (overrides the size options).
    #[arg(long)]
    pub scale: bool,
    /// Partitions of each generated topic.
    #[arg(long, default_value_t = 6)]
    pub partitions: i32,
    /// Read these topics as they are instead of generating a marketplace.
    #[arg(long, requires = "campaigns_topic")]
    pub products_topic: Option<String>,
    #[arg(long, requires = "products_topic")]
    pub campaigns_topic: Option<String>,
    /// With --products-topic: the category tree's topic (absent: a flat marketplace).
    #[arg(long, requires = "products_topic", default_value = "categories")]
    pub categories_topic: String,
    /// Skip the cluster of 2 processes.
    #[arg(long)]
    pub no_processes: bool,
    /// Run every measurement this many times, round after round, and report each run's
    /// median wall time and highest peak (a VM's noise moves single runs by 10% and more).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub rounds: u32,
    /// Folder for the event log, configs and change logs [default: a new one in the temp dir].
    #[arg(long)]
    pub work_dir: Option<PathBuf>,
    /// Keep the change logs, configs and stderr files in the folder.
    #[arg(long)]
    pub keep: bool,
    /// Write the results as JSON here.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Write the tables (Markdown) here, as well as to stdout.
    #[arg(long)]
    pub markdown: Option<PathBuf>,
    /// Draw the runs' wall time and peak RSS against the floor's, as a PNG here.
    #[arg(long)]
    pub plot: Option<PathBuf>,
}

#[derive(Args, Debug, Clone)]
pub struct PlotRebuildArgs {
    /// The report, as `rebuild --json` wrote it.
    #[arg(long)]
    pub json: PathBuf,
    /// Where the PNG goes.
    #[arg(long)]
    pub plot: PathBuf,
}

impl RebuildArgs {
    pub fn options(&self) -> anyhow::Result<RebuildOptions> {
        let source = match (&self.products_topic, &self.campaigns_topic) {
            (Some(products), Some(campaigns)) => TopicSource::Existing(Topics {
                products: products.clone(),
                campaigns: campaigns.clone(),
                categories: self.categories_topic.clone(),
            }),
            _ => {
                let (products, sellers, categories, brands, campaigns) = if self.scale {
                    (10_000_000, 50_000, 5_000, 10_000, 500)
                } else {
                    (
                        self.products,
                        self.sellers,
                        self.categories,
                        self.brands,
                        self.campaigns,
                    )
                };
                TopicSource::Generate {
                    marketplace: MarketplaceSpec {
                        products,
                        sellers,
                        categories,
                        brands,
                        campaigns,
                        updates: 0,
                        malformed_share: self.malformed,
                        seed: self.seed,
                        tree_depth: self.tree_depth,
                        tree_fanout: self.tree_fanout,
                        ..MarketplaceSpec::default()
                    },
                    partitions: self.partitions,
                }
            }
        };
        Ok(RebuildOptions {
            brokers: self.brokers.clone(),
            source,
            exe: std::env::current_exe().context("cannot find the bench's own binary")?,
            engine: engine_binary()?,
            dir: self.work_dir.clone().unwrap_or_else(rebuild::default_dir),
            keep: self.keep,
            processes: !self.no_processes,
            rounds: self.rounds as usize,
        })
    }
}

#[derive(Args, Debug)]
pub struct FloorArgs {
    #[arg(long, env = "KAFKA_BROKERS", default_value = "127.0.0.1:9092")]
    pub brokers: String,
    #[arg(long, default_value = "products")]
    pub products_topic: String,
    #[arg(long, default_value = "campaigns")]
    pub campaigns_topic: String,
    /// A missing categories topic is read as a flat marketplace, as the job does.
    #[arg(long, default_value = "categories")]
    pub categories_topic: String,
}

impl FloorArgs {
    pub fn topics(&self) -> Topics {
        Topics {
            products: self.products_topic.clone(),
            campaigns: self.campaigns_topic.clone(),
            categories: self.categories_topic.clone(),
        }
    }
}

#[derive(Args, Debug)]
pub struct BenchChildArgs {
    /// The task, as JSON (`bench::child::ChildTask`).
    #[arg(long)]
    pub task: String,
}

#[derive(Args, Debug)]
pub struct BenchFileBaselineArgs {
    #[arg(long)]
    pub input: PathBuf,
    #[arg(long)]
    pub output: PathBuf,
    #[arg(long)]
    pub dead_letter: PathBuf,
    #[arg(long, default_value_t = 1000)]
    pub batch_size: u64,
}

impl BenchArgs {
    /// The bench's options, with the `--scale` preset applied.
    pub fn options(&self) -> anyhow::Result<BenchOptions> {
        let marketplace = match self.scale {
            true => MarketplaceSpec {
                products: 10_000_000,
                sellers: 50_000,
                categories: 5_000,
                brands: 10_000,
                campaigns: 500,
                ..self.marketplace.spec()
            },
            false => self.marketplace.spec(),
        };
        let file_mode = match self.no_file_mode || self.tree_only {
            true => None,
            false => Some(FileModeOptions {
                marketplace: MarketplaceSpec {
                    updates: self.file_updates,
                    ..marketplace.clone()
                },
                batch_size: self.file_batch_size,
                workers: self.workers.clone(),
                engine: engine_binary()?,
                dir: self
                    .work_dir
                    .clone()
                    .unwrap_or_else(|| std::env::temp_dir().join(format!("eligibility-bench-{}", std::process::id()))),
            }),
        };
        Ok(BenchOptions {
            workload: WorkloadSpec {
                marketplace,
                load_batch_size: self.load_batch_size,
                update_batch_sizes: self.batch_sizes.clone(),
                updates_per_round: self.updates_per_batch_size,
                new_campaign_share: self.new_campaign_share,
                tree: None,
            },
            workers: self.workers.clone(),
            json_feed: !self.no_json_feed,
            baseline_budget: self.baseline_budget,
            baselines: !self.no_baselines,
            exe: std::env::current_exe().context("cannot find the bench's own binary")?,
            file_mode,
            main: !self.tree_only,
            tree: (!self.no_tree).then_some(TreeOptions {
                depth: self.tree_depth,
                fanout: self.tree_fanout,
                move_share: self.tree_move_share,
            }),
        })
    }
}

/// The `eligibility` binary the file mode runs: `$ELIGIBILITY_BIN`, else the one built
/// beside this binary (the same `target/<profile>` folder, or its parent for test binaries).
pub fn engine_binary() -> anyhow::Result<PathBuf> {
    if let Some(path) = std::env::var_os("ELIGIBILITY_BIN") {
        return Ok(PathBuf::from(path));
    }
    let exe = std::env::current_exe().context("cannot find the bench's own binary")?;
    exe.ancestors()
        .skip(1)
        .take(2)
        .map(|dir| dir.join("eligibility"))
        .find(|candidate| candidate.is_file())
        .with_context(|| {
            format!(
                "no `eligibility` binary beside {}: build it (`cargo build --release -p eligibility`) \
                 or set ELIGIBILITY_BIN",
                exe.display()
            )
        })
}
