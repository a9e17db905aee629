//! Figures per (campaign, seller) pair, 24 bytes each, and the campaign handles they use.
//!
//! Pairs are the largest state after the products (10.7M of them at 10M products, on the
//! worker that sums them and again in the reconcile while a restart checks what the sinks
//! hold). A map from (campaign tag, seller) to two 8-byte figures takes 32 bytes per entry;
//! with the campaign as a worker-local 4-byte handle and the product count in 4 bytes, an
//! entry is 24.

use std::hash::BuildHasher;
use std::ops::Range;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use hashbrown::hash_table::Entry;
use hashbrown::HashTable;

use crate::hashing::FastMap;
use crate::model::{CampaignId, PairFigures, SellerId, Tag};

/// How many pairs a rebuild will reach, once known (what the sinks hold, read beside the
/// rebuild), shared by the workers of a process. A pair table reserves its share of it
/// once instead of doubling through the rebuild: a doubling holds the old table and the
/// new one at once (~200 MB more at 10M pairs, a restart's peak). Zero while unknown; a
/// hint, never a bound.
#[derive(Clone, Debug, Default)]
pub struct PairCount(Arc<AtomicUsize>);

impl PairCount {
    /// Counts `pairs` more (one sink's held pairs; several sinks: the largest).
    pub fn note(&self, pairs: usize) {
        self.0.fetch_max(pairs, Ordering::Relaxed);
    }

    /// One of `shares` equal shares of the count.
    pub fn share(&self, shares: usize) -> usize {
        self.0.load(Ordering::Relaxed) / shares.max(1)
    }
}

/// A campaign as a pair table names it: an index into this worker's [`CampaignHandles`].
pub type CampaignHandle = u32;

/// The handle of every campaign tag a worker has met, and each handle's text id once known.
#[derive(Clone, Debug, Default)]
pub struct CampaignHandles {
    handles: FastMap<Tag, CampaignHandle>,
    /// Per handle: its tag, and its id once named.
    ids: Vec<(Tag, Option<CampaignId>)>,
}

impl CampaignHandles {
    /// The handle of `tag`, given a new one on first sight.
    pub fn handle(&mut self, tag: Tag) -> CampaignHandle {
        let ids = &mut self.ids;
        *self.handles.entry(tag).or_insert_with(|| {
            ids.push((tag, None));
            CampaignHandle::try_from(ids.len() - 1).expect("fewer than 2³² campaigns")
        })
    }

    /// The handle of `tag`, if it was met.
    pub fn get(&self, tag: Tag) -> Option<CampaignHandle> {
        self.handles.get(&tag).copied()
    }

    /// Remembers the id `tag` stands for (the first one given), and returns its handle.
    pub fn name(&mut self, tag: Tag, campaign_id: impl FnOnce() -> CampaignId) -> CampaignHandle {
        let handle = self.handle(tag);
        self.ids[handle as usize].1.get_or_insert_with(campaign_id);
        handle
    }

    /// The id of a handle's campaign, once named.
    pub fn id(&self, handle: CampaignHandle) -> Option<&CampaignId> {
        self.ids[handle as usize].1.as_ref()
    }

    pub fn tag(&self, handle: CampaignHandle) -> Tag {
        self.ids[handle as usize].0
    }

    /// Every named campaign: its tag and id.
    pub fn named(&self) -> impl Iterator<Item = (Tag, &CampaignId)> + '_ {
        self.ids.iter().filter_map(|(tag, id)| Some((*tag, id.as_ref()?)))
    }
}

/// One pair and its figures: (products, stock), signed because a sum may pass below zero
/// on its way (a retraction that arrives before its addition).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PairEntry {
    pub seller: SellerId,
    pub stock: i64,
    pub campaign: CampaignHandle,
    pub products: i32,
}

impl PairEntry {
    /// The entry of figures a sink holds; figures beyond the entry's range (never written
    /// by this job, whose counts fit) are kept as the range's end, so they still differ
    /// from any rebuilt pair's.
    pub fn held(campaign: CampaignHandle, seller: SellerId, figures: PairFigures) -> Self {
        PairEntry {
            seller,
            stock: i64::try_from(figures.eligible_stock).unwrap_or(i64::MAX),
            campaign,
            products: i32::try_from(figures.eligible_products).unwrap_or(i32::MAX),
        }
    }

    /// The figures as a sink holds them, (0, 0) included (a pair whose figures were forgotten).
    pub fn figures(&self) -> PairFigures {
        PairFigures {
            eligible_products: self.products.max(0) as u64,
            eligible_stock: self.stock.max(0) as u64,
        }
    }
}

/// Pairs keyed by (campaign handle, seller), in one or a few hash tables side by side.
///
/// A hash table has a power of two of buckets and fills them to at most 7/8, so one sized for
/// a count just past a power of two's 7/8 leaves a third of them empty: 10.7M pairs took 2²⁴
/// buckets of 25 bytes, 39 bytes per pair, and a restart holds two such tables (the totals
/// and the held pairs). Reserved for a known count, the pairs are spread by hash over `k`
/// equal tables (`k` up to 16) whose buckets together just cover the count: 10.7M pairs in 3
/// tables of 2²² buckets, ~29 bytes per pair. Each table grows on its own past its share.
#[derive(Clone, Debug)]
pub struct PairTable {
    parts: Vec<HashTable<PairEntry>>,
    hasher: foldhash::fast::RandomState,
}

impl Default for PairTable {
    fn default() -> Self {
        PairTable {
            parts: vec![HashTable::new()],
            hasher: Default::default(),
        }
    }
}

/// The most tables a reserved table is spread over: the buckets then exceed what the count
/// needs by at most an eighth.
const MAX_PARTS: usize = 16;

impl PairTable {
    fn hash(&self, campaign: CampaignHandle, seller: SellerId) -> u64 {
        hash_of(&self.hasher, campaign, seller)
    }

    /// The table a hash belongs to. A table places a pair by the hash's low bits and tags
    /// it with its top 7, so the part is taken from a remix of the whole hash, not from a
    /// range of bits the tables use.
    fn part_of(hash: u64, parts: usize) -> usize {
        let mixed = hash.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32;
        ((mixed * parts as u64) >> 32) as usize
    }

    fn part(&self, hash: u64) -> &HashTable<PairEntry> {
        &self.parts[Self::part_of(hash, self.parts.len())]
    }

    /// The pair's entry, to read, change, insert or remove.
    pub fn entry(&mut self, campaign: CampaignHandle, seller: SellerId) -> Entry<'_, PairEntry> {
        let hash = self.hash(campaign, seller);
        let hasher = &self.hasher;
        let part = Self::part_of(hash, self.parts.len());
        self.parts[part].entry(
            hash,
            |entry| entry.seller == seller && entry.campaign == campaign,
            |entry| hash_of(hasher, entry.campaign, entry.seller),
        )
    }

    /// Makes room for `additional` more pairs at once: if the tables lack it, the pairs move
    /// into tables that together just hold them all.
    pub fn reserve(&mut self, additional: usize) {
        let pairs = self.len() + additional;
        let parts = self.parts.len();
        // Each table takes its share of the pairs, give or take the hash's unevenness.
        let share = pairs.div_ceil(parts) + pairs / parts / 64;
        if self.parts.iter().all(|part| part.capacity() >= share) {
            return;
        }
        let (parts, buckets) = layout(pairs + pairs / 64);
        let hasher = self.hasher.clone();
        let old = std::mem::replace(
            &mut self.parts,
            (0..parts).map(|_| HashTable::with_capacity(buckets / 8 * 7)).collect(),
        );
        for entry in old.into_iter().flatten() {
            let hash = hash_of(&hasher, entry.campaign, entry.seller);
            self.parts[Self::part_of(hash, parts)]
                .insert_unique(hash, entry, |entry| hash_of(&hasher, entry.campaign, entry.seller));
        }
    }

    /// Holds `entry`, in place of the pair's earlier one.
    pub fn insert(&mut self, entry: PairEntry) {
        match self.entry(entry.campaign, entry.seller) {
            Entry::Occupied(mut held) => *held.get_mut() = entry,
            Entry::Vacant(vacant) => {
                vacant.insert(entry);
            }
        }
    }

    pub fn get(&self, campaign: CampaignHandle, seller: SellerId) -> Option<&PairEntry> {
        let hash = self.hash(campaign, seller);
        self.part(hash)
            .find(hash, |entry| entry.seller == seller && entry.campaign == campaign)
    }

    pub fn remove(&mut self, campaign: CampaignHandle, seller: SellerId) -> Option<PairEntry> {
        match self.entry(campaign, seller) {
            Entry::Occupied(held) => Some(held.remove().0),
            Entry::Vacant(_) => None,
        }
    }

    pub fn len(&self) -> usize {
        self.parts.iter().map(HashTable::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.parts.iter().all(HashTable::is_empty)
    }

    /// The pairs in the table's order, which holds while the table does not change.
    pub fn iter(&self) -> impl Iterator<Item = &PairEntry> + '_ {
        self.parts.iter().flat_map(HashTable::iter)
    }

    /// How many slots the tables have: each is empty or holds one pair, and a pair stays in
    /// its slot while the table does not change, so a walk over the slots can stop and go
    /// on from an index (where `iter().skip(n)` would walk the first `n` again).
    pub fn slots(&self) -> usize {
        self.parts.iter().map(HashTable::num_buckets).sum()
    }

    /// The pairs in the slots `range` (slots past the end hold none): the tables' buckets,
    /// one table after the other.
    pub fn in_slots(&self, range: Range<usize>) -> impl Iterator<Item = &PairEntry> + '_ {
        let mut offset = 0;
        self.parts.iter().flat_map(move |part| {
            let (start, end) = (offset, offset + part.num_buckets());
            offset = end;
            let within = range.start.max(start)..range.end.min(end);
            within.filter_map(move |slot| part.get_bucket(slot - start))
        })
    }

    pub fn iter_mut(&mut self) -> impl Iterator<Item = &mut PairEntry> + '_ {
        self.parts.iter_mut().flat_map(HashTable::iter_mut)
    }

    /// Keeps only the pairs `keep` is true of.
    pub fn retain(&mut self, mut keep: impl FnMut(&PairEntry) -> bool) {
        self.parts.iter_mut().for_each(|part| part.retain(|entry| keep(entry)));
    }

    /// Takes every pair out, keeping the allocation.
    pub fn drain(&mut self) -> impl Iterator<Item = PairEntry> + '_ {
        self.parts.iter_mut().flat_map(HashTable::drain)
    }
}

/// A pair's hash: where a lookup probes and where a growing table moves an entry must agree.
fn hash_of(hasher: &foldhash::fast::RandomState, campaign: CampaignHandle, seller: SellerId) -> u64 {
    hasher.hash_one((seller, campaign))
}

/// Fewer buckets than this per table are not worth splitting into (in tests, small tables
/// split too, so that the property test meets several).
const MIN_PART_BUCKETS: usize = if cfg!(test) { 8 } else { 1 << 12 };

/// How many tables, of how many buckets each (a power of two), hold `pairs` at a table's
/// most load (7/8) with the fewest buckets in all (the fewest tables among equals).
fn layout(pairs: usize) -> (usize, usize) {
    (1..=MAX_PARTS)
        .map(|parts| {
            // What a part takes, give or take four standard deviations of the hash's spread:
            // a small table reserved for its share alone grew by chance (1,000 pairs in
            // parts of 203 ± 13 each, 224 to a part).
            let share = pairs.div_ceil(parts).max(1);
            let share = share + 4 * share.isqrt();
            // A table holds 7/8 of its buckets, and at least 8 buckets.
            let buckets = (share * 8).div_ceil(7).next_power_of_two().max(8);
            (parts * buckets, parts, buckets)
        })
        .filter(|&(_, parts, buckets)| parts == 1 || buckets >= MIN_PART_BUCKETS)
        .min()
        .map(|(_, parts, buckets)| (parts, buckets))
        .expect("at least one layout")
}

impl IntoIterator for PairTable {
    type Item = PairEntry;
    type IntoIter = std::iter::Flatten<std::vec::IntoIter<HashTable<PairEntry>>>;

    fn into_iter(self) -> Self::IntoIter {
        self.parts.into_iter().flatten()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_is_24_bytes() {
        assert_eq!(std::mem::size_of::<PairEntry>(), 24);
    }

    #[test]
    fn pairs_are_found_by_campaign_and_seller() {
        let mut campaigns = CampaignHandles::default();
        let (a, b) = (campaigns.handle(11), campaigns.handle(22));
        assert_eq!(campaigns.handle(11), a, "a tag keeps its handle");
        assert_ne!(a, b);
        assert_eq!(campaigns.name(11, || "a".to_owned()), a);
        campaigns.name(11, || "not kept".to_owned());
        assert_eq!(campaigns.id(a).map(String::as_str), Some("a"));
        assert_eq!(campaigns.id(b), None);
        assert_eq!(campaigns.tag(b), 22);
        assert_eq!(campaigns.named().collect::<Vec<_>>(), vec![(11, &"a".to_owned())]);

        let mut table = PairTable::default();
        let figures = |products, stock| PairFigures {
            eligible_products: products,
            eligible_stock: stock,
        };
        for seller in 0..1_000 {
            table.insert(PairEntry::held(a, seller, figures(1, seller)));
            table.insert(PairEntry::held(b, seller, figures(2, seller)));
        }
        table.insert(PairEntry::held(a, 7, figures(5, 50)));
        assert_eq!(table.len(), 2_000);
        assert_eq!(table.get(a, 7).map(PairEntry::figures), Some(figures(5, 50)));
        assert_eq!(table.get(b, 7).map(PairEntry::figures), Some(figures(2, 7)));
        assert_eq!(table.remove(a, 7).map(|entry| entry.products), Some(5));
        assert_eq!(table.remove(a, 7), None);
        assert_eq!(table.get(a, 7), None);
        assert_eq!(table.iter().count(), 1_999);
        // Figures beyond the entry's range stay unequal to any that fit.
        let huge = PairEntry::held(a, 1, figures(u64::MAX, u64::MAX));
        assert_eq!((huge.products, huge.stock), (i32::MAX, i64::MAX));
        assert_eq!(table.drain().count(), 1_999);
        assert!(table.is_empty());
    }

    /// What the table is asked to do, on few campaigns and sellers, so that pairs meet and
    /// reserves spread non-empty tables over several parts.
    #[derive(Clone, Debug)]
    enum Op {
        Insert(CampaignHandle, SellerId, i32),
        Remove(CampaignHandle, SellerId),
        /// As the totals add a delta: a pair that reaches 0 products leaves.
        Add(CampaignHandle, SellerId, i32),
        Reserve(usize),
    }

    fn op() -> impl proptest::strategy::Strategy<Value = Op> {
        use proptest::prelude::*;
        let pair = (0u32..3, 0u64..60);
        prop_oneof![
            (pair.clone(), -3i32..4).prop_map(|((c, s), p)| Op::Insert(c, s, p)),
            pair.clone().prop_map(|(c, s)| Op::Remove(c, s)),
            (pair, -2i32..3).prop_map(|((c, s), p)| Op::Add(c, s, p)),
            (0usize..200).prop_map(Op::Reserve),
        ]
    }

    #[test]
    fn a_reserved_table_has_buckets_near_its_count_and_holds_it() {
        // 10.7M pairs, the 10M-product restart's count, took 2²⁴ buckets (39 B a pair).
        assert_eq!(layout(10_700_000 + 10_700_000 / 64), (3, 1 << 22));
        for pairs in [1usize, 7, 1_000, 300_000, 1_000_000, 2_500_000] {
            let mut table = PairTable::default();
            table.reserve(pairs);
            let slots = table.slots();
            // At most 7/8 full, and, once large enough to split, at most an eighth more
            // buckets than that needs.
            let needed = (pairs + pairs / 64) * 8 / 7;
            assert!(slots >= needed, "{pairs} pairs: {slots} slots");
            if pairs >= 100_000 {
                assert!(slots <= needed + needed / 8, "{pairs} pairs: {slots} slots");
            }
            let campaign = CampaignHandles::default().handle(1);
            for seller in 0..pairs as u64 {
                table.insert(PairEntry::held(
                    campaign,
                    seller,
                    PairFigures {
                        eligible_products: 1,
                        eligible_stock: 1,
                    },
                ));
            }
            assert_eq!(table.slots(), slots, "{pairs} pairs fit without growing");
            assert_eq!(table.len(), pairs);
        }
    }

    proptest::proptest! {
        /// The table answers as a map does after any run of inserts, removals, additions and
        /// reserves, and holds each pair once.
        #[test]
        fn the_table_answers_as_a_map(ops in proptest::collection::vec(op(), 0..400)) {
            let mut table = PairTable::default();
            let mut model: std::collections::BTreeMap<(CampaignHandle, SellerId), i32> = Default::default();
            let entry = |campaign, seller, products| PairEntry { seller, stock: i64::from(products) * 10, campaign, products };
            for op in ops {
                match op {
                    Op::Insert(campaign, seller, products) => {
                        table.insert(entry(campaign, seller, products));
                        model.insert((campaign, seller), products);
                    }
                    Op::Remove(campaign, seller) => {
                        let removed = table.remove(campaign, seller).map(|entry| entry.products);
                        proptest::prop_assert_eq!(removed, model.remove(&(campaign, seller)));
                    }
                    Op::Add(campaign, seller, delta) => {
                        match table.entry(campaign, seller) {
                            Entry::Occupied(mut held) => {
                                held.get_mut().products += delta;
                                held.get_mut().stock += i64::from(delta) * 10;
                                if held.get().products == 0 {
                                    held.remove();
                                }
                            }
                            Entry::Vacant(vacant) => {
                                if delta != 0 {
                                    vacant.insert(entry(campaign, seller, delta));
                                }
                            }
                        }
                        let products = model.remove(&(campaign, seller)).unwrap_or(0) + delta;
                        if products != 0 {
                            model.insert((campaign, seller), products);
                        }
                    }
                    Op::Reserve(additional) => table.reserve(additional),
                }
                proptest::prop_assert_eq!(table.len(), model.len());
            }
            for campaign in 0u32..3 {
                for seller in 0u64..60 {
                    let found = table.get(campaign, seller).map(|entry| (entry.products, entry.stock));
                    let expected = model.get(&(campaign, seller)).map(|&products| (products, i64::from(products) * 10));
                    proptest::prop_assert_eq!(found, expected);
                }
            }
            let expected: Vec<_> = model.iter().map(|(&(campaign, seller), &products)| (campaign, seller, products)).collect();
            let sorted = |pairs: Vec<(CampaignHandle, SellerId, i32)>| { let mut pairs = pairs; pairs.sort_unstable(); pairs };
            let listed = sorted(table.iter().map(|entry| (entry.campaign, entry.seller, entry.products)).collect());
            proptest::prop_assert_eq!(&listed, &expected);
            let mut sliced = Vec::new();
            let mut start = 0;
            while start < table.slots() {
                sliced.extend(table.in_slots(start..start + 7).map(|entry| (entry.campaign, entry.seller, entry.products)));
                start += 7;
            }
            proptest::prop_assert_eq!(&sorted(sliced), &expected);
            let owned = sorted(table.clone().into_iter().map(|entry| (entry.campaign, entry.seller, entry.products)).collect());
            proptest::prop_assert_eq!(&owned, &expected);
            proptest::prop_assert_eq!(table.drain().count(), expected.len());
            proptest::prop_assert!(table.is_empty() && table.iter().next().is_none());
        }

        /// Walking the slots a slice at a time meets every pair once, whatever the slices.
        #[test]
        fn slices_of_slots_meet_every_pair_once(
            sellers in proptest::collection::vec(0u64..500, 0..400),
            removed in proptest::collection::vec(0u64..500, 0..100),
            width in 1usize..100,
        ) {
            let campaign = CampaignHandles::default().handle(1);
            let mut table = PairTable::default();
            for &seller in &sellers {
                table.insert(PairEntry::held(campaign, seller, PairFigures { eligible_products: 1, eligible_stock: seller }));
            }
            for &seller in &removed {
                table.remove(campaign, seller);
            }
            let mut met = Vec::new();
            let mut start = 0;
            while start < table.slots() {
                met.extend(table.in_slots(start..start + width).map(|entry| entry.seller));
                start += width;
            }
            let mut expected: Vec<u64> = table.iter().map(|entry| entry.seller).collect();
            expected.sort_unstable();
            met.sort_unstable();
            proptest::prop_assert_eq!(met, expected);
            proptest::prop_assert_eq!(table.in_slots(table.slots()..table.slots() + width).count(), 0);
        }
    }
}
