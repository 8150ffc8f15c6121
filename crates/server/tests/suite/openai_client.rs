//! The official OpenAI Python SDK works against Aleph unchanged (tests/python/openai_embeddings.py).
//! Needs a Python with `openai` installed: `ALEPH_TEST_PYTHON`, else `python3` (scripts/test.sh sets it up).

use crate::common;

use common::{minilm, repo_root, Server};

fn run_script(python: &str, script: &str, args: &[&str]) {
    let out = std::process::Command::new(python)
        .arg(repo_root().join("tests/python").join(script))
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("running {python}: {e}"));
    assert!(
        out.status.success(),
        "{script} {args:?} failed (is `openai` installed for {python}? scripts/test.sh installs it):\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn openai_python_sdk_embeddings() {
    let python = std::env::var("ALEPH_TEST_PYTHON").unwrap_or_else(|_| "python3".into());
    let s = Server::start(&["--model-id", &minilm(), "--served-model-name", "all-MiniLM-L6-v2", "--no-model-warmup"]);
    for base in [format!("{}/v1", s.base), s.base.clone()] {
        run_script(&python, "openai_embeddings.py", &[&base, "all-MiniLM-L6-v2"]);
    }
}

#[test]
fn openai_python_sdk_images_through_extra_body() {
    let python = std::env::var("ALEPH_TEST_PYTHON").unwrap_or_else(|_| "python3".into());
    let dir = repo_root().join("tests/fixtures/tiny/clip");
    let s = Server::start(&["--model-id", dir.to_str().unwrap(), "--served-model-name", "clip", "--no-model-warmup"]);
    let image = repo_root().join("tests/fixtures/tiny/media/wide.png");
    run_script(&python, "openai_images.py", &[&format!("{}/v1", s.base), "clip", image.to_str().unwrap()]);
}
