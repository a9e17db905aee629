//! Hash maps and worker routing for the dataflow's own state.
//!
//! The maps key integers (product keys, pair tags, category ids): foldhash hashes those in
//! a few instructions, where std's SipHash costs tens. Routing across workers must agree
//! between processes, so it uses XXH3, never a per-process seed.

use crate::model::{CategoryId, SellerId, Tag};

pub type FastMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;
pub type FastSet<K> = std::collections::HashSet<K, foldhash::fast::RandomState>;

/// The worker that aggregates a (campaign tag, seller) pair, before `% peers`.
pub fn pair_route(tag: Tag, seller_id: SellerId) -> u64 {
    let mut bytes = [0u8; 16];
    bytes[..8].copy_from_slice(&tag.to_le_bytes());
    bytes[8..].copy_from_slice(&seller_id.to_le_bytes());
    xxhash_rust::xxh3::xxh3_64(&bytes)
}

/// The worker that keeps a category's parent, before `% peers`.
pub fn category_route(category_id: CategoryId) -> u64 {
    xxhash_rust::xxh3::xxh3_64(&category_id.to_le_bytes())
}
