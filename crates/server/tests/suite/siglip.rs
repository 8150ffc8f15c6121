//! SigLIP over HTTP on the tiny seeded model from scripts/make_tiny_media_models.py: images and texts into
//! one space, L2-normalized, equal to transformers' embeddings; several models in one process.

use crate::common;

use common::media::{file_uri, max_diff, OTHER_PATHS};
use common::{floats, repo_root, Server};
use serde_json::{json, Value};

fn fixture(name: &str) -> (String, Value) {
    let dir = repo_root().join("tests/fixtures/tiny").join(name);
    let reference = serde_json::from_str(&std::fs::read_to_string(dir.join("reference.json")).unwrap()).unwrap();
    (dir.to_string_lossy().into_owned(), reference)
}

fn unit(mut v: Vec<f32>) -> Vec<f32> {
    let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    v.iter_mut().for_each(|x| *x /= n);
    v
}

#[test]
fn images_and_texts_match_transformers_beside_a_clip_model() {
    let (siglip, r) = fixture("siglip");
    let (clip, _) = fixture("clip");
    let s = Server::start(&["--model-id", &siglip, "--model-id", &clip, "--served-model-name", "siglip;clip"]);
    let models = s.get("/models").json();
    let m = models["data"].as_array().unwrap().iter().find(|m| m["id"] == "siglip").expect("siglip listed").clone();
    assert_eq!(m["capabilities"], json!(["embed", "image_embed"]));

    let pngs: Vec<&Value> =
        r["images"].as_array().unwrap().iter().filter(|i| i["file"].as_str().unwrap().ends_with(".png")).collect();
    let uris: Vec<String> = pngs.iter().map(|i| file_uri(i["file"].as_str().unwrap())).collect();
    let body = s.post_json("/embeddings", &json!({"model": "siglip", "input": uris, "modality": "image"}));
    assert_eq!(body.status, 200, "{}", body.body);
    let body = body.json();
    for (i, img) in pngs.iter().enumerate() {
        let got = floats(&body["data"][i]["embedding"]);
        let d = max_diff(&got, &unit(floats(&img["embedding"])));
        assert!(d < 1e-4, "{}: differs from transformers by {d}", img["file"]);
    }
    let texts: Vec<&str> = r["texts"].as_array().unwrap().iter().map(|t| t["text"].as_str().unwrap()).collect();
    let body = s.post_json("/embeddings", &json!({"model": "siglip", "input": texts})).json();
    for (i, t) in r["texts"].as_array().unwrap().iter().enumerate() {
        let got = floats(&body["data"][i]["embedding"]);
        assert_eq!(got.len(), 32, "text and image share the space");
        let d = max_diff(&got, &unit(floats(&t["embedding"])));
        assert!(d < 1e-4, "{:?}: differs from transformers by {d}", t["text"]);
    }
    // The deprecated route routes by model too.
    let old = s.post_json("/embeddings_image", &json!({"model": "siglip", "input": uris[0]}));
    assert_eq!(old.status, 200, "{}", old.body);
}

#[test]
fn every_kernel_set_and_the_candle_path_agree_with_transformers() {
    let (dir, r) = fixture("siglip");
    let (img, text) = (&r["images"][0], &r["texts"][1]);
    for (flags, env) in OTHER_PATHS {
        let mut args = vec!["--model-id", dir.as_str(), "--no-model-warmup"];
        args.extend_from_slice(flags);
        let s = Server::start_with_env(&args, env);
        let body =
            s.post_json("/embeddings", &json!({"input": file_uri(img["file"].as_str().unwrap()), "modality": "image"}));
        let d = max_diff(&floats(&body.json()["data"][0]["embedding"]), &unit(floats(&img["embedding"])));
        assert!(d < 1e-4, "{flags:?} {env:?}: image differs by {d}");
        let body = s.post_json("/embeddings", &json!({"input": text["text"]}));
        let d = max_diff(&floats(&body.json()["data"][0]["embedding"]), &unit(floats(&text["embedding"])));
        assert!(d < 1e-4, "{flags:?} {env:?}: text differs by {d}");
    }
}
