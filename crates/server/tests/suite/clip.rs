//! CLIP over HTTP: images (data URIs and URLs) and texts into one space, the deprecated route, the
//! SSRF guard, and every media error. The model is the tiny seeded CLIP from
//! scripts/make_tiny_media_models.py; a local HTTP server plays the web.

use crate::common;

use base64::Engine as _;
use common::media::{data_uri, file_uri, max_diff, media_dir, start_web, wav_16bit_mono, OTHER_PATHS};
use common::{floats, repo_root, Server};
use serde_json::{json, Value};

fn clip_dir() -> String {
    repo_root().join("tests/fixtures/tiny/clip").to_string_lossy().into_owned()
}

fn reference() -> Value {
    let path = repo_root().join("tests/fixtures/tiny/clip/reference.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn normalized(mut v: Vec<f32>) -> Vec<f32> {
    let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    v.iter_mut().for_each(|x| *x /= n);
    v
}

fn embeddings(body: &Value) -> Vec<Vec<f32>> {
    body["data"].as_array().unwrap().iter().map(|d| floats(&d["embedding"])).collect()
}

fn clip_server(extra: &[&str]) -> Server {
    let dir = clip_dir();
    let mut args = vec!["--model-id", dir.as_str()];
    args.extend_from_slice(extra);
    Server::start(&args)
}

#[test]
fn images_and_texts_land_in_one_space_as_transformers_computes_them() {
    let s = clip_server(&[]);
    let m = &s.get("/models").json()["data"][0];
    assert_eq!(m["capabilities"], json!(["embed", "image_embed"]));

    let r = reference();
    for img in r["images"].as_array().unwrap() {
        let file = img["file"].as_str().unwrap();
        let body = s.post_json("/embeddings", &json!({"input": file_uri(file), "modality": "image"}));
        assert_eq!(body.status, 200, "{file}: {}", body.body);
        let got = &embeddings(&body.json())[0];
        assert_eq!(got.len(), 24);
        // JPEG: pure-Rust and libjpeg-turbo decoders round the inverse DCT differently (see the
        // models crate's clip_reference test, which checks the rest of the path exactly).
        let tolerance = if file.ends_with(".jpg") { 2e-3 } else { 1e-4 };
        let d = max_diff(got, &normalized(floats(&img["embedding"])));
        assert!(d < tolerance, "{file}: differs from transformers by {d}");
        assert!((got.iter().map(|x| x * x).sum::<f32>() - 1.0).abs() < 1e-5, "{file}: not normalized");
    }

    let texts: Vec<&str> = r["texts"].as_array().unwrap().iter().map(|t| t["text"].as_str().unwrap()).collect();
    let body = s.post_json("/embeddings", &json!({"input": texts})).json();
    for (got, t) in embeddings(&body).iter().zip(r["texts"].as_array().unwrap()) {
        let d = max_diff(got, &normalized(floats(&t["embedding"])));
        assert!(d < 1e-4, "{:?}: differs from transformers by {d}", t["text"]);
    }
    // Usage counts the text tower's tokens (with the window's truncation).
    let tokens: u64 =
        r["texts"].as_array().unwrap().iter().map(|t| t["input_ids"].as_array().unwrap().len() as u64).sum();
    assert_eq!(body["usage"]["prompt_tokens"], tokens);
}

#[test]
fn urls_redirects_data_uris_and_the_deprecated_route_agree() {
    let web = start_web();
    let s = clip_server(&["--media-allow-private"]);
    let files = ["wide.png", "tall.jpg", "small-gray.png", "alpha.png"];
    let uris: Vec<String> = files.iter().map(|f| file_uri(f)).collect();
    let from_data = embeddings(&s.post_json("/embeddings", &json!({"input": uris, "modality": "image"})).json());
    let urls: Vec<String> = files.iter().map(|f| format!("{web}/media/{f}")).collect();
    let from_urls = embeddings(&s.post_json("/embeddings", &json!({"input": urls, "modality": "image"})).json());
    assert_eq!(from_data, from_urls, "a URL and a data URI of the same file embed identically, in input order");

    let redirected = format!("{web}/redirect/alpha.png");
    let body = s.post_json("/v1/embeddings", &json!({"input": [redirected], "modality": "image"})).json();
    // A batch of one against a batch of four: the same up to float summation order.
    assert!(max_diff(&embeddings(&body)[0], &from_data[3]) < 1e-5);

    let old = s.post_json("/embeddings_image", &json!({"input": urls[1], "encoding_format": "base64"}));
    assert_eq!(old.status, 200, "{}", old.body);
    let b64 = old.json()["data"][0]["embedding"].as_str().unwrap().to_string();
    let bytes = base64::engine::general_purpose::STANDARD.decode(b64).unwrap();
    let v: Vec<f32> = bytes.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect();
    assert!(max_diff(&v, &from_data[1]) < 1e-5);

    // A cut image vector is rescaled to unit length, like a text one.
    let cut = s.post_json("/embeddings", &json!({"input": uris[0], "modality": "image", "dimensions": 8})).json();
    let prefix = &from_data[0][..8];
    let norm = prefix.iter().map(|x| x * x).sum::<f32>().sqrt();
    let unit: Vec<f32> = prefix.iter().map(|x| x / norm).collect();
    assert!(max_diff(&embeddings(&cut)[0], &unit) < 1e-5);

    // The OpenAPI document lists the deprecated routes as deprecated.
    let doc = s.get("/openapi.json").json();
    assert_eq!(doc["paths"]["/embeddings_image"]["post"]["deprecated"], true);
    assert_eq!(doc["paths"]["/embeddings_audio"]["post"]["deprecated"], true);
}

#[test]
fn the_ssrf_guard_refuses_internal_addresses_unless_allowed() {
    let web = start_web();
    let port = web.rsplit(':').next().unwrap().to_string();
    let s = clip_server(&["--no-model-warmup"]);
    for url in [
        format!("{web}/media/wide.png"),
        format!("http://localhost:{port}/media/wide.png"),
        format!("http://[::1]:{port}/media/wide.png"),
        format!("http://[::ffff:127.0.0.1]:{port}/media/wide.png"),
        "http://169.254.169.254/latest/meta-data/".to_string(),
        "http://10.0.0.1/x.png".to_string(),
    ] {
        let r = s.post_json("/embeddings", &json!({"input": [url], "modality": "image"}));
        let e = r.assert_error(400);
        let msg = e["error"]["message"].as_str().unwrap();
        assert!(msg.contains("refused") || msg.contains("not allowed"), "{url}: {msg}");
        assert_eq!(e["error"]["param"], "input[0]");
    }
    // And the server still serves.
    let ok = s.post_json("/embeddings", &json!({"input": file_uri("wide.png"), "modality": "image"}));
    assert_eq!(ok.status, 200);
}

/// A PNG whose header declares `w × h` (CRCs valid), with a token image body.
fn png_declaring(w: u32, h: u32) -> Vec<u8> {
    fn crc32(data: &[u8]) -> u32 {
        let mut crc = !0u32;
        for &b in data {
            crc ^= b as u32;
            for _ in 0..8 {
                crc = if crc & 1 != 0 { (crc >> 1) ^ 0xEDB8_8320 } else { crc >> 1 };
            }
        }
        !crc
    }
    fn chunk(out: &mut Vec<u8>, kind: &[u8], data: &[u8]) {
        out.extend((data.len() as u32).to_be_bytes());
        let mut body = kind.to_vec();
        body.extend_from_slice(data);
        out.extend_from_slice(&body);
        out.extend(crc32(&body).to_be_bytes());
    }
    let mut png = b"\x89PNG\r\n\x1a\n".to_vec();
    let mut ihdr = w.to_be_bytes().to_vec();
    ihdr.extend(h.to_be_bytes());
    ihdr.extend([8, 2, 0, 0, 0]); // 8-bit RGB
    chunk(&mut png, b"IHDR", &ihdr);
    // A zlib stream of a few zero bytes: far too little data for the declared size.
    chunk(&mut png, b"IDAT", &[0x78, 0x9c, 0x63, 0x00, 0x00, 0x00, 0x01, 0x00, 0x01]);
    chunk(&mut png, b"IEND", &[]);
    png
}

#[test]
fn bad_media_gets_a_clear_error_and_the_server_keeps_serving() {
    let web = start_web();
    // Loopback allowed (the test web lives there); the metadata address still refused.
    let s = clip_server(&[
        "--media-allowed-networks",
        "127.0.0.0/8",
        "--media-max-bytes",
        "1000000",
        "--media-timeout",
        "1",
    ]);
    let wide = std::fs::read(media_dir().join("wide.png")).unwrap();
    let wav = wav_16bit_mono(16_000, &[0, 1000, -1000, 0]);
    let cases: Vec<(&str, Value, u16, &str)> = vec![
        ("undecodable bytes", json!(data_uri("image/png", b"this is not an image at all")), 400, "not a PNG"),
        ("a WAV sent as an image", json!(data_uri("image/png", &wav)), 400, "not a PNG"),
        ("truncated PNG", json!(data_uri("image/png", &wide[..wide.len() / 2])), 400, "decode"),
        ("2x2 image", json!(data_uri("image/png", &png_declaring(2, 2))), 400, "at least 3"),
        ("declares 100000 x 100000", json!(data_uri("image/png", &png_declaring(100_000, 100_000))), 400, "limit"),
        ("wrong MIME type", json!(data_uri("text/plain", &wide)), 400, "expected image"),
        ("invalid base64", json!("data:image/png;base64,@@@@"), 400, "base64"),
        ("URL answering 404", json!(format!("{web}/media/nope.png")), 400, "404"),
        ("URL larger than the cap", json!(format!("{web}/big")), 400, "limit"),
        ("URL too slow", json!(format!("{web}/slow")), 400, "failed"),
        ("redirect to metadata", json!(format!("{web}/to-metadata")), 400, "refused to fetch from 169.254.169.254"),
        ("file URL", json!("file:///etc/passwd"), 422, "neither"),
        ("a bare path", json!("/tmp/cat.png"), 422, "neither"),
        ("33 images", json!(vec![file_uri("wide.png"); 33]), 422, "between 1 and 32"),
        ("no images", json!([]), 422, "between 1 and 32"),
    ];
    for (what, input, status, needle) in cases {
        let r = s.post_json("/embeddings", &json!({"input": input, "modality": "image"}));
        let e = r.assert_error(status);
        let msg = e["error"]["message"].as_str().unwrap().to_string();
        eprintln!("{what}: {status} {msg}");
        assert!(msg.contains(needle), "{what}: `{msg}` lacks `{needle}`");
    }
    let r = s.post_json("/embeddings", &json!({"input": file_uri("wide.png"), "modality": "video"}));
    r.assert_error(422);
    // Audio on an image model: the capability is missing.
    let r = s.post_json("/embeddings", &json!({"input": data_uri("audio/wav", &wav), "modality": "audio"}));
    let e = r.assert_error(400);
    assert!(e["error"]["message"].as_str().unwrap().contains("audio_embed"));
    let r = s.post_json("/embeddings_audio", &json!({"input": data_uri("audio/wav", &wav)}));
    r.assert_error(400);

    let ok = s.post_json(
        "/embeddings",
        &json!({"input": [file_uri("wide.png"), "data:image/png;base64,AAAA"], "modality": "image"}),
    );
    ok.assert_error(400);
    let ok = s.post_json("/embeddings", &json!({"input": file_uri("wide.png"), "modality": "image"}));
    assert_eq!(ok.status, 200, "{}", ok.body);
    let ok = s.post_json("/embeddings", &json!({"input": "still serving text"}));
    assert_eq!(ok.status, 200, "{}", ok.body);
}

#[test]
fn a_text_model_refuses_images() {
    let s = Server::start(&["--model-id", &common::minilm(), "--no-model-warmup"]);
    let r = s.post_json("/embeddings", &json!({"input": file_uri("wide.png"), "modality": "image"}));
    let e = r.assert_error(400);
    assert!(e["error"]["message"].as_str().unwrap().contains("image_embed"), "{e}");
    s.post_json("/embeddings_image", &json!({"input": file_uri("wide.png")})).assert_error(400);
}

#[test]
fn every_kernel_set_and_the_candle_path_agree_with_transformers() {
    let r = reference();
    let img = &r["images"][0];
    let text = &r["texts"][0];
    let dir = clip_dir();
    for (flags, env) in OTHER_PATHS {
        let mut args = vec!["--model-id", dir.as_str(), "--no-model-warmup"];
        args.extend_from_slice(flags);
        let s = Server::start_with_env(&args, env);
        let body =
            s.post_json("/embeddings", &json!({"input": file_uri(img["file"].as_str().unwrap()), "modality": "image"}));
        let d = max_diff(&embeddings(&body.json())[0], &normalized(floats(&img["embedding"])));
        assert!(d < 1e-4, "{flags:?} {env:?}: image differs by {d}");
        let body = s.post_json("/embeddings", &json!({"input": text["text"]}));
        let d = max_diff(&embeddings(&body.json())[0], &normalized(floats(&text["embedding"])));
        assert!(d < 1e-4, "{flags:?} {env:?}: text differs by {d}");
    }
}

#[test]
fn a_requests_downloads_share_one_byte_budget() {
    let web = start_web();
    let s = clip_server(&[
        "--media-allowed-networks",
        "127.0.0.0/8",
        "--media-max-bytes",
        "4000000",
        "--payload-limit",
        "5000000",
        "--no-model-warmup",
    ]);
    // One 3 MiB download fits (and then fails to decode: it is zeros); two do not fit together.
    let one = s.post_json("/embeddings", &json!({"input": [format!("{web}/big")], "modality": "image"}));
    assert!(one.assert_error(400)["error"]["message"].as_str().unwrap().contains("not a PNG"));
    let two = s
        .post_json("/embeddings", &json!({"input": [format!("{web}/big"), format!("{web}/big")], "modality": "image"}));
    assert!(two.assert_error(400)["error"]["message"].as_str().unwrap().contains("per request"), "{}", two.body);
}
