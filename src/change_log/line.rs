//! One change line read back, borrowing its campaign id from the line.
//!
//! A restart into a JSONL change log reads every line of it (10.7M at 10M products) before
//! its reconcile can start. Lines as the job writes them (`push_change_line`: one layout,
//! keys in order, no escapes) are read by [`exact_line`] without a JSON parser or an
//! allocation; any other line (hand-edited, escaped ids, spaces) by `serde_json`, which also
//! gives the error for a bad one. The fast path accepts only lines `serde_json` reads the
//! same way (tested below against it on written and mangled lines).

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
    match exact_line(line) {
        Some(change) => Ok(change),
        None => json_line(line),
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
    if !is_document_id(&parsed.id, &parsed.campaign_id, parsed.seller_id) {
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

/// Whether `id` is `campaign_id:seller_id`.
fn is_document_id(id: &str, campaign_id: &str, seller_id: SellerId) -> bool {
    id.strip_prefix(campaign_id)
        .and_then(|rest| rest.strip_prefix(':'))
        .is_some_and(|digits| digits == itoa::Buffer::new().format(seller_id))
}

/// A line in exactly the job's own layout, or `None` (then `serde_json` reads it).
fn exact_line(line: &str) -> Option<ChangeRef<'_>> {
    let (upsert, rest) = match line.strip_prefix(r#"{"op":"upsert","id":""#) {
        Some(rest) => (true, rest),
        None => (false, line.strip_prefix(r#"{"op":"delete","id":""#)?),
    };
    let (id, rest) = plain_string(rest)?;
    let (campaign_id, rest) = plain_string(rest.strip_prefix(r#","campaign_id":""#)?)?;
    let (seller_id, mut rest) = number(rest.strip_prefix(r#","seller_id":"#)?)?;
    let figures = if upsert {
        let (eligible_products, after) = number(rest.strip_prefix(r#","eligible_products":"#)?)?;
        let (eligible_stock, after) = number(after.strip_prefix(r#","eligible_stock":"#)?)?;
        rest = after;
        Some(PairFigures {
            eligible_products,
            eligible_stock,
        })
    } else {
        None
    };
    let (time, rest) = number(rest.strip_prefix(r#","time":"#)?)?;
    (rest == "}" && is_document_id(id, campaign_id, seller_id)).then_some(ChangeRef {
        time,
        campaign_id: Cow::Borrowed(campaign_id),
        seller_id,
        figures,
    })
}

/// The text before the next `"`, if nothing in it needs unescaping or is refused by JSON
/// (a backslash, a control character); and what follows the quote.
fn plain_string(text: &str) -> Option<(&str, &str)> {
    let end = text
        .bytes()
        .position(|byte| byte == b'"' || byte == b'\\' || byte < 0x20)?;
    (text.as_bytes()[end] == b'"').then(|| (&text[..end], &text[end + 1..]))
}

/// A `u64` as JSON writes it (digits, no leading zero), and what follows it.
fn number(text: &str) -> Option<(u64, &str)> {
    let digits = text.bytes().take_while(u8::is_ascii_digit).count();
    if digits == 0 || (digits > 1 && text.starts_with('0')) {
        return None;
    }
    let value = text[..digits].bytes().try_fold(0u64, |value, digit| {
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
            match exact_line(&line) {
                Some(exact) => prop_assert_eq!(exact, json),
                None => prop_assert!(line.contains('\\'), "declined an unescaped line: {}", line),
            }
        }

        /// A mangled line: the fast path accepts it only as `serde_json` reads it, and
        /// `parse_line` fails exactly when `serde_json` does.
        #[test]
        fn mangled_lines_read_as_serde_json_reads_them_or_fail_alike(
            line in change_line(),
            edits in proptest::collection::vec((any::<prop::sample::Index>(), 0..3u8, proptest::sample::select(b"0123456789:\"\\,{} -a\x01".to_vec())), 1..4),
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
            let Ok(line) = String::from_utf8(bytes) else { return Ok(()) };
            let json = json_line(&line).ok();
            if let Some(exact) = exact_line(&line) {
                prop_assert_eq!(Some(&exact), json.as_ref(), "{}", line);
            }
            prop_assert_eq!(parse_line(&line).ok(), json);
        }
    }

    #[test]
    fn numbers_as_json_writes_them_only() {
        assert_eq!(number("0,"), Some((0, ",")));
        assert_eq!(number("18446744073709551615}"), Some((u64::MAX, "}")));
        assert_eq!(number("18446744073709551616}"), None, "overflow");
        assert_eq!(number("01"), None, "leading zero");
        assert_eq!(number("-1"), None);
        assert_eq!(number(""), None);
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

    #[test]
    fn a_hand_written_line_with_spaces_and_another_key_order_still_reads() {
        let line = r#"{ "time": 3, "op": "delete", "seller_id": 7, "campaign_id": "c\"1", "id": "c\"1:7" }"#;
        let change = parse_line(line).expect("reads");
        assert_eq!(change.campaign_id, "c\"1");
        assert_eq!((change.seller_id, change.time, change.figures), (7, 3, None));
        assert!(parse_line(r#"{"op":"upsert","id":"c:8","campaign_id":"c","seller_id":7,"eligible_products":1,"eligible_stock":1,"time":0}"#).is_err());
    }
}
