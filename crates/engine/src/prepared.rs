//! An input after preprocessing: what waits in the queue and what a batch is built from.

use aleph_models::{AudioFeatures, Encoded, OutputKind, Pixels};

/// A tokenized text (or pair), a preprocessed image, or an audio clip's features.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Prepared {
    /// Token ids, what the sequence wants back, and the adapter it runs with (see [`crate::RunOptions`]).
    Tokens(Encoded, OutputKind, Option<u16>),
    /// Pixels with the tokens the vision tower spends on them, so images share the token budget.
    Image { pixels: Pixels, cost: usize },
    /// Log-mel features with the tokens the audio tower spends on them.
    Audio { features: AudioFeatures, cost: usize },
}

impl Prepared {
    /// What the item costs against the batch's token budget.
    pub fn cost(&self) -> usize {
        match self {
            Prepared::Tokens(e, ..) => e.len(),
            Prepared::Image { cost, .. } | Prepared::Audio { cost, .. } => *cost,
        }
    }
}

impl From<Encoded> for Prepared {
    fn from(e: Encoded) -> Self {
        Prepared::Tokens(e, OutputKind::Default, None)
    }
}
