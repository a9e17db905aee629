//! `eligibility-bench --sweep`: the bench at several product counts, each in a process of
//! its own so that each reads its own peak memory, then plots against products.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::Command;

use anyhow::{bail, Context};

use super::plot;
use super::report::BenchReport;
use super::Phase;
use crate::args::BenchArgs;

/// Products per seller in the sweep, as in the `--scale` preset.
const PRODUCTS_PER_SELLER: u64 = 200;

pub fn run(args: &BenchArgs) -> anyhow::Result<()> {
    let dir = args.plots.clone().unwrap_or_else(|| PathBuf::from("."));
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let exe = std::env::current_exe().context("cannot find the bench's own binary")?;
    let mut reports = Vec::new();
    for &products in &args.sweep {
        let json = dir.join(format!("sweep-{products}.json"));
        let sellers = (products / PRODUCTS_PER_SELLER).max(10);
        eprintln!("sweep: {products} products, {sellers} sellers");
        let mut command = Command::new(&exe);
        command.args(["--products", &products.to_string(), "--sellers", &sellers.to_string()]);
        command.args([
            "--categories",
            &args.marketplace.categories.to_string(),
            "--brands",
            &args.marketplace.brands.to_string(),
        ]);
        command.args([
            "--campaigns",
            &args.marketplace.campaigns.to_string(),
            "--seed",
            &args.marketplace.seed.to_string(),
        ]);
        command.args([
            "--workers",
            &join(&args.workers),
            "--batch-sizes",
            &join(&args.batch_sizes),
        ]);
        command.args(["--updates-per-batch-size", &args.updates_per_batch_size.to_string()]);
        command.args(["--load-batch-size", &args.load_batch_size.to_string()]);
        command.args(["--new-campaign-share", &args.new_campaign_share.to_string()]);
        command.args([
            "--baseline-budget",
            &humantime::format_duration(args.baseline_budget).to_string(),
        ]);
        command.arg("--json").arg(&json);
        // The sweep plots the in-memory phases only.
        command.args(["--no-file-mode", "--no-tree"]);
        if args.no_json_feed {
            command.arg("--no-json-feed");
        }
        if args.no_baselines {
            command.arg("--no-baselines");
        }
        let status = command.status().context("cannot start a sweep run")?;
        if !status.success() {
            bail!("the sweep run at {products} products failed: {status}");
        }
        let text = std::fs::read_to_string(&json).with_context(|| format!("cannot read {}", json.display()))?;
        reports.push(serde_json::from_str::<BenchReport>(&text)?);
        std::fs::remove_file(&json).ok();
    }
    let path = dir.join("sweep.json");
    std::fs::write(&path, serde_json::to_string_pretty(&reports)?)
        .with_context(|| format!("cannot write {}", path.display()))?;
    let table = summary(&reports);
    println!("{table}");
    if let Some(markdown) = &args.markdown {
        std::fs::write(markdown, &table).with_context(|| format!("cannot write {}", markdown.display()))?;
    }
    plot::sweep_plots(&reports, &dir)
}

fn join(values: &[usize]) -> String {
    values.iter().map(usize::to_string).collect::<Vec<_>>().join(",")
}

/// One row per product count: the headline figures.
fn summary(reports: &[BenchReport]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "| products | implementation | bootstrap events/s | new campaign ms | edit ms | state B/product | peak RSS MiB |"
    );
    let _ = writeln!(out, "|---:|---|---:|---:|---:|---:|---:|");
    for report in reports {
        for implementation in &report.implementations {
            let figure = |phase: Phase, get: fn(&super::measure::PhaseResult) -> f64| {
                implementation.phases.iter().find(|p| p.phase == phase).map_or(0.0, get)
            };
            let engine_memory = implementation.name == report.implementations[0].name;
            let _ = writeln!(
                out,
                "| {} | {} | {:.0} | {:.1} | {:.1} | {} | {} |",
                report.products,
                implementation.name,
                figure(Phase::Bootstrap, |p| p.events_per_second),
                figure(Phase::NewCampaign, |p| p.max_ms),
                figure(Phase::CampaignEdit, |p| p.max_ms),
                if engine_memory {
                    format!("{:.0}", report.memory.engine_state_bytes_per_product)
                } else {
                    String::new()
                },
                if engine_memory {
                    format!(
                        "{:.0}",
                        report.memory.peak_resident_bytes_after_engine as f64 / 1048576.0
                    )
                } else {
                    String::new()
                },
            );
        }
    }
    out
}
