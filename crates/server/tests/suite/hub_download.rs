//! Model resolution through the HuggingFace hub protocol, against a local server that serves the hub's
//! file layout (`/api/models/{id}/revision/{rev}` and `/{id}/resolve/{rev}/{file}` with range requests).

use crate::common;

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use common::{cosine, floats, Server};
use serde_json::json;

const SHA: &str = "0123456789abcdef0123456789abcdef01234567";
const FILES: &[&str] = &[
    "config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "model.safetensors",
    "modules.json",
    "sentence_bert_config.json",
    "1_Pooling/config.json",
    "vocab.txt",
    "README.md",
];

/// A repository that ships only PyTorch pickles, in shards (tests/fixtures/tiny/distilbert-classify).
const PICKLED: &str = "aleph-test/distilbert-classify";
/// BGE-M3 as BAAI ships it: its sparse and ColBERT heads as `.pt` pickles beside the weights.
const BGE_M3: &str = "aleph-test/bge-m3";

#[derive(Clone)]
struct Hub {
    dir: PathBuf,
    /// Repositories served as tiny fixtures' folders: (repository id, folder).
    fixtures: Vec<(&'static str, PathBuf)>,
    log: Arc<Mutex<Vec<String>>>,
}

impl Hub {
    fn fixture(&self, org: &str, name: &str) -> Option<&PathBuf> {
        self.fixtures.iter().find(|(id, _)| *id == format!("{org}/{name}")).map(|(_, dir)| dir)
    }

    fn dir(&self, org: &str, name: &str) -> &PathBuf {
        self.fixture(org, name).unwrap_or(&self.dir)
    }
}

/// Every file under `dir`, as paths relative to it.
fn files_under(dir: &std::path::Path, prefix: &str) -> Vec<String> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        let name = format!("{prefix}{}", e.file_name().into_string().unwrap());
        if e.file_type().unwrap().is_dir() {
            out.extend(files_under(&e.path(), &format!("{name}/")));
        } else {
            out.push(name);
        }
    }
    out
}

async fn info(
    State(hub): State<Hub>,
    Path((org, name, rev)): Path<(String, String, String)>,
    headers: HeaderMap,
) -> Response {
    hub.log.lock().unwrap().push(format!("info {org}/{name}@{rev} auth={:?}", headers.get(header::AUTHORIZATION)));
    if let Some(dir) = hub.fixture(&org, &name) {
        let siblings: Vec<_> = files_under(dir, "").into_iter().map(|f| json!({"rfilename": f})).collect();
        return Json(json!({"sha": SHA, "siblings": siblings})).into_response();
    }
    if org != "sentence-transformers" || name != "all-MiniLM-L6-v2" {
        return (StatusCode::NOT_FOUND, "Repository not found").into_response();
    }
    let mut siblings: Vec<_> = FILES.iter().map(|f| json!({"rfilename": f})).collect();
    siblings.push(json!({"rfilename": "pytorch_model.bin"}));
    siblings.push(json!({"rfilename": "onnx/model.onnx"}));
    Json(json!({"sha": SHA, "siblings": siblings})).into_response()
}

async fn resolve(
    State(hub): State<Hub>,
    Path((org, name, _rev, file)): Path<(String, String, String, String)>,
    headers: HeaderMap,
) -> Response {
    hub.log.lock().unwrap().push(format!("get {org}/{name}/{file}"));
    let Ok(bytes) = std::fs::read(hub.dir(&org, &name).join(&file)) else {
        return (StatusCode::NOT_FOUND, "Entry not found").into_response();
    };
    let size = bytes.len();
    let mut out = HeaderMap::new();
    out.insert("x-repo-commit", SHA.parse().unwrap());
    out.insert(header::ETAG, format!("\"etag-{}\"", file.replace('/', "-")).parse().unwrap());
    let range = headers.get(header::RANGE).and_then(|v| v.to_str().ok()).and_then(|r| r.strip_prefix("bytes="));
    let Some(range) = range else {
        return (StatusCode::OK, out, bytes).into_response();
    };
    let (start, end) = range.split_once('-').unwrap();
    let start: usize = start.parse().unwrap();
    let end: usize = if end.is_empty() { size - 1 } else { end.parse::<usize>().unwrap().min(size - 1) };
    out.insert(header::CONTENT_RANGE, format!("bytes {start}-{end}/{size}").parse().unwrap());
    (StatusCode::PARTIAL_CONTENT, out, bytes[start..=end].to_vec()).into_response()
}

/// Starts the fake hub on a background thread; returns its URL and request log.
fn start_hub() -> (String, Arc<Mutex<Vec<String>>>) {
    let tiny = common::repo_root().join("tests/fixtures/tiny");
    let fixtures = vec![(PICKLED, tiny.join("distilbert-classify")), (BGE_M3, tiny.join("bge-m3"))];
    let hub = Hub { dir: common::minilm_dir(), fixtures, log: Arc::new(Mutex::new(Vec::new())) };
    let log = hub.log.clone();
    let app = Router::new()
        .route("/api/models/{org}/{name}/revision/{rev}", get(info))
        .route("/{org}/{name}/resolve/{rev}/{*file}", get(resolve))
        .with_state(hub);
    (common::serve_router(app), log)
}

fn hello_reference() -> Vec<f32> {
    let reference: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(common::repo_root().join("tests/fixtures/minilm/reference.json")).unwrap(),
    )
    .unwrap();
    floats(&reference["vectors"][1]) // "Hello world"
}

#[test]
fn downloads_from_the_hub_then_serves_from_the_cache_offline() {
    let (endpoint, log) = start_hub();
    let home = std::env::temp_dir().join(format!("aleph-hf-home-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&home);
    let home_s = home.to_string_lossy().into_owned();
    let id = "sentence-transformers/all-MiniLM-L6-v2";
    let env = [("HF_HOME", home_s.as_str()), ("HF_ENDPOINT", endpoint.as_str()), ("HF_TOKEN", "hf_test_token")];

    let s = Server::start_with_env(&["--model-id", id, "--no-model-warmup"], &env);
    let body = s.post_json("/embeddings", &json!({"input": "Hello world"})).json();
    assert_eq!(body["model"], id, "served under the hub id");
    assert!(cosine(&floats(&body["data"][0]["embedding"]), &hello_reference()) >= 0.9999);
    drop(s);

    let requests = log.lock().unwrap().clone();
    assert!(requests.iter().any(|r| r.contains("hf_test_token")), "HF_TOKEN is sent: {requests:?}");
    assert!(requests.iter().any(|r| r.ends_with("/model.safetensors")));
    assert!(!requests.iter().any(|r| r.contains("pytorch_model.bin") || r.contains("onnx")), "{requests:?}");
    let snapshot = home.join("hub/models--sentence-transformers--all-MiniLM-L6-v2/snapshots").join(SHA);
    assert!(snapshot.join("1_Pooling/config.json").exists(), "hub cache layout");

    // Offline: the cache alone serves it, and the hub is not asked.
    let before = log.lock().unwrap().len();
    let offline = [("HF_HOME", home_s.as_str()), ("HF_ENDPOINT", endpoint.as_str()), ("HF_HUB_OFFLINE", "1")];
    let s = Server::start_with_env(&["--model-id", id, "--no-model-warmup"], &offline);
    assert_eq!(s.post_json("/embeddings", &json!({"input": "Hello world"})).status, 200);
    drop(s);
    // A commit hash as --revision finds the same snapshot.
    let s = Server::start_with_env(&["--model-id", id, "--revision", SHA, "--no-model-warmup"], &offline);
    drop(s);
    assert_eq!(log.lock().unwrap().len(), before, "no hub traffic when offline");

    // Offline and not cached: a clear error naming the model.
    let e = Server::try_start(&["--model-id", "org/missing", "--no-model-warmup"], &offline).err().unwrap();
    assert!(e.contains("org/missing") && e.contains("HF_HUB_OFFLINE"), "{e}");
    // Online but unknown to the hub.
    let e = Server::try_start(&["--model-id", "org/missing", "--no-model-warmup"], &env).err().unwrap();
    assert!(e.contains("org/missing"), "{e}");

    // HF_HUB_CACHE takes precedence over HF_HOME.
    let cache = home.join("hub").to_string_lossy().into_owned();
    let elsewhere = [("HF_HOME", "/nonexistent"), ("HF_HUB_CACHE", cache.as_str()), ("HF_HUB_OFFLINE", "1")];
    let s = Server::start_with_env(&["--model-id", id, "--no-model-warmup"], &elsewhere);
    drop(s);
    std::fs::remove_dir_all(&home).unwrap();
}

#[test]
fn a_repository_of_pickles_downloads_and_serves() {
    let (endpoint, log) = start_hub();
    let home = std::env::temp_dir().join(format!("aleph-hf-pickles-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&home);
    let home_s = home.to_string_lossy().into_owned();
    let env = [("HF_HOME", home_s.as_str()), ("HF_ENDPOINT", endpoint.as_str())];
    let s = Server::start_with_env(&["--model-id", PICKLED, "--no-model-warmup"], &env);
    let reply = s.post_json("/classify", &json!({"input": ["I love this movie"]}));
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(reply.json()["data"][0].as_array().unwrap().len(), 3);
    drop(s);
    let requests = log.lock().unwrap().clone();
    for shard in
        ["pytorch_model-00001-of-00002.bin", "pytorch_model-00002-of-00002.bin", "pytorch_model.bin.index.json"]
    {
        assert!(requests.iter().any(|r| r.ends_with(shard)), "{shard} fetched: {requests:?}");
    }
    std::fs::remove_dir_all(&home).unwrap();
}

#[test]
fn bge_m3_downloads_with_its_heads_and_serves_every_output() {
    let (endpoint, log) = start_hub();
    let home = std::env::temp_dir().join(format!("aleph-hf-bge-m3-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&home);
    let home_s = home.to_string_lossy().into_owned();
    let env = [("HF_HOME", home_s.as_str()), ("HF_ENDPOINT", endpoint.as_str())];
    let s = Server::start_with_env(&["--model-id", BGE_M3, "--no-model-warmup"], &env);
    let caps = s.get("/models").json()["data"][0]["capabilities"].clone();
    assert_eq!(caps, json!(["embed", "sparse", "colbert"]));
    let reply = s.post_json("/embed_sparse", &json!({"inputs": "a man is playing a guitar"}));
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert!(!reply.json()[0].as_array().unwrap().is_empty());
    let reply = s.post_json("/embeddings", &json!({"input": "a man is playing a guitar", "output": "colbert"}));
    assert_eq!(reply.status, 200, "{}", reply.body);
    drop(s);
    let requests = log.lock().unwrap().clone();
    for file in ["sparse_linear.pt", "colbert_linear.pt", "model.safetensors", "1_Pooling/config.json"] {
        assert!(requests.iter().any(|r| r.ends_with(file)), "{file} fetched: {requests:?}");
    }
    std::fs::remove_dir_all(&home).unwrap();
}
