//! `--vector-disk-cache`: model outputs kept on disk, so an input seen before skips the model.
//!
//! One file per entry, named by the SHA-256 of everything that decides the output: the model's
//! fingerprint (what was loaded and how), the run options (truncation, output kind) and the input
//! itself. The folder is bounded: past `max_bytes` the least recently used entries are deleted. Files
//! are written to a temporary name and renamed, so a reader never sees half an entry; a file that does
//! not parse is treated as a miss and removed.

use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use aleph_models::OutputKind;
use sha2::{Digest, Sha256};

use crate::handle::{Input, RunOptions};

const MAGIC: &[u8; 4] = b"ALV1";
const HEADER: usize = 12;

pub type Key = [u8; 32];

/// Where the cache lives and what it may hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheConfig {
    pub dir: PathBuf,
    pub max_bytes: u64,
    /// Identifies the loaded model and every load option that changes its outputs.
    pub fingerprint: String,
}

/// A cached output: the vector and the tokens it cost when it was computed.
#[derive(Debug, Clone, PartialEq)]
pub struct Cached {
    pub vector: Vec<f32>,
    pub cost: usize,
}

#[derive(Default)]
struct Index {
    /// Entry → (file size, last use).
    entries: HashMap<Key, (u64, u64)>,
    /// Last use → entry, oldest first.
    by_use: BTreeMap<u64, Key>,
    total: u64,
    clock: u64,
}

impl Index {
    fn touch(&mut self, key: Key, size: u64) {
        self.clock += 1;
        if let Some((old_size, used)) = self.entries.insert(key, (size, self.clock)) {
            self.by_use.remove(&used);
            self.total -= old_size;
        }
        self.by_use.insert(self.clock, key);
        self.total += size;
    }

    fn remove(&mut self, key: &Key) {
        if let Some((size, used)) = self.entries.remove(key) {
            self.by_use.remove(&used);
            self.total -= size;
        }
    }
}

pub struct VectorCache {
    dir: PathBuf,
    max_bytes: u64,
    fingerprint: String,
    index: Mutex<Index>,
}

impl VectorCache {
    /// Opens (or creates) the cache folder and indexes what an earlier run left, oldest first.
    pub fn open(config: &CacheConfig) -> std::io::Result<Self> {
        std::fs::create_dir_all(&config.dir)?;
        let mut found: Vec<(std::time::SystemTime, Key, u64)> = Vec::new();
        for entry in std::fs::read_dir(&config.dir)? {
            let entry = entry?;
            let name = entry.file_name();
            let Some(key) = name.to_str().and_then(parse_key) else {
                // A temporary file a crash left behind.
                if name.to_string_lossy().ends_with(".tmp") {
                    let _ = std::fs::remove_file(entry.path());
                }
                continue;
            };
            let meta = entry.metadata()?;
            found.push((meta.modified().unwrap_or(std::time::UNIX_EPOCH), key, meta.len()));
        }
        found.sort();
        let mut index = Index::default();
        for (_, key, size) in found {
            index.touch(key, size);
        }
        let cache = VectorCache {
            dir: config.dir.clone(),
            max_bytes: config.max_bytes,
            fingerprint: config.fingerprint.clone(),
            index: Mutex::new(index),
        };
        cache.evict();
        Ok(cache)
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Bytes the cache's files take.
    pub fn bytes(&self) -> u64 {
        self.lock().total
    }

    pub fn len(&self) -> usize {
        self.lock().entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Index> {
        self.index.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The entry's name: a hash of the model, the options and the input.
    pub fn key(&self, input: &Input, opts: &RunOptions) -> Key {
        let mut h = Sha256::new();
        h.update((self.fingerprint.len() as u64).to_le_bytes());
        h.update(self.fingerprint.as_bytes());
        h.update([opts.truncation.enabled as u8, opts.truncation.left as u8, output_tag(opts.output)]);
        // Only a request's own cut is hashed, so the keys of entries written before it existed stay valid.
        if let Some(limit) = opts.truncation.limit {
            h.update((limit as u64).to_le_bytes());
        }
        // Likewise the adapter, only when one is named.
        if let Some(adapter) = opts.adapter {
            h.update([b'A']);
            h.update(adapter.to_le_bytes());
        }
        let mut field = |tag: u8, bytes: &[u8]| {
            h.update([tag]);
            h.update((bytes.len() as u64).to_le_bytes());
            h.update(bytes);
        };
        match input {
            Input::Text(t) => field(1, t.as_bytes()),
            Input::Pair(a, b) => {
                field(2, a.as_bytes());
                field(2, b.as_bytes());
            }
            Input::InstructedPair { query, document, instruction } => {
                field(6, query.as_bytes());
                field(6, document.as_bytes());
                field(6, instruction.as_bytes());
            }
            Input::Ids(ids) => {
                let bytes: Vec<u8> = ids.iter().flat_map(|i| i.to_le_bytes()).collect();
                field(3, &bytes);
            }
            Input::Image(bytes) => field(4, bytes),
            Input::Audio(bytes) => field(5, bytes),
        }
        h.finalize().into()
    }

    /// The cached output, if there is a valid one.
    pub fn get(&self, key: &Key) -> Option<Cached> {
        let size = self.lock().entries.get(key).map(|(s, _)| *s)?;
        let path = self.path(key);
        match std::fs::read(&path).ok().and_then(|b| decode(&b)) {
            Some(cached) => {
                self.lock().touch(*key, size);
                Some(cached)
            }
            None => {
                self.lock().remove(key);
                let _ = std::fs::remove_file(&path);
                None
            }
        }
    }

    /// Stores an output, then deletes the least recently used entries past the size bound. Failures
    /// (a full disk) only cost the entry.
    pub fn put(&self, key: &Key, cached: &Cached) {
        let bytes = encode(cached);
        if bytes.len() as u64 > self.max_bytes {
            return;
        }
        let path = self.path(key);
        let tmp = self.dir.join(format!("{}.{}.tmp", hex(key), std::process::id()));
        let written = std::fs::File::create(&tmp)
            .and_then(|mut f| f.write_all(&bytes))
            .and_then(|()| std::fs::rename(&tmp, &path));
        if let Err(e) = written {
            let _ = std::fs::remove_file(&tmp);
            tracing::warn!("vector disk cache: cannot write {}: {e}", path.display());
            return;
        }
        self.lock().touch(*key, bytes.len() as u64);
        self.evict();
    }

    fn evict(&self) {
        loop {
            let victim = {
                let mut index = self.lock();
                if index.total <= self.max_bytes {
                    return;
                }
                let Some((_, key)) = index.by_use.iter().next().map(|(u, k)| (*u, *k)) else { return };
                index.remove(&key);
                key
            };
            let _ = std::fs::remove_file(self.path(&victim));
        }
    }

    fn path(&self, key: &Key) -> PathBuf {
        self.dir.join(hex(key))
    }
}

fn output_tag(kind: OutputKind) -> u8 {
    match kind {
        OutputKind::Default => 0,
        OutputKind::Unnormalized => 1,
        OutputKind::Tokens => 2,
        OutputKind::Sparse => 3,
        OutputKind::MultiVector => 4,
    }
}

fn hex(key: &Key) -> String {
    key.iter().map(|b| format!("{b:02x}")).collect()
}

fn parse_key(name: &str) -> Option<Key> {
    if name.len() != 64 {
        return None;
    }
    let mut key = [0u8; 32];
    for (i, k) in key.iter_mut().enumerate() {
        *k = u8::from_str_radix(name.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(key)
}

fn encode(c: &Cached) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER + 4 * c.vector.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&(c.cost as u32).to_le_bytes());
    out.extend_from_slice(&(c.vector.len() as u32).to_le_bytes());
    out.extend(c.vector.iter().flat_map(|x| x.to_le_bytes()));
    out
}

fn decode(bytes: &[u8]) -> Option<Cached> {
    if bytes.len() < HEADER || &bytes[..4] != MAGIC {
        return None;
    }
    let word = |at: usize| u32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]]) as usize;
    let (cost, len) = (word(4), word(8));
    let body = &bytes[HEADER..];
    if body.len() != len * 4 {
        return None;
    }
    let vector = body.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
    Some(Cached { vector, cost })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("aleph-cache-test-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    fn config(dir: &Path, max_bytes: u64, fingerprint: &str) -> CacheConfig {
        CacheConfig { dir: dir.to_path_buf(), max_bytes, fingerprint: fingerprint.into() }
    }

    #[test]
    fn keys_separate_models_options_and_inputs() {
        let dir = temp_dir("keys");
        let a = VectorCache::open(&config(&dir, 1 << 20, "model-a")).unwrap();
        let b = VectorCache::open(&config(&dir, 1 << 20, "model-b")).unwrap();
        let opts = RunOptions::default();
        let text = Input::Text("hello".into());
        assert_eq!(a.key(&text, &opts), a.key(&Input::Text("hello".into()), &opts));
        assert_ne!(a.key(&text, &opts), b.key(&text, &opts));
        assert_ne!(a.key(&text, &opts), a.key(&Input::Text("hello ".into()), &opts));
        let tokens = RunOptions { output: OutputKind::Tokens, ..opts };
        assert_ne!(a.key(&text, &opts), a.key(&text, &tokens));
        let mut left = opts;
        left.truncation.left = true;
        assert_ne!(a.key(&text, &opts), a.key(&text, &left));
        let adapted = RunOptions { adapter: Some(0), ..opts };
        assert_ne!(a.key(&text, &opts), a.key(&text, &adapted));
        assert_ne!(a.key(&text, &adapted), a.key(&text, &RunOptions { adapter: Some(1), ..opts }));
        // A pair is not the concatenation of its halves.
        assert_ne!(
            a.key(&Input::Pair("ab".into(), "c".into()), &opts),
            a.key(&Input::Pair("a".into(), "bc".into()), &opts)
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn round_trips_survives_reopen_and_evicts_least_recently_used() {
        let dir = temp_dir("lru");
        let entry = |x: f32| Cached { vector: vec![x; 4], cost: 7 };
        let size = (HEADER + 16) as u64;
        let cache = VectorCache::open(&config(&dir, 3 * size, "m")).unwrap();
        let keys: Vec<Key> = (0..4).map(|i| cache.key(&Input::Text(i.to_string()), &RunOptions::default())).collect();
        for (i, k) in keys.iter().take(3).enumerate() {
            cache.put(k, &entry(i as f32));
        }
        assert_eq!(cache.get(&keys[0]), Some(entry(0.0)));
        // Entry 1 is now the least recently used: the fourth put pushes it out.
        cache.put(&keys[3], &entry(3.0));
        assert_eq!(cache.len(), 3);
        assert_eq!(cache.bytes(), 3 * size);
        assert_eq!(cache.get(&keys[1]), None);
        assert!(!dir.join(hex(&keys[1])).exists());
        drop(cache);

        let reopened = VectorCache::open(&config(&dir, 3 * size, "m")).unwrap();
        assert_eq!(reopened.len(), 3);
        assert_eq!(reopened.get(&keys[3]), Some(entry(3.0)));
        // A smaller bound on reopening trims the folder.
        drop(reopened);
        let small = VectorCache::open(&config(&dir, size, "m")).unwrap();
        assert_eq!(small.len(), 1);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_corrupt_file_is_a_miss_and_goes_away() {
        let dir = temp_dir("corrupt");
        let cache = VectorCache::open(&config(&dir, 1 << 20, "m")).unwrap();
        let key = cache.key(&Input::Text("x".into()), &RunOptions::default());
        cache.put(&key, &Cached { vector: vec![1.0, 2.0], cost: 3 });
        std::fs::write(dir.join(hex(&key)), b"ALV1garbage").unwrap();
        assert_eq!(cache.get(&key), None);
        assert!(cache.is_empty());
        assert!(!dir.join(hex(&key)).exists());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
