//! The integer types a pool reads and writes as slot indices.

/// A slot index type at the API boundary: `i64` (default) or `i32`.
///
/// Inputs may carry any value (they are validated); outputs are always in `1..=max_slot`,
/// which the pool checks fits the type before it writes anything.
pub trait SlotIndex: Copy + Send + Sync + std::fmt::Debug + 'static {
    /// The largest value representable, as `u64`.
    const MAX: u64;
    /// Widens the stored value for validation.
    fn get(self) -> i64;
    /// Narrows a slot known to be `<= Self::MAX`.
    fn from_slot(slot: u64) -> Self;
}

impl SlotIndex for i64 {
    const MAX: u64 = i64::MAX as u64;
    #[inline]
    fn get(self) -> i64 {
        self
    }
    #[inline]
    fn from_slot(slot: u64) -> Self {
        slot as i64
    }
}

impl SlotIndex for i32 {
    const MAX: u64 = i32::MAX as u64;
    #[inline]
    fn get(self) -> i64 {
        i64::from(self)
    }
    #[inline]
    fn from_slot(slot: u64) -> Self {
        slot as i32
    }
}
