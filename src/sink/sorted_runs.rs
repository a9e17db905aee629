//! The records of one time as sorted runs: sorted and encoded on the worker that made
//! them, merged on the worker that writes them.
//!
//! Most times are small: one short run each. A rebuild's end is one time holding every
//! pair (10.7M at 10M products); kept as records (~100 bytes a pair, twice that while the
//! vector doubled) it was the peak of a rebuild's memory, and sorting it all on the writing
//! worker left the others idle for seconds. So each worker sorts its records of a time in
//! runs of [`RUN_LEN`] as they arrive ([`RunBuilder`]), each run encoded (bincode,
//! variable-length integers: ~35 bytes a pair), and the writing worker keeps a completed
//! time's runs ([`TimeRuns`]) and merges them, giving the sink a slice at a time; a large
//! time is merged on a thread of its own while the sink encodes what is already merged.
//!
//! Both the sort and the merge compare records by a [`SortKey`] first, a few integers
//! computed once per record, and by the records themselves only where keys are equal:
//! comparing pairs loads each campaign id from the heap, and the sort of a rebuild's
//! runs spent a fifth of its worker's time in those loads.

use std::sync::mpsc;

use bincode::Options;
use dataflows::model::{PairChange, SellerId, Time};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::dead_letter::DeadLetter;

/// Records sorted and encoded together once a time has this many waiting.
const RUN_LEN: usize = if cfg!(test) { 16 } else { 1 << 18 };

/// At most this many records are given to the sink in one call.
const SLICE_LEN: usize = if cfg!(test) { 10 } else { 1 << 16 };

/// A time with at least this many records is merged on a thread of its own; a smaller one
/// (a live time: a few pairs) on the sink's worker, sparing it a thread's start.
const MERGE_AHEAD_MIN: usize = if cfg!(test) { 50 } else { 1 << 20 };

/// How many merged slices may wait for the sink: enough to keep both sides busy, few
/// enough that the records waiting stay a few megabytes.
const SLICES_AHEAD: usize = 4;

fn encoding() -> impl Options {
    bincode::DefaultOptions::new()
}

/// A summary of a record that orders as the record does: `a <= b` implies
/// `a.sort_key() <= b.sort_key()`, so records with different keys order by their keys and
/// only records with equal keys need comparing.
pub trait SortKey {
    type Key: Ord + Copy;

    fn sort_key(&self) -> Self::Key;
}

impl SortKey for PairChange {
    type Key = (Time, SellerId, u64);

    /// The order of `PairChange` (time, then the pair) up to the campaign id's first bytes.
    fn sort_key(&self) -> Self::Key {
        let (seller, prefix) = self.pair.order_prefix();
        (self.time, seller, prefix)
    }
}

impl SortKey for DeadLetter {
    /// Dead letters are few: no key, every comparison is the records'.
    type Key = ();

    fn sort_key(&self) {}
}

/// A record beside its key, ordered as the record is: by the key, then by the record.
struct Keyed<R: SortKey>(R::Key, R);

impl<R: SortKey + Ord> Ord for Keyed<R> {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.cmp(&other.0).then_with(|| self.1.cmp(&other.1))
    }
}

impl<R: SortKey + Ord> PartialOrd for Keyed<R> {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl<R: SortKey + Ord> PartialEq for Keyed<R> {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other).is_eq()
    }
}

impl<R: SortKey + Ord> Eq for Keyed<R> {}

/// Records of one time, sorted and encoded one after another.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct SortedRun {
    bytes: Vec<u8>,
    len: usize,
}

impl SortedRun {
    /// Sorts and encodes `records`, leaving the vector empty; `order` is scratch space.
    fn seal<R: Ord + Serialize + SortKey>(records: &mut Vec<R>, order: &mut Vec<(R::Key, usize)>) -> Self {
        // The keys and positions are sorted, not the records: a pair's key is three integers
        // beside each other, where its record's campaign id is a load from the heap. A time
        // holds no two equal records, so an unstable sort orders alike.
        order.clear();
        order.extend(records.iter().enumerate().map(|(at, record)| (record.sort_key(), at)));
        order.sort_unstable_by(|(a_key, a), (b_key, b)| a_key.cmp(b_key).then_with(|| records[*a].cmp(&records[*b])));
        let mut bytes = Vec::with_capacity(records.len() * 32);
        for &(_, at) in order.iter() {
            encoding()
                .serialize_into(&mut bytes, &records[at])
                .expect("a record always encodes");
        }
        let len = records.len();
        records.clear();
        bytes.shrink_to_fit();
        SortedRun { bytes, len }
    }

    /// How many records it holds.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// One time's records on the worker that made them, not yet in a run.
pub struct RunBuilder<R: SortKey> {
    open: Vec<R>,
    /// The sort's keys, kept for the next run.
    order: Vec<(R::Key, usize)>,
}

impl<R: SortKey> Default for RunBuilder<R> {
    fn default() -> Self {
        RunBuilder {
            open: Vec::new(),
            order: Vec::new(),
        }
    }
}

impl<R: Ord + Serialize + SortKey> RunBuilder<R> {
    /// Takes every record of `data`, leaving it empty; a full run once [`RUN_LEN`] wait.
    pub fn append(&mut self, data: &mut Vec<R>) -> Option<SortedRun> {
        self.open.append(data);
        (self.open.len() >= RUN_LEN).then(|| SortedRun::seal(&mut self.open, &mut self.order))
    }

    /// The records left, as a last run (none if there are none).
    pub fn finish(mut self) -> Option<SortedRun> {
        (!self.open.is_empty()).then(|| SortedRun::seal(&mut self.open, &mut self.order))
    }
}

/// One time's runs on the worker that writes them.
#[derive(Default)]
pub struct TimeRuns {
    runs: Vec<SortedRun>,
}

impl TimeRuns {
    pub fn push(&mut self, run: SortedRun) {
        if !run.is_empty() {
            self.runs.push(run);
        }
    }

    /// Records taken so far.
    pub fn len(&self) -> usize {
        self.runs.iter().map(SortedRun::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.runs.is_empty()
    }

    /// Gives every record, sorted, in slices of at most [`SLICE_LEN`] to `give`, and stops
    /// at its first error.
    ///
    /// A large time (a rebuild's end: every pair) is merged on a thread of its own while
    /// `give` takes the slices already merged: decoding and merging the runs and the sink's
    /// encoding of the records were one serial stretch of seconds on one core.
    pub fn drain_sorted<R, E>(self, mut give: impl FnMut(&[R]) -> Result<(), E>) -> Result<(), E>
    where
        R: Ord + SortKey + DeserializeOwned + Send,
    {
        let len = self.len();
        if len < MERGE_AHEAD_MIN {
            return merge_here(&self.runs, len, give);
        }
        let runs = &self.runs;
        std::thread::scope(|scope| {
            let (merged, merged_slices) = mpsc::sync_channel::<Vec<R>>(SLICES_AHEAD);
            let (emptied, emptied_slices) = mpsc::channel::<Vec<R>>();
            let merger = std::thread::Builder::new()
                .name("sink-merge".into())
                .spawn_scoped(scope, move || {
                    merge(runs, len, |slice| {
                        merged.send(slice).ok()?;
                        // A slice back from the sink's side, or a new one while none is.
                        Some(emptied_slices.try_recv().unwrap_or_default())
                    })
                });
            if merger.is_err() {
                // No thread to be had: merge here, as a small time does.
                return merge_here(runs, len, give);
            }
            // Dropping the receiver on an error stops the merger at its next slice.
            for mut slice in merged_slices {
                give(&slice)?;
                slice.clear();
                let _ = emptied.send(slice);
            }
            Ok(())
        })
    }
}

/// Merges `runs` on this thread, giving each slice to `give` until its first error.
fn merge_here<R: Ord + SortKey + DeserializeOwned, E>(
    runs: &[SortedRun],
    len: usize,
    mut give: impl FnMut(&[R]) -> Result<(), E>,
) -> Result<(), E> {
    let mut outcome = Ok(());
    merge(runs, len, |mut slice| match give(&slice) {
        Ok(()) => {
            slice.clear();
            Some(slice)
        }
        Err(error) => {
            outcome = Err(error);
            None
        }
    });
    outcome
}

/// Merges `runs` (holding `len` records) into slices of at most [`SLICE_LEN`], handing each
/// full slice to `full`, which gives back an empty vector to fill next or `None` to stop.
fn merge<R: Ord + SortKey + DeserializeOwned>(
    runs: &[SortedRun],
    len: usize,
    mut full: impl FnMut(Vec<R>) -> Option<Vec<R>>,
) {
    let mut cursors: Vec<(&[u8], usize)> = runs.iter().map(|run| (&run.bytes[..], run.len)).collect();
    let mut next = |run: usize| -> Option<Keyed<R>> {
        let (bytes, left) = &mut cursors[run];
        if *left == 0 {
            return None;
        }
        *left -= 1;
        let record: R = encoding()
            .deserialize_from(bytes)
            .expect("a run decodes what it encoded");
        Some(Keyed(record.sort_key(), record))
    };
    let heads: Vec<Option<Keyed<R>>> = (0..runs.len()).map(&mut next).collect();
    let mut tree = LoserTree::new(heads);
    let capacity = SLICE_LEN.min(len);
    let mut slice = Vec::with_capacity(capacity);
    while let Some(Keyed(_, record)) = tree.replace_winner(&mut next) {
        if slice.capacity() == 0 {
            slice.reserve_exact(capacity);
        }
        slice.push(record);
        if slice.len() == SLICE_LEN {
            match full(slice) {
                Some(empty) => slice = empty,
                None => return,
            }
        }
    }
    if !slice.is_empty() {
        full(slice);
    }
}

/// A tournament over the heads of sorted runs: each internal node keeps the run that lost
/// there, so taking the least head and replaying its run's next one costs one comparison
/// per level, by reference. (A binary heap of the records moved ~90-byte records at every
/// level and compared twice as often: four seconds of a rebuild's end, single-threaded.)
struct LoserTree<R> {
    /// Each run's least record not yet taken; `None` once the run is done.
    heads: Vec<Option<R>>,
    /// Internal nodes `1..k` of a tree whose leaves are `k..2k` (run `i` at `k + i`).
    losers: Vec<usize>,
    winner: usize,
}

impl<R: Ord> LoserTree<R> {
    fn new(heads: Vec<Option<R>>) -> Self {
        let k = heads.len();
        let mut winners: Vec<usize> = vec![0; 2 * k];
        let mut losers = vec![0; k];
        for run in 0..k {
            winners[k + run] = run;
        }
        let mut tree = LoserTree {
            heads,
            losers: Vec::new(),
            winner: 0,
        };
        for node in (1..k).rev() {
            let (left, right) = (winners[2 * node], winners[2 * node + 1]);
            let (won, lost) = if tree.before(right, left) {
                (right, left)
            } else {
                (left, right)
            };
            winners[node] = won;
            losers[node] = lost;
        }
        tree.winner = if k > 1 { winners[1] } else { 0 };
        tree.losers = losers;
        tree
    }

    /// Whether run `a`'s head comes before run `b`'s (a finished run comes last).
    fn before(&self, a: usize, b: usize) -> bool {
        match (&self.heads[a], &self.heads[b]) {
            (Some(a), Some(b)) => a < b,
            (Some(_), None) => true,
            (None, _) => false,
        }
    }

    /// Takes the least head, puts its run's next record (from `next`) in its place and
    /// replays that run up the tree; `None` once every run is done.
    fn replace_winner(&mut self, next: impl FnOnce(usize) -> Option<R>) -> Option<R> {
        let run = self.winner;
        let least = self.heads.get_mut(run)?.take()?;
        self.heads[run] = next(run);
        let k = self.heads.len();
        let (mut winner, mut node) = (run, (k + run) / 2);
        while node >= 1 {
            if self.before(self.losers[node], winner) {
                std::mem::swap(&mut self.losers[node], &mut winner);
            }
            node /= 2;
        }
        self.winner = winner;
        Some(least)
    }
}

#[cfg(test)]
mod tests {
    use dataflows::model::{PairFigures, PairKey};
    use proptest::prelude::*;

    use super::*;

    /// Coarse on purpose: most records share a key with others, so ties are decided by the
    /// records themselves.
    impl SortKey for (u64, String) {
        type Key = u64;

        fn sort_key(&self) -> u64 {
            self.0 >> 60
        }
    }

    impl SortKey for u32 {
        type Key = u32;

        fn sort_key(&self) -> u32 {
            self >> 4
        }
    }

    /// `records` arriving in `containers` containers on each of `workers` workers (dealt
    /// round robin), their runs merged as the writing worker would.
    fn given<R>(records: Vec<R>, containers: usize, workers: usize) -> (Vec<R>, Vec<usize>)
    where
        R: Clone + Ord + SortKey + Serialize + DeserializeOwned + Send,
    {
        let mut builders: Vec<RunBuilder<R>> = (0..workers).map(|_| RunBuilder::default()).collect();
        let mut time = TimeRuns::default();
        let size = records.len().div_ceil(containers.max(1)).max(1);
        for (index, chunk) in records.chunks(size).enumerate() {
            let mut container = chunk.to_vec();
            if let Some(run) = builders[index % workers].append(&mut container) {
                time.push(run);
            }
            assert!(container.is_empty());
        }
        builders
            .into_iter()
            .filter_map(RunBuilder::finish)
            .for_each(|run| time.push(run));
        assert_eq!(time.len(), records.len());
        let (mut out, mut slices) = (Vec::new(), Vec::new());
        time.drain_sorted(|slice: &[R]| {
            slices.push(slice.len());
            out.extend_from_slice(slice);
            Ok::<(), ()>(())
        })
        .expect("no error");
        (out, slices)
    }

    /// A fixed permutation of `records` by `seed`.
    fn shuffled<R: Clone>(records: &[R], seed: u64) -> Vec<R> {
        let mut keyed: Vec<(u64, R)> = records
            .iter()
            .enumerate()
            .map(|(at, record)| ((at as u64 ^ seed).wrapping_mul(0x9e37_79b9_7f4a_7c15), record.clone()))
            .collect();
        keyed.sort_by_key(|(position, _)| *position);
        keyed.into_iter().map(|(_, record)| record).collect()
    }

    fn change(time: Time, seller_id: SellerId, campaign_id: String, products: u64) -> PairChange {
        let figures = |products| PairFigures {
            eligible_products: products,
            eligible_stock: 7 * products,
        };
        PairChange {
            time,
            pair: PairKey { seller_id, campaign_id },
            figures: (products > 0).then(|| figures(products)),
            previous: (products != 1).then(|| figures(1)),
        }
    }

    proptest! {
        #[test]
        fn records_come_out_sorted_in_slices_whatever_their_runs(
            records in proptest::collection::btree_set((any::<u64>(), "[a-c]{0,3}"), 0..200),
            containers in 1usize..40,
            workers in 1usize..4,
            seed in any::<u64>(),
        ) {
            let sorted: Vec<(u64, String)> = records.into_iter().collect();
            let (out, slices) = given(shuffled(&sorted, seed), containers, workers);
            prop_assert_eq!(out, sorted);
            prop_assert!(slices.iter().all(|len| (1..=SLICE_LEN).contains(len)));
        }

        /// Pair changes by their key, where ids share their first eight bytes, end early or
        /// hold the NUL bytes the key pads with.
        #[test]
        fn pair_changes_come_out_in_their_order(
            records in proptest::collection::btree_set(
                (0u64..3, 0u64..3, "(campaign-)?[a\\x00é]{0,4}", 0u64..3), 0..150),
            containers in 1usize..30,
            workers in 1usize..4,
            seed in any::<u64>(),
        ) {
            let mut sorted: Vec<PairChange> = records
                .into_iter()
                .map(|(time, seller, id, products)| change(time, seller, id, products))
                .collect();
            sorted.sort();
            sorted.dedup_by(|a, b| a.time == b.time && a.pair == b.pair);
            let (out, _) = given(shuffled(&sorted, seed), containers, workers);
            prop_assert_eq!(out, sorted);
        }
    }

    proptest! {
        /// Any number of runs, empty ones among them, with equal records across runs.
        #[test]
        fn the_tournament_gives_every_head_in_order(
            runs in proptest::collection::vec(proptest::collection::vec(0u8..20, 0..12), 0..10),
        ) {
            let mut runs: Vec<std::vec::IntoIter<u8>> = runs
                .into_iter()
                .map(|mut run| {
                    run.sort_unstable();
                    run.into_iter()
                })
                .collect();
            let mut expected: Vec<u8> = runs.iter().flat_map(|run| run.clone()).collect();
            expected.sort_unstable();
            let heads = runs.iter_mut().map(Iterator::next).collect();
            let mut tree = LoserTree::new(heads);
            let mut out = Vec::new();
            while let Some(record) = tree.replace_winner(|run| runs[run].next()) {
                out.push(record);
            }
            prop_assert_eq!(out, expected);
        }
    }

    /// `records` records, descending, as one worker's runs; the first slice at or above
    /// `failing` fails: what `drain_sorted` returns, and how many slices it gave.
    fn drain_until_error(records: u32, failing: u32) -> (Result<(), u32>, usize) {
        let mut builder = RunBuilder::default();
        let mut time = TimeRuns::default();
        if let Some(run) = builder.append(&mut (0..records).rev().collect()) {
            time.push(run);
        }
        if let Some(run) = builder.finish() {
            time.push(run);
        }
        assert_eq!(time.len(), records as usize);
        let mut calls = 0;
        let outcome = time.drain_sorted(|slice: &[u32]| {
            calls += 1;
            if slice[0] >= failing {
                Err(slice[0])
            } else {
                Ok(())
            }
        });
        (outcome, calls)
    }

    #[test]
    fn the_first_error_stops_the_giving_on_the_merging_thread() {
        const { assert!(100 >= MERGE_AHEAD_MIN) };
        assert_eq!(drain_until_error(100, 20), (Err(20), 3));
    }

    #[test]
    fn the_first_error_stops_the_giving_of_a_small_time() {
        const { assert!(40 < MERGE_AHEAD_MIN) };
        assert_eq!(drain_until_error(40, 20), (Err(20), 3));
    }

    #[test]
    fn a_large_time_gives_every_slice_on_the_merging_thread() {
        let (outcome, calls) = drain_until_error(1000, u32::MAX);
        assert_eq!(outcome, Ok(()));
        assert_eq!(calls, 1000usize.div_ceil(SLICE_LEN));
    }
}
