//! The report's tables of what each implementation's process cost, and the engine
//! against the hand-written incremental phase by phase, in time and in peak memory.

use std::fmt::Write as _;

use super::format::{format_ratio, mib};
use super::report::{BenchReport, ImplementationReport, Kind};

/// Both tables, as Markdown.
pub fn markdown(report: &BenchReport) -> String {
    let mut out = processes(report);
    out.push_str(&engine_against_incremental(report));
    out
}

/// One row per implementation: its process's wall time and peak, and the peak less the
/// workload, each peak also over the hand-written incremental's.
fn processes(report: &BenchReport) -> String {
    let workload = &report.workload;
    let incremental = report.implementation(&Kind::Incremental);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "#### processes\n\nEach implementation ran in a process of its own; peak RSS is the kernel's `ru_maxrss` of the reaped process. The workload alone: {:.0} MiB peak, {:.0} MiB resident once built (taken out in \"peak − workload\"), built in {:.1} s. No figure can be below the bench's own peak at spawn, at most {:.0} MiB.\n",
        mib(workload.process.peak_rss_bytes),
        mib(workload.resident_after_build_bytes),
        workload.process.wall_seconds,
        mib(report.peak_resident_bytes),
    );
    let _ = writeln!(
        out,
        "| implementation | process wall s | peak RSS MiB | peak − workload MiB | peak vs hand-written | peak − workload vs hand-written |"
    );
    let _ = writeln!(out, "|---|---:|---:|---:|---:|---:|");
    for implementation in &report.implementations {
        let own = implementation.peak_less_workload_bytes(workload);
        let (peak_ratio, own_ratio) = match incremental {
            Some(base) => (
                format_ratio(ratio(
                    implementation.process.peak_rss_bytes,
                    base.process.peak_rss_bytes,
                )),
                format_ratio(ratio(own, base.peak_less_workload_bytes(workload))),
            ),
            None => (String::new(), String::new()),
        };
        let _ = writeln!(
            out,
            "| {} | {:.2} | {:.0} | {:.0} | {peak_ratio} | {own_ratio} |",
            implementation.name,
            implementation.process.wall_seconds,
            mib(implementation.process.peak_rss_bytes),
            mib(own),
        );
    }
    let _ = writeln!(out);
    out
}

/// Per phase and engine run: its time per event and its peak by the phase's end, over
/// the hand-written incremental's (above 1: the engine spends more).
fn engine_against_incremental(report: &BenchReport) -> String {
    let mut out = String::new();
    let Some(incremental) = report.implementation(&Kind::Incremental) else {
        return out;
    };
    let engines: Vec<&ImplementationReport> = report
        .implementations
        .iter()
        .filter(|i| matches!(i.kind, Kind::Engine { .. }))
        .collect();
    let _ = writeln!(
        out,
        "#### engine / hand-written incremental\n\nTime: seconds per event over the hand-written's. Peak: peak RSS by the end of the phase over the hand-written's, workload included.\n"
    );
    let _ = writeln!(out, "| phase | engine | time | peak RSS |");
    let _ = writeln!(out, "|---|---|---:|---:|");
    for base in &incremental.phases {
        for engine in &engines {
            let Some(phase) = engine.phases.iter().find(|p| p.phase == base.phase) else {
                continue;
            };
            let time = base.events_per_second / phase.events_per_second.max(1e-9);
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} |",
                base.phase.label(),
                engine.name,
                format_ratio(time),
                format_ratio(ratio(phase.peak_rss_bytes, base.peak_rss_bytes))
            );
        }
    }
    let _ = writeln!(out);
    out
}

fn ratio(numerator: u64, denominator: u64) -> f64 {
    numerator as f64 / denominator.max(1) as f64
}
