//! CLAP over HTTP: audio clips (data URIs and URLs, WAV and FLAC, other rates, stereo, longer than
//! the window) and texts into one space, the deprecated route, and the audio errors. The model is the
//! tiny seeded CLAP from scripts/make_tiny_media_models.py.

use crate::common;

use common::media::{data_uri, file_uri, max_diff, start_web, wav_16bit_mono, OTHER_PATHS};
use common::{floats, repo_root, Server};
use serde_json::{json, Value};

fn clap_server(extra: &[&str]) -> Server {
    let dir = repo_root().join("tests/fixtures/tiny/clap").to_string_lossy().into_owned();
    let mut args = vec!["--model-id", dir.as_str()];
    args.extend_from_slice(extra);
    Server::start(&args)
}

fn reference() -> Value {
    reference_of("clap")
}

fn reference_of(model: &str) -> Value {
    let path = repo_root().join(format!("tests/fixtures/tiny/{model}/reference.json"));
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn embeddings(body: &Value) -> Vec<Vec<f32>> {
    body["data"].as_array().unwrap().iter().map(|d| floats(&d["embedding"])).collect()
}

#[test]
fn clips_and_texts_match_transformers_and_urls_match_data_uris() {
    let web = start_web();
    let s = clap_server(&["--media-allowed-networks", "127.0.0.0/8"]);
    let m = &s.get("/models").json()["data"][0];
    assert_eq!(m["capabilities"], json!(["embed", "audio_embed"]));

    let r = reference();
    let clips = r["clips"].as_array().unwrap();
    let files: Vec<&str> = clips.iter().map(|c| c["file"].as_str().unwrap()).collect();
    let uris: Vec<String> = files.iter().map(|f| file_uri(f)).collect();
    let body = s.post_json("/embeddings", &json!({"input": uris, "modality": "audio"}));
    assert_eq!(body.status, 200, "{}", body.body);
    let got = embeddings(&body.json());
    for ((file, clip), v) in files.iter().zip(clips).zip(&got) {
        let d = max_diff(v, &floats(&clip["embedding"]));
        assert!(d < 1e-4, "{file} ({} Hz): differs from transformers by {d}", clip["sampling_rate"]);
    }

    let urls: Vec<String> = files.iter().map(|f| format!("{web}/media/{f}")).collect();
    let from_urls = embeddings(&s.post_json("/embeddings", &json!({"input": urls, "modality": "audio"})).json());
    assert_eq!(from_urls, got, "a URL and a data URI of the same file embed identically");

    let old = s.post_json("/embeddings_audio", &json!({"input": uris[0]}));
    assert_eq!(old.status, 200, "{}", old.body);
    assert!(max_diff(&embeddings(&old.json())[0], &got[0]) < 1e-5);

    let texts: Vec<&str> = r["texts"].as_array().unwrap().iter().map(|t| t["text"].as_str().unwrap()).collect();
    let body = s.post_json("/embeddings", &json!({"input": texts})).json();
    for (v, t) in embeddings(&body).iter().zip(r["texts"].as_array().unwrap()) {
        let d = max_diff(v, &floats(&t["embedding"]));
        assert!(d < 1e-4, "{:?}: differs from transformers by {d}", t["text"]);
        assert_eq!(v.len(), got[0].len(), "text and audio share the space");
    }
}

#[test]
fn a_fused_clap_embeds_each_clip_of_a_batch_as_transformers_does_alone() {
    let dir = repo_root().join("tests/fixtures/tiny/clap-fused").to_string_lossy().into_owned();
    let r = reference_of("clap-fused");
    let clips = r["clips"].as_array().unwrap();
    let uris: Vec<String> = clips.iter().map(|c| file_uri(c["file"].as_str().unwrap())).collect();
    for engine in ["auto", "candle"] {
        let s = Server::start(&["--model-id", dir.as_str(), "--engine", engine]);
        // One request, so the clips share a batch: none may change another's embedding.
        let body = s.post_json("/embeddings", &json!({"input": uris, "modality": "audio"}));
        assert_eq!(body.status, 200, "{}", body.body);
        for (clip, v) in clips.iter().zip(embeddings(&body.json())) {
            let d = max_diff(&v, &floats(&clip["embedding"]));
            assert!(d < 1e-4, "{engine}, {}: differs from transformers by {d}", clip["file"]);
        }
    }
}

#[test]
fn bad_audio_gets_a_clear_error_and_the_server_keeps_serving() {
    let s = clap_server(&["--media-max-seconds", "2", "--no-model-warmup"]);
    let wav = std::fs::read(common::media::media_dir().join("chirp-48k.wav")).unwrap();
    let png = std::fs::read(common::media::media_dir().join("wide.png")).unwrap();
    let long = std::fs::read(common::media::media_dir().join("long-stereo-48k.wav")).unwrap();
    let cases: Vec<(&str, String, &str)> = vec![
        ("noise bytes", data_uri("audio/wav", b"definitely not audio, just some text bytes"), "not a WAV"),
        ("an image sent as audio", data_uri("audio/wav", &png), "not a WAV"),
        ("a WAV cut inside its header", data_uri("audio/wav", &wav[..30]), "audio"),
        ("a WAV header with no samples", data_uri("audio/wav", &wav_16bit_mono(48_000, &[])), "no samples"),
        // Found by fuzzing: symphonia panics on it; the client gets a 400, not a 500.
        ("a WAV declaring 0 Hz", data_uri("audio/wav", &wav_16bit_mono(0, &[1, 2, 3])), "malformed"),
        ("wrong MIME type", data_uri("image/png", &wav), "expected audio"),
        ("longer than --media-max-seconds", data_uri("audio/wav", &long), "limit is 2 s"),
    ];
    for (what, input, needle) in cases {
        let r = s.post_json("/embeddings", &json!({"input": input, "modality": "audio"}));
        let e = r.assert_error(400);
        let msg = e["error"]["message"].as_str().unwrap().to_string();
        assert!(msg.contains(needle), "{what}: `{msg}` lacks `{needle}`");
    }
    let r = s.post_json("/embeddings", &json!({"input": file_uri("wide.png"), "modality": "image"}));
    assert!(r.assert_error(400)["error"]["message"].as_str().unwrap().contains("image_embed"));

    // A tiny clip at an odd rate still works: resampled, then repeated to fill the window.
    let odd = wav_16bit_mono(11_025, &[0, 3000, -3000, 1000, -1000, 0, 500, -500]);
    let ok = s.post_json("/embeddings", &json!({"input": data_uri("audio/wav", &odd), "modality": "audio"}));
    assert_eq!(ok.status, 200, "{}", ok.body);
    let ok = s.post_json("/embeddings", &json!({"input": "still serving text"}));
    assert_eq!(ok.status, 200, "{}", ok.body);
}

#[test]
fn every_kernel_set_and_the_candle_path_agree_with_transformers() {
    let r = reference();
    let clip = &r["clips"][0];
    let text = &r["texts"][1];
    let dir = repo_root().join("tests/fixtures/tiny/clap").to_string_lossy().into_owned();
    for (flags, env) in OTHER_PATHS {
        let mut args = vec!["--model-id", dir.as_str(), "--no-model-warmup"];
        args.extend_from_slice(flags);
        let s = Server::start_with_env(&args, env);
        let body = s
            .post_json("/embeddings", &json!({"input": file_uri(clip["file"].as_str().unwrap()), "modality": "audio"}));
        let d = max_diff(&embeddings(&body.json())[0], &floats(&clip["embedding"]));
        assert!(d < 1e-4, "{flags:?} {env:?}: clip differs by {d}");
        let body = s.post_json("/embeddings", &json!({"input": text["text"]}));
        let d = max_diff(&embeddings(&body.json())[0], &floats(&text["embedding"]));
        assert!(d < 1e-4, "{flags:?} {env:?}: text differs by {d}");
    }
}

#[test]
fn lossy_formats_decode_and_land_near_the_lossless_clip() {
    let s = clap_server(&["--no-model-warmup"]);
    let files = ["chirp-48k.wav", "chirp-48k.ogg", "chirp-48k.mp3"];
    let uris: Vec<String> = files.iter().map(|f| file_uri(f)).collect();
    let body = s.post_json("/embeddings", &json!({"input": uris, "modality": "audio"}));
    assert_eq!(body.status, 200, "{}", body.body);
    let v = embeddings(&body.json());
    for (file, e) in files.iter().zip(&v).skip(1) {
        let cos = common::cosine(&v[0], e);
        eprintln!("{file}: cosine to the WAV {cos:.5}");
        assert!(cos > 0.99, "{file}: cosine to the WAV {cos}");
    }
}
