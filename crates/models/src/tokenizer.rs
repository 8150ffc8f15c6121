//! `tokenizer.json` through the `tokenizers` crate, with the file's own padding and truncation replaced
//! by the model's window: padding is the backend's business, and the window comes from the model.

use std::path::Path;
use std::sync::{Arc, OnceLock};

use tokenizers::{PostProcessor, Tokenizer, TruncationDirection, TruncationParams, TruncationStrategy};

use crate::error::ModelError;

/// One tokenized input.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Encoded {
    pub ids: Vec<u32>,
    pub type_ids: Vec<u32>,
}

impl Encoded {
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }
}

/// Special tokens a tokenizer's files name (as strings or `AddedToken` objects): `tokenizer_config.json`,
/// then `special_tokens_map.json` for what it leaves out, as transformers reads them.
#[derive(Debug, Default)]
pub struct SpecialTokens {
    pub bos_token: Option<String>,
    pub pad_token: Option<String>,
    pub cls_token: Option<String>,
    pub eos_token: Option<String>,
    pub unk_token: Option<String>,
}

impl SpecialTokens {
    /// None named when neither file exists.
    pub fn read(dir: &Path) -> Result<Self, ModelError> {
        #[derive(serde::Deserialize)]
        #[serde(untagged)]
        enum Name {
            Plain(String),
            Added { content: String },
        }
        #[derive(serde::Deserialize, Default)]
        struct File {
            bos_token: Option<Name>,
            pad_token: Option<Name>,
            cls_token: Option<Name>,
            eos_token: Option<Name>,
            unk_token: Option<Name>,
        }
        let read = |name: &str| -> Result<File, ModelError> {
            let path = dir.join(name);
            if path.exists() {
                crate::error::read_json(&path)
            } else {
                Ok(File::default())
            }
        };
        let (config, map) = (read("tokenizer_config.json")?, read("special_tokens_map.json")?);
        let text = |a: Option<Name>, b: Option<Name>| {
            a.or(b).map(|n| match n {
                Name::Plain(s) | Name::Added { content: s } => s,
            })
        };
        Ok(SpecialTokens {
            bos_token: text(config.bos_token, map.bos_token),
            pad_token: text(config.pad_token, map.pad_token),
            cls_token: text(config.cls_token, map.cls_token),
            eos_token: text(config.eos_token, map.eos_token),
            unk_token: text(config.unk_token, map.unk_token),
        })
    }
}

/// How a client wants an input longer than the window handled (TEI's `truncate` and
/// `truncation_direction`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Truncation {
    /// Cut to the window (else such an input is an error).
    pub enabled: bool,
    /// Cut from the start instead of the end.
    pub left: bool,
    /// A request's own cut below the window, special tokens included (vLLM's `truncate_prompt_tokens`).
    pub limit: Option<usize>,
}

impl Truncation {
    /// Cut at the window, from the end (`left`: from the start), or not at all.
    pub fn new(enabled: bool, left: bool) -> Self {
        Truncation { enabled, left, limit: None }
    }

    /// The most tokens an input keeps under a window of `window`.
    fn keep(&self, window: usize) -> usize {
        self.limit.filter(|_| self.enabled).map_or(window, |l| l.min(window))
    }
}

impl Default for Truncation {
    fn default() -> Self {
        Truncation::new(true, false)
    }
}

/// One token of `/tokenize`: its id, its text as written in the input, and where it stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenSpan {
    pub id: u32,
    /// The input's bytes the token covers (the token's own text for special tokens).
    pub text: String,
    pub special: bool,
    /// Byte offsets into the input, start inclusive, as TEI reports them; none for special tokens.
    pub span: Option<(usize, usize)>,
}

/// A tokenizer that truncates to the model's window. Cheap to share: all methods take `&self`.
#[derive(Clone)]
pub struct TextTokenizer {
    kind: Kind,
    window: usize,
    /// Text around every input, tokenized with it instead of the tokenizer's special-token template.
    template: Option<(String, String)>,
    /// How an LLM reranker's (query, document) pairs become one prompt, with its prefix's and suffix's ids.
    pair_template: Option<Arc<PairPrompt>>,
    /// The same tokenizer cutting from the start, and one not cutting at all, each built the first time a
    /// client asks for it.
    left: Arc<OnceLock<Box<Tokenizer>>>,
    uncut: Arc<OnceLock<Box<Tokenizer>>>,
    /// A static model's rules, which replace the window's cut and the special tokens.
    static_rules: Option<StaticRules>,
    /// Whitespace is stripped from both ends of a text first (jina-embeddings-v3's `custom_st.Transformer`, and
    /// sentence-transformers before 5, strip every input).
    strip: bool,
    /// The checkpoint's chat template, for requests given as chat messages.
    chat: Option<Arc<crate::chat_template::ChatTemplate>>,
}

/// How model2vec's `StaticModel.encode` tokenizes: the text cut to `char_limit` characters, no special tokens,
/// at most the window's tokens, then the unknown token's ids dropped (after the cut, as model2vec 0.10 cuts
/// inside the tokenizer).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StaticRules {
    pub char_limit: Option<usize>,
    pub unk: Option<u32>,
}

/// An LLM reranker's prompt, as its model card builds it: the tokens of `prefix`, then each of `pieces` with
/// `{instruction}`, `{query}` and `{document}` filled in and tokenized on its own (Qwen3-Reranker's whole
/// body is one piece; mxbai-rerank-v2 tokenizes its query, separators, document and task apart), then the
/// tokens of `suffix`. Pieces are cut to fit the window: the document's first; a separate query piece keeps
/// at most three quarters of the room, as mxbai-rerank-v2 does.
#[derive(Debug, Clone)]
pub struct PairTemplate {
    pub prefix: String,
    pub pieces: Vec<String>,
    pub suffix: String,
    /// The instruction when a request gives none; `None`: the prompt has no instruction then.
    pub instruction: Option<String>,
    /// A frame around the instruction where the prompt has one (`instruction: {instruction}\n` for
    /// mxbai-rerank-v2: no instruction, or an empty one, leaves it out); `None`: the instruction as it is
    /// (Qwen3-Reranker).
    pub instruction_format: Option<String>,
    /// Whether the pieces get the tokenizer's special tokens (Qwen3-Reranker's card calls the tokenizer
    /// with its defaults; mxbai-rerank-v2 turns them off).
    pub special_tokens: bool,
}

impl PairTemplate {
    /// A template file (`--rerank-template FILE`): its whole text is one piece, tokenized as one.
    pub fn from_file(path: &Path, instruction: String) -> Result<Self, ModelError> {
        let body = std::fs::read_to_string(path)
            .map_err(|e| ModelError::BadFile { path: path.to_path_buf(), reason: e.to_string() })?;
        if !body.contains("{query}") || !body.contains("{document}") {
            return Err(ModelError::BadFile {
                path: path.to_path_buf(),
                reason: "a rerank template needs both {query} and {document}".into(),
            });
        }
        Ok(PairTemplate {
            prefix: String::new(),
            pieces: vec![body],
            suffix: String::new(),
            instruction: Some(instruction),
            instruction_format: None,
            special_tokens: true,
        })
    }

    /// `piece` with its placeholders filled in one pass (a query holding `{document}` stays as written).
    fn fill(&self, piece: &str, query: &str, document: &str, instruction: Option<&str>) -> String {
        let instruction = match (&self.instruction_format, instruction) {
            (None, i) => i.unwrap_or_default().to_string(),
            // mxbai-rerank-v2 tests the instruction for truth: an empty one is none.
            (Some(frame), Some(i)) if !i.is_empty() => frame.replace("{instruction}", i),
            (Some(_), _) => String::new(),
        };
        let (mut out, mut rest) = (String::new(), piece);
        while let Some(at) = rest.find('{') {
            out.push_str(&rest[..at]);
            let tail = &rest[at..];
            let fields = [("{instruction}", instruction.as_str()), ("{query}", query), ("{document}", document)];
            match fields.iter().find(|(name, _)| tail.starts_with(name)) {
                Some((name, value)) => {
                    out.push_str(value);
                    rest = &tail[name.len()..];
                }
                None => {
                    out.push('{');
                    rest = &tail[1..];
                }
            }
        }
        out + rest
    }
}

/// What a template piece holds, for cutting it to the window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    Fixed,
    Query,
    /// The document (and perhaps the query with it).
    Document,
}

/// A [`PairTemplate`] with its prefix and suffix tokenized once.
struct PairPrompt {
    template: PairTemplate,
    prefix: Vec<u32>,
    suffix: Vec<u32>,
}

#[derive(Clone)]
enum Kind {
    HuggingFace(Box<Tokenizer>),
    /// One token per UTF-8 byte between `[CLS]`-like 1 and `[SEP]`-like 2: for the weight-free debug engine.
    Bytes,
}

impl TextTokenizer {
    /// Loads `tokenizer.json` and truncates to `window` tokens, special tokens included.
    pub fn from_file(path: &Path, window: usize) -> Result<Self, ModelError> {
        if !path.exists() {
            return Err(ModelError::MissingFile(path.to_path_buf()));
        }
        let inner = Tokenizer::from_file(path)
            .map_err(|e| ModelError::BadFile { path: path.to_path_buf(), reason: e.to_string() })?;
        Self::new(inner, window)
    }

    pub fn new(mut inner: Tokenizer, window: usize) -> Result<Self, ModelError> {
        inner.with_padding(None);
        inner
            .with_truncation(Some(TruncationParams {
                max_length: window,
                strategy: TruncationStrategy::LongestFirst,
                stride: 0,
                direction: TruncationDirection::Right,
            }))
            .map_err(|e| ModelError::Tokenizer(e.to_string()))?;
        Ok(TextTokenizer {
            kind: Kind::HuggingFace(Box::new(inner)),
            window,
            template: None,
            pair_template: None,
            left: Arc::new(OnceLock::new()),
            uncut: Arc::new(OnceLock::new()),
            static_rules: None,
            strip: false,
            chat: None,
        })
    }

    /// Ends every sequence with `token`, as a tokenizer's own Python code does where `tokenizer.json` leaves it
    /// out (gte-Qwen2-instruct's `tokenization_qwen` appends `<|endoftext|>`: `A <eos>`, `A <eos> B <eos>`).
    /// Nothing changes when the tokenizer already ends with it; an error when `token` is not in the vocabulary.
    pub fn appending(mut self, token: &str) -> Result<Self, ModelError> {
        use tokenizers::processors::{sequence::Sequence, template::TemplateProcessing, PostProcessorWrapper};
        use tokenizers::PostProcessor;
        let Kind::HuggingFace(tok) = &mut self.kind else {
            return Ok(self);
        };
        let id = tok.token_to_id(token).ok_or_else(|| ModelError::Tokenizer(format!("no `{token}` token")))?;
        let ends = |tok: &Tokenizer| tok.encode_fast("a", true).ok().and_then(|e| e.get_ids().last().copied());
        if ends(tok) == Some(id) {
            return Ok(self);
        }
        let invalid = |e: String| ModelError::Tokenizer(format!("appending `{token}`: {e}"));
        let template = TemplateProcessing::builder()
            .try_single(format!("$A:0 {token}:0"))
            .and_then(|b| b.try_pair(format!("$A:0 {token}:0 $B:1 {token}:1")))
            .map_err(|e| invalid(e.to_string()))?
            .special_tokens(vec![(token.to_string(), id)])
            .build()
            .map_err(|e| invalid(e.to_string()))?;
        // A template of the file's own that adds nothing (transformers 5 writes one) would merge a pair before
        // the eos could go between; one that adds tokens keeps them, ahead of the eos.
        let processor = match tok.get_post_processor() {
            None => PostProcessorWrapper::Template(template),
            Some(PostProcessorWrapper::Template(own)) if own.added_tokens(false) + own.added_tokens(true) == 0 => {
                PostProcessorWrapper::Template(template)
            }
            Some(own) => PostProcessorWrapper::Sequence(Sequence::new(vec![
                own.clone(),
                PostProcessorWrapper::Template(template),
            ])),
        };
        tok.with_post_processor(Some(processor));
        Ok(self)
    }

    /// Renders chat messages through `template` ([`chat_template`](Self::chat_template)).
    pub fn with_chat_template(mut self, template: crate::chat_template::ChatTemplate) -> Self {
        self.chat = Some(Arc::new(template));
        self
    }

    /// The checkpoint's chat template, if it ships one.
    pub fn chat_template(&self) -> Option<&crate::chat_template::ChatTemplate> {
        self.chat.as_deref()
    }

    /// Strips whitespace from both ends of every text before tokenizing it.
    pub fn stripping(mut self) -> Self {
        self.strip = true;
        self
    }

    /// The same tokenizer following a static model's rules ([`StaticRules`]); the window stays the token cut.
    pub fn with_static_rules(mut self, rules: StaticRules) -> Self {
        self.static_rules = Some(rules);
        self
    }

    /// The tokenizer's vocabulary tokens in id order (added tokens included), and its unknown token's id.
    pub fn vocabulary(&self) -> (Vec<String>, Option<u32>) {
        let Kind::HuggingFace(tok) = &self.kind else {
            return (Vec::new(), None);
        };
        let mut vocab: Vec<(String, u32)> = tok.get_vocab(true).into_iter().collect();
        vocab.sort_by_key(|(_, id)| *id);
        // As model2vec finds it: the model's `unk_token` (WordPiece, BPE, WordLevel), else Unigram's `unk_id`.
        let model = serde_json::to_value(tok.get_model()).unwrap_or_default();
        let unk = match (model.get("unk_token").and_then(|t| t.as_str()), model.get("unk_id").and_then(|i| i.as_u64()))
        {
            (Some(token), _) => tok.token_to_id(token),
            (None, Some(id)) => Some(id as u32),
            (None, None) => None,
        };
        (vocab.into_iter().map(|(t, _)| t).collect(), unk)
    }

    /// A byte tokenizer needing no files (ids 3..=258 are bytes, 1 and 2 frame the sequence).
    pub fn bytes(window: usize) -> Self {
        TextTokenizer {
            kind: Kind::Bytes,
            window: window.max(2),
            template: None,
            pair_template: None,
            left: Arc::new(OnceLock::new()),
            uncut: Arc::new(OnceLock::new()),
            static_rules: None,
            strip: false,
            chat: None,
        }
    }

    /// Number of ids the model's embedding table has rows for (added tokens included).
    pub fn vocab_size(&self) -> usize {
        match &self.kind {
            Kind::HuggingFace(tok) => tok.get_vocab_size(true),
            Kind::Bytes => 259,
        }
    }

    /// Client-given token ids, used as they are (no special tokens added), cut to the window.
    pub fn from_ids(&self, ids: &[u32], truncation: Truncation) -> Result<Encoded, ModelError> {
        let vocab = self.vocab_size();
        if let Some(&id) = ids.iter().find(|&&id| id as usize >= vocab) {
            return Err(ModelError::BadTokenId { id, vocab });
        }
        let keep = ids.len().min(truncation.keep(self.window));
        if keep < ids.len() && !truncation.enabled {
            return Err(ModelError::InputTooLong { tokens: ids.len(), window: self.window });
        }
        let ids = if truncation.left { &ids[ids.len() - keep..] } else { &ids[..keep] };
        Ok(Encoded { ids: ids.to_vec(), type_ids: vec![0; ids.len()] })
    }

    /// Tokenizes one text like [`Self::encode`], cut as the client asks: from the start, or not at all
    /// (then an input past the window is [`ModelError::InputTooLong`]).
    pub fn encode_with(&self, text: &str, truncation: Truncation) -> Result<Encoded, ModelError> {
        let text = if self.strip { text.trim() } else { text };
        if self.static_rules.is_some() {
            return self.encode(text);
        }
        let Kind::HuggingFace(tok) = &self.kind else {
            return self.encode(text);
        };
        let keep = truncation.keep(self.window);
        if keep < self.window && self.template.is_none() {
            return self.encode_cut(tok, text, keep, truncation.left);
        }
        if self.template.is_some() || (truncation.enabled && !truncation.left) {
            return self.encode(text);
        }
        if !truncation.enabled {
            let enc = variant(&self.uncut, tok, None)?
                .encode_fast(text, true)
                .map_err(|e| ModelError::Tokenizer(e.to_string()))?;
            if enc.len() > self.window {
                return Err(ModelError::InputTooLong { tokens: enc.len(), window: self.window });
            }
            return Ok(Encoded { ids: enc.get_ids().to_vec(), type_ids: enc.get_type_ids().to_vec() });
        }
        let enc =
            self.left_tokenizer(tok)?.encode_fast(text, true).map_err(|e| ModelError::Tokenizer(e.to_string()))?;
        Ok(Encoded { ids: enc.get_ids().to_vec(), type_ids: enc.get_type_ids().to_vec() })
    }

    fn left_tokenizer<'a>(&'a self, right: &Tokenizer) -> Result<&'a Tokenizer, ModelError> {
        variant(&self.left, right, Some(self.window))
    }

    /// `text` cut to `keep` tokens, its special tokens among them, as the tokenizer's own truncation cuts:
    /// the text's tokens first, then the special tokens added around what is left.
    fn encode_cut(&self, tok: &Tokenizer, text: &str, keep: usize, left: bool) -> Result<Encoded, ModelError> {
        let uncut = variant(&self.uncut, tok, None)?;
        let err = |e: tokenizers::Error| ModelError::Tokenizer(e.to_string());
        let mut enc = uncut.encode_fast(text, false).map_err(err)?;
        let added = uncut.get_post_processor().map_or(0, |p| p.added_tokens(false));
        let direction = if left { TruncationDirection::Left } else { TruncationDirection::Right };
        enc.truncate(keep.saturating_sub(added), 0, direction);
        let enc = uncut.post_process(enc, None, true).map_err(err)?;
        Ok(Encoded { ids: enc.get_ids().to_vec(), type_ids: enc.get_type_ids().to_vec() })
    }

    /// Every token of `text` with its byte offsets, not cut to the window (TEI's `/tokenize`).
    pub fn tokenize(&self, text: &str, add_special_tokens: bool) -> Result<Vec<TokenSpan>, ModelError> {
        let Kind::HuggingFace(tok) = &self.kind else {
            let enc = self.encode(text)?;
            return Ok(enc
                .ids
                .iter()
                .map(|&id| TokenSpan { id, text: String::new(), special: id < 3, span: None })
                .collect());
        };
        let tok = variant(&self.uncut, tok, None)?;
        let enc = tok.encode(text, add_special_tokens).map_err(|e| ModelError::Tokenizer(e.to_string()))?;
        let spans =
            enc.get_ids().iter().zip(enc.get_special_tokens_mask()).zip(enc.get_offsets()).zip(enc.get_tokens());
        Ok(spans
            .map(|(((&id, &special), &(start, stop)), token)| {
                if special == 1 {
                    return TokenSpan { id, text: token.clone(), special: true, span: None };
                }
                let bytes = text.as_bytes().get(start..stop.max(start)).unwrap_or_default();
                TokenSpan {
                    id,
                    text: String::from_utf8_lossy(bytes).into_owned(),
                    special: false,
                    span: Some((start, stop)),
                }
            })
            .collect())
    }

    /// Turns ids back into text (TEI's `/decode`).
    pub fn decode(&self, ids: &[u32], skip_special_tokens: bool) -> Result<String, ModelError> {
        match &self.kind {
            Kind::HuggingFace(tok) => {
                tok.decode(ids, skip_special_tokens).map_err(|e| ModelError::Tokenizer(e.to_string()))
            }
            Kind::Bytes => {
                Ok(ids.iter().filter(|&&id| (3..259).contains(&id)).map(|&id| (id - 3) as u8 as char).collect())
            }
        }
    }

    pub fn window(&self) -> usize {
        self.window
    }

    /// Wraps every text as `prefix + text + suffix` (special tokens written out, e.g. `<bos>`) and adds no
    /// special tokens of its own: a model's prompt format (ColPali's queries).
    pub fn with_template(mut self, prefix: String, suffix: String) -> Self {
        self.template = Some((prefix, suffix));
        self
    }

    /// Pairs become one prompt through `template` (an LLM reranker's).
    pub fn with_pair_template(mut self, template: PairTemplate) -> Result<Self, ModelError> {
        let (prefix, suffix) = (self.encode_raw(&template.prefix)?.ids, self.encode_raw(&template.suffix)?.ids);
        self.pair_template = Some(Arc::new(PairPrompt { template, prefix, suffix }));
        Ok(self)
    }

    /// The id of a token in the vocabulary (special tokens included).
    pub fn token_id(&self, token: &str) -> Option<u32> {
        match &self.kind {
            Kind::HuggingFace(tok) => tok.token_to_id(token),
            Kind::Bytes => None,
        }
    }

    /// Tokenizes `text` as written, without special tokens or template (special tokens written out in the
    /// text, such as `<bos>`, still become their ids).
    pub fn encode_raw(&self, text: &str) -> Result<Encoded, ModelError> {
        match &self.kind {
            Kind::HuggingFace(tok) => {
                let enc = tok.encode_fast(text, false).map_err(|e| ModelError::Tokenizer(e.to_string()))?;
                Ok(Encoded { ids: enc.get_ids().to_vec(), type_ids: enc.get_type_ids().to_vec() })
            }
            Kind::Bytes => self.encode(text),
        }
    }

    /// A (query, document) pair in an LLM reranker's prompt with `instruction` in place of its own; an error
    /// for a model without such a prompt.
    pub fn encode_instructed_pair(
        &self,
        query: &str,
        document: &str,
        instruction: &str,
    ) -> Result<Encoded, ModelError> {
        match self.pair_template.as_deref() {
            Some(p) => self.encode_prompt(p, query, document, Some(instruction)),
            None => Err(ModelError::Tokenizer(
                "this model takes no instruction (only LLM rerankers, such as Qwen3-Reranker, have a prompt for one)"
                    .into(),
            )),
        }
    }

    fn encode_prompt(
        &self,
        p: &PairPrompt,
        query: &str,
        doc: &str,
        instruction: Option<&str>,
    ) -> Result<Encoded, ModelError> {
        let t = &p.template;
        let mut pieces = Vec::with_capacity(t.pieces.len());
        for piece in &t.pieces {
            let text = t.fill(piece, query, doc, instruction);
            let ids = if t.special_tokens { self.encode(&text)? } else { self.encode_raw(&text)? }.ids;
            let role = match (piece.contains("{document}"), piece.contains("{query}")) {
                (true, _) => Role::Document,
                (false, true) => Role::Query,
                (false, false) => Role::Fixed,
            };
            pieces.push((role, ids));
        }
        // The room the query and document pieces share, after the prefix, suffix and fixed pieces.
        let fixed: usize = pieces.iter().filter(|(r, _)| *r == Role::Fixed).map(|(_, ids)| ids.len()).sum();
        let room = self.window.saturating_sub(p.prefix.len() + p.suffix.len() + fixed);
        let has = |role| pieces.iter().any(|(r, _)| *r == role);
        let query_room = if has(Role::Query) && has(Role::Document) { room * 3 / 4 } else { room };
        let mut used = 0;
        for (role, limit) in [(Role::Query, query_room), (Role::Document, room)] {
            for (_, ids) in pieces.iter_mut().filter(|(r, _)| *r == role) {
                ids.truncate(limit.saturating_sub(used));
                used += ids.len();
            }
        }
        let body = pieces.into_iter().flat_map(|(_, ids)| ids);
        let ids: Vec<u32> = p.prefix.iter().copied().chain(body).chain(p.suffix.iter().copied()).collect();
        Ok(Encoded { type_ids: vec![0; ids.len()], ids })
    }

    /// Tokenizes a (query, document) pair with the tokenizer's pair template; when the two pass the
    /// window, the longer side is truncated first.
    pub fn encode_pair(&self, first: &str, second: &str) -> Result<Encoded, ModelError> {
        if let Some(p) = self.pair_template.as_deref() {
            return self.encode_prompt(p, first, second, p.template.instruction.as_deref());
        }
        match &self.kind {
            Kind::HuggingFace(tok) => {
                let enc = tok.encode_fast((first, second), true).map_err(|e| ModelError::Tokenizer(e.to_string()))?;
                Ok(Encoded { ids: enc.get_ids().to_vec(), type_ids: enc.get_type_ids().to_vec() })
            }
            Kind::Bytes => {
                let joined = format!("{first}\u{1f}{second}");
                self.encode(&joined)
            }
        }
    }

    /// Tokenizes one text with the model's special tokens, truncated to the window.
    pub fn encode(&self, text: &str) -> Result<Encoded, ModelError> {
        let text = if self.strip { text.trim() } else { text };
        if let (Some(rules), Kind::HuggingFace(tok)) = (&self.static_rules, &self.kind) {
            let text = match rules.char_limit {
                Some(n) => text.char_indices().nth(n).map_or(text, |(at, _)| &text[..at]),
                None => text,
            };
            let enc = tok.encode_fast(text, false).map_err(|e| ModelError::Tokenizer(e.to_string()))?;
            let ids: Vec<u32> = enc.get_ids().iter().copied().filter(|&id| Some(id) != rules.unk).collect();
            return Ok(Encoded { type_ids: vec![0; ids.len()], ids });
        }
        if let Some((prefix, suffix)) = &self.template {
            return self.encode_raw(&format!("{prefix}{text}{suffix}"));
        }
        match &self.kind {
            Kind::HuggingFace(tok) => {
                let enc = tok.encode_fast(text, true).map_err(|e| ModelError::Tokenizer(e.to_string()))?;
                Ok(Encoded { ids: enc.get_ids().to_vec(), type_ids: enc.get_type_ids().to_vec() })
            }
            Kind::Bytes => {
                let body = text.bytes().take(self.window - 2).map(|b| b as u32 + 3);
                let ids: Vec<u32> = std::iter::once(1).chain(body).chain(std::iter::once(2)).collect();
                Ok(Encoded { type_ids: vec![0; ids.len()], ids })
            }
        }
    }
}

/// A copy of `base` truncating at `max_length` from the start (or not at all), built once.
fn variant<'a>(
    slot: &'a OnceLock<Box<Tokenizer>>,
    base: &Tokenizer,
    max_length: Option<usize>,
) -> Result<&'a Tokenizer, ModelError> {
    if let Some(t) = slot.get() {
        return Ok(t);
    }
    let mut copy = base.clone();
    let params = max_length.map(|max_length| TruncationParams {
        max_length,
        strategy: TruncationStrategy::LongestFirst,
        stride: 0,
        direction: TruncationDirection::Left,
    });
    copy.with_truncation(params).map_err(|e| ModelError::Tokenizer(e.to_string()))?;
    Ok(slot.get_or_init(|| Box::new(copy)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pair_templates_fill_each_placeholder_once() {
        let t = PairTemplate {
            prefix: String::new(),
            pieces: vec!["<I>: {instruction} <Q>: {query} <D>: {document} {other}".into()],
            suffix: String::new(),
            instruction: Some("find {document}".into()),
            instruction_format: Some("[{instruction}]".into()),
            special_tokens: true,
        };
        let filled = t.fill(&t.pieces[0], "q {query}", "d", t.instruction.as_deref());
        assert_eq!(filled, "<I>: [find {document}] <Q>: q {query} <D>: d {other}");
        assert_eq!(t.fill("{instruction}<Q>: {query}", "q", "d", None), "<Q>: q");
        assert_eq!(t.fill("{instruction}<Q>: {query}", "q", "d", Some("")), "<Q>: q", "framed: empty is none");
        let bare = PairTemplate { instruction_format: None, ..t.clone() };
        assert_eq!(bare.fill("<I>: {instruction}|", "q", "d", Some("")), "<I>: |", "bare: kept as given");
    }

    #[test]
    fn byte_tokenizer_frames_and_truncates() {
        let t = TextTokenizer::bytes(5);
        assert_eq!(t.encode("ab").unwrap().ids, vec![1, 100, 101, 2]);
        assert_eq!(t.encode("abcdef").unwrap().len(), 5);
        assert_eq!(t.encode("").unwrap().ids, vec![1, 2]);
    }
}

#[cfg(test)]
mod pair_tests {
    use super::*;

    fn minilm_like() -> TextTokenizer {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../tests/fixtures/tiny/bert-rerank/tokenizer.json");
        TextTokenizer::from_file(&path, 8).unwrap()
    }

    #[test]
    fn truncation_options() {
        let t = minilm_like();
        let text = "one two three four five six seven eight nine ten";
        let right = t.encode(text).unwrap();
        assert_eq!(right.len(), 8);
        assert_eq!(t.encode_with(text, Truncation::default()).unwrap(), right);
        let left = t.encode_with(text, Truncation::new(true, true)).unwrap();
        assert_eq!(left.len(), 8);
        assert_eq!((left.ids[0], left.ids[7]), (right.ids[0], right.ids[7]), "the special tokens stay");
        let all = t.tokenize(text, false).unwrap();
        assert_eq!(&left.ids[1..7], &all.iter().map(|s| s.id).collect::<Vec<_>>()[all.len() - 6..]);
        match t.encode_with(text, Truncation::new(false, false)) {
            Err(ModelError::InputTooLong { tokens, window: 8 }) => assert_eq!(tokens, all.len() + 2),
            other => panic!("{other:?}"),
        }
        assert_eq!(t.encode_with("one two", Truncation::new(false, false)).unwrap().len(), 4);
        // A request's own cut below the window: 5 tokens, [CLS] and [SEP] among them, from either end.
        let five = Truncation { limit: Some(5), ..Truncation::default() };
        let cut = t.encode_with(text, five).unwrap();
        assert_eq!(cut.ids, [&right.ids[..4], &right.ids[7..]].concat());
        let cut_left = t.encode_with(text, Truncation { left: true, ..five }).unwrap();
        assert_eq!(cut_left.ids, [&left.ids[..1], &left.ids[4..]].concat());
        // A cut past the window is the window; without truncation the limit is ignored.
        assert_eq!(t.encode_with(text, Truncation { limit: Some(50), ..Truncation::default() }).unwrap(), right);
        assert!(t.encode_with(text, Truncation { limit: Some(5), ..Truncation::new(false, false) }).is_err());
        assert_eq!(t.from_ids(&[1, 2, 3, 4, 5, 6, 7, 8, 9], five).unwrap().ids, vec![1, 2, 3, 4, 5]);
    }

    #[test]
    fn tokenize_reports_byte_offsets_and_decode_inverts() {
        let t = minilm_like();
        let text = "née world and more words than the window holds";
        let spans = t.tokenize(text, true).unwrap();
        assert!(spans.len() > 8, "not cut to the window");
        assert!(spans[0].special && spans[0].span.is_none() && spans[0].text == "[CLS]");
        for s in spans.iter().filter(|s| !s.special) {
            let (start, stop) = s.span.unwrap();
            assert_eq!(text.as_bytes()[start..stop], *s.text.as_bytes());
        }
        let last = spans.iter().rev().find(|s| !s.special).unwrap();
        assert_eq!(last.span.unwrap().1, text.len(), "byte offsets: `é` counts two");
        let ids: Vec<u32> = spans.iter().map(|s| s.id).collect();
        assert!(t.decode(&ids, false).unwrap().starts_with("[CLS]"));
        assert!(!t.decode(&ids, true).unwrap().contains("[CLS]"));
        // Ids past the window are cut as the client asks, never silently out of the vocabulary.
        assert!(matches!(t.from_ids(&[1, 2, 40_000_000], Truncation::default()), Err(ModelError::BadTokenId { .. })));
        assert_eq!(t.from_ids(&[1, 2, 3, 4, 5, 6, 7, 8, 9], Truncation::new(true, true)).unwrap().ids[0], 2);
    }

    #[test]
    fn pairs_get_segment_ids_from_the_template() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../tests/fixtures/tiny/bert-rerank/tokenizer.json");
        let t = TextTokenizer::from_file(&path, 64).unwrap();
        let e = t.encode_pair("what is the capital of france", "Berlin").unwrap();
        assert_eq!(e.type_ids, vec![0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1]);
        let e = t.encode_pair("what is the capital of france", "").unwrap();
        assert_eq!(e.type_ids.iter().sum::<u32>(), 1);
    }
}
