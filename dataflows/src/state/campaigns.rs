//! The campaigns, as every worker holds them: by id, and the active ones by predicate key.
//!
//! Campaigns are few (hundreds) and products many, so every worker keeps every campaign
//! and a product meets its candidates with three hash lookups, on the worker that holds
//! it, without moving. A candidate is a small handle into a slab: the criteria are looked
//! up, never copied or compared on the hot path.
//!
//! Under a category tree, a product also meets the campaigns that name an ancestor of its
//! category. The entry of a category key carries the category's ancestors, so the lookup
//! that finds the campaigns naming the category finds them too: a product whose category
//! has no ancestor but itself takes the three lookups of the flat case, and one more per
//! ancestor otherwise.

use crate::hashing::FastMap;
use crate::model::{tag_of, Campaign, CampaignId, CategoryId, IdSet, Product, Tag};
use crate::rule::{first_category_met, index_campaign, CampaignIndex, PredicateKey};

/// An active campaign's place in the table; stable while the campaign is unchanged.
pub type Handle = u32;

/// An active campaign as products meet it.
pub struct ActiveCampaign {
    pub tag: Tag,
    /// Its place in the table: a dense index for per-campaign sums.
    pub handle: Handle,
    /// The criteria left to check once a product meets the campaign under its key.
    pub residual: Campaign,
    /// The categories it is indexed under; empty when it is indexed otherwise.
    pub categories: IdSet,
    keys: Vec<PredicateKey>,
}

struct Stored {
    campaign: Campaign,
    handle: Option<Handle>,
}

/// What a product meets under one of its keys.
#[derive(Default)]
struct Keyed {
    /// The active campaigns indexed under the key.
    handles: Vec<Handle>,
    /// For a category: its ancestors besides itself, sorted, whose campaigns a product of
    /// the category meets too. Empty for other keys and in a flat tree.
    ancestors: Vec<CategoryId>,
}

impl Keyed {
    fn is_empty(&self) -> bool {
        self.handles.is_empty() && self.ancestors.is_empty()
    }
}

#[derive(Default)]
pub struct CampaignTable {
    by_id: FastMap<CampaignId, Stored>,
    slots: Vec<Option<ActiveCampaign>>,
    free: Vec<Handle>,
    by_key: FastMap<PredicateKey, Keyed>,
    /// Active campaigns with no list criterion: candidates for every product.
    unrestricted: Vec<Handle>,
    /// Per category with an entry, the campaigns its products meet through it or one of
    /// its ancestors, each once: one lookup per product instead of one per ancestor and a
    /// check per campaign. Made by [`CampaignTable::prepare`]; `None` while out of date.
    through_category: Option<FastMap<CategoryId, Vec<Handle>>>,
}

impl CampaignTable {
    /// The campaign `id` as stored, if any.
    pub fn get(&self, id: &CampaignId) -> Option<&Campaign> {
        self.by_id.get(id).map(|stored| &stored.campaign)
    }

    /// Replaces the campaign `id` (`None` deletes it) and returns what was there.
    pub fn upsert(&mut self, id: &CampaignId, new: Option<Campaign>) -> Option<Campaign> {
        self.through_category = None;
        let old = match self.by_id.remove(id) {
            Some(stored) => {
                if let Some(handle) = stored.handle {
                    self.unindex(handle);
                }
                Some(stored.campaign)
            }
            None => None,
        };
        if let Some(campaign) = new {
            let handle =
                index_campaign(&campaign).map(|index| self.index(tag_of(id), campaign.category_ids.clone(), index));
            self.by_id.insert(id.clone(), Stored { campaign, handle });
        }
        old
    }

    /// Calls `meet` with every active campaign that `product` may join: those indexed
    /// under one of its keys or under an ancestor of its category, and the unrestricted
    /// ones. Each at most once.
    pub fn candidates<'a>(&'a self, product: &Product, mut meet: impl FnMut(&'a ActiveCampaign)) {
        let [category_key, brand_key, seller_key] = product.predicate_keys();
        let [brand, seller] = [brand_key, seller_key].map(|key| self.by_key.get(&key));
        let mut meet_all = |handles: &'a [Handle]| {
            for &handle in handles {
                if let Some(active) = &self.slots[handle as usize] {
                    meet(active);
                }
            }
        };
        let handles = |keyed: Option<&'a Keyed>| keyed.map_or(&[][..], |keyed| keyed.handles.as_slice());
        match &self.through_category {
            Some(through) => meet_all(through.get(&product.category_id).map_or(&[][..], Vec::as_slice)),
            None => match self.by_key.get(&category_key) {
                Some(own) if !own.ancestors.is_empty() => {
                    self.candidates_through(product.category_id, own, &mut meet_all)
                }
                // Flat: the campaigns naming the category, as without a tree.
                category => meet_all(handles(category)),
            },
        }
        meet_all(handles(brand));
        meet_all(handles(seller));
        meet_all(&self.unrestricted);
    }

    /// The campaigns naming `category` (its entry is `own`) or one of its ancestors: a
    /// campaign that names several of them is met under each, and counted under the first
    /// only.
    fn candidates_through<'a>(&'a self, category: CategoryId, own: &'a Keyed, meet_all: &mut impl FnMut(&'a [Handle])) {
        let ancestors = own.ancestors.as_slice();
        debug_assert!(!ancestors.contains(&category), "strict ancestors");
        let ancestors_keyed = ancestors
            .iter()
            .map(|ancestor| (*ancestor, self.by_key.get(&PredicateKey::Category(*ancestor))));
        for (named, keyed) in std::iter::once((category, Some(own))).chain(ancestors_keyed) {
            let Some(keyed) = keyed else { continue };
            for handle in &keyed.handles {
                if let Some(active) = &self.slots[*handle as usize] {
                    let first = active.categories.len() == 1
                        || first_category_met(&active.categories, category, ancestors) == Some(named);
                    if first {
                        meet_all(std::slice::from_ref(handle));
                    }
                }
            }
        }
    }

    /// Makes the per-category lists [`CampaignTable::candidates`] takes, if out of date:
    /// once per time with product changes, after its campaign and tree changes (a few
    /// thousand categories with campaigns, against up to millions of products).
    pub fn prepare(&mut self) {
        if self.through_category.is_some() {
            return;
        }
        let mut through = FastMap::default();
        for (key, own) in &self.by_key {
            let PredicateKey::Category(category) = *key else {
                continue;
            };
            let mut handles = Vec::new();
            self.candidates_through(category, own, &mut |met: &[Handle]| handles.extend_from_slice(met));
            through.insert(category, handles);
        }
        self.through_category = Some(through);
    }

    /// Sets the ancestors of `category` besides itself, sorted, as the tree now has them.
    pub fn set_ancestors(&mut self, category: CategoryId, ancestors: &[CategoryId]) {
        self.through_category = None;
        let key = PredicateKey::Category(category);
        if ancestors.is_empty() {
            if let Some(keyed) = self.by_key.get_mut(&key) {
                keyed.ancestors = Vec::new();
                if keyed.is_empty() {
                    self.by_key.remove(&key);
                }
            }
        } else {
            self.by_key.entry(key).or_default().ancestors = ancestors.to_vec();
        }
    }

    /// The active campaigns indexed under `category`: those that name it.
    pub fn naming(&self, category: CategoryId) -> impl Iterator<Item = Handle> + '_ {
        self.by_key
            .get(&PredicateKey::Category(category))
            .into_iter()
            .flat_map(|keyed| keyed.handles.iter().copied())
    }

    /// One more than the greatest handle in use: the length of a per-campaign array.
    pub fn handles(&self) -> usize {
        self.slots.len()
    }

    /// The active campaign under `handle`, from [`CampaignTable::naming`].
    pub fn active(&self, handle: Handle) -> &ActiveCampaign {
        self.slots[handle as usize]
            .as_ref()
            .expect("a handle of an active campaign")
    }

    fn index(&mut self, tag: Tag, category_ids: IdSet, index: CampaignIndex) -> Handle {
        let (keys, residual) = match index {
            CampaignIndex::Keys(keys, residual) => (keys, residual),
            CampaignIndex::EveryCategory(residual) => (Vec::new(), residual),
        };
        // Categories are indexed first: a campaign that names any is indexed under them.
        let categories = category_ids;
        let handle = match self.free.pop() {
            Some(handle) => handle,
            None => {
                self.slots.push(None);
                (self.slots.len() - 1) as Handle
            }
        };
        if keys.is_empty() {
            self.unrestricted.push(handle);
        }
        for key in &keys {
            self.by_key.entry(*key).or_default().handles.push(handle);
        }
        self.slots[handle as usize] = Some(ActiveCampaign {
            tag,
            handle,
            residual,
            categories,
            keys,
        });
        handle
    }

    fn unindex(&mut self, handle: Handle) {
        let Some(active) = self.slots[handle as usize].take() else {
            return;
        };
        if active.keys.is_empty() {
            remove_handle(&mut self.unrestricted, handle);
        }
        for key in &active.keys {
            if let Some(keyed) = self.by_key.get_mut(key) {
                remove_handle(&mut keyed.handles, handle);
                if keyed.is_empty() {
                    self.by_key.remove(key);
                }
            }
        }
        self.free.push(handle);
    }
}

/// Removes a handle from a short list whose order does not matter.
fn remove_handle(handles: &mut Vec<Handle>, handle: Handle) {
    if let Some(position) = handles.iter().position(|h| *h == handle) {
        handles.swap_remove(position);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn product(seller_id: u64, category_id: u64, brand_id: u64) -> Product {
        Product {
            seller_id,
            category_id,
            brand_id,
            price_minor: 100,
            stock: 1,
        }
    }

    /// The candidates' tags, checked equal with and without the per-category lists.
    fn tags(table: &mut CampaignTable, product: &Product) -> Vec<Tag> {
        let met = |table: &CampaignTable| {
            let mut tags = Vec::new();
            table.candidates(product, |active| tags.push(active.tag));
            tags.sort();
            tags
        };
        table.through_category = None;
        let unprepared = met(table);
        table.prepare();
        assert_eq!(met(table), unprepared, "the prepared lists meet what the lookups meet");
        unprepared
    }

    fn by_categories(categories: &[u64]) -> Campaign {
        Campaign {
            category_ids: IdSet::new(categories.to_vec()),
            ..Campaign::unrestricted()
        }
    }

    #[test]
    fn candidates_follow_edits_deactivation_and_deletes() {
        let mut table = CampaignTable::default();
        let (a, b, c) = ("a".to_owned(), "b".to_owned(), "c".to_owned());
        let by_category = Campaign {
            category_ids: IdSet::new(vec![1, 2]),
            ..Campaign::unrestricted()
        };
        assert_eq!(table.upsert(&a, Some(by_category.clone())), None);
        table.upsert(&b, Some(Campaign::unrestricted()));
        let by_brand = Campaign {
            brand_ids: IdSet::new(vec![9]),
            ..Campaign::unrestricted()
        };
        table.upsert(&c, Some(by_brand));
        let mut all = vec![tag_of("a"), tag_of("b"), tag_of("c")];
        all.sort();
        assert_eq!(tags(&mut table, &product(5, 1, 9)), all);
        assert_eq!(tags(&mut table, &product(5, 3, 8)), vec![tag_of("b")]);

        // Deactivated: still known by id, no longer a candidate.
        let inactive = Campaign {
            active: false,
            ..by_category.clone()
        };
        assert_eq!(table.upsert(&a, Some(inactive.clone())), Some(by_category));
        assert!(!tags(&mut table, &product(5, 1, 8)).contains(&tag_of("a")));
        assert_eq!(table.by_id.len(), 3);
        assert_eq!(table.upsert(&a, None), Some(inactive));
        assert_eq!(table.upsert(&b, None), Some(Campaign::unrestricted()));
        assert!(tags(&mut table, &product(5, 1, 8)).is_empty());
        assert!(table.by_key.keys().all(|key| *key == PredicateKey::Brand(9)));
        // Freed slots are reused.
        table.upsert(&a, Some(Campaign::unrestricted()));
        assert_eq!(table.slots.len(), 3);
    }

    #[test]
    fn through_ancestors_a_campaign_is_met_once() {
        let mut table = CampaignTable::default();
        let (a, b, c) = ("a".to_owned(), "b".to_owned(), "c".to_owned());
        // a names the product's category and two of its ancestors; b one ancestor; c none.
        table.upsert(&a, Some(by_categories(&[1, 10, 1001])));
        table.upsert(&b, Some(by_categories(&[10])));
        table.upsert(&c, Some(by_categories(&[2])));
        let p = product(5, 1001, 9);
        let mut ab = vec![tag_of("a"), tag_of("b")];
        ab.sort();
        table.set_ancestors(1001, &[1, 10]);
        assert_eq!(tags(&mut table, &p), ab);
        table.set_ancestors(1001, &[10]);
        assert_eq!(tags(&mut table, &p), ab);
        table.set_ancestors(1001, &[]);
        assert_eq!(tags(&mut table, &p), vec![tag_of("a")]);
        assert_eq!(table.naming(10).count(), 2);
        assert_eq!(table.active(table.naming(2).next().unwrap()).tag, tag_of("c"));
        // A category's entry lives while it has ancestors or campaigns.
        table.set_ancestors(77, &[2]);
        assert_eq!(tags(&mut table, &product(5, 77, 9)), vec![tag_of("c")]);
        table.upsert(&c, None);
        assert!(table.by_key.contains_key(&PredicateKey::Category(77)));
        table.set_ancestors(77, &[]);
        assert!(!table.by_key.contains_key(&PredicateKey::Category(77)));
        assert!(!table.by_key.contains_key(&PredicateKey::Category(2)));
    }
}
