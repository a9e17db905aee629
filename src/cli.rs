//! The command line: `eligibility run | generate | demo | produce | campaigns`.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::cluster::layers::ClusterArgs;

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
    /// Load an event log (JSONL) into the Kafka topics, creating them compacted if missing.
    Produce(ProduceArgs),
    /// A seller's campaigns from the Elasticsearch index, sorted by eligible products or stock.
    Campaigns(CampaignsArgs),
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
    /// Job configuration (TOML): Kafka source, sinks, batching; used without --input.
    #[arg(long, conflicts_with = "input")]
    pub config: Option<PathBuf>,
    /// With --config: where to start (committed, earliest, offsets:topic/partition=offset,…,
    /// timestamp:<ms|RFC 3339>); see docs/kafka.md.
    #[arg(long, default_value = "committed")]
    pub from: String,
    /// With --config: stop once every partition has been read to its end.
    #[arg(long)]
    pub stop_at_end: bool,
    /// How many lines the input may run past the last acknowledged batch: bounds the
    /// records held in memory at once (about two batches of 10,000 by default).
    #[arg(long, default_value_t = 20_000)]
    pub max_unacknowledged_records: u64,
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
    /// Levels of the category tree: 0 for flat categories (no `categories` records), 1 for
    /// top-level ones only. Campaigns then also name inner categories, and about 1% of the
    /// updates move subtrees, promote categories or delete category records.
    #[arg(long, default_value_t = 3)]
    pub tree_depth: u32,
    /// Children of each inner category.
    #[arg(long, default_value_t = generate::DEFAULT_TREE_FANOUT)]
    pub tree_fanout: u64,
    /// Give every line a "timestamp" (milliseconds since the Unix epoch), which file mode
    /// takes as its clock for campaign windows: --start-at for the first line, then
    /// --line-interval-ms more for each next one.
    #[arg(long)]
    pub line_timestamps: bool,
    /// The first line's timestamp, RFC 3339 with a zone (a whole millisecond, from 1970 on).
    #[arg(long, default_value = generate::DEFAULT_START_AT, value_parser = generate::parse_start_at_ms)]
    pub start_at: u64,
    /// Milliseconds between two lines' timestamps.
    #[arg(long, default_value_t = generate::DEFAULT_LINE_INTERVAL_MS)]
    pub line_interval_ms: u64,
    /// Share of campaigns, 0 to 1, with a window (starts_at / ends_at) that opens and closes
    /// within the log's timestamps: usually both bounds, sometimes one, now and then an empty
    /// window; campaign edits may move it. More than 0 turns on --line-timestamps (without
    /// them file mode's clock never moves and no scheduled campaign would ever open).
    #[arg(long, default_value_t = 0.0, value_parser = generate::parse_share)]
    pub scheduled_campaigns: f64,
}

impl From<&MarketplaceArgs> for generate::MarketplaceSpec {
    fn from(args: &MarketplaceArgs) -> Self {
        generate::MarketplaceSpec {
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
            tree_depth: args.tree_depth,
            tree_fanout: args.tree_fanout,
            line_timestamps: args.line_timestamps,
            start_at_ms: args.start_at,
            line_interval_ms: args.line_interval_ms,
            scheduled_campaigns: args.scheduled_campaigns,
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

#[derive(Args, Debug)]
pub struct ProduceArgs {
    /// The event log to load (SPEC.md's JSONL envelope per line).
    #[arg(long)]
    pub input: PathBuf,
    /// Take brokers, topic names and client settings from this job config.
    #[arg(long, conflicts_with = "brokers")]
    pub config: Option<PathBuf>,
    /// Bootstrap servers, when no --config is given.
    #[arg(long, default_value = "127.0.0.1:9092")]
    pub brokers: String,
    /// Partitions of each topic it creates.
    #[arg(long, default_value_t = 3)]
    pub partitions: i32,
    /// Replication factor of each topic it creates.
    #[arg(long, default_value_t = 1)]
    pub replication_factor: i32,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum CampaignSort {
    Products,
    Stock,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutputFormat {
    Table,
    Json,
}

#[derive(Args, Debug)]
pub struct CampaignsArgs {
    /// The seller whose campaigns to show.
    #[arg(long)]
    pub seller: u64,
    /// The figure to sort by, largest first.
    #[arg(long, value_enum, default_value = "products")]
    pub sort: CampaignSort,
    /// How many campaigns to show.
    #[arg(long, default_value_t = 20)]
    pub limit: usize,
    #[arg(long, value_enum, default_value = "table")]
    pub format: OutputFormat,
    /// Take the index and its connection from this job config's [sinks.elasticsearch].
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// The node to query, when no --config is given.
    #[arg(long, default_value = "http://127.0.0.1:9200")]
    pub url: String,
    /// The pairs index, when no --config is given.
    #[arg(long, default_value = "eligibility-pairs")]
    pub index: String,
}
