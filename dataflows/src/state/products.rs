//! One worker's share of the products: each product once, in a slab, indexed by its keys.
//!
//! A product lives in one slot of a vector; its key maps to the slot, and each of its
//! predicate keys (category, brand, seller) holds the slot, a 4-byte integer. A campaign
//! change then meets only the products under its own keys, and a campaign with no list
//! criterion scans the slab, which is contiguous.

use crate::hashing::{FastMap, FastSet};
use crate::model::{Product, ProductKey};
use crate::rule::PredicateKey;

type Slot = u32;

#[derive(Default)]
pub struct ProductTable {
    slots: FastMap<ProductKey, Slot>,
    products: Slab,
    free: Vec<Slot>,
    by_key: FastMap<PredicateKey, FastSet<Slot>>,
}

impl ProductTable {
    /// Replaces the product under `key` (`None` deletes it) and returns what was there.
    pub fn upsert(&mut self, key: ProductKey, new: Option<Product>) -> Option<Product> {
        let slot = match (self.slots.get(&key), new) {
            (Some(slot), _) => *slot,
            (None, None) => return None,
            (None, Some(_)) => {
                let slot = self.free.pop().unwrap_or_else(|| {
                    self.products.push(None);
                    Slot::try_from(self.products.len() - 1).expect("fewer than 2³² products per worker")
                });
                self.slots.insert(key, slot);
                slot
            }
        };
        let old = std::mem::replace(self.products.get_mut(slot), new);
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
        if new.is_none() {
            self.slots.remove(&key);
            self.free.push(slot);
        }
        old
    }

    /// The products indexed under `key`: those of a category, a brand or a seller.
    pub fn with_key(&self, key: PredicateKey) -> impl Iterator<Item = &Product> + '_ {
        self.by_key
            .get(&key)
            .into_iter()
            .flatten()
            .filter_map(|slot| self.products.get(*slot).as_ref())
    }

    /// Whether some product is indexed under `key`.
    pub fn has_key(&self, key: PredicateKey) -> bool {
        self.by_key.contains_key(&key)
    }

    /// Every product of the share.
    pub fn iter(&self) -> impl Iterator<Item = &Product> + '_ {
        self.products.iter().flatten()
    }
}

/// Slots in chunks of fixed size: growing never copies the slab or holds it twice (a
/// doubling vector of 10M products would reserve room for 16.7M and copy 8M on its way).
#[derive(Default)]
struct Slab {
    chunks: Vec<Vec<Option<Product>>>,
}

/// Slots per chunk: 3 MB of products.
const CHUNK: usize = 1 << 16;

impl Slab {
    fn len(&self) -> usize {
        self.chunks
            .last()
            .map_or(0, |last| (self.chunks.len() - 1) * CHUNK + last.len())
    }

    fn push(&mut self, product: Option<Product>) {
        match self.chunks.last_mut() {
            Some(last) if last.len() < CHUNK => last.push(product),
            _ => {
                let mut chunk = Vec::with_capacity(CHUNK);
                chunk.push(product);
                self.chunks.push(chunk);
            }
        }
    }

    fn get(&self, slot: Slot) -> &Option<Product> {
        let slot = slot as usize;
        &self.chunks[slot / CHUNK][slot % CHUNK]
    }

    fn get_mut(&mut self, slot: Slot) -> &mut Option<Product> {
        let slot = slot as usize;
        &mut self.chunks[slot / CHUNK][slot % CHUNK]
    }

    fn iter(&self) -> impl Iterator<Item = &Option<Product>> + '_ {
        self.chunks.iter().flatten()
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
        assert_eq!(table.slots.len(), 1);
        assert_eq!(*table.products.get(table.slots[&b]), Some(product(2, 7, 20)));
        // The freed slot is reused.
        table.upsert(a, Some(product(3, 8, 1)));
        assert_eq!(table.products.len(), 2);
        assert_eq!(table.iter().count(), 2);
    }
}

#[cfg(test)]
mod slab_tests {
    use super::*;

    #[test]
    fn the_slab_addresses_slots_across_chunks() {
        let mut slab = Slab::default();
        let product = |stock| Product {
            seller_id: 1,
            category_id: 2,
            brand_id: 3,
            price_minor: 4,
            stock,
        };
        for stock in 0..(2 * CHUNK as u32 + 5) {
            slab.push(Some(product(stock)));
        }
        assert_eq!(slab.len(), 2 * CHUNK + 5);
        assert_eq!(slab.chunks.len(), 3);
        assert!(slab.chunks.iter().all(|chunk| chunk.capacity() == CHUNK));
        *slab.get_mut(CHUNK as Slot) = None;
        assert_eq!(*slab.get(CHUNK as Slot + 1), Some(product(CHUNK as u32 + 1)));
        assert_eq!(slab.iter().flatten().count(), 2 * CHUNK + 4);
        let stocks: Vec<u32> = slab.iter().flatten().map(|p| p.stock).take(3).collect();
        assert_eq!(stocks, vec![0, 1, 2]);
    }
}
