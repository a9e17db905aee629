//! Figures per (campaign, seller) pair, 24 bytes each, and the campaign handles they use.
//!
//! Pairs are the largest state after the products (10.7M of them at 10M products, on the
//! worker that sums them and again in the reconcile while a restart checks what the sinks
//! hold). A map from (campaign tag, seller) to two 8-byte figures takes 32 bytes per entry;
//! with the campaign as a worker-local 4-byte handle and the product count in 4 bytes, an
//! entry is 24, and [`PairTable`] holds it in ~28 (a general hash table took 39 at 10.7M).

use std::hash::BuildHasher;
use std::ops::Range;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

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

    /// One of `shares` equal shares of the count, with room for the hash's uneven split:
    /// pairs go to workers by hash, so a worker gets its share give or take a few times
    /// its square root (~2,300 of 5.3M), and a table reserved for exactly its share would
    /// double for the last few pairs of half the workers.
    pub fn share(&self, shares: usize) -> usize {
        let share = self.0.load(Ordering::Relaxed) / shares.max(1);
        if share == 0 {
            return 0;
        }
        share + share / 64 + 64
    }
}

/// A campaign as a pair table names it: its place, from 1, among this worker's
/// [`CampaignHandles`] (0 is no campaign: an empty slot of a [`PairTable`]).
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
            CampaignHandle::try_from(ids.len()).expect("fewer than 2³² campaigns")
        })
    }

    /// The handle of `tag`, if it was met.
    pub fn get(&self, tag: Tag) -> Option<CampaignHandle> {
        self.handles.get(&tag).copied()
    }

    /// Remembers the id `tag` stands for (the first one given), and returns its handle.
    pub fn name(&mut self, tag: Tag, campaign_id: impl FnOnce() -> CampaignId) -> CampaignHandle {
        let handle = self.handle(tag);
        self.ids[Self::place(handle)].1.get_or_insert_with(campaign_id);
        handle
    }

    fn place(handle: CampaignHandle) -> usize {
        handle as usize - 1
    }

    /// The id of a handle's campaign, once named.
    pub fn id(&self, handle: CampaignHandle) -> Option<&CampaignId> {
        self.ids[Self::place(handle)].1.as_ref()
    }

    pub fn tag(&self, handle: CampaignHandle) -> Tag {
        self.ids[Self::place(handle)].0
    }

    /// Every named campaign: its tag and id.
    pub fn named(&self) -> impl Iterator<Item = (Tag, &CampaignId)> + '_ {
        self.ids.iter().filter_map(|(tag, id)| Some((*tag, id.as_ref()?)))
    }
}

/// One pair and its figures: (products, stock), signed because a sum may pass below zero
/// on its way (a retraction that arrives before its addition). The default, all zeros, is
/// no pair: an empty slot of a [`PairTable`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PairEntry {
    pub seller: SellerId,
    pub stock: i64,
    pub campaign: CampaignHandle,
    pub products: i32,
}

impl PairEntry {
    const EMPTY: PairEntry = PairEntry {
        seller: 0,
        stock: 0,
        campaign: 0,
        products: 0,
    };

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

/// Pairs keyed by (campaign handle, seller), in one array of entries with linear probing.
///
/// A general table spends what this one does not: hashbrown keeps a control byte per slot
/// and a power of two of slots, so a table reserved for 10.7M pairs had 2²⁴ slots of 25
/// bytes, 39 bytes per pair (a restart holds two such tables, the totals and the held pairs).
/// Here a slot is the 24-byte entry itself, empty where its campaign handle is 0 (handles
/// start at 1), and the slots are as many as the pairs need at a load of at most
/// [`MAX_LOAD`]: ~28 bytes per pair. A pair's home slot is its hash scaled to the table (the
/// hash's high bits), and a removal shifts the pairs after it back, so no tombstone is left.
/// The slots are allocated zeroed, so the kernel maps their pages as the pairs reach them.
#[derive(Clone, Debug, Default)]
pub struct PairTable {
    slots: Vec<PairEntry>,
    len: usize,
    hasher: foldhash::fast::RandomState,
}

/// The most pairs per slot before the table grows: linear probing then finds a held pair in
/// ~4 slots on average and an absent one in ~22, all in a few adjacent cache lines.
const MAX_LOAD: (usize, usize) = (17, 20);

// SAFETY: `PairEntry` is integers only, and all zeros is a valid one (an empty slot).
unsafe impl bytemuck::Zeroable for PairEntry {}

/// Where a probe for a pair ended: its slot, or the empty slot where it would go.
pub enum PairSlot<'a> {
    Occupied(OccupiedPair<'a>),
    Vacant(VacantPair<'a>),
}

/// A pair in the table, to read, change or remove.
pub struct OccupiedPair<'a> {
    table: &'a mut PairTable,
    slot: usize,
}

impl OccupiedPair<'_> {
    pub fn get(&self) -> &PairEntry {
        &self.table.slots[self.slot]
    }

    pub fn get_mut(&mut self) -> &mut PairEntry {
        &mut self.table.slots[self.slot]
    }

    /// Takes the pair out of the table.
    pub fn remove(self) -> PairEntry {
        self.table.remove_slot(self.slot)
    }
}

/// The slot an absent pair would take.
pub struct VacantPair<'a> {
    table: &'a mut PairTable,
    slot: usize,
}

impl VacantPair<'_> {
    /// Puts `entry` there; it must be the pair this slot was probed for.
    pub fn insert(self, entry: PairEntry) {
        debug_assert_ne!(entry.campaign, 0, "campaign handles start at 1");
        self.table.slots[self.slot] = entry;
        self.table.len += 1;
        if self.table.over_load() {
            self.table.grow(self.table.len);
        }
    }
}

impl PairTable {
    fn hash(&self, campaign: CampaignHandle, seller: SellerId) -> u64 {
        self.hasher.hash_one((seller, campaign))
    }

    /// The slot a hash starts its probe at: its place in [0, slots), from its high bits.
    fn home(hash: u64, slots: usize) -> usize {
        ((u128::from(hash) * slots as u128) >> 64) as usize
    }

    fn next(&self, slot: usize) -> usize {
        if slot + 1 == self.slots.len() {
            0
        } else {
            slot + 1
        }
    }

    /// The pair's slot, or the empty slot where the probe for it ended; `None` if the table
    /// has no slots yet.
    fn probe(&self, campaign: CampaignHandle, seller: SellerId) -> Option<Result<usize, usize>> {
        if self.slots.is_empty() {
            return None;
        }
        let mut slot = Self::home(self.hash(campaign, seller), self.slots.len());
        loop {
            let entry = &self.slots[slot];
            if entry.campaign == 0 {
                return Some(Err(slot));
            }
            if entry.seller == seller && entry.campaign == campaign {
                return Some(Ok(slot));
            }
            slot = self.next(slot);
        }
    }

    /// The pair's entry, to read, change, insert or remove.
    pub fn entry(&mut self, campaign: CampaignHandle, seller: SellerId) -> PairSlot<'_> {
        if self.slots.is_empty() {
            self.grow(1);
        }
        match self.probe(campaign, seller).expect("the table has slots") {
            Ok(slot) => PairSlot::Occupied(OccupiedPair { table: self, slot }),
            Err(slot) => PairSlot::Vacant(VacantPair { table: self, slot }),
        }
    }

    fn over_load(&self) -> bool {
        self.len * MAX_LOAD.1 > self.slots.len() * MAX_LOAD.0
    }

    /// Slots enough for `pairs` at the table's most load.
    fn slots_for(pairs: usize) -> usize {
        (pairs * MAX_LOAD.1).div_ceil(MAX_LOAD.0).max(pairs + 1)
    }

    /// Grows to slots for `pairs`, and at least twice the slots it has, so that growing one
    /// pair at a time costs a constant per pair.
    fn grow(&mut self, pairs: usize) {
        self.rehash(Self::slots_for(pairs).max(self.slots.len() * 2));
    }

    /// Moves every pair into a table of `slots` slots.
    fn rehash(&mut self, slots: usize) {
        let old = std::mem::replace(&mut self.slots, bytemuck::zeroed_vec(slots));
        for entry in old.into_iter().filter(|entry| entry.campaign != 0) {
            let mut slot = Self::home(self.hash(entry.campaign, entry.seller), slots);
            while self.slots[slot].campaign != 0 {
                slot = self.next(slot);
            }
            self.slots[slot] = entry;
        }
    }

    /// Empties `hole` and shifts back the pairs after it that may sit there, so that every
    /// probe still meets its pair before an empty slot.
    fn remove_slot(&mut self, mut hole: usize) -> PairEntry {
        let removed = self.slots[hole];
        let mut slot = self.next(hole);
        while self.slots[slot].campaign != 0 {
            let entry = self.slots[slot];
            let home = Self::home(self.hash(entry.campaign, entry.seller), self.slots.len());
            // It may move back unless its home lies after the hole, up to its slot.
            let stays = if hole <= slot {
                hole < home && home <= slot
            } else {
                hole < home || home <= slot
            };
            if !stays {
                self.slots[hole] = entry;
                hole = slot;
            }
            slot = self.next(slot);
        }
        self.slots[hole] = PairEntry::EMPTY;
        self.len -= 1;
        removed
    }

    /// Makes room for `additional` more pairs at once.
    pub fn reserve(&mut self, additional: usize) {
        let slots = Self::slots_for(self.len + additional);
        if slots > self.slots.len() {
            self.rehash(slots);
        }
    }

    /// Holds `entry`, in place of the pair's earlier one.
    pub fn insert(&mut self, entry: PairEntry) {
        match self.entry(entry.campaign, entry.seller) {
            PairSlot::Occupied(mut held) => *held.get_mut() = entry,
            PairSlot::Vacant(vacant) => vacant.insert(entry),
        }
    }

    pub fn get(&self, campaign: CampaignHandle, seller: SellerId) -> Option<&PairEntry> {
        match self.probe(campaign, seller)? {
            Ok(slot) => Some(&self.slots[slot]),
            Err(_) => None,
        }
    }

    pub fn remove(&mut self, campaign: CampaignHandle, seller: SellerId) -> Option<PairEntry> {
        match self.probe(campaign, seller)? {
            Ok(slot) => Some(self.remove_slot(slot)),
            Err(_) => None,
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The pairs in the table's order, which holds while the table does not change.
    pub fn iter(&self) -> impl Iterator<Item = &PairEntry> + '_ {
        self.slots.iter().filter(|entry| entry.campaign != 0)
    }

    /// How many slots the table has: each is empty or holds one pair, and a pair stays in
    /// its slot while the table does not change, so a walk over the slots can stop and go
    /// on from an index (where `iter().skip(n)` would walk the first `n` again).
    pub fn slots(&self) -> usize {
        self.slots.len()
    }

    /// The pairs in the slots `range` (slots past the end hold none).
    pub fn in_slots(&self, range: Range<usize>) -> impl Iterator<Item = &PairEntry> + '_ {
        let end = range.end.min(self.slots.len());
        let start = range.start.min(end);
        self.slots[start..end].iter().filter(|entry| entry.campaign != 0)
    }

    pub fn iter_mut(&mut self) -> impl Iterator<Item = &mut PairEntry> + '_ {
        self.slots.iter_mut().filter(|entry| entry.campaign != 0)
    }

    /// Takes every pair out, keeping the allocation.
    pub fn drain(&mut self) -> impl Iterator<Item = PairEntry> + '_ {
        self.len = 0;
        self.slots
            .iter_mut()
            .filter(|entry| entry.campaign != 0)
            .map(std::mem::take)
    }
}

impl IntoIterator for PairTable {
    type Item = PairEntry;
    type IntoIter = std::iter::Filter<std::vec::IntoIter<PairEntry>, fn(&PairEntry) -> bool>;

    fn into_iter(self) -> Self::IntoIter {
        self.slots.into_iter().filter(|entry| entry.campaign != 0)
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

    /// What the table is asked to do, on few campaigns and sellers, so that pairs meet,
    /// probes wrap around the end and removals shift runs back.
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
        let pair = (1u32..4, 0u64..40);
        prop_oneof![
            (pair.clone(), -3i32..4).prop_map(|((c, s), p)| Op::Insert(c, s, p)),
            pair.clone().prop_map(|(c, s)| Op::Remove(c, s)),
            (pair, -2i32..3).prop_map(|((c, s), p)| Op::Add(c, s, p)),
            (0usize..60).prop_map(Op::Reserve),
        ]
    }

    #[test]
    fn a_reserved_table_takes_under_29_bytes_per_pair() {
        let mut table = PairTable::default();
        table.reserve(1_000_000);
        let bytes = table.slots() * std::mem::size_of::<PairEntry>();
        assert!(bytes < 29 * 1_000_000, "{bytes} bytes");
        let campaign = CampaignHandles::default().handle(1);
        for seller in 0..1_000_000 {
            table.insert(PairEntry::held(
                campaign,
                seller,
                PairFigures {
                    eligible_products: 1,
                    eligible_stock: 1,
                },
            ));
        }
        assert_eq!(
            table.slots() * std::mem::size_of::<PairEntry>(),
            bytes,
            "no growth within the reserve"
        );
    }

    proptest::proptest! {
        /// The table answers as a map does after any run of inserts, removals, additions and
        /// reserves, and holds each pair in exactly one slot.
        #[test]
        fn the_table_answers_as_a_map(ops in proptest::collection::vec(op(), 0..300)) {
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
                            PairSlot::Occupied(mut held) => {
                                held.get_mut().products += delta;
                                held.get_mut().stock += i64::from(delta) * 10;
                                if held.get().products == 0 {
                                    held.remove();
                                }
                            }
                            PairSlot::Vacant(vacant) => {
                                if delta != 0 {
                                    vacant.insert(entry(campaign, seller, delta));
                                }
                            }
                        }
                        let products = model.remove(&(campaign, seller)).unwrap_or(0) + delta;
                        if products != 0 || (delta == 0 && table.get(campaign, seller).is_some()) {
                            model.insert((campaign, seller), products);
                        }
                    }
                    Op::Reserve(additional) => table.reserve(additional),
                }
                proptest::prop_assert_eq!(table.len(), model.len());
            }
            for campaign in 1u32..4 {
                for seller in 0u64..40 {
                    let found = table.get(campaign, seller).map(|entry| (entry.products, entry.stock));
                    let expected = model.get(&(campaign, seller)).map(|&products| (products, i64::from(products) * 10));
                    proptest::prop_assert_eq!(found, expected);
                }
            }
            let mut all: Vec<(CampaignHandle, SellerId, i32)> =
                table.iter().map(|entry| (entry.campaign, entry.seller, entry.products)).collect();
            all.sort_unstable();
            let expected: Vec<_> = model.iter().map(|(&(campaign, seller), &products)| (campaign, seller, products)).collect();
            proptest::prop_assert_eq!(&all, &expected);
            let mut drained: Vec<_> = table.clone().into_iter().map(|entry| (entry.campaign, entry.seller, entry.products)).collect();
            drained.sort_unstable();
            proptest::prop_assert_eq!(&drained, &expected);
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
