//! The workers of a process lend each other their shares of the products at a rebuild's end.
//!
//! A worker holds the products of its partitions (or of its key hashes), so nearly every
//! seller has products on every worker, and each worker's end of a rebuild summed its own
//! partial total for nearly every pair: on two workers, twice the pairs, exchanged and
//! added up again (21.3M partial totals for 10.7M pairs at 10M products). At the end no
//! share changes until every worker is done, so each worker lends its share, read-only,
//! to the others of its process, and the workers sum the sellers of every share between
//! them, each seller once: one total per pair and process, as on one worker.
//!
//! ```text
//!   each worker: index its share -> lend it -> (all lent) claim sellers and sum each
//!                from every share, until none is left -> (all done) take its share back
//! ```
//!
//! The sellers are claimed a few at a time from one list, largest first, not dealt out
//! beforehand: a seller's cost is its products and its pairs, and neither a hash of the
//! seller nor an even split of the products left the workers even (one of two summed
//! 15% and 45% longer than the other at 10M products, whose sellers' sizes are skewed).
//!
//! Processes do not share memory: each still sums its own products (one total per pair
//! and process, added up where the pair's totals live).

use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use crate::model::SellerId;
use crate::state::ProductTable;

/// The shares the workers of one process lend each other; cloned into every worker.
#[derive(Clone)]
pub struct LentShares(Arc<Lending>);

struct Lending {
    /// Per worker of the process: its share, while lent.
    shares: Mutex<Vec<Option<Arc<ProductTable>>>>,
    /// Every seller of the shares, largest first, once all are lent.
    sellers: OnceLock<Vec<SellerId>>,
    /// The first seller of the list not yet claimed.
    claimed: AtomicUsize,
    /// How many workers no longer read the shares.
    done: AtomicUsize,
}

impl LentShares {
    /// For the `workers` workers of one process, exactly: timely numbers a process's
    /// workers one after another, so worker `i` lends into slot `i % workers`. A worker
    /// given a `LentShares` of its own (`workers` 1) sums every seller of its share alone.
    pub fn new(workers: usize) -> Self {
        let workers = workers.max(1);
        LentShares(Arc::new(Lending {
            shares: Mutex::new(vec![None; workers]),
            sellers: OnceLock::new(),
            claimed: AtomicUsize::new(0),
            done: AtomicUsize::new(0),
        }))
    }

    fn workers(&self) -> usize {
        self.slots().len()
    }

    fn slots(&self) -> std::sync::MutexGuard<'_, Vec<Option<Arc<ProductTable>>>> {
        // A worker that panicked while holding the lock fails the job: the data is whole.
        self.0.shares.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Lends `worker`'s share (indexed) until [`take_back`](Self::take_back).
    pub fn lend(&self, worker: usize, share: ProductTable) {
        let mut slots = self.slots();
        let slot = worker % slots.len();
        assert!(slots[slot].is_none(), "worker {worker} lent its share twice");
        slots[slot] = Some(Arc::new(share));
    }

    /// Every share of the process, once every worker has lent its own.
    pub fn all(&self) -> Option<Vec<Arc<ProductTable>>> {
        self.slots().iter().cloned().collect()
    }

    /// The next `count` sellers to sum, none once every seller is claimed; `shares` is
    /// what [`all`](Self::all) gave, the same for every worker.
    pub fn claim(&self, shares: &[Arc<ProductTable>], count: usize) -> &[SellerId] {
        let sellers = self.0.sellers.get_or_init(|| largest_first(shares));
        let start = self.0.claimed.fetch_add(count, Ordering::Relaxed).min(sellers.len());
        &sellers[start..(start + count).min(sellers.len())]
    }

    /// Says that `worker` no longer reads the shares: it has dropped what [`all`](Self::all)
    /// gave it.
    pub fn finish(&self) {
        self.0.done.fetch_add(1, Ordering::AcqRel);
    }

    /// `worker`'s share back, once no worker reads the shares any more.
    pub fn take_back(&self, worker: usize) -> Option<ProductTable> {
        let mut slots = self.slots();
        if self.0.done.load(Ordering::Acquire) < slots.len() {
            return None;
        }
        let slot = worker % slots.len();
        let share = slots[slot]
            .take()
            .expect("a share is taken back once, after it was lent");
        Some(Arc::into_inner(share).expect("every worker dropped the shares before it finished"))
    }
}

/// Every seller of `shares`, the most products first (the few large sellers are not left
/// to the end, where one would keep a worker busy alone).
fn largest_first(shares: &[Arc<ProductTable>]) -> Vec<SellerId> {
    let mut counts: Vec<(SellerId, usize)> = shares.iter().flat_map(|share| share.seller_counts()).collect();
    counts.sort_unstable();
    let mut sellers: Vec<(usize, SellerId)> = counts
        .chunk_by(|a, b| a.0 == b.0)
        .map(|seller| (seller.iter().map(|(_seller, count)| count).sum(), seller[0].0))
        .collect();
    sellers.sort_unstable_by(|a, b| b.cmp(a));
    sellers.into_iter().map(|(_count, seller)| seller).collect()
}

impl Default for LentShares {
    /// A worker alone: it sums every seller of its own share itself.
    fn default() -> Self {
        LentShares::new(1)
    }
}

impl fmt::Debug for LentShares {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LentShares").field("workers", &self.workers()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Product, ProductKey};

    fn sellers(share: &ProductTable) -> Vec<SellerId> {
        share.seller_counts().map(|(seller, _count)| seller).collect()
    }

    fn product_of(seller: SellerId) -> Product {
        Product {
            seller_id: seller,
            category_id: 1,
            brand_id: 1,
            price_minor: 100,
            stock: 1,
        }
    }

    fn share_of(seller: SellerId) -> ProductTable {
        let mut share = ProductTable::default();
        share.upsert(ProductKey([seller, 0]), Some(product_of(seller)));
        share
    }

    #[test]
    fn shares_are_read_once_all_are_lent_and_taken_back_once_all_are_done() {
        let lent = LentShares::new(2);
        lent.lend(2, share_of(7));
        assert!(lent.all().is_none(), "worker 1's share is missing");
        lent.lend(1, share_of(8));
        let shares = lent.all().expect("both lent");
        let lent_sellers: Vec<Vec<SellerId>> = shares.iter().map(|share| sellers(share)).collect();
        assert_eq!(lent_sellers, vec![vec![7], vec![8]], "slot i % workers");
        lent.finish();
        assert!(lent.take_back(0).is_none(), "worker 1 still reads");
        drop(shares);
        lent.finish();
        assert_eq!(sellers(&lent.take_back(0).expect("all done")), vec![7]);
        assert_eq!(sellers(&lent.take_back(1).expect("all done")), vec![8]);
    }

    #[test]
    fn workers_claiming_at_once_sum_every_seller_once_largest_first() {
        // Sellers 0..300 with i % 7 + 1 products each, spread over two shares.
        let mut shares = [ProductTable::default(), ProductTable::default()];
        let mut key = 0;
        for seller in 0..300u64 {
            for _ in 0..=seller % 7 {
                key += 1;
                shares[(key % 2) as usize].upsert(ProductKey([key, key]), Some(product_of(seller)));
            }
        }
        let shares: Vec<Arc<ProductTable>> = shares.into_iter().map(Arc::new).collect();
        let lent = LentShares::new(3);
        let claimed: Vec<Vec<SellerId>> = std::thread::scope(|scope| {
            let workers: Vec<_> = (0..3)
                .map(|_| {
                    scope.spawn(|| {
                        let mut mine = Vec::new();
                        loop {
                            let claim = lent.claim(&shares, 4);
                            if claim.is_empty() {
                                return mine;
                            }
                            mine.extend_from_slice(claim);
                        }
                    })
                })
                .collect();
            workers
                .into_iter()
                .map(|worker| worker.join().expect("no panic"))
                .collect()
        });
        let mut all: Vec<SellerId> = claimed.concat();
        all.sort_unstable();
        assert_eq!(all, (0..300).collect::<Vec<_>>(), "each seller once");
        let list = largest_first(&shares);
        let sizes: Vec<u64> = list.iter().map(|seller| seller % 7 + 1).collect();
        assert!(sizes.is_sorted_by(|a, b| a >= b), "largest first: {sizes:?}");
        assert!(lent.claim(&shares, 4).is_empty(), "none left");
    }
}
