//! A pool of OS threads for tokenization, so CPU-bound work never blocks tokio's workers.

use std::thread::JoinHandle;

use crossbeam_channel::{Receiver, Sender};

type Job = Box<dyn FnOnce() + Send + 'static>;

pub struct TokenizerPool {
    jobs: Option<Sender<Job>>,
    threads: Vec<JoinHandle<()>>,
}

impl TokenizerPool {
    /// Starts `workers` threads (at least one).
    pub fn new(workers: usize) -> Self {
        let (tx, rx) = crossbeam_channel::unbounded::<Job>();
        let threads = (0..workers.max(1))
            .map(|i| {
                let rx: Receiver<Job> = rx.clone();
                std::thread::Builder::new()
                    .name(format!("aleph-tok-{i}"))
                    .spawn(move || {
                        while let Ok(job) = rx.recv() {
                            job();
                        }
                    })
                    .expect("spawning a tokenizer thread")
            })
            .collect();
        TokenizerPool { jobs: Some(tx), threads }
    }

    pub fn workers(&self) -> usize {
        self.threads.len()
    }

    /// Runs `f` on a pool thread without waiting for it (a panic in `f` is caught and dropped).
    pub fn spawn<F: FnOnce() + Send + 'static>(&self, f: F) {
        let job: Job = Box::new(move || {
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
        });
        if let Some(jobs) = &self.jobs {
            let _ = jobs.send(job);
        }
    }

    /// Runs `f` on a pool thread and awaits its result. A panic in `f` comes back as `None`.
    pub async fn run<T, F>(&self, f: F) -> Option<T>
    where
        T: Send + 'static,
        F: FnOnce() -> T + Send + 'static,
    {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let job: Job = Box::new(move || {
            let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).ok();
            let _ = tx.send(out);
        });
        self.jobs.as_ref()?.send(job).ok()?;
        rx.await.ok().flatten()
    }
}

impl Drop for TokenizerPool {
    fn drop(&mut self) {
        self.jobs.take();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn runs_jobs_off_the_runtime_and_survives_panics() {
        let pool = TokenizerPool::new(2);
        let name = pool.run(|| std::thread::current().name().map(str::to_string)).await.unwrap();
        assert!(name.unwrap().starts_with("aleph-tok-"));
        assert_eq!(pool.run(|| -> u32 { panic!("boom") }).await, None);
        assert_eq!(pool.run(|| 7).await, Some(7));
    }
}
