//! Who pays for the tokens a request feeds the models. The HTTP layer runs each request inside [`metered`]
//! with its caller's meter (an API key with a tokens-per-second limit); the engine charges every token it
//! queues for a forward pass (cached vectors cost nothing) to the meter of the request it serves.

use std::future::Future;
use std::sync::Arc;

/// Counts the tokens charged to one caller.
pub trait TokenMeter: Send + Sync {
    fn charge(&self, tokens: usize);
}

tokio::task_local! {
    static METER: Arc<dyn TokenMeter>;
}

/// Runs `request` with `meter` paying for the tokens it queues.
pub async fn metered<F: Future>(meter: Arc<dyn TokenMeter>, request: F) -> F::Output {
    METER.scope(meter, request).await
}

/// Charges `tokens` to the meter of the request being served, if it has one.
pub(crate) fn charge(tokens: usize) {
    let _ = METER.try_with(|meter| meter.charge(tokens));
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    #[derive(Default)]
    struct Count(AtomicUsize);

    impl TokenMeter for Count {
        fn charge(&self, tokens: usize) {
            self.0.fetch_add(tokens, Ordering::Relaxed);
        }
    }

    #[tokio::test]
    async fn charges_go_to_the_meter_of_the_request_they_serve() {
        let count = Arc::new(Count::default());
        metered(count.clone(), async {
            charge(5);
            tokio::task::yield_now().await;
            charge(7);
        })
        .await;
        charge(100); // outside any request: nobody pays
        assert_eq!(count.0.load(Ordering::Relaxed), 12);
    }
}
