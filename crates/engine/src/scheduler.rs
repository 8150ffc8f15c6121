//! One scheduler for the compute of every model in the process. Aleph's CPU kernels run each batch on one
//! shared pool of threads (one per core); this decides whose batch those threads work on. One batch computes
//! at a time, so models never oversubscribe the cores. Under contention each model gets time in proportion to
//! its weight (`--compute-weight`), as a weighted fair queue over virtual time: a model's virtual time grows by
//! the compute it used over its weight, and the batch with the least runs. A running batch offers to give way
//! at each parallel region of the kernels (every matrix product: well under a millisecond to a few), so a
//! model with a short batch waits for a slice, not for a flood's whole batch. A model with no batch waiting
//! costs nothing.

use std::collections::HashMap;
use std::rc::Rc;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// How far ahead in virtual time a running batch may get of a waiting one before it gives way: fewer switches,
/// at this much more latency.
const GRANULARITY: Duration = Duration::from_micros(500);

/// How long a model must have had no batch to count as idle. The moment between two batches of a busy model
/// (the batcher handing over the next one) is not idleness: it keeps the virtual time it is owed.
const IDLE_AFTER: Duration = Duration::from_millis(10);

#[derive(Default)]
pub struct ComputeScheduler {
    state: Mutex<State>,
    turn: Condvar,
}

#[derive(Default)]
struct State {
    /// The batch computing now.
    holder: Option<u64>,
    /// Batches begun and not finished: running or waiting for their turn.
    batches: HashMap<u64, Batch>,
    /// Each model's virtual time and when its last batch ended, kept between batches so a model cannot bank
    /// credit by pausing (see `begin`).
    kept: HashMap<String, Kept>,
    next_id: u64,
}

struct Kept {
    vtime: f64,
    ended: Instant,
}

struct Batch {
    model: String,
    weight: f64,
    /// Virtual seconds: compute used over the weight.
    vtime: f64,
    /// When it took the turn, while it holds it.
    since: Option<Instant>,
}

impl ComputeScheduler {
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// Runs `compute` (one batch of `model`, weighted `weight`) when it is its turn. `compute` receives the
    /// yield point to call between its parallel regions.
    pub fn run<R>(self: &Arc<Self>, model: &str, weight: f64, compute: impl FnOnce(YieldPoint) -> R) -> R {
        let id = self.begin(model, weight);
        let finished = Finish { scheduler: self, id };
        self.acquire(id);
        let result = compute(YieldPoint { scheduler: self.clone(), id });
        drop(finished);
        result
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Registers a batch. A model that was idle starts no further behind than the least virtual time of the
    /// batches there now: idling earns no credit to spend later. A busy model's next batch keeps its place.
    fn begin(&self, model: &str, weight: f64) -> u64 {
        let mut s = self.lock();
        let floor = s.batches.values().map(|b| b.vtime).fold(f64::INFINITY, f64::min);
        let busy = s.batches.values().any(|b| b.model == model);
        let (own, idle) = match s.kept.get(model) {
            Some(k) => (k.vtime, !busy && k.ended.elapsed() > IDLE_AFTER),
            None => (0.0, !busy),
        };
        let vtime = if idle && floor.is_finite() { own.max(floor - GRANULARITY.as_secs_f64()) } else { own };
        let id = s.next_id;
        s.next_id += 1;
        s.batches.insert(id, Batch { model: model.to_string(), weight: weight.max(1e-3), vtime, since: None });
        id
    }

    /// Waits until no batch computes and this one has the least virtual time of the waiting ones.
    fn acquire(&self, id: u64) {
        let mut s = self.lock();
        loop {
            if s.holder.is_none() && next_in_line(&s) == Some(id) {
                s.holder = Some(id);
                if let Some(b) = s.batches.get_mut(&id) {
                    b.since = Some(Instant::now());
                }
                return;
            }
            s = self.turn.wait(s).unwrap_or_else(|p| p.into_inner());
        }
    }

    /// Charges the time computed since the turn was taken; frees the turn.
    fn release(&self, s: &mut State, id: u64) {
        if let Some(b) = s.batches.get_mut(&id) {
            if let Some(since) = b.since.take() {
                b.vtime += since.elapsed().as_secs_f64() / b.weight;
            }
        }
        if s.holder == Some(id) {
            s.holder = None;
        }
        self.turn.notify_all();
    }

    /// Between parallel regions of the running batch: gives the turn to a waiting batch that is further
    /// behind by more than the granularity, and waits to get it back.
    fn yield_point(&self, id: u64) {
        let mut s = self.lock();
        let Some(own) = s.batches.get(&id) else { return };
        let running = own.since.map_or(0.0, |t| t.elapsed().as_secs_f64() / own.weight);
        let now = own.vtime + running;
        let behind = s
            .batches
            .iter()
            .filter(|(other, b)| **other != id && b.since.is_none())
            .any(|(_, b)| b.vtime + GRANULARITY.as_secs_f64() < now);
        if !behind {
            return;
        }
        self.release(&mut s, id);
        drop(s);
        self.acquire(id);
    }

    /// Batches begun and not finished (for tests and metrics).
    pub fn active(&self) -> usize {
        self.lock().batches.len()
    }
}

/// Where a running batch offers its turn to a batch further behind.
#[derive(Clone)]
pub struct YieldPoint {
    scheduler: Arc<ComputeScheduler>,
    id: u64,
}

impl YieldPoint {
    pub fn offer(&self) {
        self.scheduler.yield_point(self.id);
    }
}

/// How one model's batches (and warm-up) reach the cores: through the scheduler when the model computes on
/// Aleph's CPU kernels, which offer the turn between their parallel regions; directly otherwise (candle keeps
/// its own threads, a GPU its own queue).
#[derive(Clone)]
pub struct ComputeSlot {
    scheduler: Option<Arc<ComputeScheduler>>,
    model: String,
    weight: f64,
}

impl ComputeSlot {
    pub fn new(scheduler: Option<Arc<ComputeScheduler>>, model: &str, weight: f64) -> Self {
        ComputeSlot { scheduler, model: model.to_string(), weight }
    }

    /// Runs `compute` in this model's turn.
    pub fn run<R>(&self, compute: impl FnOnce() -> R) -> R {
        match &self.scheduler {
            None => compute(),
            Some(scheduler) => scheduler.run(&self.model, self.weight, |turn| {
                aleph_models::cpu::with_yield_point(Rc::new(move || turn.offer()), compute)
            }),
        }
    }
}

/// The waiting batch with the least virtual time (the oldest among equals).
fn next_in_line(s: &State) -> Option<u64> {
    s.batches
        .iter()
        .filter(|(id, _)| s.holder != Some(**id))
        .min_by(|(a_id, a), (b_id, b)| a.vtime.total_cmp(&b.vtime).then(a_id.cmp(b_id)))
        .map(|(id, _)| *id)
}

/// Ends a batch, also when its compute panics: the turn is freed and the model's virtual time kept.
struct Finish<'a> {
    scheduler: &'a ComputeScheduler,
    id: u64,
}

impl Drop for Finish<'_> {
    fn drop(&mut self) {
        let mut s = self.scheduler.lock();
        self.scheduler.release(&mut s, self.id);
        if let Some(b) = s.batches.remove(&self.id) {
            let kept = s.kept.entry(b.model).or_insert(Kept { vtime: 0.0, ended: Instant::now() });
            kept.vtime = kept.vtime.max(b.vtime);
            kept.ended = Instant::now();
        }
        self.scheduler.turn.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    /// The tests that time spinning threads run one at a time, so they do not share the cores.
    static TIMED: Mutex<()> = Mutex::new(());

    fn timed() -> MutexGuard<'static, ()> {
        TIMED.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Burns `ms` of compute in 200 µs slices, calling the yield point between them as the kernels do: time
    /// spent waiting for the turn does not count.
    fn work(ms: u64, yield_point: &YieldPoint) {
        for _ in 0..ms * 5 {
            let slice = Instant::now() + Duration::from_micros(200);
            while Instant::now() < slice {
                std::hint::spin_loop();
            }
            yield_point.offer();
        }
    }

    #[test]
    fn one_batch_computes_at_a_time() {
        let _timed = timed();
        let scheduler = ComputeScheduler::new();
        let inside = Arc::new(AtomicUsize::new(0));
        let threads: Vec<_> = (0..4)
            .map(|i| {
                let (scheduler, inside) = (scheduler.clone(), inside.clone());
                std::thread::spawn(move || {
                    for _ in 0..5 {
                        scheduler.run(&format!("m{}", i % 2), 1.0, |yield_point| {
                            for _ in 0..10 {
                                assert_eq!(inside.fetch_add(1, Ordering::SeqCst), 0, "two batches computing");
                                std::thread::sleep(Duration::from_micros(100));
                                inside.fetch_sub(1, Ordering::SeqCst);
                                yield_point.offer();
                            }
                        });
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(scheduler.active(), 0);
    }

    /// A short batch arriving while a long one computes waits for a slice, not for the long one.
    #[test]
    fn a_short_batch_overtakes_a_long_one() {
        let _timed = timed();
        let scheduler = ComputeScheduler::new();
        // The flood has used compute before: it is ahead in virtual time.
        scheduler.run("flood", 1.0, |y| work(20, &y));
        let long = {
            let scheduler = scheduler.clone();
            std::thread::spawn(move || scheduler.run("flood", 1.0, |y| work(400, &y)))
        };
        std::thread::sleep(Duration::from_millis(50));
        let asked = Instant::now();
        scheduler.run("trickle", 1.0, |y| work(5, &y));
        let waited = asked.elapsed();
        assert!(!long.is_finished(), "the long batch is still computing");
        assert!(waited < Duration::from_millis(150), "the short batch took {waited:?}");
        long.join().unwrap();
    }

    /// Under contention, compute is shared in proportion to the weights.
    #[test]
    fn contended_time_follows_the_weights() {
        let _timed = timed();
        let scheduler = ComputeScheduler::new();
        let done: Arc<Vec<AtomicUsize>> = Arc::new((0..2).map(|_| AtomicUsize::new(0)).collect());
        let until = Instant::now() + Duration::from_millis(600);
        let threads: Vec<_> = [(0, 3.0), (1, 1.0)]
            .into_iter()
            .map(|(i, weight)| {
                let (scheduler, done) = (scheduler.clone(), done.clone());
                std::thread::spawn(move || {
                    while Instant::now() < until {
                        scheduler.run(&format!("m{i}"), weight, |y| work(2, &y));
                        done[i].fetch_add(1, Ordering::SeqCst);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let (heavy, light) = (done[0].load(Ordering::SeqCst) as f64, done[1].load(Ordering::SeqCst) as f64);
        let ratio = heavy / light.max(1.0);
        assert!((2.0..4.5).contains(&ratio), "weights 3:1 gave {heavy} and {light} batches");
    }

    /// A model whose batches follow each other keeps what it is owed between them, even against a batch whose
    /// parallel regions are long (a big model's warm-up: a GEMM of hundreds of milliseconds): the moment between
    /// two of its batches is not idleness.
    #[test]
    fn back_to_back_batches_keep_their_share_against_long_regions() {
        let _timed = timed();
        let scheduler = ComputeScheduler::new();
        let until = Instant::now() + Duration::from_millis(800);
        let coarse = {
            let scheduler = scheduler.clone();
            std::thread::spawn(move || {
                scheduler.run("coarse", 1.0, |y| {
                    let mut used = Duration::ZERO;
                    while Instant::now() < until {
                        let region = Instant::now();
                        while region.elapsed() < Duration::from_millis(40) {
                            std::hint::spin_loop();
                        }
                        used += region.elapsed();
                        y.offer();
                    }
                    used
                })
            })
        };
        std::thread::sleep(Duration::from_millis(20));
        let mut fine = Duration::ZERO;
        while Instant::now() < until {
            // `work` spins its 2 ms outside the waits at its yield points.
            scheduler.run("fine", 1.0, |y| work(2, &y));
            fine += Duration::from_millis(2);
        }
        let coarse = coarse.join().unwrap();
        let share = fine.as_secs_f64() / (fine + coarse).as_secs_f64();
        assert!(share > 0.35, "back-to-back batches got {share:.2} of the compute ({fine:?} against {coarse:?})");
    }

    #[test]
    fn a_panicking_batch_frees_the_turn() {
        let scheduler = ComputeScheduler::new();
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            scheduler.run("bad", 1.0, |_| panic!("a kernel panicked"));
        }));
        assert!(caught.is_err());
        assert_eq!(scheduler.run("good", 1.0, |_| 7), 7);
        assert_eq!(scheduler.active(), 0);
    }
}
