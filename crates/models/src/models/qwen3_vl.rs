//! Qwen3-VL-Embedding's and Qwen3-VL-Reranker's prompts on text (the language model itself is Qwen3's layers,
//! read by `models::llama` as `Family::Qwen3Vl`). Each text goes into the chat frame their reference code
//! (QwenLM/Qwen3-VL-Embedding's `Qwen3VLEmbedder` and `Qwen3VLReranker`) renders with the model's chat
//! template and `add_generation_prompt=True`.

use std::collections::BTreeMap;

use unicode_categories::UnicodeCategories;

use crate::st_config::Prompts;
use crate::tokenizer::PairTemplate;

/// The embedder's instruction when a request names none (`Qwen3VLEmbedder`'s `default_instruction`).
pub const EMBEDDING_INSTRUCTION: &str = "Represent the user's input.";
/// The instruction the model card gives queries.
pub const QUERY_INSTRUCTION: &str = "Retrieve images or text relevant to the user's query.";
/// What follows the text: the user's turn closed and the assistant's opened (the generation prompt).
pub const EMBEDDING_SUFFIX: &str = "<|im_end|>\n<|im_start|>assistant\n";
/// The reference embedder's token cap (`MAX_LENGTH`).
pub const EMBEDDING_MAX_LENGTH: usize = 8192;
/// The reference reranker's (`Qwen3VLReranker`'s `MAX_LENGTH`; it keeps the frame's last tokens beyond it).
pub const RERANK_MAX_LENGTH: usize = 10240;

/// The reranker's instruction when a request gives none (`Qwen3VLReranker`'s default).
pub const RERANK_INSTRUCTION: &str = "Given a search query, retrieve relevant candidates that answer the query.";

/// Qwen3-VL-Reranker's prompt for a text query and document: its system message, then the user's turn of
/// text parts `<Instruct>: {instruction}`, `<Query>:`, the query, `\n<Document>:`, the document (the chat
/// template joins parts with nothing between), then the generation prompt.
pub fn reranker_template(instruction: Option<String>) -> PairTemplate {
    super::qwen3::judge_template(
        "<Instruct>: {instruction}<Query>:{query}\n<Document>:{document}",
        EMBEDDING_SUFFIX,
        instruction.unwrap_or_else(|| RERANK_INSTRUCTION.into()),
        false,
    )
}

/// The frame up to the user's text with `instruction` as the system message (an empty one is the default, as
/// the reference's `instruction or default_instruction`).
pub fn embedding_prefix(instruction: &str) -> String {
    let instruction = match with_final_punctuation(instruction) {
        empty if empty.is_empty() => EMBEDDING_INSTRUCTION.to_string(),
        given => given,
    };
    format!("<|im_start|>system\n{instruction}<|im_end|>\n<|im_start|>user\n")
}

/// The embedder's named prompts: `document` (the default instruction, used when a request names none) and
/// `query` (the model card's retrieval instruction).
pub fn embedding_prompts() -> Prompts {
    let prompts = BTreeMap::from([
        ("document".to_string(), embedding_prefix(EMBEDDING_INSTRUCTION)),
        ("query".to_string(), embedding_prefix(QUERY_INSTRUCTION)),
    ]);
    Prompts { prompts, default_prompt_name: Some("document".into()) }
}

/// The reference's rule for an instruction: stripped, and given a full stop unless it ends in punctuation
/// (any Unicode `P*` category, as `unicodedata.category(c).startswith('P')`).
pub fn with_final_punctuation(instruction: &str) -> String {
    let instruction = instruction.trim();
    match instruction.chars().last() {
        Some(c) if c.is_punctuation() => instruction.to_string(),
        Some(_) => format!("{instruction}."),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_instruction_gets_a_full_stop_unless_it_ends_in_punctuation() {
        assert_eq!(with_final_punctuation(" Find the answer "), "Find the answer.");
        assert_eq!(with_final_punctuation("Find it!"), "Find it!");
        assert_eq!(with_final_punctuation("Find it)"), "Find it)");
        // Symbols (Unicode S*) are not punctuation.
        assert_eq!(with_final_punctuation("a + b = c"), "a + b = c.");
        assert_eq!(with_final_punctuation("找到它。"), "找到它。");
        assert_eq!(with_final_punctuation("¿Dónde está?"), "¿Dónde está?");
        assert_eq!(with_final_punctuation("quote»"), "quote»");
        assert_eq!(embedding_prefix("  "), embedding_prefix(EMBEDDING_INSTRUCTION), "empty: the default");
        let p = embedding_prompts();
        assert_eq!(p.default_prompt_name.as_deref(), Some("document"));
        assert_eq!(
            p.get("query").unwrap(),
            "<|im_start|>system\nRetrieve images or text relevant to the user's query.<|im_end|>\n<|im_start|>user\n"
        );
    }
}
