//! Size classes: a request is rounded up to its class, and blocks of one class are carved from
//! the same slabs, so a freed block fits every later request of its class.
//!
//! Classes are multiples of the pool's alignment; above four alignments, each power of two is
//! split into four classes (the second level of a TLSF-like scheme), so rounding wastes at most
//! a quarter of the request.

/// The class of a `size`-byte request, for a power-of-two `align`; `None` when it would not
/// fit in a `usize` (a request near `usize::MAX`).
pub(crate) fn class_size(size: usize, align: usize) -> Option<usize> {
    debug_assert!(align.is_power_of_two());
    let s = size.max(1).checked_next_multiple_of(align)?;
    // Four alignments past usize (an alignment near the top of the range): every size is
    // below them.
    if align.checked_mul(4).is_none_or(|small| s <= small) {
        return Some(s);
    }
    let top = 1usize << (usize::BITS - 1 - s.leading_zeros());
    s.checked_next_multiple_of(top / 4)
}

/// The largest class no larger than `bytes` (0: none, `bytes` is below `align`): the largest
/// request a pool of at most `bytes` can serve, since every class is its own class.
pub(crate) fn largest_class_within(bytes: usize, align: usize) -> usize {
    debug_assert!(align.is_power_of_two());
    let s = bytes - bytes % align;
    if align.checked_mul(4).is_none_or(|small| s <= small) {
        return s;
    }
    // The classes between `top` and `2 * top` are the multiples of `top / 4`.
    let top = 1usize << (usize::BITS - 1 - s.leading_zeros());
    s - s % (top / 4)
}

#[cfg(test)]
mod tests {
    use super::{class_size, largest_class_within};

    #[test]
    fn the_largest_class_within_a_bound_is_a_class_and_the_largest() {
        for align in [1usize, 8, 256, 4096] {
            for bytes in (0..20_000).step_by(13) {
                let c = largest_class_within(bytes, align);
                assert!(c <= bytes, "bytes {bytes} align {align}: {c}");
                if c > 0 {
                    assert_eq!(class_size(c, align), Some(c), "{c} is a class");
                }
                // The next request up needs a class above the bound.
                assert!(
                    class_size(c + 1, align).unwrap() > bytes,
                    "bytes {bytes} align {align}: {c}"
                );
            }
        }
        assert_eq!(largest_class_within(1000, 256), 768);
        assert_eq!(largest_class_within(255, 256), 0);
        assert_eq!(largest_class_within(usize::MAX, 1 << 63), 1 << 63);
    }

    #[test]
    fn an_alignment_near_the_top_of_usize_does_not_overflow() {
        assert_eq!(class_size(1, 1 << 62), Some(1 << 62));
        assert_eq!(class_size(1, 1 << 63), Some(1 << 63));
        assert_eq!(class_size((1 << 63) + 1, 1 << 63), None);
    }

    #[test]
    fn classes_are_aligned_and_waste_at_most_a_quarter() {
        for align in [1usize, 8, 256, 4096] {
            for size in (1..20_000).step_by(7) {
                let c = class_size(size, align).unwrap();
                assert!(
                    c >= size && c.is_multiple_of(align),
                    "size {size} align {align}: {c}"
                );
                if size > 4 * align {
                    assert!(c - size <= size / 4, "size {size} align {align}: {c}");
                }
                // Monotone: a larger request never gets a smaller class.
                assert!(class_size(size + 1, align).unwrap() >= c);
            }
        }
        assert_eq!(class_size(64 << 20, 256), Some(64 << 20));
        assert_eq!(class_size(1, 256), Some(256));
        assert_eq!(class_size(1025, 256), Some(1280));
        // Past usize: no class.
        assert_eq!(class_size(usize::MAX, 256), None);
        assert_eq!(class_size(usize::MAX - 1000, 256), None);
    }
}
