//! The tree phase: the engine and the baselines on a marketplace whose categories form a
//! tree, against the same marketplace kept flat (`workload`).
//!
//! Each implementation runs each case in a process of its own: the load, then one subtree
//! move, then one new campaign on a top-level category, each one batch. The report gives
//! each phase's time and pair writes in both cases side by side. Every run of both cases
//! must end with the same pairs, or the bench fails.

pub mod workload;

use std::fmt::Write as _;
use std::path::Path;

use anyhow::bail;
use serde::{Deserialize, Serialize};

use self::workload::{TreeCase, TreeFigures, TreePhaseSpec};
use super::child::{self, ChildTask};
use super::engine::Feed;
use super::format::format_ratio;
use super::kind::Kind;
use super::measure::PhaseResult;
use super::process::ProcessFigures;
use super::workload::WorkloadSpec;
use super::{check_agreement, BenchOptions, Phase};

/// The tree phase's settings.
#[derive(Clone, Debug)]
pub struct TreeOptions {
    /// Levels of the tree (at least 2, for a subtree to move).
    pub depth: u32,
    /// Children of each inner category.
    pub fanout: u64,
    /// The share of the products the moved subtree should hold.
    pub move_share: f64,
}

/// One implementation on one case.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct TreeRun {
    pub name: String,
    pub kind: Kind,
    pub case: TreeCase,
    pub phases: Vec<PhaseResult>,
    pub process: ProcessFigures,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct TreeReport {
    pub products: usize,
    pub campaigns: u64,
    pub depth: u32,
    pub fanout: u64,
    pub figures: TreeFigures,
    /// Every implementation on the tree, then on the flat marketplace.
    pub runs: Vec<TreeRun>,
}

/// The workload spec of one case: the bench's marketplace with the tree's shape.
pub fn spec(options: &BenchOptions, tree: &TreeOptions, case: TreeCase) -> WorkloadSpec {
    let mut spec = options.workload.clone();
    spec.marketplace.tree_depth = tree.depth;
    spec.marketplace.tree_fanout = tree.fanout;
    spec.update_batch_sizes = Vec::new();
    spec.tree = Some(TreePhaseSpec {
        case,
        move_share: tree.move_share,
    });
    spec
}

/// Runs every implementation on both cases; fails unless they all end with the same pairs.
pub fn run(exe: &Path, options: &BenchOptions, tree: &TreeOptions) -> anyhow::Result<TreeReport> {
    if tree.depth < 2 {
        bail!("the tree phase needs a tree of at least 2 levels, for a subtree to move");
    }
    let mut kinds: Vec<Kind> = options
        .workers
        .iter()
        .map(|&workers| Kind::Engine {
            workers,
            feed: Feed::Decoded,
        })
        .collect();
    if options.baselines {
        kinds.extend([Kind::Incremental, Kind::PerCampaign, Kind::PerPair]);
    }
    let mut reference = None;
    let mut runs = Vec::new();
    let mut built = None;
    for case in [TreeCase::Tree, TreeCase::Flat] {
        let mut digest = None;
        for kind in &kinds {
            let name = format!("{}, {}", kind.name(), case.name());
            eprintln!("tree phase: running {name}");
            let task = ChildTask::Implementation {
                workload: spec(options, tree, case),
                kind: Some(kind.clone()),
                baseline_budget: options.baseline_budget,
            };
            let (output, process) = child::spawn(exe, &task)?;
            if *digest.get_or_insert(output.workload_digest) != output.workload_digest {
                bail!("{name} built another workload from the same spec and seed");
            }
            // The tree and the flat marketplace hold the same pairs.
            check_agreement(&name, &output, &mut reference)?;
            let figures = output.tree.clone().unwrap_or_default();
            match &built {
                None => built = Some((output.products, figures)),
                Some((_, first)) if *first != figures => bail!("{name} saw another tree phase: {figures:?}"),
                Some(_) => {}
            }
            runs.push(TreeRun {
                name: kind.name(),
                kind: kind.clone(),
                case,
                phases: output.phases,
                process,
            });
        }
    }
    let (products, figures) = built.unwrap_or_default();
    Ok(TreeReport {
        products,
        campaigns: options.workload.marketplace.campaigns,
        depth: tree.depth,
        fanout: tree.fanout,
        figures,
        runs,
    })
}

/// A phase's time in ms: the one batch's latency, or the whole phase's wall time.
fn phase_ms(result: &PhaseResult) -> f64 {
    match result.batches_total {
        1 => result.max_ms,
        _ => result.seconds * 1e3,
    }
}

impl TreeReport {
    /// One implementation's figures for `phase` in `case`.
    pub fn phase(&self, kind: &Kind, case: TreeCase, phase: &Phase) -> Option<&PhaseResult> {
        self.runs
            .iter()
            .find(|run| &run.kind == kind && run.case == case)?
            .phases
            .iter()
            .find(|p| &p.phase == phase)
    }

    pub fn to_markdown(&self) -> String {
        let f = &self.figures;
        let mut out = String::new();
        let parent = |p: Option<u64>| p.map_or_else(|| "the top level".to_owned(), |p| format!("category {p}"));
        let _ = writeln!(
            out,
            "#### category trees\n\n{} products, {} campaigns; {} categories in a tree of {} levels, fan-out {} ({} top-level). Flat: the same marketplace with no category records, each campaign listing every category it names with all those below it.\n",
            self.products, self.campaigns, f.categories, f.levels, self.fanout, f.top_level_categories,
        );
        let _ = writeln!(
            out,
            "- **subtree move**: category {} ({} categories, {} products, {:.1}%) moves from under {} to under {}; {} active campaigns name a category above its old or new place. Flat: {} campaign edits (each campaign whose list the move changes).",
            f.moved,
            f.moved_categories,
            f.moved_products,
            f.moved_share * 100.0,
            parent(f.moved_from),
            parent(f.moved_to),
            f.campaigns_above,
            f.flat_campaign_edits,
        );
        let _ = writeln!(
            out,
            "- **top-level campaign**: a new campaign on top-level category {} ({} products, {:.1}%). Flat: a new campaign listing its {} categories.\n",
            f.top_level,
            f.top_level_products,
            f.top_level_share * 100.0,
            f.top_level_flat_list,
        );
        let _ = writeln!(
            out,
            "| phase | implementation | tree ms | flat ms | tree / flat | pair writes, tree | pair writes, flat |"
        );
        let _ = writeln!(out, "|---|---|---:|---:|---:|---:|---:|");
        let kinds: Vec<&TreeRun> = self.runs.iter().filter(|run| run.case == TreeCase::Tree).collect();
        for phase in [Phase::Bootstrap, Phase::SubtreeMove, Phase::TopLevelCampaign] {
            for run in &kinds {
                let tree = self.phase(&run.kind, TreeCase::Tree, &phase);
                let flat = self.phase(&run.kind, TreeCase::Flat, &phase);
                let (Some(tree), Some(flat)) = (tree, flat) else {
                    continue;
                };
                let sampled = |p: &PhaseResult| if p.sampled() { " (sampled)" } else { "" };
                let _ = writeln!(
                    out,
                    "| {} | {} | {:.1}{} | {:.1}{} | {} | {} | {} |",
                    phase.label(),
                    run.name,
                    phase_ms(tree),
                    sampled(tree),
                    phase_ms(flat),
                    sampled(flat),
                    format_ratio(phase_ms(tree) / phase_ms(flat).max(1e-9)),
                    tree.writes,
                    flat.writes,
                );
            }
        }
        let _ = writeln!(out);
        out
    }
}
