//! A cache bounded in bytes, least recently used out first.
//!
//! It holds uploaded matrices (their host copy and device buffers), keyed by
//! content hash. An evicted or deleted id is simply absent: lookups answer
//! `None` and the HTTP layer turns that into 404, never into a wrong result.

use std::collections::{BTreeMap, HashMap};

struct Slot<V> {
    value: V,
    bytes: usize,
    tick: u64,
}

/// What went wrong adding to the cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TooBig {
    /// Bytes the entry would occupy.
    pub bytes: usize,
    /// The cache's capacity.
    pub capacity: usize,
}

/// A map from ids to values whose total size in bytes stays within a capacity.
pub struct ByteLru<V> {
    capacity: usize,
    used: usize,
    tick: u64,
    slots: HashMap<String, Slot<V>>,
    order: BTreeMap<u64, String>,
}

impl<V: Clone> ByteLru<V> {
    /// An empty cache holding at most `capacity` bytes.
    pub fn new(capacity: usize) -> Self {
        ByteLru {
            capacity,
            used: 0,
            tick: 0,
            slots: HashMap::new(),
            order: BTreeMap::new(),
        }
    }

    /// The capacity in bytes.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Bytes in use.
    pub fn used(&self) -> usize {
        self.used
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// Whether the cache is empty.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    fn touch(&mut self, key: &str) {
        self.tick += 1;
        let t = self.tick;
        if let Some(slot) = self.slots.get_mut(key) {
            self.order.remove(&slot.tick);
            slot.tick = t;
            self.order.insert(t, key.to_string());
        }
    }

    /// The value under `key`, marking it most recently used.
    pub fn get(&mut self, key: &str) -> Option<V> {
        if !self.slots.contains_key(key) {
            return None;
        }
        self.touch(key);
        self.slots.get(key).map(|s| s.value.clone())
    }

    /// The value under `key` without changing its recency.
    pub fn peek(&self, key: &str) -> Option<V> {
        self.slots.get(key).map(|s| s.value.clone())
    }

    /// Bytes charged to `key`, if present.
    pub fn bytes_of(&self, key: &str) -> Option<usize> {
        self.slots.get(key).map(|s| s.bytes)
    }

    /// Evicts least recently used entries other than `keep` until `need` more bytes fit.
    fn make_room(&mut self, need: usize, keep: &str) -> Vec<(String, V)> {
        let mut evicted = Vec::new();
        while self.used + need > self.capacity {
            let victim = self
                .order
                .iter()
                .find(|(_, k)| k.as_str() != keep)
                .map(|(t, k)| (*t, k.clone()));
            let Some((t, k)) = victim else { break };
            self.order.remove(&t);
            if let Some(slot) = self.slots.remove(&k) {
                self.used -= slot.bytes;
                evicted.push((k, slot.value));
            }
        }
        evicted
    }

    /// Inserts (or replaces) `key`, evicting least recently used entries to make
    /// room; returns what was evicted. An entry larger than the whole cache is refused.
    pub fn insert(
        &mut self,
        key: &str,
        value: V,
        bytes: usize,
    ) -> Result<Vec<(String, V)>, TooBig> {
        if bytes > self.capacity {
            return Err(TooBig {
                bytes,
                capacity: self.capacity,
            });
        }
        self.remove(key);
        let evicted = self.make_room(bytes, key);
        self.tick += 1;
        self.order.insert(self.tick, key.to_string());
        self.slots.insert(
            key.to_string(),
            Slot {
                value,
                bytes,
                tick: self.tick,
            },
        );
        self.used += bytes;
        Ok(evicted)
    }

    /// Charges `extra` more bytes to `key` (say, device buffers in another
    /// precision), evicting other entries as needed. Refused when the entry would
    /// outgrow the whole cache; `Ok(None)` when `key` is absent.
    pub fn grow(&mut self, key: &str, extra: usize) -> Result<Option<Vec<(String, V)>>, TooBig> {
        let Some(cur) = self.slots.get(key).map(|s| s.bytes) else {
            return Ok(None);
        };
        if cur + extra > self.capacity {
            return Err(TooBig {
                bytes: cur + extra,
                capacity: self.capacity,
            });
        }
        let evicted = self.make_room(extra, key);
        if let Some(slot) = self.slots.get_mut(key) {
            slot.bytes += extra;
            self.used += extra;
        }
        self.touch(key);
        Ok(Some(evicted))
    }

    /// Charges `bytes` fewer to `key` (device buffers given up); no entry
    /// goes below zero. False when `key` is absent.
    pub fn shrink(&mut self, key: &str, bytes: usize) -> bool {
        let Some(slot) = self.slots.get_mut(key) else {
            return false;
        };
        let less = bytes.min(slot.bytes);
        slot.bytes -= less;
        self.used -= less;
        true
    }

    /// Removes `key`, returning its value.
    pub fn remove(&mut self, key: &str) -> Option<V> {
        let slot = self.slots.remove(key)?;
        self.order.remove(&slot.tick);
        self.used -= slot.bytes;
        Some(slot.value)
    }

    /// Ids from least to most recently used.
    pub fn keys_lru_first(&self) -> Vec<String> {
        self.order.values().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn evicts_least_recently_used_first() {
        let mut c = ByteLru::new(100);
        c.insert("a", 1, 40).unwrap();
        c.insert("b", 2, 40).unwrap();
        assert_eq!(c.get("a"), Some(1)); // b is now the oldest
        let ev = c.insert("c", 3, 40).unwrap();
        assert_eq!(ev, vec![("b".to_string(), 2)]);
        assert_eq!(c.get("b"), None);
        assert_eq!(c.used(), 80);
        assert_eq!(c.keys_lru_first(), vec!["a", "c"]);
    }

    #[test]
    fn refuses_entries_larger_than_capacity_and_replaces_in_place() {
        let mut c = ByteLru::new(100);
        assert_eq!(
            c.insert("big", 0, 101),
            Err(TooBig {
                bytes: 101,
                capacity: 100
            })
        );
        c.insert("a", 1, 60).unwrap();
        c.insert("a", 2, 70).unwrap();
        assert_eq!(c.used(), 70);
        assert_eq!(c.len(), 1);
        assert_eq!(c.remove("a"), Some(2));
        assert_eq!(c.used(), 0);
    }

    #[test]
    fn grow_evicts_others_but_not_itself() {
        let mut c = ByteLru::new(100);
        c.insert("a", 1, 30).unwrap();
        c.insert("b", 2, 30).unwrap();
        let ev = c.grow("b", 50).unwrap().unwrap();
        assert_eq!(ev, vec![("a".to_string(), 1)]);
        assert_eq!(c.bytes_of("b"), Some(80));
        assert!(c.grow("b", 30).is_err());
        assert_eq!(c.grow("zz", 1), Ok(None));
    }

    #[test]
    fn shrink_gives_bytes_back_without_going_below_zero() {
        let mut c = ByteLru::new(100);
        c.insert("a", 1, 30).unwrap();
        c.grow("a", 50).unwrap();
        assert!(c.shrink("a", 50));
        assert_eq!((c.bytes_of("a"), c.used()), (Some(30), 30));
        assert!(c.shrink("a", 500));
        assert_eq!((c.bytes_of("a"), c.used()), (Some(0), 0));
        assert!(!c.shrink("zz", 1));
    }
}
