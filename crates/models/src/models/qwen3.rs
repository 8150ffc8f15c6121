//! Qwen3-Reranker's prompt (the Qwen3 decoder itself is read by `models::llama`).

use crate::tokenizer::PairTemplate;

/// Qwen3-Reranker's default instruction (also a template file's, where `--rerank-instruction` gives none).
pub const DEFAULT_INSTRUCTION: &str = "Given a web search query, retrieve relevant passages that answer the query";

/// Qwen3-Reranker's prompt, as its model card builds it (with `instruction`, or the card's default).
pub fn reranker_template(instruction: Option<String>) -> PairTemplate {
    judge_template(
        "<Instruct>: {instruction}\n<Query>: {query}\n<Document>: {document}",
        "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n",
        instruction.unwrap_or_else(|| DEFAULT_INSTRUCTION.into()),
        true,
    )
}

/// The Qwen rerankers' frame (Qwen3-Reranker's, Qwen3-VL-Reranker's): the system message asking for "yes" or
/// "no", the user's turn holding `body` (one piece, filled with the instruction, query and document), `suffix`.
pub fn judge_template(body: &str, suffix: &str, instruction: String, special_tokens: bool) -> PairTemplate {
    PairTemplate {
        prefix: "<|im_start|>system\nJudge whether the Document meets the requirements based on the Query and the \
                 Instruct provided. Note that the answer can only be \"yes\" or \"no\".<|im_end|>\n<|im_start|>user\n"
            .into(),
        pieces: vec![body.into()],
        suffix: suffix.into(),
        instruction: Some(instruction),
        instruction_format: None,
        special_tokens,
    }
}
