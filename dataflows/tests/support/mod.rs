//! The harness of the dataflow tests: events in, one logical time per batch, changes out.

#![allow(dead_code)] // Each test file uses its own part.

use std::sync::mpsc;
use std::sync::{Arc, Mutex};

use dataflows::decode::Change;
use dataflows::model::{CampaignId, ProductId};
use dataflows::operators::{PairChanges, Upsert};
use dataflows::{
    render_eligibility, Campaign, Category, CategoryId, JobClock, PairChange, PairFigures, PairKey, Product,
    ProductPlacement, Time,
};
use timely::container::CapacityContainerBuilder;
use timely::dataflow::operators::capture::{Capture, Extract};
use timely::dataflow::operators::generic::operator::empty;
use timely::dataflow::operators::Input;
use timely::dataflow::{InputHandle, Scope, Stream};

/// One input record: product, campaign or category, key, new state.
#[derive(Clone, Debug)]
pub enum Event {
    Product(&'static str, Option<Product>),
    Campaign(&'static str, Option<Campaign>),
    Category(CategoryId, Option<Category>),
}

impl Event {
    /// The record as the decoder gives it, for the brute-force reference.
    pub fn as_record(&self) -> (String, Change) {
        match self {
            Event::Product(key, value) => (key.to_string(), Change::Product(*value)),
            Event::Campaign(key, value) => (key.to_string(), Change::Campaign(value.clone())),
            Event::Category(id, value) => (id.to_string(), Change::Category(*value)),
        }
    }
}

type Handle<D> = InputHandle<Time, CapacityContainerBuilder<Vec<D>>>;

/// The dataflow's three inputs.
pub struct Inputs {
    products: Handle<Upsert<ProductId, Product>>,
    campaigns: Handle<Upsert<CampaignId, Campaign>>,
    categories: Handle<Upsert<CategoryId, Category>>,
}

/// The three input streams, for `render_eligibility`.
pub type Streams<'scope> = (
    Stream<'scope, Time, Vec<Upsert<ProductId, Product>>>,
    Stream<'scope, Time, Vec<Upsert<CampaignId, Campaign>>>,
    Stream<'scope, Time, Vec<Upsert<CategoryId, Category>>>,
);

impl Inputs {
    pub fn new(scope: Scope<'_, Time>) -> (Inputs, Streams<'_>) {
        let (products, products_stream) = scope.new_input();
        let (campaigns, campaigns_stream) = scope.new_input();
        let (categories, categories_stream) = scope.new_input();
        (
            Inputs {
                products,
                campaigns,
                categories,
            },
            (products_stream, campaigns_stream, categories_stream),
        )
    }

    pub fn advance_to(&mut self, time: Time) {
        self.products.advance_to(time);
        self.campaigns.advance_to(time);
        self.categories.advance_to(time);
    }

    /// Sends a batch, each event with its position as sequence number.
    pub fn send(&mut self, batch: &[Event]) {
        self.send_some(batch, |_| true);
    }

    /// Sends what worker `index` of `peers` feeds of a batch under `placement`: `ByKey`,
    /// worker 0 feeds everything; `AsRead`, each product's records are fed by the worker its
    /// key's bytes sum to (as a Kafka partition has one reader), the rest by worker 0.
    pub fn send_placed(&mut self, batch: &[Event], placement: ProductPlacement, index: usize, peers: usize) {
        let reader = |key: &str| key.bytes().map(usize::from).sum::<usize>() % peers;
        match placement {
            ProductPlacement::ByKey if index == 0 => self.send(batch),
            ProductPlacement::ByKey => {}
            ProductPlacement::AsRead => self.send_some(batch, |event| match event {
                Event::Product(key, _) => reader(key) == index,
                _ => index == 0,
            }),
        }
    }

    /// Sends the events of a batch that `keep` takes, each with its position in the whole
    /// batch as sequence number.
    pub fn send_some(&mut self, batch: &[Event], keep: impl Fn(&Event) -> bool) {
        for (seq, event) in batch.iter().enumerate().filter(|(_, event)| keep(event)) {
            let seq = seq as u64;
            match event.clone() {
                Event::Product(key, value) => self.products.send(Upsert {
                    key: key.into(),
                    seq,
                    value,
                }),
                Event::Campaign(key, value) => self.campaigns.send(Upsert {
                    key: key.into(),
                    seq,
                    value,
                }),
                Event::Category(key, value) => self.categories.send(Upsert { key, seq, value }),
            }
        }
    }
}

/// Runs `batches` (batch `i` at time `i`) and returns the changes, sorted.
pub fn run(workers: usize, batches: Vec<Vec<Event>>) -> Vec<PairChange> {
    run_with(workers, batches, true)
}

/// As [`run`]; without `categories`, the dataflow gets an empty categories stream, as a
/// job without a categories source does, and the batches must hold no category.
pub fn run_with(workers: usize, batches: Vec<Vec<Event>>, categories: bool) -> Vec<PairChange> {
    run_placed(workers, batches, categories, ProductPlacement::ByKey)
}

/// As [`run_with`], the products placed and fed as [`Inputs::send_placed`] says.
pub fn run_placed(
    workers: usize,
    batches: Vec<Vec<Event>>,
    categories: bool,
    placement: ProductPlacement,
) -> Vec<PairChange> {
    let (send, recv) = mpsc::channel();
    let send = Arc::new(Mutex::new(send));
    let batches = Arc::new(batches);
    timely::execute(timely::Config::process(workers), move |worker| {
        let send = send.lock().unwrap().clone();
        let mut inputs = worker.dataflow::<Time, _, _>(|scope| {
            let (inputs, (products, campaigns, tree)) = Inputs::new(scope);
            let tree = match categories {
                true => tree,
                false => empty(scope),
            };
            render_eligibility(products, campaigns, tree, JobClock::stopped(scope), placement, None)
                .pair_changes(|_| 0)
                .capture_into(send);
            inputs
        });
        for (time, batch) in batches.iter().enumerate() {
            inputs.advance_to(time as Time);
            inputs.send_placed(batch, placement, worker.index(), worker.peers());
        }
    })
    .unwrap();
    sorted_changes(recv)
}

/// Every change a captured stream carried, in order.
pub fn sorted_changes(
    recv: mpsc::Receiver<timely::dataflow::operators::capture::Event<Time, Vec<PairChange>>>,
) -> Vec<PairChange> {
    let mut changes: Vec<PairChange> = recv.extract().into_iter().flat_map(|(_time, data)| data).collect();
    changes.sort();
    changes
}

/// Some figures (a pair that exists).
pub fn figures(eligible_products: u64, eligible_stock: u64) -> Option<PairFigures> {
    Some(PairFigures {
        eligible_products,
        eligible_stock,
    })
}

/// A change of `campaign`'s pair with `seller_id` at `time`.
pub fn change(
    time: Time,
    campaign: &str,
    seller_id: u64,
    new: Option<PairFigures>,
    previous: Option<PairFigures>,
) -> PairChange {
    PairChange {
        time,
        pair: PairKey {
            campaign_id: campaign.into(),
            seller_id,
        },
        figures: new,
        previous,
    }
}
