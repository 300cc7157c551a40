//! Append-only memory for the rows the store keeps.
//!
//! The store holds every appended row for the life of the process, so each stored byte lands on
//! a page that was never touched before. Left in tonic's receive buffer, that buffer is a fresh
//! 4 KiB-page allocation per request and the kernel takes one page fault per 4 KiB (over a third
//! of the emulator's CPU in the end-to-end benchmark). Copying the accepted rows into large
//! mappings advised for transparent huge pages costs one `memcpy` but takes one fault per 2 MiB,
//! and frees tonic's buffer for reuse by the next request of the connection.

use std::ptr::NonNull;
use std::sync::Arc;

use bytes::Bytes;

/// Size of a fresh mapping; larger requests get a mapping of their own size.
const CHUNK_BYTES: usize = 32 << 20;
const HUGE_PAGE: usize = 2 << 20;

/// One anonymous private mapping, unmapped when the last row in it is dropped.
#[derive(Debug)]
struct Mapping {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is plain memory owned by this value. Regions handed out are immutable and
// disjoint from the part the (single) arena still writes.
unsafe impl Send for Mapping {}
unsafe impl Sync for Mapping {}

impl Mapping {
    fn new(len: usize) -> Option<Mapping> {
        // SAFETY: a fresh anonymous mapping; no existing memory is affected.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return None;
        }
        // Advice only: without THP (or when refused) the mapping still works with small pages.
        // SAFETY: the range is exactly the mapping just created.
        let _ = unsafe { libc::madvise(ptr, len, libc::MADV_HUGEPAGE) };
        NonNull::new(ptr.cast::<u8>()).map(|ptr| Mapping { ptr, len })
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: the mapping was created by `Mapping::new` with this length; no region of it
        // outlives this value (each holds an `Arc` to it).
        unsafe {
            libc::munmap(self.ptr.as_ptr().cast(), self.len);
        }
    }
}

/// The filled, immutable part of a mapping that one request's rows live in.
struct Region {
    mapping: Arc<Mapping>,
    start: usize,
    len: usize,
}

impl AsRef<[u8]> for Region {
    fn as_ref(&self) -> &[u8] {
        // SAFETY: `start..start + len` is inside the mapping, was fully written before the
        // region was created, and is never written again.
        unsafe {
            std::slice::from_raw_parts(self.mapping.ptr.as_ptr().add(self.start), self.len)
        }
    }
}

/// Per-connection row storage: requests are packed one after the other into the current
/// mapping. Not shared between threads; the rows it hands out are.
#[derive(Debug, Default)]
pub struct RowArena {
    current: Option<Arc<Mapping>>,
    used: usize,
}

impl RowArena {
    pub fn new() -> RowArena {
        RowArena::default()
    }

    /// Copies `rows` into the arena; the returned rows are the same bytes, in order. When no
    /// memory can be mapped the rows are returned as they are.
    pub fn store(&mut self, rows: Vec<Bytes>) -> Vec<Bytes> {
        let total: usize = rows.iter().map(Bytes::len).sum();
        if total == 0 {
            return rows;
        }
        let free = self.current.as_ref().map_or(0, |m| m.len - self.used);
        if free < total {
            let len = total.max(CHUNK_BYTES).next_multiple_of(HUGE_PAGE);
            match Mapping::new(len) {
                Some(m) => {
                    self.current = Some(Arc::new(m));
                    self.used = 0;
                }
                None => return rows,
            }
        }
        let mapping = self.current.clone().expect("a mapping with room");
        let start = self.used;
        let mut at = start;
        for row in &rows {
            // SAFETY: `at + row.len() <= start + total <= mapping.len`; this part of the mapping
            // has not been handed out, and `row` cannot overlap it (it is other memory).
            unsafe {
                std::ptr::copy_nonoverlapping(
                    row.as_ptr(),
                    mapping.ptr.as_ptr().add(at),
                    row.len(),
                );
            }
            at += row.len();
        }
        self.used = at;
        let region = Bytes::from_owner(Region {
            mapping,
            start,
            len: total,
        });
        let mut out = Vec::with_capacity(rows.len());
        let mut at = 0;
        for row in &rows {
            out.push(region.slice(at..at + row.len()));
            at += row.len();
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stored_rows_keep_their_bytes_across_mappings() {
        let mut arena = RowArena::new();
        let first: Vec<Bytes> = (0..100u8).map(|i| Bytes::from(vec![i; 1 + i as usize])).collect();
        let stored = arena.store(first.clone());
        assert_eq!(stored, first);
        // Larger than what is left of the first mapping: a second one, the first stays valid.
        let big = vec![Bytes::from(vec![7u8; CHUNK_BYTES]), Bytes::from_static(b"")];
        let stored_big = arena.store(big.clone());
        assert_eq!(stored_big, big);
        assert_eq!(stored, first);
        drop(arena);
        assert_eq!(stored[99].len(), 100);
        assert!(stored[99].iter().all(|&b| b == 99));
    }

    #[test]
    fn empty_rows_need_no_memory() {
        let mut arena = RowArena::new();
        let rows = vec![Bytes::new(), Bytes::new()];
        assert_eq!(arena.store(rows.clone()), rows);
        assert!(arena.current.is_none());
    }
}
