//! The report as Markdown: the phase tables, the goals, and the processes' figures
//! (`processes`), the file mode's and the tree phase's tables.

use std::fmt::Write as _;

use super::format::{format_ratio, mib};
use super::processes;
use super::report::{BenchReport, ImplementationReport, Kind};
use super::Phase;

impl BenchReport {
    /// Markdown: one table per phase, each figure with its ratio to the engine's.
    pub fn to_markdown(&self) -> String {
        let mut out = String::new();
        if self.implementations.is_empty() {
            // Only the tree phase ran.
            if let Some(tree) = &self.tree {
                out.push_str(&tree.to_markdown());
            }
            return out;
        }
        let _ = writeln!(
            out,
            "{} products, {} sellers, {} categories, {} brands, {} campaigns (seed {}); {} on {} cores; new campaign reaches {:.1}% of products.\n",
            self.products,
            self.sellers,
            self.categories,
            self.brands,
            self.campaigns,
            self.seed,
            self.machine.cpu,
            self.machine.cores,
            self.new_campaign_share * 100.0
        );
        let reference = self.engine(1).or_else(|| self.implementations.first());
        let Some(reference) = reference else {
            return out;
        };
        let _ = writeln!(
            out,
            "Ratio: the {}'s events/s over the row's (above 1: the engine is faster).\n",
            reference.name
        );
        for (position, phase) in reference.phases.iter().enumerate() {
            let _ = writeln!(out, "#### {}\n", phase.phase.label());
            let _ = writeln!(
                out,
                "| implementation | events/s | p50 ms | p99 ms | pair writes | batches timed | ratio | peak RSS MiB by its end |"
            );
            let _ = writeln!(out, "|---|---:|---:|---:|---:|---:|---:|---:|");
            for implementation in &self.implementations {
                let Some(result) = implementation.phases.get(position) else {
                    continue;
                };
                let ratio = phase.events_per_second / result.events_per_second.max(1e-9);
                let _ = writeln!(
                    out,
                    "| {} | {:.0} | {:.2} | {:.2} | {} | {}/{} | {} | {:.0} |",
                    implementation.name,
                    result.events_per_second,
                    result.p50_ms,
                    result.p99_ms,
                    result.writes,
                    result.batches_timed,
                    result.batches_total,
                    format_ratio(ratio),
                    mib(result.peak_rss_bytes)
                );
            }
            let _ = writeln!(out);
        }
        let memory = &self.memory;
        let _ = writeln!(
            out,
            "Inside the engine's first process: state {:.0} MiB ({:.0} B/product, {} worker(s); the bench's copy of the pairs, {:.0} MiB, taken out), workload {:.0} MiB, peak RSS {:.0} MiB. The bench's own peak RSS {:.0} MiB. Run took {:.0} s.\n",
            memory.engine_state_bytes as f64 / 1048576.0,
            memory.engine_state_bytes_per_product,
            memory.engine_workers,
            memory.collected_pairs_bytes as f64 / 1048576.0,
            memory.workload_bytes as f64 / 1048576.0,
            memory.peak_resident_bytes_after_engine as f64 / 1048576.0,
            self.peak_resident_bytes as f64 / 1048576.0,
            self.seconds
        );
        out.push_str(&processes::markdown(self));
        if let Some(file_mode) = &self.file_mode {
            out.push_str(&file_mode.to_markdown());
        }
        if let Some(tree) = &self.tree {
            out.push_str(&tree.to_markdown());
        }
        out.push_str(&self.goals());
        out
    }

    /// The goals on product updates, checked against this run.
    pub fn goals(&self) -> String {
        let mut out = String::new();
        let Some(incremental) = self.implementation(&Kind::Incremental) else {
            return out;
        };
        let _ = writeln!(out, "| goal on updates | batch | measured | met |");
        let _ = writeln!(out, "|---|---:|---:|---|");
        let updates = |report: &ImplementationReport| -> Vec<(usize, f64)> {
            report
                .phases
                .iter()
                .filter_map(|p| match p.phase {
                    Phase::Updates { batch_size } => Some((batch_size, p.events_per_second)),
                    _ => None,
                })
                .collect()
        };
        let base = updates(incremental);
        let mut goal = |label: &str, engine: Option<&ImplementationReport>, target: f64| {
            let Some(engine) = engine else {
                return;
            };
            for ((batch, rate), (_, base)) in updates(engine).into_iter().zip(&base) {
                let ratio = rate / base.max(1e-9);
                let met = if ratio >= target { "yes" } else { "no" };
                let _ = writeln!(out, "| {label} | {batch} | {} | {met} |", format_ratio(ratio));
            }
        };
        goal("engine 1 worker ≥ 0.5× hand-written incremental", self.engine(1), 0.5);
        goal("engine 2 workers > 1× hand-written incremental", self.engine(2), 1.0);
        for kind in [Kind::PerCampaign, Kind::PerPair] {
            let Some(baseline) = self.implementation(&kind) else {
                continue;
            };
            let Some(engine) = self.engine(1) else {
                continue;
            };
            for ((batch, rate), (_, base)) in updates(engine).into_iter().zip(updates(baseline)) {
                let ratio = rate / base.max(1e-9);
                let met = if ratio >= 100.0 { "yes" } else { "no" };
                let _ = writeln!(
                    out,
                    "| engine 1 worker ≥ 100× {} | {batch} | {} | {met} |",
                    baseline.name,
                    format_ratio(ratio)
                );
            }
        }
        out
    }
}
