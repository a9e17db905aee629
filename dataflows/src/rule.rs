//! The eligibility rule of SPEC.md, and how it splits into an index key and a residual.
//!
//! The dataflow never pairs every product with every campaign. Like a presearcher (Lucene
//! Monitor, Luwak), it indexes each campaign under the values of one of its list criteria:
//! its categories if it has any, else its brands, else its sellers. A product is indexed
//! under its own category, brand and seller, so the join on these keys yields exactly the
//! (product, campaign) candidates that pass the indexed criterion, each once.
//!
//! Invariant: `is_eligible(p, c)` holds exactly when `p` carries one of the keys of
//! `index_campaign(c)` and the residual returned with them admits `p`. The residual is the
//! campaign with the indexed list cleared, so it is checked by `is_eligible` itself.

use serde::{Deserialize, Serialize};

use crate::model::{Campaign, Product};

/// Whether product `p` may join campaign `c`.
pub fn is_eligible(p: &Product, c: &Campaign) -> bool {
    c.active
        && c.category_ids.admits(p.category_id)
        && c.brand_ids.admits(p.brand_id)
        && c.seller_ids.admits(p.seller_id)
        && !c.excluded_seller_ids.contains(p.seller_id)
        && c.min_price_minor.is_none_or(|min| p.price_minor >= min)
        && c.max_price_minor.is_none_or(|max| p.price_minor <= max)
        && u64::from(p.stock) >= c.min_stock
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
        assert!(is_eligible(&product(), &Campaign::unrestricted()));
    }

    #[test]
    fn inactive_admits_nothing() {
        let c = Campaign {
            active: false,
            ..Campaign::unrestricted()
        };
        assert!(!is_eligible(&product(), &c));
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
            assert_eq!(is_eligible(&p, &campaign), expected, "{campaign:?}");
        }
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
        use proptest::prelude::*;

        fn small_ids() -> impl Strategy<Value = IdSet> {
            prop::collection::vec(0..4u64, 0..3).prop_map(IdSet::new)
        }

        fn campaign() -> impl Strategy<Value = Campaign> {
            (
                (small_ids(), small_ids(), small_ids(), small_ids()),
                prop::option::of(0..5u64),
                prop::option::of(0..5u64),
                0..3u64,
                any::<bool>(),
            )
                .prop_map(
                    |((category_ids, brand_ids, seller_ids, excluded_seller_ids), min, max, min_stock, active)| {
                        Campaign {
                            category_ids,
                            brand_ids,
                            seller_ids,
                            excluded_seller_ids,
                            min_price_minor: min,
                            max_price_minor: max,
                            min_stock,
                            active,
                        }
                    },
                )
        }

        fn product() -> impl Strategy<Value = Product> {
            (0..4u64, 0..4u64, 0..4u64, 0..5u64, 0..3u32).prop_map(
                |(seller_id, category_id, brand_id, price_minor, stock)| Product {
                    seller_id,
                    category_id,
                    brand_id,
                    price_minor,
                    stock,
                },
            )
        }

        proptest! {
            /// The join on index keys plus the residual check decides exactly what the rule does.
            #[test]
            fn index_keys_and_residual_decide_like_the_rule(p in product(), c in campaign()) {
                let joined = match index_campaign(&c) {
                    None => false,
                    Some(CampaignIndex::Keys(keys, residual)) => {
                        let meets = keys.iter().filter(|key| p.predicate_keys().contains(key)).count();
                        prop_assert!(meets <= 1, "a product meets a campaign at most once");
                        meets == 1 && is_eligible(&p, &residual)
                    }
                    Some(CampaignIndex::EveryCategory(residual)) => is_eligible(&p, &residual),
                };
                prop_assert_eq!(joined, is_eligible(&p, &c));
            }
        }
    }
}
