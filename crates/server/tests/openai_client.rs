//! The official OpenAI Python SDK works against Aleph unchanged (tests/python/openai_embeddings.py).
//! Needs a Python with `openai` installed: `ALEPH_TEST_PYTHON`, else `python3` (scripts/test.sh sets it up).

mod common;

use common::{minilm, repo_root, Server};

#[test]
fn openai_python_sdk_embeddings() {
    let python = std::env::var("ALEPH_TEST_PYTHON").unwrap_or_else(|_| "python3".into());
    let s = Server::start(&["--model-id", &minilm(), "--served-model-name", "all-MiniLM-L6-v2", "--no-model-warmup"]);
    let script = repo_root().join("tests/python/openai_embeddings.py");
    for base in [format!("{}/v1", s.base), s.base.clone()] {
        let out = std::process::Command::new(&python)
            .arg(&script)
            .args([&base, "all-MiniLM-L6-v2"])
            .output()
            .unwrap_or_else(|e| panic!("running {python}: {e}"));
        assert!(
            out.status.success(),
            "OpenAI SDK against {base} failed (is `openai` installed for {python}? scripts/test.sh installs it):\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
