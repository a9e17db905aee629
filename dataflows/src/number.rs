//! Exact reading of JSON number literals, without ever going through a float.
//!
//! A JSON number is decimal text. Reading it as `f64` first would turn `129.905` into
//! `129.90499999…` and round it the wrong way, so the literal is scaled by a power of ten
//! on its digits: `to_scaled(text, 2)` is `round(price * 100)` with halves rounded up.

/// Why a number literal was not accepted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NumberError {
    /// The text is not a JSON number literal.
    NotANumber,
    /// The value is below zero.
    Negative,
    /// The value has a fractional part where an integer is required.
    NotInteger,
    /// The value does not fit the target type.
    OutOfRange,
}

/// Reads a non-negative integer (`15`, also `15.0` or `1.5e1`, which are the same number).
pub fn to_integer(text: &str) -> Result<u64, NumberError> {
    let literal = Literal::parse(text)?;
    literal.scaled(0, Rounding::Exact)
}

/// Reads a non-negative decimal and returns `round(value * 10^scale)`, halves rounded up.
pub fn to_scaled(text: &str, scale: i64) -> Result<u64, NumberError> {
    let literal = Literal::parse(text)?;
    literal.scaled(scale, Rounding::HalfUp)
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Rounding {
    /// Any dropped non-zero digit is an error.
    Exact,
    HalfUp,
}

/// `digits * 10^exponent`, with `digits` the significant digits of the literal.
struct Literal<'a> {
    negative: bool,
    /// Integer and fraction digits concatenated, leading zeros included.
    int_digits: &'a [u8],
    frac_digits: &'a [u8],
    exponent: i64,
}

impl<'a> Literal<'a> {
    fn parse(text: &'a str) -> Result<Self, NumberError> {
        let bytes = text.as_bytes();
        let mut i = 0;
        let negative = bytes.first() == Some(&b'-');
        if negative {
            i += 1;
        }
        let int_start = i;
        while i < bytes.len() && bytes[i].is_ascii_digit() {
            i += 1;
        }
        let int_digits = &bytes[int_start..i];
        // JSON forbids an empty integer part and leading zeros like `012`.
        if int_digits.is_empty() || (int_digits.len() > 1 && int_digits[0] == b'0') {
            return Err(NumberError::NotANumber);
        }
        let mut frac_digits: &[u8] = &[];
        if i < bytes.len() && bytes[i] == b'.' {
            i += 1;
            let frac_start = i;
            while i < bytes.len() && bytes[i].is_ascii_digit() {
                i += 1;
            }
            frac_digits = &bytes[frac_start..i];
            if frac_digits.is_empty() {
                return Err(NumberError::NotANumber);
            }
        }
        let mut exponent: i64 = 0;
        if i < bytes.len() && (bytes[i] == b'e' || bytes[i] == b'E') {
            i += 1;
            let mut exp_negative = false;
            if i < bytes.len() && (bytes[i] == b'+' || bytes[i] == b'-') {
                exp_negative = bytes[i] == b'-';
                i += 1;
            }
            let exp_start = i;
            while i < bytes.len() && bytes[i].is_ascii_digit() {
                // Saturate: an exponent beyond any sane size is out of range either way.
                exponent = exponent.saturating_mul(10).saturating_add(i64::from(bytes[i] - b'0'));
                i += 1;
            }
            if i == exp_start {
                return Err(NumberError::NotANumber);
            }
            if exp_negative {
                exponent = -exponent;
            }
        }
        if i != bytes.len() {
            return Err(NumberError::NotANumber);
        }
        Ok(Literal {
            negative,
            int_digits,
            frac_digits,
            exponent,
        })
    }

    fn is_zero(&self) -> bool {
        self.int_digits.iter().chain(self.frac_digits).all(|d| *d == b'0')
    }

    fn scaled(&self, scale: i64, rounding: Rounding) -> Result<u64, NumberError> {
        if self.is_zero() {
            // `-0` and `0.000` are zero, which is not negative.
            return Ok(0);
        }
        if self.negative {
            return Err(NumberError::Negative);
        }
        let digits: Vec<u8> = self
            .int_digits
            .iter()
            .chain(self.frac_digits)
            .copied()
            .skip_while(|d| *d == b'0')
            .collect();
        // value = digits * 10^shift
        let frac_len = i64::try_from(self.frac_digits.len()).map_err(|_| NumberError::OutOfRange)?;
        let shift = self.exponent.saturating_sub(frac_len).saturating_add(scale);
        let kept_len = i64::try_from(digits.len())
            .map_err(|_| NumberError::OutOfRange)?
            .saturating_add(shift.min(0));
        let (kept, dropped): (&[u8], &[u8]) = if kept_len <= 0 {
            (&[], &digits[..])
        } else {
            digits.split_at(kept_len as usize)
        };
        // Digits dropped past the first are only looked at for exactness.
        let first_dropped_is_leading = kept_len >= 0;
        let mut value: u64 = 0;
        for d in kept {
            value = value
                .checked_mul(10)
                .and_then(|v| v.checked_add(u64::from(d - b'0')))
                .ok_or(NumberError::OutOfRange)?;
        }
        if shift > 0 {
            for _ in 0..shift {
                value = value.checked_mul(10).ok_or(NumberError::OutOfRange)?;
            }
        }
        let dropped_nonzero = dropped.iter().any(|d| *d != b'0');
        match rounding {
            Rounding::Exact if dropped_nonzero => Err(NumberError::NotInteger),
            Rounding::Exact => Ok(value),
            Rounding::HalfUp => {
                let round_up = first_dropped_is_leading && dropped.first().is_some_and(|d| *d >= b'5');
                if round_up {
                    value.checked_add(1).ok_or(NumberError::OutOfRange)
                } else {
                    Ok(value)
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prices_become_minor_units() {
        assert_eq!(to_scaled("129.90", 2), Ok(12990));
        assert_eq!(to_scaled("129.9", 2), Ok(12990));
        assert_eq!(to_scaled("129", 2), Ok(12900));
        assert_eq!(to_scaled("0", 2), Ok(0));
        assert_eq!(to_scaled("0.01", 2), Ok(1));
        assert_eq!(to_scaled("1.2990e2", 2), Ok(12990));
        assert_eq!(to_scaled("1299E-1", 2), Ok(12990));
        assert_eq!(to_scaled("1e2", 2), Ok(10000));
    }

    #[test]
    fn halves_round_up_on_the_decimal_text() {
        // As f64, 129.905 * 100 is 12990.499999999998 and would round down.
        assert_eq!(to_scaled("129.905", 2), Ok(12991));
        assert_eq!(to_scaled("129.9049999", 2), Ok(12990));
        assert_eq!(to_scaled("0.005", 2), Ok(1));
        assert_eq!(to_scaled("0.0049", 2), Ok(0));
        assert_eq!(to_scaled("1e-9", 2), Ok(0));
        assert_eq!(to_scaled("5e-3", 2), Ok(1));
        assert_eq!(to_scaled("1e-999999999999999999999", 2), Ok(0));
    }

    #[test]
    fn negative_zero_is_zero_and_negatives_are_rejected() {
        assert_eq!(to_scaled("-0", 2), Ok(0));
        assert_eq!(to_scaled("-0.0", 2), Ok(0));
        assert_eq!(to_scaled("-0.01", 2), Err(NumberError::Negative));
        assert_eq!(to_integer("-3"), Err(NumberError::Negative));
    }

    #[test]
    fn integers_accept_integral_values_only() {
        assert_eq!(to_integer("15"), Ok(15));
        assert_eq!(to_integer("15.0"), Ok(15));
        assert_eq!(to_integer("1.5e1"), Ok(15));
        assert_eq!(to_integer("18446744073709551615"), Ok(u64::MAX));
        assert_eq!(to_integer("18446744073709551616"), Err(NumberError::OutOfRange));
        assert_eq!(to_integer("1.5"), Err(NumberError::NotInteger));
        assert_eq!(to_integer("1e-1"), Err(NumberError::NotInteger));
        assert_eq!(to_integer("1e400"), Err(NumberError::OutOfRange));
    }

    #[test]
    fn non_numbers_are_rejected() {
        for text in ["", "-", "01", "1.", ".5", "1e", "1e+", "abc", "1 ", "+1", "0x10"] {
            assert_eq!(to_integer(text), Err(NumberError::NotANumber), "{text:?}");
        }
    }
}
