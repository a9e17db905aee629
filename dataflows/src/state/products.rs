//! One worker's share of the products: each product once, in a slab, indexed by its keys.
//!
//! A product lives in one slot of a chunked vector, with its key; a hash table of slots,
//! 4 bytes each, finds it by that key, and each of its predicate keys (category, brand,
//! seller) holds the slot too. A campaign change then meets only the products under its
//! own keys, and a campaign with no list criterion scans the slab, which is contiguous.
//!
//! The key lives once, in the slot: a map from key to slot would hold it again in its
//! buckets (24 bytes with the slot, at hashbrown's load ~40 bytes per product, the largest
//! part of a rebuild's memory); a table of slots costs ~8.
//!
//! A rebuild [`load`](ProductTable::load)s its products without indexing them and then
//! [`index`](ProductTable::index)es the slab at once: three set inserts per product, each
//! into a set that grows and rehashes, were two fifths of reading a 10M-product topic.

use hashbrown::HashTable;

use crate::hashing::{FastMap, FastSet};
use crate::model::{Product, ProductKey, SellerId};
use crate::rule::PredicateKey;

type Slot = u32;

#[derive(Default)]
pub struct ProductTable {
    /// Every live slot, placed by its key's hash.
    slots: HashTable<Slot>,
    products: Slab,
    by_key: FastMap<PredicateKey, FastSet<Slot>>,
    /// Set by [`load`](Self::load): `by_key` lags the slab until [`index`](Self::index).
    unindexed: bool,
}

/// Where a key sits in the table: the key is already a uniform 128-bit hash; its low half
/// routes products to workers, so all of one worker's keys share its residue: the high half.
fn place(key: &ProductKey) -> u64 {
    key.0[1]
}

impl ProductTable {
    /// Replaces the product under `key` (`None` deletes it) and returns what was there.
    pub fn upsert(&mut self, key: ProductKey, new: Option<Product>) -> Option<Product> {
        self.index();
        let (slot, old) = self.slot_for(key, new)?;
        if old == new {
            return old;
        }
        let old_keys = old.map(|product| product.predicate_keys());
        let new_keys = new.map(|product| product.predicate_keys());
        for (index, old_key) in old_keys.into_iter().flatten().enumerate() {
            if new_keys.is_some_and(|keys| keys[index] == old_key) {
                continue;
            }
            if let Some(slots) = self.by_key.get_mut(&old_key) {
                slots.remove(&slot);
                if slots.is_empty() {
                    self.by_key.remove(&old_key);
                }
            }
        }
        for (index, new_key) in new_keys.into_iter().flatten().enumerate() {
            if old_keys.is_some_and(|keys| keys[index] == new_key) {
                continue;
            }
            self.by_key.entry(new_key).or_default().insert(slot);
        }
        self.settle(slot, new);
        old
    }

    /// As [`upsert`](Self::upsert), but leaves the key index behind until
    /// [`index`](Self::index): for a rebuild, which reads no index until it has loaded
    /// every product.
    pub fn load(&mut self, key: ProductKey, new: Option<Product>) -> Option<Product> {
        self.unindexed = true;
        let (slot, old) = self.slot_for(key, new)?;
        if old != new {
            self.settle(slot, new);
        }
        old
    }

    /// Brings the key index up to the slab after [`load`](Self::load)s, all at once: per
    /// kind of key, the live slots are counted and placed by key (a counting sort), and each
    /// key's set is built from its run at its final size, so no set grows or rehashes and
    /// each is filled while it is in cache.
    pub fn index(&mut self) {
        if !self.unindexed {
            return;
        }
        self.unindexed = false;
        self.by_key.clear();
        let mut buckets: FastMap<PredicateKey, usize> = FastMap::default();
        let mut keys: Vec<PredicateKey> = Vec::new();
        let mut ends: Vec<usize> = Vec::new();
        let mut placed: Vec<Slot> = Vec::new();
        for kind in 0..3 {
            let key_of = |stored: &Stored| stored.product.predicate_keys()[kind];
            buckets.clear();
            keys.clear();
            ends.clear();
            for (_, stored) in self.products.live() {
                let key = key_of(stored);
                let bucket = *buckets.entry(key).or_insert_with(|| {
                    keys.push(key);
                    ends.push(0);
                    keys.len() - 1
                });
                ends[bucket] += 1;
            }
            // Counts to each bucket's start; placing moves a start to the bucket's end.
            let mut start = 0;
            for count in &mut ends {
                (*count, start) = (start, start + *count);
            }
            placed.clear();
            placed.resize(start, 0);
            for (slot, stored) in self.products.live() {
                let end = &mut ends[buckets[&key_of(stored)]];
                placed[*end] = slot;
                *end += 1;
            }
            self.by_key.reserve(keys.len());
            let mut start = 0;
            for (key, &end) in keys.iter().zip(&ends) {
                self.by_key.insert(*key, placed[start..end].iter().copied().collect());
                start = end;
            }
        }
    }

    /// Room for `additional` more products in the table of slots, in one allocation. A
    /// rebuild knows how many records it will read: growing by doubling instead rehashed
    /// every slot each time, each a read of its key in the slab (a cache miss apiece).
    pub fn reserve(&mut self, additional: usize) {
        let products = &self.products;
        self.slots.reserve(additional, |slot| place(&products.get(*slot).key));
    }

    /// Finds or makes `key`'s slot for `new` (a delete frees it from the table) and returns
    /// it with the product that was there; `None` for a delete of a missing product.
    fn slot_for(&mut self, key: ProductKey, new: Option<Product>) -> Option<(Slot, Option<Product>)> {
        let products = &self.products;
        let is_key = |slot: &Slot| products.get(*slot).key == key;
        // A delete leaves the table in the same lookup that finds it.
        let found = match new {
            Some(_) => self.slots.find(place(&key), is_key).copied(),
            None => self
                .slots
                .find_entry(place(&key), is_key)
                .ok()
                .map(|entry| entry.remove().0),
        };
        let (slot, old) = match (found, new) {
            (Some(slot), _) => (slot, Some(self.products.get(slot).product)),
            (None, None) => return None,
            (None, Some(product)) => {
                let slot = self.products.insert(Stored { key, product });
                let products = &self.products;
                self.slots
                    .insert_unique(place(&key), slot, |slot| place(&products.get(*slot).key));
                (slot, None)
            }
        };
        Some((slot, old))
    }

    /// Stores `new` in `slot`, or frees it.
    fn settle(&mut self, slot: Slot, new: Option<Product>) {
        match new {
            Some(product) => self.products.get_mut(slot).product = product,
            None => self.products.vacate(slot),
        }
    }

    /// The products indexed under `key`: those of a category, a brand or a seller.
    pub fn with_key(&self, key: PredicateKey) -> impl Iterator<Item = &Product> + '_ {
        self.assert_indexed();
        self.by_key
            .get(&key)
            .into_iter()
            .flatten()
            .map(|slot| &self.products.get(*slot).product)
    }

    /// Whether some product is indexed under `key`.
    pub fn has_key(&self, key: PredicateKey) -> bool {
        self.assert_indexed();
        self.by_key.contains_key(&key)
    }

    /// Every product of the share.
    pub fn iter(&self) -> impl Iterator<Item = &Product> + '_ {
        self.products.iter()
    }

    /// The sellers with a product here, and how many products each has here.
    pub fn seller_counts(&self) -> impl Iterator<Item = (SellerId, usize)> + '_ {
        self.assert_indexed();
        self.by_key.iter().filter_map(|(key, slots)| match key {
            PredicateKey::Seller(seller) => Some((*seller, slots.len())),
            _ => None,
        })
    }

    /// A lagging index would miss products silently: reading one is a bug, not a slow path.
    fn assert_indexed(&self) {
        assert!(
            !self.unindexed,
            "the product index is read before `index` after a `load`"
        );
    }

    /// Live products.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }
}

/// A product and its key, in its slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Stored {
    key: ProductKey,
    product: Product,
}

/// Slots in chunks of fixed size: growing never copies the slab or holds it twice (a
/// doubling vector of 10M products would reserve room for 16.7M and copy 8M on its way).
/// A vacant slot keeps its last content and is marked in `vacant`, a bit per slot: an
/// `Option` would add 8 bytes to every slot. Vacant slots are filled again first.
#[derive(Default)]
struct Slab {
    chunks: Vec<Vec<Stored>>,
    vacant: Vec<u64>,
    free: Vec<Slot>,
}

/// Slots per chunk: 3.5 MB of products.
const CHUNK: usize = 1 << 16;

impl Slab {
    fn len(&self) -> usize {
        self.chunks
            .last()
            .map_or(0, |last| (self.chunks.len() - 1) * CHUNK + last.len())
    }

    /// Stores `stored` in a vacant slot, or a new one, and returns the slot.
    fn insert(&mut self, stored: Stored) -> Slot {
        if let Some(slot) = self.free.pop() {
            *self.get_mut(slot) = stored;
            self.vacant[slot as usize / 64] &= !(1 << (slot % 64));
            return slot;
        }
        let slot = Slot::try_from(self.len()).expect("fewer than 2³² products per worker");
        match self.chunks.last_mut() {
            Some(last) if last.len() < CHUNK => last.push(stored),
            _ => {
                let mut chunk = Vec::with_capacity(CHUNK);
                chunk.push(stored);
                self.chunks.push(chunk);
            }
        }
        if slot % 64 == 0 {
            self.vacant.push(0);
        }
        slot
    }

    fn vacate(&mut self, slot: Slot) {
        self.vacant[slot as usize / 64] |= 1 << (slot % 64);
        self.free.push(slot);
    }

    fn is_vacant(&self, slot: usize) -> bool {
        self.vacant[slot / 64] & (1 << (slot % 64)) != 0
    }

    fn get(&self, slot: Slot) -> &Stored {
        let slot = slot as usize;
        &self.chunks[slot / CHUNK][slot % CHUNK]
    }

    fn get_mut(&mut self, slot: Slot) -> &mut Stored {
        let slot = slot as usize;
        &mut self.chunks[slot / CHUNK][slot % CHUNK]
    }

    /// The products of the live slots, in slot order.
    fn iter(&self) -> impl Iterator<Item = &Product> + '_ {
        self.live().map(|(_, stored)| &stored.product)
    }

    /// The live slots and what they hold, in slot order.
    fn live(&self) -> impl Iterator<Item = (Slot, &Stored)> + '_ {
        self.chunks
            .iter()
            .flatten()
            .enumerate()
            .filter(|(slot, _)| !self.is_vacant(*slot))
            .map(|(slot, stored)| (slot as Slot, stored))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn product(category_id: u64, brand_id: u64, stock: u32) -> Product {
        Product {
            seller_id: 1,
            category_id,
            brand_id,
            price_minor: 100,
            stock,
        }
    }

    fn stocks(table: &ProductTable, key: PredicateKey) -> Vec<u32> {
        let mut stocks: Vec<u32> = table.with_key(key).map(|p| p.stock).collect();
        stocks.sort();
        stocks
    }

    #[test]
    fn the_key_index_follows_edits_moves_and_deletes() {
        let mut table = ProductTable::default();
        let (a, b) = (ProductKey::of("a"), ProductKey::of("b"));
        assert_eq!(table.upsert(a, Some(product(1, 7, 10))), None);
        assert_eq!(table.upsert(b, Some(product(1, 7, 20))), None);
        assert_eq!(stocks(&table, PredicateKey::Category(1)), vec![10, 20]);
        // A stock edit keeps the keys; a move leaves the old category, keeps the brand.
        assert_eq!(table.upsert(a, Some(product(1, 7, 11))), Some(product(1, 7, 10)));
        assert_eq!(table.upsert(b, Some(product(2, 7, 20))), Some(product(1, 7, 20)));
        assert_eq!(stocks(&table, PredicateKey::Category(1)), vec![11]);
        assert_eq!(stocks(&table, PredicateKey::Category(2)), vec![20]);
        assert_eq!(stocks(&table, PredicateKey::Brand(7)), vec![11, 20]);
        assert_eq!(stocks(&table, PredicateKey::Seller(1)), vec![11, 20]);
        assert_eq!(table.upsert(a, None), Some(product(1, 7, 11)));
        assert_eq!(
            table.upsert(a, None),
            None,
            "deleting a missing product changes nothing"
        );
        assert!(stocks(&table, PredicateKey::Category(1)).is_empty());
        assert!(
            !table.by_key.contains_key(&PredicateKey::Category(1)),
            "an emptied key is dropped"
        );
        assert_eq!(stocks(&table, PredicateKey::Brand(7)), vec![20]);
        assert_eq!(table.len(), 1);
        assert_eq!(table.iter().copied().collect::<Vec<_>>(), vec![product(2, 7, 20)]);
        // The freed slot is reused.
        table.upsert(a, Some(product(3, 8, 1)));
        assert_eq!(table.products.len(), 2);
        assert_eq!(table.iter().count(), 2);
        assert_eq!(table.upsert(a, Some(product(3, 8, 2))), Some(product(3, 8, 1)));
    }
}

#[cfg(test)]
mod load_tests {
    use proptest::prelude::*;

    use super::*;

    /// Everything the index answers, in a comparable form: each seller's count, each key's products.
    type Answers = (Vec<(SellerId, usize)>, Vec<(PredicateKey, Vec<Product>)>);

    fn answers(table: &ProductTable) -> Answers {
        let mut sellers: Vec<(SellerId, usize)> = table.seller_counts().collect();
        sellers.sort();
        let keys = (0..4).flat_map(|id| {
            [
                PredicateKey::Category(id),
                PredicateKey::Brand(id),
                PredicateKey::Seller(id),
            ]
        });
        let indexed = keys
            .map(|key| {
                assert_eq!(table.has_key(key), table.with_key(key).next().is_some());
                let mut products: Vec<Product> = table.with_key(key).copied().collect();
                products.sort_by_key(|p| (p.seller_id, p.category_id, p.brand_id, p.stock));
                (key, products)
            })
            .collect();
        (sellers, indexed)
    }

    fn change() -> impl Strategy<Value = (u8, Option<Product>)> {
        let product =
            (0u64..4, 0u64..4, 0u64..4, 0u32..3).prop_map(|(seller_id, category_id, brand_id, stock)| Product {
                seller_id,
                category_id,
                brand_id,
                price_minor: 100,
                stock,
            });
        (0u8..12, proptest::option::weighted(0.8, product))
    }

    proptest! {
        /// Loading changes (moves, deletes, reinserts into freed slots) and indexing once
        /// answers as upserting them one by one did, also for upserts after the index, and
        /// with room reserved before loading and again part way (which moves every slot).
        #[test]
        fn a_loaded_then_indexed_table_answers_as_an_upserted_one(
            loaded in proptest::collection::vec(change(), 0..60),
            live in proptest::collection::vec(change(), 0..20),
            reserved in (0usize..80, 0usize..200),
        ) {
            let key = |id: u8| ProductKey::of(&format!("p-{id}"));
            let (mut upserted, mut bulk) = (ProductTable::default(), ProductTable::default());
            bulk.reserve(reserved.0);
            for (index, (id, new)) in loaded.iter().enumerate() {
                if index == loaded.len() / 2 {
                    bulk.reserve(reserved.1);
                }
                prop_assert_eq!(upserted.upsert(key(*id), *new), bulk.load(key(*id), *new));
            }
            bulk.index();
            prop_assert_eq!(answers(&upserted), answers(&bulk));
            for (id, new) in &live {
                prop_assert_eq!(upserted.upsert(key(*id), *new), bulk.upsert(key(*id), *new));
            }
            prop_assert_eq!(answers(&upserted), answers(&bulk));
            prop_assert_eq!(upserted.len(), bulk.len());
        }
    }

    #[test]
    #[should_panic(expected = "before `index`")]
    fn reading_the_index_of_a_loaded_table_is_refused() {
        let mut table = ProductTable::default();
        table.load(
            ProductKey::of("a"),
            Some(Product {
                seller_id: 1,
                category_id: 2,
                brand_id: 3,
                price_minor: 4,
                stock: 5,
            }),
        );
        let _ = table.seller_counts();
    }
}

#[cfg(test)]
mod slab_tests {
    use super::*;

    #[test]
    fn the_slab_addresses_slots_across_chunks_and_reuses_vacant_ones() {
        let mut slab = Slab::default();
        let stored = |stock: u32| Stored {
            key: ProductKey([u64::from(stock), 0]),
            product: Product {
                seller_id: 1,
                category_id: 2,
                brand_id: 3,
                price_minor: 4,
                stock,
            },
        };
        for stock in 0..(2 * CHUNK as u32 + 5) {
            assert_eq!(slab.insert(stored(stock)), stock);
        }
        assert_eq!(slab.len(), 2 * CHUNK + 5);
        assert_eq!(slab.chunks.len(), 3);
        assert!(slab.chunks.iter().all(|chunk| chunk.capacity() == CHUNK));
        slab.vacate(CHUNK as Slot);
        assert_eq!(*slab.get(CHUNK as Slot + 1), stored(CHUNK as u32 + 1));
        assert_eq!(slab.iter().count(), 2 * CHUNK + 4, "a vacant slot is not a product");
        let stocks: Vec<u32> = slab.iter().map(|p| p.stock).take(3).collect();
        assert_eq!(stocks, vec![0, 1, 2]);
        assert_eq!(slab.insert(stored(7)), CHUNK as Slot, "the vacant slot is reused");
        assert_eq!(slab.iter().count(), 2 * CHUNK + 5);
        assert_eq!(slab.len(), 2 * CHUNK + 5);
    }
}
