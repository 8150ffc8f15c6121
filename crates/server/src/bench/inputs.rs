//! Texts of a given length in a model's own tokens, cut from real sentences (not repeated filler, which
//! some tokenizers compress into a few tokens).

use aleph_models::{ModelError, TextTokenizer};

/// `count` distinct texts of `tokens` tokens each for `tok`, special tokens included (shorter when the
/// corpus cannot fill them), each starting at a different corpus sentence.
pub fn texts_of_length(
    tok: &TextTokenizer,
    corpus: &[String],
    tokens: usize,
    count: usize,
) -> Result<Vec<String>, ModelError> {
    let specials = tok.tokenize("", true)?.len();
    let body = tokens.saturating_sub(specials).max(1);
    let mut out = Vec::with_capacity(count);
    for i in 0..count {
        let start = (i * 7) % corpus.len().max(1);
        let mut text = String::new();
        let mut next = start;
        // Enough sentences for `body` tokens (about 4 bytes a token in English), then cut at the token.
        loop {
            while text.len() < 6 * body + 16 && next < start + corpus.len() {
                if !text.is_empty() {
                    text.push(' ');
                }
                text.push_str(corpus[next % corpus.len()].trim());
                next += 1;
            }
            let spans = tok.tokenize(&text, false)?;
            if spans.len() >= body || next >= start + corpus.len() {
                let keep = spans.len().min(body);
                let end = match keep.checked_sub(1).map(|k| &spans[k]) {
                    None => 0,
                    // Tokenizers without offsets (the debug engine's bytes) take one byte per token.
                    Some(span) => span.span.map_or(keep, |(_, stop)| stop),
                };
                out.push(cut_at(&text, end).to_string());
                break;
            }
            // Denser text than expected: take more sentences.
            let more = text.len() * 2;
            while text.len() < more && next < start + corpus.len() {
                text.push(' ');
                text.push_str(corpus[next % corpus.len()].trim());
                next += 1;
            }
        }
    }
    Ok(out)
}

/// `text` up to byte `end`, moved back to a character boundary.
fn cut_at(text: &str, end: usize) -> &str {
    let mut end = end.min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuts_on_character_boundaries() {
        assert_eq!(cut_at("héllo", 2), "h");
        assert_eq!(cut_at("héllo", 3), "hé");
        assert_eq!(cut_at("abc", 10), "abc");
    }

    #[test]
    fn byte_tokenizer_texts_have_the_asked_length() {
        let tok = TextTokenizer::bytes(512);
        let corpus: Vec<String> = ["A man is playing a guitar.", "Two dogs run on the beach."].map(String::from).into();
        let specials = tok.tokenize("", true).unwrap().len();
        let texts = texts_of_length(&tok, &corpus, 40, 3).unwrap();
        assert_eq!(texts.len(), 3);
        for t in &texts {
            assert_eq!(tok.tokenize(t, true).unwrap().len(), 40.max(specials + 1), "{t:?}");
        }
        assert_ne!(texts[0], texts[1]);
    }
}
