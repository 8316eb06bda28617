//! Token arithmetic on caller values: the bound admission counts within, and sums that are
//! checked (or exact) instead of wrapping.

use crate::pool::{ErrorKind, PoolError};

/// The most tokens admission counts (`INT64_MAX`). Budgets are signed — SGLang lets them
/// go negative — so every token count, and every page-rounded one, must fit an `i64`; no
/// pool holds more (its slot indices are `int64_t`).
pub(crate) const MAX_TOKENS: u64 = i64::MAX as u64;

/// `x` rounded up to a multiple of `ps`. Callers bound `x` and `ps` by [`MAX_TOKENS`], so
/// the result (below `x + ps`) fits.
#[inline]
pub(crate) fn ceil_paged(x: u64, ps: u64) -> u64 {
    x.div_ceil(ps) * ps
}

/// `x` rounded up to a multiple of `ps`, or `None` beyond [`MAX_TOKENS`].
pub(crate) fn checked_ceil_paged(x: u64, ps: u64) -> Option<u64> {
    x.div_ceil(ps).checked_mul(ps).filter(|&t| t <= MAX_TOKENS)
}

/// `a + b`, or `None` beyond [`MAX_TOKENS`].
pub(crate) fn checked_sum(a: u64, b: u64) -> Option<u64> {
    a.checked_add(b).filter(|&t| t <= MAX_TOKENS)
}

/// The exact sum of token counts, as a float: the value the `u64` sum converts to whenever
/// it does not overflow, and still right when it would (the float budgets take any `u64`,
/// e.g. an unclipped `max_new_tokens`).
pub(crate) fn sum_f64<const N: usize>(parts: [u64; N]) -> f64 {
    parts.iter().map(|&x| u128::from(x)).sum::<u128>() as f64
}

/// A pass's room, `available + evictable` tokens, refused beyond [`MAX_TOKENS`] (no pool
/// and prefix cache hold more; wrapping would turn it into a tiny budget).
pub(crate) fn room(available: u64, evictable: u64) -> Result<u64, PoolError> {
    checked_sum(available, evictable).ok_or_else(|| {
        invalid(format!(
            "available {available} + evictable {evictable} tokens exceeds INT64_MAX"
        ))
    })
}

/// An invalid configuration value or argument.
pub(crate) fn invalid(message: impl Into<String>) -> PoolError {
    PoolError::new(ErrorKind::InvalidArgument, message)
}

/// An impossible request length.
pub(crate) fn bad_lengths(message: impl Into<String>) -> PoolError {
    PoolError::new(ErrorKind::InvalidLengths, message)
}

/// `Ok` if `value` (the config field `field`) is between 1 and [`MAX_TOKENS`].
pub(crate) fn check_positive_tokens(field: &str, value: u64) -> Result<(), PoolError> {
    if value == 0 || value > MAX_TOKENS {
        return Err(invalid(format!(
            "{field} {value} must be between 1 and INT64_MAX"
        )));
    }
    Ok(())
}

/// `Ok` if the ratio `field` is finite and positive (0, negative or NaN would reserve
/// nothing, or garbage, for running requests).
pub(crate) fn check_positive_ratio(field: &str, value: f64) -> Result<(), PoolError> {
    if !(value.is_finite() && value > 0.0) {
        return Err(invalid(format!(
            "{field} {value} must be finite and positive"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checked_helpers_refuse_what_does_not_fit_an_i64() {
        assert_eq!(checked_ceil_paged(20, 16), Some(32));
        assert_eq!(checked_ceil_paged(MAX_TOKENS, 1), Some(MAX_TOKENS));
        assert_eq!(checked_ceil_paged(MAX_TOKENS, 16), None);
        assert_eq!(checked_ceil_paged(u64::MAX, 16), None);
        assert_eq!(checked_sum(MAX_TOKENS - 1, 1), Some(MAX_TOKENS));
        assert_eq!(checked_sum(MAX_TOKENS, 1), None);
        assert_eq!(checked_sum(u64::MAX, 1), None);
    }

    #[test]
    fn sum_f64_is_the_u64_sum_and_exact_past_it() {
        assert_eq!(sum_f64([32, 100, 16]), (32u64 + 100 + 16) as f64);
        // (2^64 from an integer: powi's precision is unspecified, and Miri varies it.)
        assert_eq!(sum_f64([u64::MAX, 1, 16]), (1u128 << 64) as f64 + 16.0);
    }

    #[test]
    fn room_is_refused_past_int64_max() {
        assert_eq!(room(1000, 24).unwrap(), 1024);
        assert_eq!(room(MAX_TOKENS, 0).unwrap(), MAX_TOKENS);
        let err = room(u64::MAX, 2).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidArgument);
        assert!(err.message().contains("evictable 2"), "{}", err.message());
        assert!(room(MAX_TOKENS, 1).is_err());
    }

    #[test]
    fn config_checks_name_the_field() {
        assert!(check_positive_tokens("max_prefill_tokens", 1).is_ok());
        let err = check_positive_tokens("max_prefill_tokens", 0).unwrap_err();
        assert!(err.message().starts_with("max_prefill_tokens 0"));
        assert!(check_positive_tokens("x", MAX_TOKENS + 1).is_err());
        assert!(check_positive_ratio("new_token_ratio", 0.7).is_ok());
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            let err = check_positive_ratio("new_token_ratio", bad).unwrap_err();
            assert!(err.message().starts_with("new_token_ratio"));
        }
    }
}
