//! `eligibility demo`: the embedded default. A marketplace generated in memory, the job
//! run on it with the JSONL sink, and what sellers would see, with how fast it went.
//! Needs no broker, no search cluster, nothing beyond the binary.

use std::collections::BTreeMap;

use std::sync::Arc;
use std::time::Instant;

use anyhow::Context;
use dataflows::instant::{format_rfc3339, EpochNanos};
use dataflows::model::{PairChange, PairFigures, SellerId, Time};

use crate::change_log::{fold_state, read_changes};
use crate::cli::DemoArgs;
use crate::cluster::ClusterOptions;
use crate::compose::{self, EventLogRun};
use crate::job;
use crate::metrics::Metrics;
use crate::source::event_log::EventLogInput;
use generate::{generate_to_vec, MarketplaceSpec};

/// The scheduled campaign the demo adds: it opens and closes while the job reads the log.
const FLASH_SALE: &str = "flash-sale";

pub fn run(args: &DemoArgs) -> anyhow::Result<()> {
    let mut spec = MarketplaceSpec::from(&args.marketplace);
    // Lines carry timestamps, the clock that opens and closes the flash sale.
    spec.line_timestamps = true;
    let dir = match &args.output_dir {
        Some(dir) => dir.clone(),
        None => std::env::temp_dir().join(format!("eligibility-demo-{}", std::process::id())),
    };
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let changes_path = dir.join("changes.jsonl");
    let rejected_path = dir.join("rejected.jsonl");

    println!(
        "Marketplace: {} products of {} sellers in {} categories ({}) and {} brands, {} campaigns, then {} updates ({:.1}% malformed).",
        spec.products,
        spec.sellers,
        spec.categories,
        match spec.tree_depth {
            0 => "flat".to_owned(),
            depth => format!("a tree {depth} levels deep"),
        },
        spec.brands,
        spec.campaigns,
        spec.updates,
        spec.malformed_share * 100.0
    );
    let started = Instant::now();
    let (log, flash_sale) = with_flash_sale(generate_to_vec(&spec), &spec);
    let log = Arc::new(log);
    let events = log.iter().filter(|b| **b == b'\n').count();
    println!(
        "Generated {events} events ({:.1} MB) in {:.2} s.",
        log.len() as f64 / 1e6,
        started.elapsed().as_secs_f64()
    );

    let cluster = ClusterOptions {
        workers: args.workers,
        ..ClusterOptions::default()
    };
    let run = EventLogRun {
        input: EventLogInput::Bytes(log),
        batch_size: args.batch_size,
        max_unacknowledged_records: 8 * args.batch_size,
        changes: &changes_path,
        dead_letters: &rejected_path,
    };
    let job = compose::event_log_job(run, cluster.clone(), Arc::new(Metrics::new()), None)?;
    let report = job::run(job)?;
    let seconds = report.elapsed.as_secs_f64();
    println!(
        "Ran the job on {} worker(s), {} events a batch: {} events in {seconds:.2} s, {:.0} events/s.",
        cluster.workers,
        args.batch_size,
        report.records_read,
        report.records_read as f64 / seconds.max(1e-9)
    );
    println!(
        "  {} upserts and {} deletes written to {}; {} rejected records in {}.",
        report.pairs_upserted,
        report.pairs_deleted,
        changes_path.display(),
        report.records_rejected,
        rejected_path.display()
    );

    let changes = read_changes(&changes_path)?;
    let state = fold_state(&changes);
    let mut by_seller: BTreeMap<SellerId, Vec<(String, PairFigures)>> = BTreeMap::new();
    for (pair, figures) in &state {
        by_seller
            .entry(pair.seller_id)
            .or_default()
            .push((pair.campaign_id.clone(), *figures));
    }
    println!(
        "  {} (seller, campaign) pairs exist; {} of {} sellers can join at least one campaign.",
        state.len(),
        by_seller.len(),
        spec.sellers
    );
    print_flash_sale(&flash_sale, &changes, args.batch_size);
    // The biggest sellers first: they have the most to show.
    let mut sellers: Vec<(&SellerId, &Vec<(String, PairFigures)>)> = by_seller.iter().collect();
    sellers.sort_by_key(|(seller, campaigns)| {
        let products: u64 = campaigns.iter().map(|(_, f)| f.eligible_products).max().unwrap_or(0);
        (std::cmp::Reverse(products), **seller)
    });
    for (seller, campaigns) in sellers.into_iter().take(args.show_sellers) {
        print_seller(*seller, campaigns);
    }
    Ok(())
}

/// The flash sale's window: from 40% to 70% of the log's clock.
struct FlashSale {
    starts_at: EpochNanos,
    ends_at: EpochNanos,
}

/// Puts a scheduled campaign first in `log`: products in stock, open from 40% to 70% of
/// the span of the lines' timestamps.
fn with_flash_sale(log: Vec<u8>, spec: &MarketplaceSpec) -> (Vec<u8>, FlashSale) {
    let lines = log.iter().filter(|b| **b == b'\n').count() as u64;
    let span_ms = lines.saturating_sub(1) * spec.line_interval_ms;
    let at = |share: u64| EpochNanos::from_millis(spec.start_at_ms + span_ms * share / 100);
    let sale = FlashSale {
        starts_at: at(40),
        ends_at: at(70),
    };
    let line = format!(
        r#"{{"topic": "campaigns", "key": "{FLASH_SALE}", "value": {{"min_stock": 1, "starts_at": "{}", "ends_at": "{}"}}, "timestamp": {}}}"#,
        format_rfc3339(sale.starts_at),
        format_rfc3339(sale.ends_at),
        spec.start_at_ms
    );
    let mut with = Vec::with_capacity(log.len() + line.len() + 1);
    with.extend_from_slice(line.as_bytes());
    with.push(b'\n');
    with.extend_from_slice(&log);
    (with, sale)
}

/// When the flash sale opened and closed, and what was written for it then.
fn print_flash_sale(sale: &FlashSale, changes: &[PairChange], batch_size: u64) {
    let mut by_time: BTreeMap<Time, (u64, u64)> = BTreeMap::new();
    for change in changes.iter().filter(|c| c.pair.campaign_id == FLASH_SALE) {
        let (upserts, deletes) = by_time.entry(change.time).or_default();
        match change.figures {
            Some(_) => *upserts += 1,
            None => *deletes += 1,
        }
    }
    println!(
        "\nScheduled campaign {FLASH_SALE}, open from {} to {}, created in line 0:",
        format_rfc3339(sale.starts_at),
        format_rfc3339(sale.ends_at)
    );
    let (Some((opened, (upserts, _))), Some((closed, (_, deletes)))) =
        (by_time.first_key_value(), by_time.last_key_value())
    else {
        println!("  no pairs: no product in stock, or the log ends before it opens");
        return;
    };
    let lines = |time: &Time| format!("lines {}-{}", time * batch_size, (time + 1) * batch_size - 1);
    println!(
        "  opened in batch {opened} ({}), the first whose clock reached its start: {upserts} pairs upserted",
        lines(opened)
    );
    println!(
        "  closed in batch {closed} ({}), the first whose clock reached its end: {deletes} pairs deleted",
        lines(closed)
    );
    let between = by_time.range(opened + 1..*closed).map(|(_, (u, d))| u + d).sum::<u64>();
    println!("  in between, product updates changed its pairs {between} times");
}

fn print_seller(seller: SellerId, campaigns: &[(String, PairFigures)]) {
    let mut by_products = campaigns.to_vec();
    by_products.sort_by(|a, b| b.1.eligible_products.cmp(&a.1.eligible_products).then(a.0.cmp(&b.0)));
    let mut by_stock = campaigns.to_vec();
    by_stock.sort_by(|a, b| b.1.eligible_stock.cmp(&a.1.eligible_stock).then(a.0.cmp(&b.0)));
    println!(
        "\nSeller {seller} can join {} campaigns. The first five:",
        campaigns.len()
    );
    println!(
        "  {:<37}   {:<37}",
        "sorted by eligible products", "sorted by eligible stock"
    );
    for row in 0..5.min(campaigns.len()) {
        let (a, b) = (&by_products[row], &by_stock[row]);
        println!(
            "  {:<8} {:>8} products {:>9} stock   {:<8} {:>9} stock {:>8} products",
            a.0, a.1.eligible_products, a.1.eligible_stock, b.0, b.1.eligible_stock, b.1.eligible_products
        );
    }
}
