//! One change line read back, borrowing its campaign id from the line.
//!
//! A restart into a JSONL change log reads every line of it (10.7M at 10M products) before
//! its reconcile can start. Lines as the job writes them (`push_change_line`: one layout,
//! keys in order, no escapes) are read by [`exact_line`] without a JSON parser or an
//! allocation; any other line (hand-edited, escaped ids, spaces) by `serde_json`, which also
//! gives the error for a bad one. The fast path accepts only lines `serde_json` reads the
//! same way (tested below against it on written and mangled lines). It reads bytes and checks
//! UTF-8 in the campaign id only, the one place a non-ASCII byte can stand in its layout:
//! checking every line whole was a sixth of the fold's time.

use std::borrow::Cow;

use anyhow::{bail, Context};
use dataflows::model::{PairFigures, SellerId, Time};
use serde::Deserialize;

/// A change line's content; `campaign_id` borrowed from the line unless it was escaped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChangeRef<'a> {
    pub time: Time,
    pub campaign_id: Cow<'a, str>,
    pub seller_id: SellerId,
    /// `None` for a delete.
    pub figures: Option<PairFigures>,
}

/// Reads one change line (without its newline).
pub fn parse_line(line: &str) -> anyhow::Result<ChangeRef<'_>> {
    parse_line_bytes(line.as_bytes())
}

/// Reads one change line (without its newline) from bytes that may not be UTF-8.
pub fn parse_line_bytes(line: &[u8]) -> anyhow::Result<ChangeRef<'_>> {
    match exact_line(line) {
        Some(change) => Ok(change),
        None => json_line(std::str::from_utf8(line).context("a change line is not UTF-8")?),
    }
}

#[derive(Deserialize)]
struct JsonLine<'a> {
    #[serde(borrow)]
    op: Cow<'a, str>,
    #[serde(borrow)]
    id: Cow<'a, str>,
    #[serde(borrow)]
    campaign_id: Cow<'a, str>,
    seller_id: u64,
    eligible_products: Option<u64>,
    eligible_stock: Option<u64>,
    time: Time,
}

/// Any JSON object with the change line's fields, checked.
fn json_line(line: &str) -> anyhow::Result<ChangeRef<'_>> {
    let parsed: JsonLine = serde_json::from_str(line).with_context(|| format!("not a change line: {line}"))?;
    if !is_document_id(parsed.id.as_bytes(), &parsed.campaign_id, parsed.seller_id) {
        bail!("id {} does not match campaign_id:seller_id", parsed.id);
    }
    let figures = match (parsed.op.as_ref(), parsed.eligible_products, parsed.eligible_stock) {
        ("upsert", Some(eligible_products), Some(eligible_stock)) => Some(PairFigures {
            eligible_products,
            eligible_stock,
        }),
        ("delete", None, None) => None,
        _ => bail!(
            "change line {} has op {:?} and inconsistent figures",
            parsed.id,
            parsed.op
        ),
    };
    Ok(ChangeRef {
        time: parsed.time,
        campaign_id: parsed.campaign_id,
        seller_id: parsed.seller_id,
        figures,
    })
}

/// A line in exactly the job's own layout, or `None` (then `serde_json` reads it).
fn exact_line(line: &[u8]) -> Option<ChangeRef<'_>> {
    let (upsert, rest) = match line.strip_prefix(br#"{"op":"upsert","id":""#) {
        Some(rest) => (true, rest),
        None => (false, line.strip_prefix(br#"{"op":"delete","id":""#)?),
    };
    let (id, rest) = plain_string(rest)?;
    let (campaign_id, rest) = plain_string(rest.strip_prefix(br#","campaign_id":""#)?)?;
    // The id must be `campaign_id:seller_id`, so it is UTF-8 when the campaign id is.
    let campaign_id = std::str::from_utf8(campaign_id).ok()?;
    let (seller_id, mut rest) = number(rest.strip_prefix(br#","seller_id":"#)?)?;
    let figures = if upsert {
        let (eligible_products, after) = number(rest.strip_prefix(br#","eligible_products":"#)?)?;
        let (eligible_stock, after) = number(after.strip_prefix(br#","eligible_stock":"#)?)?;
        rest = after;
        Some(PairFigures {
            eligible_products,
            eligible_stock,
        })
    } else {
        None
    };
    let (time, rest) = number(rest.strip_prefix(br#","time":"#)?)?;
    (rest == b"}" && is_document_id(id, campaign_id, seller_id)).then_some(ChangeRef {
        time,
        campaign_id: Cow::Borrowed(campaign_id),
        seller_id,
        figures,
    })
}

/// Whether the bytes `id` are `campaign_id:seller_id`.
fn is_document_id(id: &[u8], campaign_id: &str, seller_id: SellerId) -> bool {
    id.strip_prefix(campaign_id.as_bytes())
        .and_then(|rest| rest.strip_prefix(b":"))
        .is_some_and(|digits| digits == itoa::Buffer::new().format(seller_id).as_bytes())
}

/// The bytes before the next `"`, if nothing in them needs unescaping or is refused by JSON
/// (a backslash, a control character); and what follows the quote.
fn plain_string(text: &[u8]) -> Option<(&[u8], &[u8])> {
    let end = text
        .iter()
        .position(|&byte| byte == b'"' || byte == b'\\' || byte < 0x20)?;
    (text[end] == b'"').then(|| (&text[..end], &text[end + 1..]))
}

/// A `u64` as JSON writes it (digits, no leading zero), and what follows it.
fn number(text: &[u8]) -> Option<(u64, &[u8])> {
    let digits = text.iter().take_while(|byte| byte.is_ascii_digit()).count();
    if digits == 0 || (digits > 1 && text[0] == b'0') {
        return None;
    }
    let value = text[..digits].iter().try_fold(0u64, |value, digit| {
        value.checked_mul(10)?.checked_add(u64::from(digit - b'0'))
    })?;
    Some((value, &text[digits..]))
}

#[cfg(test)]
mod tests {
    use dataflows::model::{PairChange, PairKey};
    use proptest::prelude::*;

    use super::*;
    use crate::sink::jsonl::push_change_line;

    fn written(campaign_id: String, seller_id: u64, figures: Option<(u64, u64)>, time: u64) -> String {
        let change = PairChange {
            time,
            pair: PairKey { seller_id, campaign_id },
            figures: figures.map(|(eligible_products, eligible_stock)| PairFigures {
                eligible_products,
                eligible_stock,
            }),
            previous: None,
        };
        let mut line = Vec::new();
        push_change_line(&change, &mut Vec::new(), &mut line);
        assert_eq!(line.pop(), Some(b'\n'));
        String::from_utf8(line).expect("UTF-8")
    }

    /// Small numbers mostly (an edit then often makes a leading zero or a longer number),
    /// the largest sometimes.
    fn figure() -> impl Strategy<Value = u64> {
        prop_oneof![0..100u64, any::<u64>(), Just(u64::MAX)]
    }

    fn change_line() -> impl Strategy<Value = String> {
        (
            prop_oneof![".*", "[a-z0-9:-]{0,12}", "[\"\\\\\\x00-\\x1f:a-z]{0,6}"],
            figure(),
            proptest::option::of((figure(), figure())),
            figure(),
        )
            .prop_map(|(campaign_id, seller_id, figures, time)| written(campaign_id, seller_id, figures, time))
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(1024))]

        /// Every line the job writes reads back as `serde_json` reads it, by the fast path
        /// unless its id needed escapes.
        #[test]
        fn written_lines_read_as_serde_json_reads_them(line in change_line()) {
            let json = json_line(&line).expect("a written line is a change line");
            match exact_line(line.as_bytes()) {
                Some(exact) => prop_assert_eq!(exact, json),
                None => prop_assert!(line.contains('\\'), "declined an unescaped line: {}", line),
            }
        }

        /// A mangled line, UTF-8 or not: the fast path accepts it only as `serde_json`
        /// reads it, and `parse_line_bytes` fails exactly when `serde_json` does (a line that
        /// is not UTF-8 it cannot read).
        #[test]
        fn mangled_lines_read_as_serde_json_reads_them_or_fail_alike(
            line in change_line(),
            edits in proptest::collection::vec((any::<prop::sample::Index>(), 0..3u8, proptest::sample::select(b"0123456789:\"\\,{} -a\x01\x80\xc3\xff".to_vec())), 1..4),
        ) {
            let mut bytes = line.into_bytes();
            for (at, kind, byte) in edits {
                if bytes.is_empty() {
                    break;
                }
                let at = at.index(bytes.len());
                match kind {
                    0 => { bytes.remove(at); }
                    1 => bytes.insert(at, byte),
                    _ => bytes[at] = byte,
                }
            }
            let json = std::str::from_utf8(&bytes).ok().and_then(|line| json_line(line).ok());
            if let Some(exact) = exact_line(&bytes) {
                prop_assert_eq!(Some(&exact), json.as_ref(), "{}", String::from_utf8_lossy(&bytes));
            }
            prop_assert_eq!(parse_line_bytes(&bytes).ok(), json);
        }
    }

    #[test]
    fn numbers_as_json_writes_them_only() {
        assert_eq!(number(b"0,"), Some((0, &b","[..])));
        assert_eq!(number(b"18446744073709551615}"), Some((u64::MAX, &b"}"[..])));
        assert_eq!(number(b"18446744073709551616}"), None, "overflow");
        assert_eq!(number(b"01"), None, "leading zero");
        assert_eq!(number(b"-1"), None);
        assert_eq!(number(b""), None);
    }

    /// Lines in the job's layout that are not JSON: refused, not read by the fast path.
    #[test]
    fn a_line_in_the_layout_but_not_json_is_refused() {
        let good = r#"{"op":"upsert","id":"c:7","campaign_id":"c","seller_id":7,"eligible_products":1,"eligible_stock":2,"time":3}"#;
        assert!(parse_line(good).is_ok());
        for bad in [
            good.replace(r#""seller_id":7"#, r#""seller_id":07"#)
                .replace("c:7", "c:07"),
            good.replace(r#""time":3"#, r#""time":03"#),
            good.replace(r#""c:7""#, "\"c\u{1}:7\"")
                .replace(r#""c","#, "\"c\u{1}\","),
        ] {
            assert!(parse_line(&bad).is_err(), "{bad}");
        }
    }

    /// Bytes that are not UTF-8 in the campaign id or the id: refused, by either path.
    #[test]
    fn a_line_that_is_not_utf8_is_refused() {
        let good = r#"{"op":"upsert","id":"cé:7","campaign_id":"cé","seller_id":7,"eligible_products":1,"eligible_stock":2,"time":3}"#;
        assert_eq!(parse_line(good).expect("reads").campaign_id, "cé");
        let id_only = good.as_bytes().to_vec();
        let at = good.find('é').expect("in the id");
        for (first, second) in [(0xc3, 0x28), (0xff, 0xff)] {
            let mut bad = id_only.clone();
            (bad[at], bad[at + 1]) = (first, second);
            assert!(
                parse_line_bytes(&bad).is_err(),
                "the id: {}",
                String::from_utf8_lossy(&bad)
            );
            let mut both = bad.clone();
            let in_campaign = good.rfind('é').expect("in the campaign id");
            (both[in_campaign], both[in_campaign + 1]) = (first, second);
            assert!(
                parse_line_bytes(&both).is_err(),
                "both: {}",
                String::from_utf8_lossy(&both)
            );
        }
    }

    #[test]
    fn a_hand_written_line_with_spaces_and_another_key_order_still_reads() {
        let line = r#"{ "time": 3, "op": "delete", "seller_id": 7, "campaign_id": "c\"1", "id": "c\"1:7" }"#;
        let change = parse_line(line).expect("reads");
        assert_eq!(change.campaign_id, "c\"1");
        assert_eq!((change.seller_id, change.time, change.figures), (7, 3, None));
        assert!(parse_line(r#"{"op":"upsert","id":"c:8","campaign_id":"c","seller_id":7,"eligible_products":1,"eligible_stock":1,"time":0}"#).is_err());
    }
}
