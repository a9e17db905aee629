//! How an edit of a campaign changes one product's eligibility.
//!
//! An edit meets every product under the campaign's keys. Most edits change one criterion
//! (a price bound, the minimum stock), so a product is first checked against the criteria
//! that changed only: where both versions agree on them, its eligibility cannot flip, and
//! the criteria they share are never checked. They are checked once, and only for a
//! product the changed criteria treat differently.

use crate::model::{Campaign, CategoryId, Product};
use crate::rule::{is_eligible, meets, Criteria};

/// A campaign's old and new version (`None`: absent or not meeting this product's key).
#[derive(Clone, Copy, Debug)]
pub struct Edit<'a> {
    old: Option<&'a Campaign>,
    new: Option<&'a Campaign>,
    /// The criteria in which the two versions differ, when both are present.
    changed: Criteria,
}

impl<'a> Edit<'a> {
    pub fn new(old: Option<&'a Campaign>, new: Option<&'a Campaign>) -> Self {
        let changed = match (old, new) {
            (Some(old), Some(new)) => Criteria::differing(old, new),
            _ => Criteria::ALL,
        };
        Edit { old, new, changed }
    }

    /// Whether no product's eligibility can flip: both versions present and alike, or
    /// both absent.
    pub fn changes_nothing(&self) -> bool {
        match (self.old, self.new) {
            (Some(_), Some(_)) => self.changed == Criteria::NONE,
            (None, None) => true,
            _ => false,
        }
    }

    /// `Some(true)` if `p` becomes eligible, `Some(false)` if it stops being eligible,
    /// `None` if its eligibility stays as it was.
    #[inline]
    pub fn flip(&self, p: &Product, ancestors: &[CategoryId]) -> Option<bool> {
        match (self.old, self.new) {
            (Some(old), Some(new)) => {
                let was = meets(self.changed, p, ancestors, old);
                let is = meets(self.changed, p, ancestors, new);
                (was != is && meets(self.changed.others(), p, ancestors, new)).then_some(is)
            }
            (Some(old), None) => is_eligible(p, ancestors, old).then_some(false),
            (None, Some(new)) => is_eligible(p, ancestors, new).then_some(true),
            (None, None) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::strategies::{ancestors, campaign, product};
    use proptest::prelude::*;

    /// A second version: the first with each field taken from `other` where `take` says,
    /// so that edits changing one, several or no criteria all come up.
    fn edited(first: &Campaign, other: &Campaign, take: [bool; 8]) -> Campaign {
        let pick = |i: usize| take[i];
        Campaign {
            active: if pick(0) { other.active } else { first.active },
            category_ids: if pick(1) {
                other.category_ids.clone()
            } else {
                first.category_ids.clone()
            },
            brand_ids: if pick(2) {
                other.brand_ids.clone()
            } else {
                first.brand_ids.clone()
            },
            seller_ids: if pick(3) {
                other.seller_ids.clone()
            } else {
                first.seller_ids.clone()
            },
            excluded_seller_ids: if pick(4) {
                other.excluded_seller_ids.clone()
            } else {
                first.excluded_seller_ids.clone()
            },
            min_price_minor: if pick(5) {
                other.min_price_minor
            } else {
                first.min_price_minor
            },
            max_price_minor: if pick(6) {
                other.max_price_minor
            } else {
                first.max_price_minor
            },
            min_stock: if pick(7) { other.min_stock } else { first.min_stock },
            window: first.window,
        }
    }

    proptest! {
        /// The flip is exactly where the rule decides differently for the two versions.
        #[test]
        fn an_edit_flips_exactly_where_the_rule_differs(
            p in product(),
            ancestors in ancestors(),
            first in campaign(),
            other in campaign(),
            take in any::<[bool; 8]>(),
            present in (any::<bool>(), any::<bool>()),
        ) {
            let second = edited(&first, &other, take);
            let old = present.0.then_some(&first);
            let new = present.1.then_some(&second);
            let was = old.is_some_and(|c| is_eligible(&p, &ancestors, c));
            let is = new.is_some_and(|c| is_eligible(&p, &ancestors, c));
            let edit = Edit::new(old, new);
            prop_assert_eq!(edit.flip(&p, &ancestors), (was != is).then_some(is));
            if edit.changes_nothing() {
                prop_assert_eq!(was, is);
            }
        }
    }
}
