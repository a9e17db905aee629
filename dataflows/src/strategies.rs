//! Random products and campaigns for the library's property tests: small id ranges, so
//! that criteria and products meet often.

use proptest::prelude::*;

use crate::model::{Campaign, IdSet, Product};

/// A list of up to two of four ids.
pub fn small_ids() -> impl Strategy<Value = IdSet> {
    prop::collection::vec(0..4u64, 0..3).prop_map(IdSet::new)
}

pub fn campaign() -> impl Strategy<Value = Campaign> {
    (
        (small_ids(), small_ids(), small_ids(), small_ids()),
        prop::option::of(0..5u64),
        prop::option::of(0..5u64),
        0..3u64,
        any::<bool>(),
    )
        .prop_map(
            |((category_ids, brand_ids, seller_ids, excluded_seller_ids), min, max, min_stock, active)| Campaign {
                category_ids,
                brand_ids,
                seller_ids,
                excluded_seller_ids,
                min_price_minor: min,
                max_price_minor: max,
                min_stock,
                active,
                window: Default::default(),
            },
        )
}

pub fn product() -> impl Strategy<Value = Product> {
    (0..4u64, 0..4u64, 0..4u64, 0..5u64, 0..3u32).prop_map(|(seller_id, category_id, brand_id, price_minor, stock)| {
        Product {
            seller_id,
            category_id,
            brand_id,
            price_minor,
            stock,
        }
    })
}

/// Other ancestors of a product's category: a few small ids, maybe the category itself
/// (on a cycle), in any order.
pub fn ancestors() -> impl Strategy<Value = Vec<u64>> {
    prop::collection::vec(0..6u64, 0..4).prop_map(|mut ids| {
        ids.dedup();
        ids
    })
}
