//! Checks shared by the inference routes, run before any work is queued.

use aleph_engine::{Input, ModelHandle};

use super::error::ApiError;
use super::schemas::{InputItem, InputItems};
use super::state::Limits;

/// 400 unless the model has `capability`, naming what it can do instead.
pub fn require_capability(model: &ModelHandle, requested: &str, capability: &str, param: &str) -> Result<(), ApiError> {
    let caps = model.info().capabilities();
    if caps.contains(&capability) {
        return Ok(());
    }
    Err(ApiError::bad_request(format!(
        "model `{requested}` does not support `{capability}`; it supports: {}",
        caps.join(", ")
    ))
    .with_param(param))
}

/// Strips each text (as Infinity does) and enforces the count and length limits (422).
pub fn validate_texts(field: &str, texts: Vec<String>, limits: &Limits) -> Result<Vec<String>, ApiError> {
    check_count(field, texts.len(), limits)?;
    texts.into_iter().enumerate().map(|(i, t)| validate_text(&format!("{field}[{i}]"), t, limits)).collect()
}

/// Texts and token-id inputs of `/embeddings`: the count limit, each text as [`validate_text`], each
/// id list non-empty (ids themselves are checked against the vocabulary by the tokenizer).
pub fn validate_inputs(field: &str, items: InputItems, limits: &Limits) -> Result<Vec<Input>, ApiError> {
    check_count(field, items.0.len(), limits)?;
    items
        .0
        .into_iter()
        .enumerate()
        .map(|(i, item)| match item {
            InputItem::Text(t) => validate_text(&format!("{field}[{i}]"), t, limits).map(Input::Text),
            InputItem::Ids(ids) if ids.is_empty() => {
                Err(ApiError::unprocessable(format!("`{field}[{i}]` is an empty list of token ids"))
                    .with_param(format!("{field}[{i}]")))
            }
            InputItem::Ids(ids) => Ok(Input::Ids(ids)),
        })
        .collect()
}

fn check_count(field: &str, n: usize, limits: &Limits) -> Result<(), ApiError> {
    if n == 0 {
        return Err(ApiError::unprocessable(format!("`{field}` must hold at least 1 item")).with_param(field));
    }
    if n > limits.max_client_batch_size {
        return Err(ApiError::unprocessable(format!(
            "`{field}` holds {n} items; at most {} are allowed per request",
            limits.max_client_batch_size
        ))
        .with_param(field));
    }
    Ok(())
}

/// Checks a list of media references (data URIs or http(s) URLs) against the count limit and their
/// form (422), before anything is fetched.
pub fn validate_media(field: &str, sources: Vec<String>, limits: &Limits) -> Result<Vec<String>, ApiError> {
    let max = limits.max_media_items;
    if sources.is_empty() || sources.len() > max {
        return Err(ApiError::unprocessable(format!(
            "`{field}` holds {} items; between 1 and {max} images or audio clips are allowed per request",
            sources.len()
        ))
        .with_param(field));
    }
    for (i, s) in sources.iter().enumerate() {
        let s = s.trim();
        let data = s.get(..5).is_some_and(|p| p.eq_ignore_ascii_case("data:"));
        let url = url::Url::parse(s).is_ok_and(|u| matches!(u.scheme(), "http" | "https") && u.host().is_some());
        if !data && !url {
            return Err(ApiError::unprocessable(format!(
                "`{field}[{i}]` is neither a data URI (data:<type>;base64,...) nor an http(s) URL"
            ))
            .with_param(format!("{field}[{i}]")));
        }
    }
    Ok(sources)
}

/// Strips one text and enforces the length limit.
pub fn validate_text(field: &str, text: String, limits: &Limits) -> Result<String, ApiError> {
    let stripped = text.trim();
    let chars = stripped.chars().count();
    if chars > limits.max_string_chars {
        return Err(ApiError::unprocessable(format!(
            "`{field}` has {chars} characters; at most {} are allowed",
            limits.max_string_chars
        ))
        .with_param(field));
    }
    Ok(if stripped.len() == text.len() { text } else { stripped.to_string() })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn texts_are_stripped_and_limited() {
        let limits = Limits { max_client_batch_size: 2, max_string_chars: 5, max_media_items: 1, max_json_depth: 8 };
        assert_eq!(validate_texts("input", vec![" ab ".into()], &limits).unwrap(), vec!["ab"]);
        assert_eq!(validate_texts("input", vec![], &limits).unwrap_err().status.as_u16(), 422);
        assert_eq!(validate_texts("input", vec!["a".into(); 3], &limits).unwrap_err().status.as_u16(), 422);
        let e = validate_texts("documents", vec!["ok".into(), "toolong".into()], &limits).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("documents[1]"));
    }

    #[test]
    fn media_must_be_data_uris_or_web_urls() {
        let limits = Limits { max_client_batch_size: 8, max_string_chars: 5, max_media_items: 2, max_json_depth: 8 };
        let ok = vec!["data:image/png;base64,AA==".to_string(), "https://example.com/a.png".to_string()];
        assert!(validate_media("input", ok, &limits).is_ok());
        for bad in ["file:///etc/passwd", "/tmp/x.png", "ftp://host/x", "https://"] {
            let e = validate_media("input", vec![bad.to_string()], &limits).unwrap_err();
            assert_eq!(e.status.as_u16(), 422, "{bad}");
        }
        assert_eq!(validate_media("input", vec!["data:,".into(); 3], &limits).unwrap_err().status.as_u16(), 422);
    }
}
