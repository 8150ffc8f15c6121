//! vLLM's chat form of `/v1/embeddings`: one conversation (OpenAI chat messages) rendered by the model's chat
//! template into one prompt, tokenized as vLLM does (no special tokens unless asked), and embedded as one
//! vector. Only text parts are taken: a model that reads images gets them through `modality: image` today.

use std::sync::Arc;

use aleph_engine::{Input, ModelHandle};
use aleph_models::chat_template::{ChatTemplate, RenderOptions};
use serde_json::Value;

use super::error::ApiError;
use super::schemas::EmbeddingRequest;
use super::state::AppState;
use super::validate::validate_text;

/// The conversation of `req` as one input of token ids.
pub async fn chat_input(
    state: &AppState,
    model: &Arc<ModelHandle>,
    req: &EmbeddingRequest,
) -> Result<Vec<Input>, ApiError> {
    let Some(messages) = &req.messages else {
        return Err(ApiError::unprocessable("no `messages`").with_param("messages"));
    };
    if !req.input.0.is_empty() {
        return Err(ApiError::unprocessable("give `input` or `messages`, not both").with_param("messages"));
    }
    if req.prompt_name.is_some() {
        return Err(ApiError::unprocessable(
            "`prompt_name` applies to `input`; with `messages` the chat template frames the text (a system message \
             carries an instruction)",
        )
        .with_param("prompt_name"));
    }
    if req.add_generation_prompt && req.continue_final_message {
        return Err(ApiError::unprocessable("add_generation_prompt and continue_final_message cannot both be true")
            .with_param("continue_final_message"));
    }
    check_messages(messages, state)?;
    if req.chat_template.is_none() && model.tokenizer().chat_template().is_none() {
        return Err(ApiError::bad_request(format!(
            "model `{}` ships no chat template (chat_template.jinja or tokenizer_config.json): send `input`, or a \
             `chat_template`",
            model.name()
        ))
        .with_param("messages"));
    }
    let opts = RenderOptions {
        add_generation_prompt: req.add_generation_prompt,
        continue_final_message: req.continue_final_message,
        extra: req.chat_template_kwargs.clone().unwrap_or_default(),
    };
    // The handle, not the tokenizer, goes to the pool: cloning a tokenizer copies its whole vocabulary.
    let job = model.clone();
    let (messages, add_special, own) = (messages.clone(), req.add_special_tokens, req.chat_template.clone());
    let ids = state
        .pool()
        .run(move || -> Result<Vec<u32>, String> {
            let tokenizer = job.tokenizer();
            // A request's own template is rendered with the model's special tokens, where its template names them.
            let prompt = match (own, tokenizer.chat_template()) {
                (Some(source), Some(t)) => t.with_source(source).render(&messages, &opts),
                (Some(source), None) => ChatTemplate::new(source, None, None).render(&messages, &opts),
                (None, Some(t)) => t.render(&messages, &opts),
                (None, None) => Err("the model ships no chat template".to_string()),
            }?;
            let ids = if add_special {
                tokenizer.tokenize(&prompt, true).map(|spans| spans.into_iter().map(|s| s.id).collect())
            } else {
                tokenizer.encode_raw(&prompt).map(|e| e.ids)
            };
            ids.map_err(|e| e.to_string())
        })
        .await
        .ok_or_else(|| ApiError::bad_request("rendering the messages failed").with_param("messages"))?
        .map_err(|e| ApiError::bad_request(e).with_param("messages"))?;
    if ids.is_empty() {
        return Err(ApiError::unprocessable("the messages render to no tokens").with_param("messages"));
    }
    Ok(vec![Input::Ids(ids)])
}

/// A list of `{role, content}` whose content is a string or a list of text parts; any other part is refused,
/// naming it.
fn check_messages(messages: &Value, state: &AppState) -> Result<(), ApiError> {
    let bad = |at: String, what: &str| Err(ApiError::unprocessable(format!("`{at}` {what}")).with_param(at));
    let Some(list) = messages.as_array() else {
        return bad("messages".into(), "must be a list of chat messages (one conversation)");
    };
    if list.is_empty() {
        return bad("messages".into(), "must hold at least one message");
    }
    for (i, m) in list.iter().enumerate() {
        if m.get("role").and_then(Value::as_str).is_none() {
            return bad(format!("messages[{i}].role"), "must be a string");
        }
        match m.get("content") {
            Some(Value::String(text)) => {
                validate_text(&format!("messages[{i}].content"), text.clone(), &state.limits)?;
            }
            Some(Value::Array(parts)) => {
                for (j, part) in parts.iter().enumerate() {
                    let at = format!("messages[{i}].content[{j}]");
                    match part.get("type").and_then(Value::as_str) {
                        Some("text") => match part.get("text") {
                            Some(Value::String(text)) => {
                                validate_text(&format!("{at}.text"), text.clone(), &state.limits)?;
                            }
                            _ => return bad(format!("{at}.text"), "must be a string"),
                        },
                        Some(kind) => {
                            return Err(ApiError::bad_request(format!(
                                "`{at}` is a `{kind}` part: chat messages are embedded from their text parts only \
                                 (send images with `modality: image` to a model that reads them)"
                            ))
                            .with_param(at))
                        }
                        None => return bad(at, "must have a `type`"),
                    }
                }
            }
            Some(Value::Null) | None => {}
            Some(_) => return bad(format!("messages[{i}].content"), "must be a string or a list of parts"),
        }
    }
    Ok(())
}
