//! Drives the eligibility dataflow through the bench's phases on in-process workers.
//!
//! Every batch is one logical time. Each worker feeds its share of the batch (every
//! `peers`-th record), advances its inputs and steps until the probe has passed the time,
//! so a batch's latency runs from its first record in to its last pair change out. The
//! changes are taken by value at the end of the dataflow and checked after the clock stops
//! (`collected`), as a sink would take them: the bench's own bookkeeping is not timed.
//!
//! A workload without category records runs with the categories input closed at once, as
//! a job without a categories topic does: the tree's part of the dataflow then finishes at
//! once and costs the flat case nothing per time.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use anyhow::anyhow;
use dataflows::decode::{decode_category_id, decode_envelope, Change, Record};
use dataflows::model::{Campaign, CampaignId, Category, CategoryId, Product, ProductId, Time};
use dataflows::operators::{PairChanges, Upsert};
use dataflows::reference::PairState;
use dataflows::{render_eligibility, JobClock, PairChange, ProductPlacement};
use differential_dataflow::Hashable;
use timely::container::CapacityContainerBuilder;
use timely::dataflow::channels::pact::Pipeline;
use timely::dataflow::operators::{Input, Operator, Probe};
use timely::dataflow::ProbeHandle;

use super::collected::CollectedPairs;
use super::measure::{resident_bytes, PhaseResult};
use super::workload::Workload;
use super::Phase;

/// How the engine is fed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Feed {
    /// Records decoded before the clock starts.
    Decoded,
    /// Event-log lines, decoded on the workers inside the timed region.
    Json,
}

/// What one engine run measured, and the pairs it ended with.
pub struct EngineOutcome {
    pub phases: Vec<PhaseResult>,
    pub pairs: PairState,
    /// Resident memory before the dataflow was built and after the initial load.
    pub resident_before: u64,
    pub resident_loaded: u64,
    /// What the bench's own copy of the pairs took after the initial load, on all workers.
    pub collected_bytes: u64,
}

/// What worker 0 hands back: its phase timings and resident memory before and after loading.
type WorkerZero = (Vec<PhaseResult>, u64, u64);

/// Runs every phase on `workers` threads.
pub fn run(
    workload: Arc<Workload>,
    phases: Arc<Vec<Phase>>,
    workers: usize,
    feed: Feed,
) -> anyhow::Result<EngineOutcome> {
    let writes = Arc::new(AtomicU64::new(0));
    let collected_bytes = Arc::new(AtomicU64::new(0));
    let shared_collected_bytes = collected_bytes.clone();
    let results: Arc<Mutex<Option<WorkerZero>>> = Arc::new(Mutex::new(None));
    let config = match workers {
        1 => timely::Config::thread(),
        n => timely::Config::process(n),
    };
    let shared_results = results.clone();
    let tree = workload.has_categories();
    let guards = timely::execute(config, move |worker| {
        let index = worker.index();
        let peers = worker.peers();
        let resident_before = resident_bytes();
        let collected: Rc<RefCell<CollectedPairs>> = Rc::default();
        let probe = ProbeHandle::new();
        let (mut products, mut campaigns, categories) = worker.dataflow::<Time, _, _>(|scope| {
            let (products_in, products) = scope.new_input::<Vec<Upsert<ProductId, Product>>>();
            let (campaigns_in, campaigns) = scope.new_input::<Vec<Upsert<CampaignId, Campaign>>>();
            let (categories_in, categories) = scope.new_input::<Vec<Upsert<CategoryId, Category>>>();
            let local = collected.clone();
            let counter = writes.clone();
            // Probed after the changes are taken, so a passed time has all of them here.
            render_eligibility(
                products,
                campaigns,
                categories,
                JobClock::stopped(scope),
                ProductPlacement::ByKey,
                None,
            )
            .pair_changes(|pair| pair.hashed())
            .unary::<CapacityContainerBuilder<Vec<()>>, _, _, _>(Pipeline, "CollectPairs", |_, _| {
                move |input, _output| {
                    input.for_each(|_time, changes: &mut Vec<PairChange>| {
                        counter.fetch_add(changes.len() as u64, Ordering::Relaxed);
                        local.borrow_mut().receive(changes);
                    });
                }
            })
            .probe_with(&probe);
            (products_in, campaigns_in, categories_in)
        });
        // Dropped, the input is closed from the start.
        let mut categories = tree.then_some(categories);

        let mut time: Time = 0;
        let mut measured = Vec::with_capacity(phases.len());
        let mut resident_loaded = resident_before;
        for phase in phases.iter() {
            let batches = workload.batches(phase);
            let writes_before = writes.load(Ordering::SeqCst);
            let mut result = PhaseResult::new(phase.clone());
            let started = Instant::now();
            for batch in batches {
                let batch_started = Instant::now();
                for position in (index..batch.len()).step_by(peers) {
                    let record = match feed {
                        Feed::Decoded => batch.records[position].clone(),
                        Feed::Json => {
                            decode_envelope(batch.lines[position].as_bytes()).expect("the bench writes valid lines")
                        }
                    };
                    let seq = position as u64;
                    match record {
                        Record {
                            key,
                            change: Change::Product(value),
                        } => products.send(Upsert { key, seq, value }),
                        Record {
                            key,
                            change: Change::Campaign(value),
                        } => campaigns.send(Upsert { key, seq, value }),
                        Record {
                            key,
                            change: Change::Category(value),
                        } => {
                            let key = decode_category_id(&key).expect("a decoded category record has a decimal key");
                            categories
                                .as_mut()
                                .expect("a workload with category records keeps the input open")
                                .send(Upsert { key, seq, value })
                        }
                    }
                }
                time += 1;
                products.advance_to(time);
                campaigns.advance_to(time);
                if let Some(categories) = categories.as_mut() {
                    categories.advance_to(time);
                }
                while probe.less_than(&time) {
                    worker.step();
                }
                result.record_batch(batch.len(), batch_started.elapsed());
                collected.borrow_mut().apply_pending();
            }
            result.finish(
                started.elapsed().as_secs_f64(),
                writes.load(Ordering::SeqCst) - writes_before,
            );
            if matches!(phase, Phase::Bootstrap) {
                resident_loaded = resident_bytes();
                shared_collected_bytes.fetch_add(collected.borrow().footprint_bytes(), Ordering::SeqCst);
            }
            measured.push(result);
        }
        drop((products, campaigns, categories));
        while worker.step() {}
        if index == 0 {
            *shared_results.lock().expect("poisoned") = Some((measured, resident_before, resident_loaded));
        }
        let mut collected = std::mem::take(&mut *collected.borrow_mut());
        collected.apply_pending();
        collected.into_pairs()
    })
    .map_err(|e| anyhow!("cannot start the timely workers: {e}"))?;

    let mut pairs = PairState::new();
    for outcome in guards.join() {
        let state = outcome
            .map_err(|e| anyhow!("a worker failed: {e}"))?
            .map_err(|problem| anyhow!("the engine broke the output contract: {problem}"))?;
        pairs.extend(state);
    }
    let (phases, resident_before, resident_loaded) = results
        .lock()
        .expect("poisoned")
        .take()
        .ok_or_else(|| anyhow!("worker 0 reported nothing"))?;
    Ok(EngineOutcome {
        phases,
        pairs,
        resident_before,
        resident_loaded,
        collected_bytes: collected_bytes.load(Ordering::SeqCst),
    })
}
