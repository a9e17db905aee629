//! The entities the job reasons about, as they are after decoding.
//!
//! Prices are integer minor units (`round(price * 100)`): no float exists past the decoder.
//! Id lists are sorted and free of duplicates, so two campaigns with the same criteria in a
//! different order compare equal and an edit that only reorders a list changes nothing.

use std::cmp::Ordering;

use serde::{Deserialize, Serialize};

use crate::instant::EpochNanos;

/// Logical time: a batch number in file mode, a millisecond clock with Kafka sources.
pub type Time = u64;

/// A product id, the key of the `products` changelog.
pub type ProductId = String;
/// A campaign id, the key of the `campaigns` changelog.
pub type CampaignId = String;

/// A product id as the dataflow keys it: a 128-bit hash (XXH3) of the text id.
///
/// Product ids key the largest state; as integers they hash and compare without `memcmp`
/// and take 16 bytes instead of a heap string. Two of n ids collide with a chance of about
/// n²/2¹²⁹ (10⁻²¹ for a billion products). The key never leaves the running job: its
/// state is rebuilt from the changelogs at every start. Two `u64` halves rather than a
/// `u128`, whose 16-byte alignment would pad every (key, product) entry by 8 bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ProductKey(pub [u64; 2]);

impl ProductKey {
    /// The key of a product id; the same id gives the same key in every process.
    pub fn of(id: &str) -> Self {
        let hash = xxhash_rust::xxh3::xxh3_128(id.as_bytes());
        ProductKey([hash as u64, (hash >> 64) as u64])
    }

    /// Which worker holds the product: the low half, already uniformly spread.
    pub fn route(&self) -> u64 {
        self.0[0]
    }
}

/// A campaign as the hot path names it: a 64-bit hash (XXH3) of its id.
///
/// Pairs are counted under the tag, an integer, and get their text id only when written.
/// Two of n campaign ids share a tag with a chance of about n²/2⁶⁵ (10⁻¹³ for a
/// thousand); they would then share pairs, accepted for the speed.
pub type Tag = u64;

/// The tag of a campaign id; the same in every process.
pub fn tag_of(campaign_id: &str) -> Tag {
    xxhash_rust::xxh3::xxh3_64(campaign_id.as_bytes())
}

pub type SellerId = u64;
pub type CategoryId = u64;
pub type BrandId = u64;

/// The fields of a product that eligibility depends on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Product {
    pub seller_id: SellerId,
    pub category_id: CategoryId,
    pub brand_id: BrandId,
    /// Price in minor units (cents).
    pub price_minor: u64,
    pub stock: u32,
}

/// A node of the category tree: its parent, `None` for a root.
///
/// A category without a record is a root too; `parent_id` may name a category that has no
/// record (another root), or form a cycle (SPEC.md, "Category trees").
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Category {
    pub parent_id: Option<CategoryId>,
}

/// A campaign's participation criteria.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Campaign {
    pub category_ids: IdSet,
    pub brand_ids: IdSet,
    pub seller_ids: IdSet,
    pub excluded_seller_ids: IdSet,
    /// Lowest admitted price in minor units, inclusive.
    pub min_price_minor: Option<u64>,
    /// Highest admitted price in minor units, inclusive.
    pub max_price_minor: Option<u64>,
    pub min_stock: u64,
    pub active: bool,
    /// When the campaign is open; it has pairs only then (SPEC.md, "Campaign windows").
    pub window: Window,
}

/// When a campaign is open: from `starts_at` (inclusive) to `ends_at` (exclusive), each
/// `None` for no bound. `ends_at <= starts_at` is valid and never open.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Window {
    pub starts_at: Option<EpochNanos>,
    pub ends_at: Option<EpochNanos>,
}

impl Window {
    /// Whether the window is open when the job's clock reads `clock`.
    pub fn is_open_at(&self, clock: EpochNanos) -> bool {
        self.starts_at.is_none_or(|start| start <= clock) && self.ends_at.is_none_or(|end| clock < end)
    }

    /// The next bound the clock has not reached at `clock`: where openness may change next.
    pub fn next_bound_after(&self, clock: EpochNanos) -> Option<EpochNanos> {
        [self.starts_at, self.ends_at]
            .into_iter()
            .flatten()
            .filter(|bound| *bound > clock)
            .min()
    }

    pub fn is_unbounded(&self) -> bool {
        self.starts_at.is_none() && self.ends_at.is_none()
    }
}

impl Campaign {
    /// The campaign every field of which has its default: active, with no criteria.
    pub fn unrestricted() -> Self {
        Campaign {
            active: true,
            ..Campaign::default()
        }
    }
}

/// A sorted, duplicate-free list of ids; empty means "no restriction" for an inclusion list.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct IdSet(Vec<u64>);

impl IdSet {
    pub fn new(mut ids: Vec<u64>) -> Self {
        ids.sort_unstable();
        ids.dedup();
        IdSet(ids)
    }

    pub fn contains(&self, id: u64) -> bool {
        self.0.binary_search(&id).is_ok()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn iter(&self) -> impl Iterator<Item = u64> + '_ {
        self.0.iter().copied()
    }

    /// An empty inclusion list admits every id.
    pub fn admits(&self, id: u64) -> bool {
        self.is_empty() || self.contains(id)
    }
}

impl FromIterator<u64> for IdSet {
    fn from_iter<I: IntoIterator<Item = u64>>(iter: I) -> Self {
        IdSet::new(iter.into_iter().collect())
    }
}

/// The three changelogs the job reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Topic {
    Products,
    Campaigns,
    /// The category tree, keyed by the category id in decimal.
    Categories,
}

impl Topic {
    pub fn name(self) -> &'static str {
        match self {
            Topic::Products => "products",
            Topic::Campaigns => "campaigns",
            Topic::Categories => "categories",
        }
    }
}

/// One (seller, campaign) pair: the unit of every output.
///
/// The seller comes first so that pairs order (and mostly compare) by an integer, not by
/// the campaign's text: sorting pairs is much of what the dataflow does. Ordered as the
/// derived order would (seller, then the id's bytes), with the id's first eight bytes
/// compared as one integer: a seller's pairs differ only there, and the sort of a
/// rebuild's 10M pairs spent a tenth of its time in `memcmp` calls for a few bytes.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct PairKey {
    pub seller_id: SellerId,
    pub campaign_id: CampaignId,
}

impl Ord for PairKey {
    fn cmp(&self, other: &Self) -> Ordering {
        self.seller_id
            .cmp(&other.seller_id)
            .then_with(|| text_prefix(&self.campaign_id).cmp(&text_prefix(&other.campaign_id)))
            .then_with(|| self.campaign_id.cmp(&other.campaign_id))
    }
}

impl PartialOrd for PairKey {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// The first eight bytes of `text`, zero-padded, as a big-endian integer: where two
/// prefixes differ they order as the texts do (a text ending early pads with the least
/// byte), and where they are equal the texts decide.
///
/// Built from whole loads, not by copying into a zeroed buffer: that copy (a `memcpy` of a
/// few bytes, then an 8-byte load of them) stalled on store forwarding and was half of
/// merging a rebuild's sorted runs.
#[inline]
fn text_prefix(text: &str) -> u64 {
    let bytes = text.as_bytes();
    let len = bytes.len();
    if len >= 8 {
        return u64::from_be_bytes(bytes[..8].try_into().expect("eight bytes"));
    }
    if len >= 4 {
        // The first four and the last four bytes, overlapping where len < 8 (equal bytes).
        let head = u32::from_be_bytes(bytes[..4].try_into().expect("four bytes")) as u64;
        let tail = u32::from_be_bytes(bytes[len - 4..].try_into().expect("four bytes")) as u64;
        return (head << 32) | (tail << (8 * (8 - len)));
    }
    bytes
        .iter()
        .enumerate()
        .fold(0, |prefix, (index, &byte)| prefix | (byte as u64) << (56 - 8 * index))
}

impl PairKey {
    /// The seller and the campaign id's first eight bytes as an integer: pairs whose
    /// prefixes differ order as these do, so a sort can compare them without the id's text.
    pub fn order_prefix(&self) -> (SellerId, u64) {
        (self.seller_id, text_prefix(&self.campaign_id))
    }

    /// The document id in every sink: `campaign_id:seller_id`.
    pub fn document_id(&self) -> String {
        format!("{}:{}", self.campaign_id, self.seller_id)
    }
}

/// The figures kept for a pair that exists (`eligible_products > 0`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct PairFigures {
    pub eligible_products: u64,
    pub eligible_stock: u64,
}

/// A pair's new state at one logical time: its figures, or `None` when it ended.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct PairChange {
    pub time: Time,
    pub pair: PairKey,
    pub figures: Option<PairFigures>,
    /// The figures before this time, `None` for a pair that did not exist.
    pub previous: Option<PairFigures>,
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn pair(seller_id: SellerId, campaign_id: &str) -> PairKey {
        PairKey {
            seller_id,
            campaign_id: campaign_id.to_owned(),
        }
    }

    proptest! {
        /// The order of (seller, id) tuples, whatever the ids: prefixes of each other,
        /// NUL bytes (which the padding also uses), longer than eight bytes, multi-byte.
        #[test]
        fn pairs_order_as_seller_then_campaign_text(
            a in (0u64..3, "[a\\x00\\x01é]{0,10}"),
            b in (0u64..3, "[a\\x00\\x01é]{0,10}"),
        ) {
            let (left, right) = (pair(a.0, &a.1), pair(b.0, &b.1));
            prop_assert_eq!(left.cmp(&right), a.cmp(&b));
            prop_assert_eq!(left.cmp(&right) == Ordering::Equal, left == right);
            // The prefix orders as the pairs do wherever it differs.
            if left <= right {
                prop_assert!(left.order_prefix() <= right.order_prefix());
            }
        }

        /// Every length from empty to past eight bytes, any bytes.
        #[test]
        fn the_prefix_is_the_first_eight_bytes_zero_padded(text in "\\PC{0,10}") {
            let mut padded = [0u8; 8];
            let len = text.len().min(8);
            padded[..len].copy_from_slice(&text.as_bytes()[..len]);
            prop_assert_eq!(text_prefix(&text), u64::from_be_bytes(padded));
        }
    }

    #[test]
    fn a_text_ending_early_orders_first() {
        assert!(pair(1, "c-1") < pair(1, "c-1\0"));
        assert!(pair(1, "c-1\0") < pair(1, "c-10"));
        assert!(pair(1, "campaign-9") > pair(1, "campaign-10"));
        assert!(pair(1, "z") < pair(2, "a"));
    }
}
