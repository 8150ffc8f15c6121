//! The one contract between the engine (scheduling) and the models (compute).

/// What a sequence wants back. Models that report [`crate::ModelInfo::token_outputs`] honour every kind;
/// the others return their one output.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum OutputKind {
    /// The model's output: a pooled (and, if the model normalizes, unit) embedding, logits, or token vectors.
    #[default]
    Default,
    /// The pooled embedding before L2 normalization (TEI's `normalize: false`).
    Unnormalized,
    /// The last hidden state of every token, row-major `len × hidden` (TEI's `/embed_all`).
    Tokens,
    /// Vocabulary weights, only the non-zero ones, as [`sparse_pairs`] lays them out (SPLADE; BGE-M3's lexical
    /// weights).
    Sparse,
    /// ColBERT vectors of the tokens after the first, row-major (BGE-M3's `colbert_vecs`).
    MultiVector,
}

/// Sparse weights as one flat vector, `[id₀, w₀, id₁, w₁, …]` in id order, each id as an f32 (exact: loaders
/// refuse vocabularies of 2²⁴ entries or more).
pub fn sparse_pairs(weights: impl IntoIterator<Item = (u32, f32)>) -> Vec<f32> {
    let mut pairs: Vec<(u32, f32)> = weights.into_iter().collect();
    pairs.sort_unstable_by_key(|p| p.0);
    pairs.into_iter().flat_map(|(id, w)| [id as f32, w]).collect()
}

/// The `(id, weight)` pairs [`sparse_pairs`] wrote.
pub fn read_sparse_pairs(v: &[f32]) -> impl Iterator<Item = (u32, f32)> + '_ {
    v.chunks_exact(2).map(|p| (p[0] as u32, p[1]))
}

/// Tokenized sequences packed back to back, without padding.
///
/// Sequence `i` occupies `input_ids[cu_seqlens[i]..cu_seqlens[i + 1]]`. A backend that needs a padded
/// rectangle builds it itself, so a padding-free backend pays nothing for one that does not.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Batch {
    pub input_ids: Vec<u32>,
    pub token_type_ids: Vec<u32>,
    /// Cumulative sequence offsets: `len() + 1` entries, starting at 0.
    pub cu_seqlens: Vec<usize>,
    /// Length of the longest sequence.
    pub max_len: usize,
    /// What each sequence wants back; empty means [`OutputKind::Default`] for all.
    pub outputs: Vec<OutputKind>,
    /// The adapter each sequence runs with (an index into [`crate::ModelInfo::adapters`]: jina-embeddings-v3's
    /// per-task LoRA); empty means none for all.
    pub adapters: Vec<Option<u16>>,
}

impl Batch {
    pub fn new() -> Self {
        Batch { cu_seqlens: vec![0], ..Default::default() }
    }

    /// Appends one sequence.
    pub fn push(&mut self, ids: &[u32], type_ids: &[u32]) {
        self.push_as(ids, type_ids, OutputKind::Default);
    }

    /// Appends one sequence that wants `output` back.
    pub fn push_as(&mut self, ids: &[u32], type_ids: &[u32], output: OutputKind) {
        self.push_with(ids, type_ids, output, None);
    }

    /// Appends one sequence that wants `output` back, computed with `adapter` (if any).
    pub fn push_with(&mut self, ids: &[u32], type_ids: &[u32], output: OutputKind, adapter: Option<u16>) {
        debug_assert_eq!(ids.len(), type_ids.len());
        if adapter.is_some() && self.adapters.len() < self.len() {
            self.adapters.resize(self.len(), None);
        }
        if adapter.is_some() || !self.adapters.is_empty() {
            self.adapters.push(adapter);
        }
        if output != OutputKind::Default && self.outputs.len() < self.len() {
            self.outputs.resize(self.len(), OutputKind::Default);
        }
        if output != OutputKind::Default || !self.outputs.is_empty() {
            self.outputs.push(output);
        }
        self.input_ids.extend_from_slice(ids);
        self.token_type_ids.extend_from_slice(type_ids);
        self.cu_seqlens.push(self.input_ids.len());
        self.max_len = self.max_len.max(ids.len());
    }

    /// What sequence `i` wants back.
    pub fn output(&self, i: usize) -> OutputKind {
        self.outputs.get(i).copied().unwrap_or_default()
    }

    /// The adapter sequence `i` runs with.
    pub fn adapter(&self, i: usize) -> Option<u16> {
        self.adapters.get(i).copied().flatten()
    }

    /// The sequences `which` (in that order) as a batch of their own.
    pub fn select(&self, which: &[usize]) -> Batch {
        let mut b = Batch::new();
        for &i in which {
            let (s, e) = (self.cu_seqlens[i], self.cu_seqlens[i + 1]);
            b.push_with(&self.input_ids[s..e], &self.token_type_ids[s..e], self.output(i), self.adapter(i));
        }
        b
    }

    /// Number of sequences.
    pub fn len(&self) -> usize {
        self.cu_seqlens.len().saturating_sub(1)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn seq_len(&self, i: usize) -> usize {
        self.cu_seqlens[i + 1] - self.cu_seqlens[i]
    }

    /// Real (unpadded) tokens in the batch.
    pub fn total_tokens(&self) -> usize {
        self.input_ids.len()
    }

    /// Tokens a padded backend computes: every sequence at the longest length.
    pub fn padded_tokens(&self) -> usize {
        self.len() * self.max_len
    }
}

/// What a forward pass returns: one vector per sequence, in batch order (an embedding, or logits).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Output {
    pub vectors: Vec<Vec<f32>>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn push_tracks_offsets_and_max_len() {
        let mut b = Batch::new();
        b.push(&[1, 2, 3], &[0, 0, 0]);
        b.push(&[4], &[0]);
        assert_eq!(b.len(), 2);
        assert_eq!(b.cu_seqlens, vec![0, 3, 4]);
        assert_eq!(b.seq_len(0), 3);
        assert_eq!(b.seq_len(1), 1);
        assert_eq!(b.max_len, 3);
        assert_eq!(b.total_tokens(), 4);
        assert_eq!(b.padded_tokens(), 6);
        assert!(b.outputs.is_empty());
    }

    #[test]
    fn output_kinds_line_up_with_sequences() {
        let mut b = Batch::new();
        b.push(&[1, 2], &[0, 0]);
        b.push_as(&[3], &[0], OutputKind::Tokens);
        b.push(&[4], &[0]);
        assert_eq!(
            (0..3).map(|i| b.output(i)).collect::<Vec<_>>(),
            vec![OutputKind::Default, OutputKind::Tokens, OutputKind::Default]
        );
    }

    #[test]
    fn adapters_line_up_with_sequences_and_survive_a_selection() {
        let mut b = Batch::new();
        b.push(&[1, 2], &[0, 0]);
        b.push_with(&[3], &[0], OutputKind::Tokens, Some(2));
        b.push(&[4, 5, 6], &[0, 1, 1]);
        assert_eq!((0..3).map(|i| b.adapter(i)).collect::<Vec<_>>(), vec![None, Some(2), None]);
        let s = b.select(&[2, 1]);
        assert_eq!(s.input_ids, vec![4, 5, 6, 3]);
        assert_eq!(s.token_type_ids, vec![0, 1, 1, 0]);
        assert_eq!(s.cu_seqlens, vec![0, 3, 4]);
        assert_eq!((s.max_len, s.adapter(0), s.adapter(1), s.output(1)), (3, None, Some(2), OutputKind::Tokens));
    }
}
