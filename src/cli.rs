//! The command line: `eligibility run | generate | demo`.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

use crate::cluster::ClusterOptions;
use crate::commands;

#[derive(Parser, Debug)]
#[command(
    name = "eligibility",
    version,
    about = "Which campaigns can each seller join, and with how much: kept current incrementally."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
    /// Log filter (tracing's env-filter syntax); RUST_LOG overrides it.
    #[arg(long, global = true, default_value = "info")]
    pub log: String,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run the job: on an event log with --input, or on the sources and sinks of --config.
    Run(RunArgs),
    /// Write a synthetic marketplace event log (JSONL) for tests, demos and benchmarks.
    Generate(GenerateArgs),
    /// Generate a marketplace in memory, run the job on it and show what sellers would see.
    Demo(DemoArgs),
}

/// Cluster layout, shared by every command that starts timely workers.
#[derive(Args, Debug, Clone)]
pub struct ClusterArgs {
    /// Worker threads per process.
    #[arg(long, default_value_t = 1)]
    pub workers: usize,
    /// Number of processes in the cluster.
    #[arg(long, default_value_t = 1)]
    pub processes: usize,
    /// Index of this process, 0-based.
    #[arg(long, default_value_t = 0)]
    pub process: usize,
    /// File of host:port lines, one per process, in process order.
    #[arg(long)]
    pub hostfile: Option<PathBuf>,
}

impl From<&ClusterArgs> for ClusterOptions {
    fn from(args: &ClusterArgs) -> Self {
        ClusterOptions {
            workers: args.workers,
            processes: args.processes,
            process: args.process,
            hostfile: args.hostfile.clone(),
        }
    }
}

#[derive(Args, Debug)]
pub struct RunArgs {
    /// JSONL event log to read (SPEC.md's envelope per line).
    #[arg(long)]
    pub input: Option<PathBuf>,
    /// Where the change log goes; `-` for standard output.
    #[arg(long, default_value = "-")]
    pub output: PathBuf,
    /// Where rejected records go (JSONL); `-` for standard output.
    #[arg(long, default_value = "rejected.jsonl")]
    pub dead_letter: PathBuf,
    /// Lines per logical time: line n belongs to batch n / batch-size.
    #[arg(long, default_value_t = 1000)]
    pub batch_size: u64,
    /// Job configuration (TOML) for the Kafka and search sinks.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// How many batches the input may run ahead of the acknowledged output.
    #[arg(long, default_value_t = 64)]
    pub max_inflight_batches: u64,
    /// Seconds between progress lines on stderr; 0 for none.
    #[arg(long, default_value_t = 2.0)]
    pub progress_secs: f64,
    #[command(flatten)]
    pub cluster: ClusterArgs,
}

#[derive(Args, Debug, Clone)]
pub struct MarketplaceArgs {
    /// Products in the initial load.
    #[arg(long, default_value_t = 100_000)]
    pub products: u64,
    #[arg(long, default_value_t = 2_000)]
    pub sellers: u64,
    #[arg(long, default_value_t = 500)]
    pub categories: u64,
    #[arg(long, default_value_t = 1_000)]
    pub brands: u64,
    /// Campaigns in the initial load.
    #[arg(long, default_value_t = 50)]
    pub campaigns: u64,
    /// Events after the initial load.
    #[arg(long, default_value_t = 100_000)]
    pub updates: u64,
    /// Share of malformed records, 0 to 1.
    #[arg(long, default_value_t = 0.001)]
    pub malformed: f64,
    /// Zipf exponent of products per seller.
    #[arg(long, default_value_t = 0.9)]
    pub seller_skew: f64,
    /// Zipf exponent of products per category and brand.
    #[arg(long, default_value_t = 1.0)]
    pub category_skew: f64,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

impl From<&MarketplaceArgs> for crate::generate::MarketplaceSpec {
    fn from(args: &MarketplaceArgs) -> Self {
        crate::generate::MarketplaceSpec {
            products: args.products,
            sellers: args.sellers,
            categories: args.categories,
            brands: args.brands,
            campaigns: args.campaigns,
            updates: args.updates,
            malformed_share: args.malformed,
            seller_skew: args.seller_skew,
            category_skew: args.category_skew,
            seed: args.seed,
        }
    }
}

#[derive(Args, Debug)]
pub struct GenerateArgs {
    #[command(flatten)]
    pub marketplace: MarketplaceArgs,
    /// Where the event log goes; `-` for standard output.
    #[arg(long, default_value = "-")]
    pub output: PathBuf,
}

#[derive(Args, Debug)]
pub struct DemoArgs {
    #[command(flatten)]
    pub marketplace: MarketplaceArgs,
    /// Worker threads.
    #[arg(long, default_value_t = 2)]
    pub workers: usize,
    /// Lines per logical time.
    #[arg(long, default_value_t = 10_000)]
    pub batch_size: u64,
    /// Folder for the change log and the dead letters (default: a new temporary folder).
    #[arg(long)]
    pub output_dir: Option<PathBuf>,
    /// How many sellers to show.
    #[arg(long, default_value_t = 3)]
    pub show_sellers: usize,
}

fn init_logging(filter: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(filter));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .init();
}

pub fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(&cli.log);
    let result = match &cli.command {
        Command::Run(args) => commands::run::run(args),
        Command::Generate(args) => commands::generate::run(args),
        Command::Demo(args) => commands::demo::run(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::FAILURE
        }
    }
}
