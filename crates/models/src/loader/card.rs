//! The model card (`README.md`): its YAML front matter names the hub's `pipeline_tag`, which is how a causal
//! LM checkpoint says it was trained as a reranker (`text-ranking`: Qwen3-Reranker, mxbai-rerank-v2).

use std::path::Path;

/// The card's text, if the folder has one.
pub fn read(dir: &Path) -> Option<String> {
    std::fs::read_to_string(dir.join("README.md")).ok()
}

/// The value of a top-level `key:` in the card's front matter (between its opening and closing `---`).
pub fn front_matter<'a>(card: &'a str, key: &str) -> Option<&'a str> {
    let mut lines = card.lines();
    if lines.next()?.trim_end() != "---" {
        return None;
    }
    lines
        .take_while(|l| l.trim_end() != "---")
        .filter_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
        .map(|v| v.trim().trim_matches(|c| c == '"' || c == '\'').trim())
        .next()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_top_level_keys_of_the_front_matter_only() {
        let card = "---\nlicense: apache-2.0\npipeline_tag: \"text-ranking\"\ntags:\n- pipeline_tag: x\n---\npipeline_tag: no\n";
        assert_eq!(front_matter(card, "pipeline_tag"), Some("text-ranking"));
        assert_eq!(front_matter(card, "license"), Some("apache-2.0"));
        assert_eq!(front_matter(card, "library_name"), None);
        assert_eq!(front_matter("pipeline_tag: text-ranking\n", "pipeline_tag"), None);
        assert_eq!(front_matter("---\nlicense: mit\n---\npipeline_tag: text-ranking", "pipeline_tag"), None);
    }
}
