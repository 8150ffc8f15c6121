//! The token embeddings of the text families: word rows, plus absolute positions and token types where the
//! family has them, summed and optionally normalized. Inputs are checked against the tables here, so an id
//! or a length the model cannot take is the same clear error on every backend.

use crate::backend::{Norm, Ops};
use crate::batch::Batch;
use crate::error::ModelError;

use super::Weights;

pub struct TextEmbeddings<O: Ops> {
    word: O::Table,
    vocab: usize,
    hidden: usize,
    /// The absolute position table and the position of each sequence's first token (RoBERTa's `pad + 1`).
    position: Option<(O::Table, usize)>,
    /// The token-type table and its rows; with one row, that row is added to every token.
    token_type: Option<(O::Table, usize)>,
    norm: Option<Norm<O::Param>>,
    /// The longest sequence the model takes (its position table's, or its config's for rotary families).
    max_len: usize,
}

impl<O: Ops> TextEmbeddings<O> {
    /// Only word rows, `vocab × hidden`, from `table` (`embeddings.word_embeddings`, `embed_tokens`, ...).
    pub fn words(table: &Weights<O>, vocab: usize, hidden: usize) -> Result<Self, ModelError> {
        Ok(Self::from_table(table.table(vocab, hidden)?, vocab, hidden))
    }

    /// Word rows already prepared by the family (Gemma's scaled table).
    pub fn from_table(word: O::Table, vocab: usize, hidden: usize) -> Self {
        TextEmbeddings { word, vocab, hidden, position: None, token_type: None, norm: None, max_len: usize::MAX }
    }

    /// BERT's layout under `emb` (`word_embeddings`, `position_embeddings` with `positions = (rows, first)`,
    /// `token_type_embeddings` with `types` rows, none for 0), normalized by `norm`.
    pub fn bert(
        emb: &Weights<O>,
        vocab: usize,
        hidden: usize,
        positions: Option<(usize, usize)>,
        types: usize,
        norm: Norm<O::Param>,
    ) -> Result<Self, ModelError> {
        let mut e = Self::words(&emb.pp("word_embeddings"), vocab, hidden)?.with_norm(norm);
        if let Some((rows, first)) = positions {
            e = e.with_positions(&emb.pp("position_embeddings"), rows, first)?;
        }
        if types > 0 {
            e.token_type = Some((emb.pp("token_type_embeddings").table(types, hidden)?, types));
        }
        Ok(e)
    }

    /// Absolute positions from `table` (`rows × hidden`), a sequence's first token at row `first`.
    pub fn with_positions(mut self, table: &Weights<O>, rows: usize, first: usize) -> Result<Self, ModelError> {
        self.position = Some((table.table(rows, self.hidden)?, first));
        self.max_len = self.max_len.min(rows.saturating_sub(first));
        Ok(self)
    }

    pub fn with_norm(mut self, norm: Norm<O::Param>) -> Self {
        self.norm = Some(norm);
        self
    }

    /// Refuses sequences longer than `max_len` (a rotary family's configured positions).
    pub fn with_max_len(mut self, max_len: usize) -> Self {
        self.max_len = self.max_len.min(max_len);
        self
    }

    pub fn hidden_size(&self) -> usize {
        self.hidden
    }

    /// The batch's embeddings, `[tokens, hidden]`, packed like it.
    pub fn forward(&self, o: &O, batch: &Batch) -> Result<O::T, ModelError> {
        if batch.max_len > self.max_len {
            return Err(ModelError::Forward(format!(
                "a sequence of {} tokens is longer than the model's {} positions",
                batch.max_len, self.max_len
            )));
        }
        let positions: Vec<u32> = match &self.position {
            Some((_, first)) => {
                (0..batch.len()).flat_map(|s| (0..batch.seq_len(s)).map(|t| (first + t) as u32)).collect()
            }
            None => Vec::new(),
        };
        let types: Vec<u32> = match self.token_type {
            Some((_, 1)) => vec![0; batch.total_tokens()],
            Some((_, n)) => batch.token_type_ids.iter().map(|&t| t.min(n as u32 - 1)).collect(),
            None => Vec::new(),
        };
        let mut tables = vec![(&self.word, &batch.input_ids[..])];
        tables.extend(self.position.as_ref().map(|(p, _)| (p, &positions[..])));
        tables.extend(self.token_type.as_ref().map(|(t, _)| (t, &types[..])));
        self.lookup(o, &tables)
    }

    /// Embeddings of bare token ids (a decoder's prompt pieces), `[ids, hidden]`.
    pub fn ids(&self, o: &O, ids: &[u32]) -> Result<O::T, ModelError> {
        self.lookup(o, &[(&self.word, ids)])
    }

    fn lookup(&self, o: &O, tables: &[(&O::Table, &[u32])]) -> Result<O::T, ModelError> {
        if let Some(&id) = tables[0].1.iter().find(|&&id| id as usize >= self.vocab) {
            return Err(ModelError::Forward(format!("token id {id} is outside the vocabulary")));
        }
        let mut x = o.empty()?;
        o.embed(&mut x, self.hidden, tables)?;
        if let Some(norm) = &self.norm {
            o.norm(&mut x, norm)?;
        }
        Ok(x)
    }
}
