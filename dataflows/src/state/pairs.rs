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

/// Pairs keyed by (campaign handle, seller).
#[derive(Clone, Debug, Default)]
pub struct PairTable {
    pairs: HashTable<PairEntry>,
    hasher: foldhash::fast::RandomState,
}

impl PairTable {
    fn place(&self, campaign: CampaignHandle, seller: SellerId) -> u64 {
        self.hasher.hash_one((seller, campaign))
    }

    /// The pair's entry, to read, change, insert or remove.
    pub fn entry(&mut self, campaign: CampaignHandle, seller: SellerId) -> Entry<'_, PairEntry> {
        let place = self.place(campaign, seller);
        let hasher = &self.hasher;
        self.pairs.entry(
            place,
            |entry| entry.seller == seller && entry.campaign == campaign,
            |entry| hasher.hash_one((entry.seller, entry.campaign)),
        )
    }

    /// Makes room for `additional` more pairs at once.
    pub fn reserve(&mut self, additional: usize) {
        let hasher = &self.hasher;
        self.pairs
            .reserve(additional, |entry| hasher.hash_one((entry.seller, entry.campaign)));
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
        self.pairs.find(self.place(campaign, seller), |entry| {
            entry.seller == seller && entry.campaign == campaign
        })
    }

    pub fn remove(&mut self, campaign: CampaignHandle, seller: SellerId) -> Option<PairEntry> {
        match self.entry(campaign, seller) {
            Entry::Occupied(held) => Some(held.remove().0),
            Entry::Vacant(_) => None,
        }
    }

    pub fn len(&self) -> usize {
        self.pairs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.pairs.is_empty()
    }

    /// The pairs in the table's order, which holds while the table does not change.
    pub fn iter(&self) -> impl Iterator<Item = &PairEntry> + '_ {
        self.pairs.iter()
    }

    /// How many slots the table has: each is empty or holds one pair, and a pair stays in
    /// its slot while the table does not change, so a walk over the slots can stop and go
    /// on from an index (where `iter().skip(n)` would walk the first `n` again).
    pub fn slots(&self) -> usize {
        self.pairs.num_buckets()
    }

    /// The pairs in the slots `range` (slots past the end hold none).
    pub fn in_slots(&self, range: Range<usize>) -> impl Iterator<Item = &PairEntry> + '_ {
        range.filter_map(|slot| self.pairs.get_bucket(slot))
    }

    pub fn iter_mut(&mut self) -> impl Iterator<Item = &mut PairEntry> + '_ {
        self.pairs.iter_mut()
    }

    /// Takes every pair out, keeping the allocation.
    pub fn drain(&mut self) -> impl Iterator<Item = PairEntry> + '_ {
        self.pairs.drain()
    }
}

impl IntoIterator for PairTable {
    type Item = PairEntry;
    type IntoIter = hashbrown::hash_table::IntoIter<PairEntry>;

    fn into_iter(self) -> Self::IntoIter {
        self.pairs.into_iter()
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

    proptest::proptest! {
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
