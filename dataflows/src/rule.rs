//! The eligibility rule of SPEC.md, and how it splits into an index key and a residual.
//!
//! The dataflow never pairs every product with every campaign. Like a presearcher (Lucene
//! Monitor, Luwak), it indexes each campaign under the values of one of its list criteria:
//! its categories if it has any, else its brands, else its sellers. A product is indexed
//! under its own category, brand and seller, so the join on these keys yields exactly the
//! (product, campaign) candidates that pass the indexed criterion, each once.
//!
//! With a category tree, a product is also met under each ancestor of its category, so a
//! campaign naming both a category and one of its ancestors would meet the product twice:
//! it counts only under the least of its categories the product falls in
//! ([`first_category_met`]).
//!
//! Invariant: `is_eligible(p, ancestors, c)` holds exactly when `p` carries one of the keys
//! of `index_campaign(c)` (its category's ancestors count as category keys), that key is the
//! first one met, and the residual returned with the keys admits `p`. The residual is the
//! campaign with the indexed list cleared, so it is checked by `is_eligible` itself, with
//! no ancestors: it has no category criterion left (categories are indexed first).

use serde::{Deserialize, Serialize};

use crate::model::{Campaign, CategoryId, IdSet, Product};

/// The ancestors to pass for a product whose category has none but itself, or for a
/// residual, which has no category criterion.
pub const NO_ANCESTORS: &[CategoryId] = &[];

/// Whether product `p` may join campaign `c`; `ancestors` are those of `p.category_id`
/// besides the category itself (which always counts), in any order.
#[inline]
pub fn is_eligible(p: &Product, ancestors: &[CategoryId], c: &Campaign) -> bool {
    meets(Criteria::ALL, p, ancestors, c)
}

/// A set of a campaign's criteria, one bit each.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Criteria(u8);

impl Criteria {
    const ACTIVE: u8 = 1;
    const CATEGORIES: u8 = 1 << 1;
    const BRANDS: u8 = 1 << 2;
    const SELLERS: u8 = 1 << 3;
    const EXCLUDED_SELLERS: u8 = 1 << 4;
    const MIN_PRICE: u8 = 1 << 5;
    const MAX_PRICE: u8 = 1 << 6;
    const MIN_STOCK: u8 = 1 << 7;
    pub const ALL: Criteria = Criteria(u8::MAX);
    pub const NONE: Criteria = Criteria(0);

    /// The criteria in which two versions of a campaign differ.
    pub fn differing(a: &Campaign, b: &Campaign) -> Criteria {
        let bits = [
            (a.active != b.active, Self::ACTIVE),
            (a.category_ids != b.category_ids, Self::CATEGORIES),
            (a.brand_ids != b.brand_ids, Self::BRANDS),
            (a.seller_ids != b.seller_ids, Self::SELLERS),
            (a.excluded_seller_ids != b.excluded_seller_ids, Self::EXCLUDED_SELLERS),
            (a.min_price_minor != b.min_price_minor, Self::MIN_PRICE),
            (a.max_price_minor != b.max_price_minor, Self::MAX_PRICE),
            (a.min_stock != b.min_stock, Self::MIN_STOCK),
        ];
        Criteria(
            bits.iter()
                .filter(|(differs, _)| *differs)
                .fold(0, |set, (_, bit)| set | bit),
        )
    }

    /// Every criterion not in this set.
    pub fn others(self) -> Criteria {
        Criteria(!self.0)
    }

    #[inline]
    fn has(self, bit: u8) -> bool {
        self.0 & bit != 0
    }
}

/// Whether `p` passes the criteria of `c` in `criteria` (the others are not checked).
#[inline]
pub fn meets(criteria: Criteria, p: &Product, ancestors: &[CategoryId], c: &Campaign) -> bool {
    (!criteria.has(Criteria::ACTIVE) || c.active)
        && (!criteria.has(Criteria::CATEGORIES) || admits_category(&c.category_ids, p.category_id, ancestors))
        && (!criteria.has(Criteria::BRANDS) || c.brand_ids.admits(p.brand_id))
        && (!criteria.has(Criteria::SELLERS) || c.seller_ids.admits(p.seller_id))
        && (!criteria.has(Criteria::EXCLUDED_SELLERS) || !c.excluded_seller_ids.contains(p.seller_id))
        && (!criteria.has(Criteria::MIN_PRICE) || c.min_price_minor.is_none_or(|min| p.price_minor >= min))
        && (!criteria.has(Criteria::MAX_PRICE) || c.max_price_minor.is_none_or(|max| p.price_minor <= max))
        && (!criteria.has(Criteria::MIN_STOCK) || u64::from(p.stock) >= c.min_stock)
}

/// Whether a campaign's `categories` admit a product of `category` with these other
/// `ancestors`: an empty list admits every category, else one of them must be named.
pub fn admits_category(categories: &IdSet, category: CategoryId, ancestors: &[CategoryId]) -> bool {
    categories.is_empty() || first_category_met(categories, category, ancestors).is_some()
}

/// The least of `categories` that is `category` or one of its other `ancestors`: the one
/// key under which a category-indexed campaign counts a product of `category`.
pub fn first_category_met(categories: &IdSet, category: CategoryId, ancestors: &[CategoryId]) -> Option<CategoryId> {
    let mut first = categories.contains(category).then_some(category);
    for &ancestor in ancestors {
        if first.is_none_or(|first| ancestor < first) && categories.contains(ancestor) {
            first = Some(ancestor);
        }
    }
    first
}

/// A key under which products and campaigns meet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum PredicateKey {
    Category(u64),
    Brand(u64),
    Seller(u64),
}

impl Product {
    /// Every key a product is indexed under: one of each kind.
    pub fn predicate_keys(&self) -> [PredicateKey; 3] {
        [
            PredicateKey::Category(self.category_id),
            PredicateKey::Brand(self.brand_id),
            PredicateKey::Seller(self.seller_id),
        ]
    }
}

/// Where an active campaign is indexed, and what is left to check after the join.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CampaignIndex {
    /// Under these keys, all of one kind.
    Keys(Vec<PredicateKey>, Campaign),
    /// No list criterion at all: the campaign meets every product, through every category.
    EveryCategory(Campaign),
}

/// How campaign `c` is indexed, or `None` when it is inactive and has no pairs.
pub fn index_campaign(c: &Campaign) -> Option<CampaignIndex> {
    if !c.active {
        return None;
    }
    let mut residual = c.clone();
    let index = if !c.category_ids.is_empty() {
        residual.category_ids = Default::default();
        CampaignIndex::Keys(c.category_ids.iter().map(PredicateKey::Category).collect(), residual)
    } else if !c.brand_ids.is_empty() {
        residual.brand_ids = Default::default();
        CampaignIndex::Keys(c.brand_ids.iter().map(PredicateKey::Brand).collect(), residual)
    } else if !c.seller_ids.is_empty() {
        residual.seller_ids = Default::default();
        CampaignIndex::Keys(c.seller_ids.iter().map(PredicateKey::Seller).collect(), residual)
    } else {
        CampaignIndex::EveryCategory(residual)
    };
    Some(index)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::IdSet;

    fn product() -> Product {
        Product {
            seller_id: 42,
            category_id: 1001,
            brand_id: 7,
            price_minor: 12990,
            stock: 15,
        }
    }

    fn ids(list: &[u64]) -> IdSet {
        IdSet::new(list.to_vec())
    }

    #[test]
    fn defaults_admit_everything() {
        assert!(is_eligible(&product(), NO_ANCESTORS, &Campaign::unrestricted()));
    }

    #[test]
    fn inactive_admits_nothing() {
        let c = Campaign {
            active: false,
            ..Campaign::unrestricted()
        };
        assert!(!is_eligible(&product(), NO_ANCESTORS, &c));
        assert_eq!(index_campaign(&c), None);
    }

    #[test]
    fn each_criterion_can_exclude() {
        let p = product();
        let base = Campaign::unrestricted();
        let cases: Vec<(Campaign, bool)> = vec![
            (
                Campaign {
                    category_ids: ids(&[1001, 5]),
                    ..base.clone()
                },
                true,
            ),
            (
                Campaign {
                    category_ids: ids(&[5]),
                    ..base.clone()
                },
                false,
            ),
            (
                Campaign {
                    brand_ids: ids(&[7]),
                    ..base.clone()
                },
                true,
            ),
            (
                Campaign {
                    brand_ids: ids(&[8]),
                    ..base.clone()
                },
                false,
            ),
            (
                Campaign {
                    seller_ids: ids(&[42]),
                    ..base.clone()
                },
                true,
            ),
            (
                Campaign {
                    seller_ids: ids(&[41]),
                    ..base.clone()
                },
                false,
            ),
            (
                Campaign {
                    excluded_seller_ids: ids(&[41]),
                    ..base.clone()
                },
                true,
            ),
            (
                Campaign {
                    excluded_seller_ids: ids(&[42]),
                    ..base.clone()
                },
                false,
            ),
            (
                Campaign {
                    min_price_minor: Some(12990),
                    ..base.clone()
                },
                true,
            ),
            (
                Campaign {
                    min_price_minor: Some(12991),
                    ..base.clone()
                },
                false,
            ),
            (
                Campaign {
                    max_price_minor: Some(12990),
                    ..base.clone()
                },
                true,
            ),
            (
                Campaign {
                    max_price_minor: Some(12989),
                    ..base.clone()
                },
                false,
            ),
            (
                Campaign {
                    min_stock: 15,
                    ..base.clone()
                },
                true,
            ),
            (
                Campaign {
                    min_stock: 16,
                    ..base.clone()
                },
                false,
            ),
            // A seller both included and excluded is excluded.
            (
                Campaign {
                    seller_ids: ids(&[42]),
                    excluded_seller_ids: ids(&[42]),
                    ..base.clone()
                },
                false,
            ),
            // An empty price range admits nothing, and is not an error.
            (
                Campaign {
                    min_price_minor: Some(2),
                    max_price_minor: Some(1),
                    ..base.clone()
                },
                false,
            ),
        ];
        for (campaign, expected) in cases {
            assert_eq!(is_eligible(&p, NO_ANCESTORS, &campaign), expected, "{campaign:?}");
        }
    }

    #[test]
    fn a_category_criterion_holds_through_an_ancestor() {
        let p = product();
        let in_ = |categories: &[u64]| Campaign {
            category_ids: ids(categories),
            ..Campaign::unrestricted()
        };
        // 1001's ancestors besides itself: 10 and 1.
        let ancestors = [10, 1];
        assert!(is_eligible(&p, &ancestors, &in_(&[1])));
        assert!(is_eligible(&p, &ancestors, &in_(&[10, 77])));
        assert!(is_eligible(&p, &ancestors, &in_(&[1001])));
        assert!(!is_eligible(&p, &ancestors, &in_(&[100])));
        assert!(
            !is_eligible(&p, NO_ANCESTORS, &in_(&[1])),
            "flat: only the category itself"
        );
        // The first category met is the least named one among the product's ancestors.
        assert_eq!(first_category_met(&ids(&[10, 1001]), 1001, &ancestors), Some(10));
        assert_eq!(first_category_met(&ids(&[1, 10, 1001]), 1001, &ancestors), Some(1));
        assert_eq!(first_category_met(&ids(&[1001, 2000]), 1001, &ancestors), Some(1001));
        assert_eq!(first_category_met(&ids(&[2000]), 1001, &ancestors), None);
    }

    #[test]
    fn index_prefers_categories_then_brands_then_sellers() {
        let c = Campaign {
            category_ids: ids(&[2, 1]),
            brand_ids: ids(&[7]),
            seller_ids: ids(&[42]),
            ..Campaign::unrestricted()
        };
        let Some(CampaignIndex::Keys(keys, residual)) = index_campaign(&c) else {
            panic!()
        };
        assert_eq!(keys, vec![PredicateKey::Category(1), PredicateKey::Category(2)]);
        assert!(residual.category_ids.is_empty());
        assert_eq!(residual.brand_ids, c.brand_ids);

        let c = Campaign {
            brand_ids: ids(&[7]),
            seller_ids: ids(&[42]),
            ..Campaign::unrestricted()
        };
        let Some(CampaignIndex::Keys(keys, residual)) = index_campaign(&c) else {
            panic!()
        };
        assert_eq!(keys, vec![PredicateKey::Brand(7)]);
        assert_eq!(residual.seller_ids, c.seller_ids);

        let c = Campaign {
            seller_ids: ids(&[42, 43]),
            ..Campaign::unrestricted()
        };
        let Some(CampaignIndex::Keys(keys, _)) = index_campaign(&c) else {
            panic!()
        };
        assert_eq!(keys, vec![PredicateKey::Seller(42), PredicateKey::Seller(43)]);

        let c = Campaign {
            excluded_seller_ids: ids(&[1]),
            ..Campaign::unrestricted()
        };
        assert!(matches!(index_campaign(&c), Some(CampaignIndex::EveryCategory(_))));
    }

    mod invariant {
        use super::*;
        use crate::strategies::{ancestors, campaign, product};
        use proptest::prelude::*;

        proptest! {
            /// The join on index keys (a product's category meets under each of its
            /// ancestors too), counted under the first category met, plus the residual
            /// check decides exactly what the rule does.
            #[test]
            fn index_keys_and_residual_decide_like_the_rule(p in product(), ancestors in ancestors(), c in campaign()) {
                let mut product_keys = p.predicate_keys().to_vec();
                product_keys.extend(ancestors.iter().map(|a| PredicateKey::Category(*a)));
                let joined = match index_campaign(&c) {
                    None => false,
                    Some(CampaignIndex::Keys(keys, residual)) => {
                        let counted = keys
                            .iter()
                            .filter(|key| product_keys.contains(key))
                            .filter(|key| match key {
                                PredicateKey::Category(category) => {
                                    first_category_met(&c.category_ids, p.category_id, &ancestors) == Some(*category)
                                }
                                _ => true,
                            })
                            .count();
                        prop_assert!(counted <= 1, "a product counts for a campaign at most once");
                        prop_assert!(residual.category_ids.is_empty(), "a residual has no category criterion");
                        counted == 1 && is_eligible(&p, NO_ANCESTORS, &residual)
                    }
                    Some(CampaignIndex::EveryCategory(residual)) => {
                        prop_assert!(residual.category_ids.is_empty());
                        is_eligible(&p, NO_ANCESTORS, &residual)
                    }
                };
                prop_assert_eq!(joined, is_eligible(&p, &ancestors, &c));
            }
        }
    }
}
