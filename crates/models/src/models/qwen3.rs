//! Qwen3-Reranker's prompt (the Qwen3 decoder itself is read by `models::llama`).

use crate::tokenizer::PairTemplate;

/// Qwen3-Reranker's default instruction (also a template file's, where `--rerank-instruction` gives none).
pub const DEFAULT_INSTRUCTION: &str = "Given a web search query, retrieve relevant passages that answer the query";

/// Qwen3-Reranker's prompt, as its model card builds it (with `instruction`, or the card's default).
pub fn reranker_template(instruction: Option<String>) -> PairTemplate {
    PairTemplate {
        prefix: "<|im_start|>system\nJudge whether the Document meets the requirements based on the Query and the \
                 Instruct provided. Note that the answer can only be \"yes\" or \"no\".<|im_end|>\n<|im_start|>user\n"
            .into(),
        pieces: vec!["<Instruct>: {instruction}\n<Query>: {query}\n<Document>: {document}".into()],
        suffix: "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n".into(),
        instruction: Some(instruction.unwrap_or_else(|| DEFAULT_INSTRUCTION.into())),
        instruction_format: None,
        special_tokens: true,
    }
}
