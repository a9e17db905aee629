//! The records of one time, kept by a sink operator until the time completes, then given
//! to the sink sorted.
//!
//! Most times are small: their records are kept as they came and sorted once. A rebuild's
//! end is one time holding every pair (10.7M at 10M products); kept as records (~100 bytes
//! a pair, twice that while the vector doubled) it was the peak of a rebuild's memory. So
//! a time's records are sorted in runs of [`RUN_LEN`] as they arrive, each run kept encoded
//! (bincode, variable-length integers: ~35 bytes a pair), and the completed time is a merge
//! of the runs, given out a slice at a time.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use bincode::Options;
use serde::de::DeserializeOwned;
use serde::Serialize;

/// Records sorted and encoded together once a time has this many waiting.
const RUN_LEN: usize = if cfg!(test) { 16 } else { 1 << 16 };

/// At most this many records are given to the sink in one call.
const SLICE_LEN: usize = if cfg!(test) { 10 } else { 1 << 16 };

fn encoding() -> impl Options {
    bincode::DefaultOptions::new()
}

/// Sorted records, encoded one after another.
struct Run {
    bytes: Vec<u8>,
    len: usize,
}

/// One time's records: those not yet in a run, and the runs.
pub struct TimeRecords<R> {
    open: Vec<R>,
    runs: Vec<Run>,
}

impl<R> Default for TimeRecords<R> {
    fn default() -> Self {
        TimeRecords {
            open: Vec::new(),
            runs: Vec::new(),
        }
    }
}

impl<R: Ord + Serialize + DeserializeOwned> TimeRecords<R> {
    /// Takes every record of `data`, leaving it empty.
    pub fn append(&mut self, data: &mut Vec<R>) {
        self.open.append(data);
        if self.open.len() >= RUN_LEN {
            self.seal();
        }
    }

    /// Records taken so far.
    pub fn len(&self) -> usize {
        self.open.len() + self.runs.iter().map(|run| run.len).sum::<usize>()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Sorts and encodes the open records as a run.
    fn seal(&mut self) {
        // In place: a time holds no two equal records, so an unstable sort orders alike.
        self.open.sort_unstable();
        let mut bytes = Vec::with_capacity(self.open.len() * 32);
        let len = self.open.len();
        for record in self.open.drain(..) {
            encoding()
                .serialize_into(&mut bytes, &record)
                .expect("a record always encodes");
        }
        bytes.shrink_to_fit();
        self.runs.push(Run { bytes, len });
    }

    /// Gives every record, sorted, in slices of at most [`SLICE_LEN`] to `give`, and stops
    /// at its first error.
    pub fn drain_sorted<E>(mut self, mut give: impl FnMut(&[R]) -> Result<(), E>) -> Result<(), E> {
        if self.runs.is_empty() {
            self.open.sort_unstable();
            return self.open.chunks(SLICE_LEN).try_for_each(give);
        }
        if !self.open.is_empty() {
            self.seal();
        }
        let mut cursors: Vec<(&[u8], usize)> = self.runs.iter().map(|run| (&run.bytes[..], run.len)).collect();
        let mut next = |run: usize| -> Option<R> {
            let (bytes, left) = &mut cursors[run];
            if *left == 0 {
                return None;
            }
            *left -= 1;
            Some(
                encoding()
                    .deserialize_from(bytes)
                    .expect("a run decodes what it encoded"),
            )
        };
        let mut heads: BinaryHeap<Reverse<(R, usize)>> = (0..self.runs.len())
            .filter_map(|run| Some(Reverse((next(run)?, run))))
            .collect();
        let mut slice = Vec::with_capacity(SLICE_LEN);
        while let Some(Reverse((record, run))) = heads.pop() {
            slice.push(record);
            if let Some(record) = next(run) {
                heads.push(Reverse((record, run)));
            }
            if slice.len() == SLICE_LEN {
                give(&slice)?;
                slice.clear();
            }
        }
        if !slice.is_empty() {
            give(&slice)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn given(records: Vec<(u64, String)>, containers: usize) -> (Vec<(u64, String)>, Vec<usize>) {
        let mut time = TimeRecords::default();
        let size = records.len().div_ceil(containers.max(1)).max(1);
        for chunk in records.chunks(size) {
            let mut container = chunk.to_vec();
            time.append(&mut container);
            assert!(container.is_empty());
        }
        assert_eq!(time.len(), records.len());
        let (mut out, mut slices) = (Vec::new(), Vec::new());
        time.drain_sorted(|slice| {
            slices.push(slice.len());
            out.extend_from_slice(slice);
            Ok::<(), ()>(())
        })
        .expect("no error");
        (out, slices)
    }

    proptest! {
        #[test]
        fn records_come_out_sorted_in_slices_whatever_their_runs(
            records in proptest::collection::btree_set((any::<u64>(), "[a-c]{0,3}"), 0..200),
            containers in 1usize..40,
            seed in any::<u64>(),
        ) {
            let sorted: Vec<(u64, String)> = records.into_iter().collect();
            // Arrive shuffled: a fixed permutation by the seed.
            let mut arriving = sorted.clone();
            arriving.sort_by_key(|(number, text)| (number ^ seed).wrapping_mul(0x9e37_79b9_7f4a_7c15).wrapping_add(text.len() as u64));
            let (out, slices) = given(arriving, containers);
            prop_assert_eq!(out, sorted);
            prop_assert!(slices.iter().all(|len| (1..=SLICE_LEN).contains(len)));
        }
    }

    #[test]
    fn the_first_error_stops_the_giving() {
        let mut time = TimeRecords::default();
        time.append(&mut (0..100u32).rev().collect());
        let mut calls = 0;
        let outcome = time.drain_sorted(|slice| {
            calls += 1;
            if slice[0] >= 20 {
                Err(slice[0])
            } else {
                Ok(())
            }
        });
        assert_eq!(outcome, Err(20));
        assert_eq!(calls, 3);
    }
}
