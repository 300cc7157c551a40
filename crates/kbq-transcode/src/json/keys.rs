//! An object's columns by the exact bytes of their keys: a small open-addressing table built
//! when the plan is compiled, probed with a hash of the key's length, first and last eight
//! bytes. A record's keys come in whatever order its serializer chose (a `BTreeMap` sorts them),
//! so the column after the previous one is often not the next key; this answers in one probe
//! and one comparison instead of a scan of every column or a general-purpose hasher.

/// Marks an empty slot.
const EMPTY: u16 = u16::MAX;

#[derive(Debug, Clone)]
pub struct KeyTable {
    /// Index into the object's fields, or [`EMPTY`]; the length is a power of two.
    slots: Box<[u16]>,
}

impl KeyTable {
    /// The table of `keys`, each at its position in the iterator (fewer than `u16::MAX`).
    pub fn new<'k>(keys: impl ExactSizeIterator<Item = &'k [u8]>) -> KeyTable {
        // At most half full, so that a miss ends at an empty slot after a probe or two.
        let size = (keys.len() * 2).next_power_of_two().max(4);
        let mut slots = vec![EMPTY; size].into_boxed_slice();
        for (i, key) in keys.enumerate() {
            let mut s = hash(key) as usize & (size - 1);
            while slots[s] != EMPTY {
                s = (s + 1) & (size - 1);
            }
            slots[s] = u16::try_from(i).expect("fewer columns than u16::MAX");
        }
        KeyTable { slots }
    }

    /// The index of the key equal to `key`; `key_of(i)` gives the key at index `i`.
    #[inline]
    pub fn get<'k>(&self, key: &[u8], key_of: impl Fn(usize) -> &'k [u8]) -> Option<usize> {
        let mask = self.slots.len() - 1;
        let mut s = hash(key) as usize & mask;
        loop {
            let i = self.slots[s];
            if i == EMPTY {
                return None;
            }
            if same(key_of(i as usize), key) {
                return Some(i as usize);
            }
            s = (s + 1) & mask;
        }
    }
}

/// Bytes `at..at + 8` as an integer.
#[inline(always)]
fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("eight bytes"))
}

/// Every byte of a key of at most eight bytes, in one integer: two overlapping four-byte loads,
/// or the first, middle and last byte. Keys of the same length are equal exactly when these
/// are.
#[inline(always)]
fn short(b: &[u8]) -> u64 {
    let n = b.len();
    if n >= 4 {
        let lo = u32::from_le_bytes(b[..4].try_into().expect("four bytes"));
        let hi = u32::from_le_bytes(b[n - 4..].try_into().expect("four bytes"));
        lo as u64 | ((hi as u64) << 32)
    } else if n > 0 {
        b[0] as u64 | ((b[n / 2] as u64) << 8) | ((b[n - 1] as u64) << 16)
    } else {
        0
    }
}

/// The first and last eight bytes (overlapping for keys shorter than 16), or [`short`]'s
/// integer and zero: together with the length they cover every byte of keys up to 16 bytes.
#[inline(always)]
fn ends(b: &[u8]) -> (u64, u64) {
    if b.len() >= 8 {
        (u64_at(b, 0), u64_at(b, b.len() - 8))
    } else {
        (short(b), 0)
    }
}

/// Equality without a call to `memcmp`, which costs more than the comparison of a column name.
#[inline(always)]
pub fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len()
        && if a.len() <= 16 {
            ends(a) == ends(b)
        } else {
            a == b
        }
}

/// Mixes the length and the first and last eight bytes: column names that share a prefix
/// (`customer_id`, `customer_email`) differ in their length or their end.
#[inline(always)]
fn hash(key: &[u8]) -> u64 {
    let (head, tail) = ends(key);
    let h = (head ^ tail.rotate_left(31) ^ key.len() as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    h ^ (h >> 29)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_is_found_and_others_are_not() {
        let keys: Vec<String> = (0..300)
            .map(|i| format!("column_with_a_long_shared_prefix_{i}"))
            .chain(["a", "", "customer_id", "customer_email"].map(String::from))
            .collect();
        let table = KeyTable::new(keys.iter().map(|k| k.as_bytes()));
        let key_of = |i: usize| keys[i].as_bytes();
        for (i, k) in keys.iter().enumerate() {
            assert_eq!(table.get(k.as_bytes(), key_of), Some(i), "{k}");
        }
        for miss in [
            "b",
            "customer_i",
            "Customer_id",
            "column_with_a_long_shared_prefix_300",
        ] {
            assert_eq!(table.get(miss.as_bytes(), key_of), None, "{miss}");
        }
    }

    #[test]
    fn keys_are_equal_exactly_when_their_bytes_are() {
        // Every length up to past 16, a difference at every position.
        for n in 0..24 {
            let a: Vec<u8> = (0..n as u8).map(|i| b'a' + i).collect();
            assert!(same(&a, &a.clone()));
            for at in 0..n {
                let mut b = a.clone();
                b[at] ^= 0x20;
                assert!(!same(&a, &b), "{n} {at}");
            }
            assert!(!same(&a, &[a.as_slice(), b"x"].concat()));
        }
    }

    #[test]
    fn an_object_without_columns_finds_nothing() {
        let table = KeyTable::new(std::iter::empty());
        assert_eq!(table.get(b"x", |_| unreachable!()), None);
    }
}
