//! A model's bounded queue of prepared items (tokenized texts, preprocessed images) waiting for a batch.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::Instant;

use tokio::sync::oneshot;

use crate::batcher::{select, BatchPolicy};
use crate::error::EngineError;
use crate::prepared::Prepared;

/// What one item gets back: its vector, and how long it waited and computed.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ItemOutput {
    pub vector: Vec<f32>,
    pub queue_time: std::time::Duration,
    pub inference_time: std::time::Duration,
}

pub(crate) type Reply = oneshot::Sender<Result<ItemOutput, EngineError>>;

/// One input waiting for compute; its result goes back on `reply`.
pub(crate) struct Item {
    pub seq: u64,
    pub input: Prepared,
    pub reply: Reply,
    pub enqueued: Instant,
}

impl Item {
    /// The requester has gone away (client disconnected, request cancelled).
    pub fn abandoned(&self) -> bool {
        self.reply.is_closed()
    }
}

struct State {
    items: VecDeque<Item>,
    next_seq: u64,
    /// Bumped on every push, so a prepared batch knows whether a better one may now exist.
    generation: u64,
    closed: bool,
}

pub(crate) struct Queue {
    state: Mutex<State>,
    ready: Condvar,
    limit: usize,
    depth: AtomicUsize,
    depth_gauge: metrics::Gauge,
}

impl Queue {
    pub fn new(model: &str, limit: usize) -> Self {
        Queue {
            state: Mutex::new(State { items: VecDeque::new(), next_seq: 0, generation: 0, closed: false }),
            ready: Condvar::new(),
            limit,
            depth: AtomicUsize::new(0),
            depth_gauge: metrics::gauge!("aleph_queue_depth", "model" => model.to_string()),
        }
    }

    fn set_depth(&self, depth: usize) {
        self.depth.store(depth, Ordering::Relaxed);
        self.depth_gauge.set(depth as f64);
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding this lock cannot leave the deque half-updated, so poisoning is ignored.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn depth(&self) -> usize {
        self.depth.load(Ordering::Relaxed)
    }

    /// Enqueues all of a request's items, or none if that would pass the limit.
    pub fn push_all(&self, model: &str, items: Vec<(Prepared, Reply)>) -> Result<(), EngineError> {
        let mut st = self.lock();
        if st.closed {
            return Err(EngineError::ShuttingDown(model.to_string()));
        }
        let queued = st.items.len();
        if queued + items.len() > self.limit {
            return Err(EngineError::Overloaded { model: model.to_string(), queued, limit: self.limit });
        }
        let now = Instant::now();
        for (input, reply) in items {
            let seq = st.next_seq;
            st.next_seq += 1;
            st.items.push_back(Item { seq, input, reply, enqueued: now });
        }
        st.generation += 1;
        self.set_depth(st.items.len());
        drop(st);
        self.ready.notify_one();
        Ok(())
    }

    /// Stops accepting items; the batcher drains what is left and then sees `None`.
    pub fn close(&self) {
        self.lock().closed = true;
        self.ready.notify_all();
    }

    /// Blocks until items are queued, then removes and returns the next batch (with the generation it
    /// was cut at). `None` once closed and drained.
    pub fn next_batch(&self, policy: &BatchPolicy) -> Option<(Vec<Item>, u64)> {
        let mut st = self.lock();
        loop {
            drop_abandoned(&mut st);
            self.set_depth(st.items.len());
            if !st.items.is_empty() {
                let batch = cut(&mut st, policy);
                self.set_depth(st.items.len());
                return Some((batch, st.generation));
            }
            if st.closed {
                return None;
            }
            st = self.ready.wait(st).unwrap_or_else(|p| p.into_inner());
        }
    }

    /// If items arrived since `batch` was cut, puts it back and cuts again, so the batch handed to the
    /// model reflects everything queued by then.
    pub fn recut(&self, batch: Vec<Item>, generation: u64, policy: &BatchPolicy) -> (Vec<Item>, u64) {
        let mut st = self.lock();
        if st.generation == generation || batch.len() >= policy.max_items {
            return (batch, generation);
        }
        // Put the items back in arrival order, then cut anew.
        let mut merged: Vec<Item> = batch;
        merged.extend(st.items.drain(..));
        merged.sort_by_key(|i| i.seq);
        st.items = merged.into();
        drop_abandoned(&mut st);
        let batch = cut(&mut st, policy);
        self.set_depth(st.items.len());
        (batch, st.generation)
    }
}

fn drop_abandoned(st: &mut State) {
    if st.items.iter().any(Item::abandoned) {
        st.items.retain(|i| !i.abandoned());
    }
}

fn cut(st: &mut State, policy: &BatchPolicy) -> Vec<Item> {
    let lengths: Vec<usize> = st.items.iter().take(policy.window()).map(|i| i.input.cost()).collect();
    let picked = select(&lengths, policy);
    // Remove from the back so earlier indices stay valid.
    let mut batch: Vec<Item> = picked.iter().rev().filter_map(|&i| st.items.remove(i)).collect();
    batch.reverse();
    batch
}

#[cfg(test)]
mod tests {
    use super::*;

    fn enc(n: usize) -> Prepared {
        Prepared::Tokens(aleph_models::Encoded { ids: vec![1; n], type_ids: vec![0; n] }, Default::default(), None)
    }

    const POLICY: BatchPolicy = BatchPolicy { max_items: 2, max_tokens: 1000, pads: true };

    #[test]
    fn refuses_past_the_limit_all_or_nothing() {
        let q = Queue::new("m", 3);
        let mk = |n| (0..n).map(|_| (enc(1), oneshot::channel().0)).collect::<Vec<_>>();
        assert!(matches!(q.push_all("m", mk(4)), Err(EngineError::Overloaded { .. })));
        assert_eq!(q.depth(), 0);
        q.push_all("m", mk(3)).unwrap();
        assert_eq!(q.depth(), 3);
    }

    #[test]
    fn drops_abandoned_items_before_batching() {
        let q = Queue::new("m", 10);
        let (tx1, rx1) = oneshot::channel();
        let (tx2, _rx2) = oneshot::channel();
        q.push_all("m", vec![(enc(1), tx1), (enc(2), tx2)]).unwrap();
        drop(rx1);
        let (batch, _) = q.next_batch(&POLICY).unwrap();
        assert_eq!(batch.len(), 1);
        assert_eq!(batch[0].input.cost(), 2);
    }

    #[test]
    fn recut_takes_in_new_arrivals() {
        let q = Queue::new("m", 10);
        let (tx1, _r1) = oneshot::channel();
        q.push_all("m", vec![(enc(1), tx1)]).unwrap();
        let (batch, generation) = q.next_batch(&POLICY).unwrap();
        assert_eq!(batch.len(), 1);
        let (tx2, _r2) = oneshot::channel();
        q.push_all("m", vec![(enc(1), tx2)]).unwrap();
        let (batch, _) = q.recut(batch, generation, &POLICY);
        assert_eq!(batch.len(), 2);
        assert_eq!(q.depth(), 0);
        assert!(batch[0].seq < batch[1].seq);
    }

    #[test]
    fn close_wakes_and_drains() {
        let q = Queue::new("m", 10);
        q.close();
        assert!(q.next_batch(&POLICY).is_none());
        assert!(matches!(q.push_all("m", vec![]), Err(EngineError::ShuttingDown(_))));
    }
}
