//! A model's chat template, rendered as transformers' `apply_chat_template(..., tokenize=False)` renders it:
//! the Jinja of `chat_template.jinja` (or `tokenizer_config.json`'s `chat_template`, or a processor's
//! `chat_template.json`) over `messages`, with `add_generation_prompt`, the special tokens and any extra
//! variables, Python's string methods available as transformers' sandbox has them.

use std::path::Path;

use minijinja::value::Serde;
use minijinja::{Environment, ErrorKind, Value};
use serde::Serialize;

use crate::tokenizer::SpecialTokens;

/// The template's source and the special tokens it may name.
#[derive(Debug, Clone)]
pub struct ChatTemplate {
    source: String,
    bos_token: Option<String>,
    eos_token: Option<String>,
}

/// What a render is given besides the messages.
#[derive(Debug, Clone, Default)]
pub struct RenderOptions {
    pub add_generation_prompt: bool,
    /// vLLM's `continue_final_message`: the last message left open (its end-of-turn cut off).
    pub continue_final_message: bool,
    /// `chat_template_kwargs`: more variables for the template.
    pub extra: serde_json::Map<String, serde_json::Value>,
}

impl ChatTemplate {
    /// The template in `dir`, if the checkpoint has one (the default one where `tokenizer_config.json` lists
    /// several by name).
    pub fn read(dir: &Path) -> Option<ChatTemplate> {
        let from_config = |name: &str| -> Option<serde_json::Value> {
            let text = std::fs::read_to_string(dir.join(name)).ok()?;
            serde_json::from_str::<serde_json::Value>(&text).ok()?.get("chat_template").cloned()
        };
        let source = std::fs::read_to_string(dir.join("chat_template.jinja"))
            .ok()
            .or_else(|| from_config("tokenizer_config.json").and_then(|v| pick_default(&v)))
            .or_else(|| from_config("chat_template.json").and_then(|v| pick_default(&v)))?;
        let special = SpecialTokens::read(dir).unwrap_or_default();
        Some(ChatTemplate::new(source, special.bos_token, special.eos_token))
    }

    pub fn new(source: String, bos_token: Option<String>, eos_token: Option<String>) -> Self {
        ChatTemplate { source, bos_token, eos_token }
    }

    /// Another template's `source` with this one's special tokens (a request's own template).
    pub fn with_source(&self, source: String) -> ChatTemplate {
        ChatTemplate { source, ..self.clone() }
    }

    /// `messages` rendered into one prompt; a template error names what went wrong (as a client error: the
    /// messages are the client's).
    pub fn render(&self, messages: &serde_json::Value, opts: &RenderOptions) -> Result<String, String> {
        render(&self.source, messages, opts, self.bos_token.as_deref(), self.eos_token.as_deref())
    }
}

/// A `chat_template` value: a string, or a list of `{name, template}` of which `default` is the one used.
fn pick_default(value: &serde_json::Value) -> Option<String> {
    match value {
        serde_json::Value::String(s) => Some(s.clone()),
        serde_json::Value::Array(named) => named
            .iter()
            .find(|t| t.get("name").and_then(|n| n.as_str()) == Some("default"))
            .and_then(|t| t.get("template")?.as_str().map(str::to_string)),
        _ => None,
    }
}

/// Renders `source` (a request's own `chat_template`, or a model's).
pub fn render(
    source: &str,
    messages: &serde_json::Value,
    opts: &RenderOptions,
    bos_token: Option<&str>,
    eos_token: Option<&str>,
) -> Result<String, String> {
    let mut env = Environment::new();
    // transformers' sandbox: blocks trimmed and stripped, Python's methods on strings, dicts and lists.
    let syntax = minijinja::syntax::SyntaxConfig::builder().trim_blocks(true).lstrip_blocks(true).build();
    env.set_syntax(syntax.map_err(|e| e.to_string())?);
    env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
    env.add_function("raise_exception", |message: String| -> Result<Value, minijinja::Error> {
        Err(minijinja::Error::new(ErrorKind::InvalidOperation, message))
    });
    env.add_template("chat", source).map_err(|e| format!("the chat template does not parse: {e}"))?;
    let template = env.get_template("chat").map_err(|e| e.to_string())?;
    #[derive(Serialize)]
    struct Context<'a> {
        messages: &'a serde_json::Value,
        add_generation_prompt: bool,
        bos_token: &'a str,
        eos_token: &'a str,
    }
    let base = Value::from(Serde(Context {
        messages,
        add_generation_prompt: opts.add_generation_prompt,
        bos_token: bos_token.unwrap_or_default(),
        eos_token: eos_token.unwrap_or_default(),
    }));
    let ctx = minijinja::context! { ..Value::from(Serde(&opts.extra)), ..base };
    let mut rendered = template.render(ctx).map_err(|e| format!("rendering the chat template: {e}"))?;
    if opts.continue_final_message {
        // As transformers does: the prompt ends where the last message's own text ends.
        let last = messages.as_array().and_then(|m| m.last()).and_then(last_text).unwrap_or_default();
        let trimmed = last.trim();
        match rendered.rfind(trimmed) {
            Some(at) if !trimmed.is_empty() => rendered.truncate(at + trimmed.len()),
            _ => return Err("continue_final_message: the last message's text is not in the rendered prompt".into()),
        }
    }
    Ok(rendered)
}

/// The text of a message: its string content, or its last text part.
fn last_text(message: &serde_json::Value) -> Option<String> {
    match message.get("content")? {
        serde_json::Value::String(s) => Some(s.clone()),
        serde_json::Value::Array(parts) => {
            parts.iter().rev().find_map(|p| p.get("text").and_then(|t| t.as_str()).map(str::to_string))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const QWEN: &str = "{%- for m in messages %}{{- '<|im_start|>' + m.role + '\\n' }}{%- if m.content is string %}\
        {{- m.content }}{%- else %}{%- for c in m.content %}{%- if 'text' in c %}{{- c.text }}{%- endif %}\
        {%- endfor %}{%- endif %}{{- '<|im_end|>\\n' }}{%- endfor %}\
        {%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}";

    #[test]
    fn messages_render_as_transformers_does() {
        let messages = json!([
            {"role": "system", "content": [{"type": "text", "text": "Represent the user's input."}]},
            {"role": "user", "content": [{"type": "text", "text": "hello "}, {"type": "text", "text": "world"}]}
        ]);
        let t = ChatTemplate::new(QWEN.into(), None, None);
        let opts = RenderOptions { add_generation_prompt: true, ..Default::default() };
        assert_eq!(
            t.render(&messages, &opts).unwrap(),
            "<|im_start|>system\nRepresent the user's input.<|im_end|>\n<|im_start|>user\nhello world<|im_end|>\n\
             <|im_start|>assistant\n"
        );
        let open = RenderOptions { continue_final_message: true, ..Default::default() };
        assert!(t.render(&messages, &open).unwrap().ends_with("user\nhello world"));
    }

    #[test]
    fn python_string_methods_and_raise_exception_work() {
        let src = "{% if not messages[0].content.startswith('ok') %}{{ raise_exception('bad start') }}{% endif %}\
                   {{ messages[0].content.strip().upper() }}|{{ bos_token }}";
        let t = ChatTemplate::new(src.into(), Some("<s>".into()), None);
        let out = t.render(&json!([{"role": "user", "content": " ok then "}]), &RenderOptions::default());
        assert!(out.unwrap_err().contains("bad start"));
        let out = t.render(&json!([{"role": "user", "content": "ok then "}]), &RenderOptions::default()).unwrap();
        assert_eq!(out, "OK THEN|<s>");
    }
}
