//! all-MiniLM-L6-v2 served by Aleph matches sentence-transformers (reference vectors committed in
//! tests/fixtures/minilm, made by scripts/make_minilm_reference.py).

use crate::common;

use aleph_eval::metrics::spearman;
use common::{cosine, floats, minilm, repo_root, Server};
use serde_json::{json, Value};

fn fixtures() -> (Vec<String>, Vec<Vec<f32>>, Vec<u64>) {
    let dir = repo_root().join("tests/fixtures/minilm");
    let sentences: Vec<String> =
        serde_json::from_str(&std::fs::read_to_string(dir.join("sentences.json")).unwrap()).unwrap();
    let reference: Value = serde_json::from_str(&std::fs::read_to_string(dir.join("reference.json")).unwrap()).unwrap();
    let vectors = reference["vectors"].as_array().unwrap().iter().map(floats).collect();
    let counts = reference["token_counts"].as_array().unwrap().iter().map(|c| c.as_u64().unwrap()).collect();
    (sentences, vectors, counts)
}

#[test]
fn minilm_matches_sentence_transformers() {
    let server = Server::start(&["--model-id", &minilm(), "--no-model-warmup"]);
    check_parity(&server);
}

/// The candle reference backend, and Aleph's CPU kernels with each narrower instruction set (the
/// machine running the tests may have AVX-512; others may have only AVX2, or neither).
#[test]
fn every_backend_and_instruction_set_matches() {
    let m = minilm();
    let candle = Server::start(&["--model-id", &m, "--no-model-warmup", "--engine", "candle"]);
    assert_eq!(candle.get("/models").json()["data"][0]["backend"], "candle");
    check_parity(&candle);
    for isa in ["avx2", "scalar"] {
        let s = Server::start_with_env(&["--model-id", &m, "--no-model-warmup"], &[("ALEPH_CPU_ISA", isa)]);
        check_parity(&s);
    }
}

/// Half precision on candle (what a GPU serves by default), here on candle's CPU device: MiniLM's vectors
/// stay within cosine 0.999 of sentence-transformers' f32 ones, and TEI's `/info` says the precision.
/// Aleph's CPU kernels do not compute float16 and the server refuses to start, saying where it runs.
#[test]
fn half_precision_on_candle_matches_and_says_so() {
    let m = minilm();
    let (sentences, reference, _) = fixtures();
    for (dtype, name) in [("float16", "float16"), ("bf16", "bfloat16")] {
        let server = Server::start(&["--model-id", &m, "--no-model-warmup", "--engine", "candle", "--dtype", dtype]);
        assert_eq!(server.get("/info").json()["model_dtype"], name);
        let reply = server.post_json("/embeddings", &json!({"input": sentences}));
        assert_eq!(reply.status, 200, "{}", reply.body);
        for (i, item) in reply.json()["data"].as_array().unwrap().iter().enumerate() {
            let c = cosine(&floats(&item["embedding"]), &reference[i]);
            assert!(c >= 0.999, "{dtype}, sentence {i}: cosine {c}");
        }
    }
    let refused = Server::try_start(&["--model-id", &m, "--no-model-warmup", "--dtype", "float16"], &[]);
    let logs = refused.err().expect("float16 on Aleph's CPU kernels must not start");
    assert!(logs.contains("--engine candle"), "{logs}");
}

fn check_parity(server: &Server) {
    let (sentences, reference, counts) = fixtures();
    assert!(sentences.len() >= 50);

    // All at once: one request, batched by the engine.
    let reply = server.post_json("/embeddings", &json!({"input": sentences}));
    assert_eq!(reply.status, 200, "{}", reply.body);
    let body = reply.json();
    let data = body["data"].as_array().unwrap();
    assert_eq!(data.len(), sentences.len());
    let mut worst = 1.0f64;
    for (i, item) in data.iter().enumerate() {
        assert_eq!(item["index"], i);
        let v = floats(&item["embedding"]);
        assert_eq!(v.len(), 384);
        let c = cosine(&v, &reference[i]);
        worst = worst.min(c);
        assert!(c >= 0.9999, "sentence {i} {:?}: cosine {c}", sentences[i]);
    }
    eprintln!("worst cosine over {} sentences: {worst:.7}", sentences.len());
    assert_eq!(body["usage"]["prompt_tokens"], counts.iter().sum::<u64>(), "usage counts real tokens");

    // One by one: the same vectors whatever the batch composition.
    for i in [0, 1, 2, 21, 28, sentences.len() - 1] {
        let body = server.post_json("/embeddings", &json!({"input": sentences[i]})).json();
        let v = floats(&body["data"][0]["embedding"]);
        assert!(cosine(&v, &reference[i]) >= 0.9999, "solo sentence {i}");
        assert_eq!(body["usage"]["total_tokens"], counts[i]);
    }
}

/// `--embedding-dtype` against sentence-transformers' `quantize_embeddings`, calibrated on the corpus that
/// ships in the binary (reference made by scripts/make_minilm_reference.py).
#[test]
fn quantized_output_matches_sentence_transformers() {
    let (sentences, _, _) = fixtures();
    let reference: Value = serde_json::from_str(
        &std::fs::read_to_string(repo_root().join("tests/fixtures/minilm/reference.json")).unwrap(),
    )
    .unwrap();
    let m = minilm();
    let dtypes = ["int8", "uint8", "binary", "ubinary"];
    let server = Server::start(&[
        "--model-id",
        &m,
        "--model-id",
        &m,
        "--model-id",
        &m,
        "--model-id",
        &m,
        "--served-model-name",
        "int8;uint8;binary;ubinary",
        "--embedding-dtype",
        "int8;uint8;binary;ubinary",
        "--no-model-warmup",
    ]);
    for dtype in dtypes {
        let expected = reference["quantized_first_12"][dtype].as_array().unwrap();
        let body = server.post_json("/embeddings", &json!({"model": dtype, "input": &sentences[..12]})).json();
        let (mut equal, mut total, mut flipped_bits) = (0, 0, 0);
        for (i, want) in expected.iter().enumerate() {
            let got = floats(&body["data"][i]["embedding"]);
            let want = floats(want);
            assert_eq!(got.len(), want.len(), "{dtype}: {} values", want.len());
            for (g, w) in got.iter().zip(&want) {
                assert_eq!(g.fract(), 0.0, "{dtype}: integers rendered as floats");
                total += 1;
                if g == w {
                    equal += 1;
                    continue;
                }
                if dtype.ends_with("binary") {
                    // A component within ~1e-6 of zero may take the other sign.
                    let byte = |x: f32| (if dtype == "binary" { x + 128.0 } else { x }) as u8;
                    flipped_bits += (byte(*g) ^ byte(*w)).count_ones();
                } else {
                    // Off by one where a value sits on a bucket edge (the float vectors agree to ~1e-6).
                    assert!((g - w).abs() <= 1.0, "{dtype} sentence {i}: {g} vs {w}");
                }
            }
        }
        assert!(equal as f64 >= 0.97 * total as f64, "{dtype}: only {equal}/{total} identical");
        assert!(flipped_bits <= 4, "{dtype}: {flipped_bits} sign bits differ");
    }
    // Binary bits are the signs of the float vector, so `dimensions` cuts before packing.
    let f = server.post_json("/embeddings", &json!({"model": "int8", "input": "Hello world", "dimensions": 16})).json();
    assert_eq!(floats(&f["data"][0]["embedding"]).len(), 16);
    let b =
        server.post_json("/embeddings", &json!({"model": "ubinary", "input": "Hello world", "dimensions": 16})).json();
    assert_eq!(floats(&b["data"][0]["embedding"]), vec![114.0, 120.0]);
    let v = server
        .post_json("/embeddings", &json!({"model": "binary", "input": "x", "encoding_format": "base64"}))
        .assert_error(400);
    assert_eq!(v["error"]["param"], "encoding_format");
    let b64 = server.post_json("/embeddings", &json!({"model": "int8", "input": "x", "encoding_format": "base64"}));
    assert_eq!(b64.status, 200, "int8 as base64 float32, as Infinity");
}

/// `--dtype int8`: dynamically quantized, smoothed linear layers stay close to sentence-transformers' f32
/// vectors. VNNI (8-bit activations) is held to issue 4's bound, cosine ≥ 0.995 for every sentence; the AVX2
/// kernel takes 7-bit activations, so that its 16-bit pair sums cannot saturate, and gets a looser one.
#[test]
fn int8_weights_stay_close() {
    let (sentences, reference, _) = fixtures();
    let mut kernels = vec![("avx2", 0.997, 0.985)];
    #[cfg(target_arch = "x86_64")]
    if is_x86_feature_detected!("avx512f") && is_x86_feature_detected!("avx512vnni") {
        kernels.push(("avx512", 0.999, 0.995));
    }
    for (isa, mean_bound, min_bound) in kernels {
        let server = Server::start_with_env(
            &["--model-id", &minilm(), "--no-model-warmup", "--dtype", "int8"],
            &[("ALEPH_CPU_ISA", isa)],
        );
        let body = server.post_json("/embeddings", &json!({"input": sentences})).json();
        let cos: Vec<f64> =
            (0..sentences.len()).map(|i| cosine(&floats(&body["data"][i]["embedding"]), &reference[i])).collect();
        let mean = cos.iter().sum::<f64>() / cos.len() as f64;
        let min = cos.iter().copied().fold(1.0, f64::min);
        eprintln!("int8 on {isa}: mean cosine {mean:.6}, min {min:.6}");
        assert!(mean >= mean_bound, "{isa}: mean cosine {mean}");
        assert!(min >= min_bound, "{isa}: min cosine {min}");
    }
    let e = Server::try_start(&["--model-id", &minilm(), "--dtype", "int8", "--engine", "candle"], &[])
        .err()
        .expect("int8 needs the CPU kernels");
    assert!(e.contains("int8"), "{e}");
}

/// `--dtype bfloat16`: the real MiniLM with its weights in bf16, against sentence-transformers' f32 vectors, on
/// AVX512-BF16 (inputs rounded to bf16 as well) where the CPU has it and on AVX2's kernel (weights widened in
/// registers): every sentence at cosine >= 0.999, the mean >= 0.9995. `/models` reports the bytes held, the
/// linear layers' halved; where the CPU has no bf16 arithmetic the load log says what bf16 costs.
#[test]
fn bf16_weights_stay_close() {
    let (sentences, reference, _) = fixtures();
    let f32_bytes = {
        let s = Server::start(&["--model-id", &minilm(), "--no-model-warmup"]);
        s.get("/models").json()["data"][0]["weight_bytes"].as_u64().unwrap()
    };
    for isa in ["avx512", "avx2"] {
        let server = Server::start_with_env(
            &["--model-id", &minilm(), "--no-model-warmup", "--dtype", "bfloat16"],
            &[("ALEPH_CPU_ISA", isa)],
        );
        let bytes = server.get("/models").json()["data"][0]["weight_bytes"].as_u64().unwrap();
        // The linear layers' half; the norms stay f32 (the word table is read in place either way).
        assert!(bytes < f32_bytes * 8 / 10, "{isa}: {bytes} bytes in bf16, {f32_bytes} in f32");
        let body = server.post_json("/embeddings", &json!({"input": sentences})).json();
        let cos: Vec<f64> =
            (0..sentences.len()).map(|i| cosine(&floats(&body["data"][i]["embedding"]), &reference[i])).collect();
        let mean = cos.iter().sum::<f64>() / cos.len() as f64;
        let min = cos.iter().copied().fold(1.0, f64::min);
        eprintln!("bf16 on {isa}: mean cosine {mean:.6}, min {min:.6}");
        assert!(mean >= 0.9995 && min >= 0.999, "{isa}: mean {mean}, min {min}");
        let logs = server.logs();
        let native = ["(amx-bf16 kernel)", "(avx512-bf16 kernel)"].iter().any(|k| logs.contains(k));
        assert!(logs.contains("bf16 linear layers ("), "{isa}: {logs}");
        assert!(native || logs.contains("--dtype bfloat16: this CPU has no bf16 arithmetic"), "{isa}: {logs}");
    }
}

/// all-mpnet-base-v2 (MPNet: relative-position buckets; scripts/fetch-models.sh) against sentence-transformers:
/// the parity sentences within cosine 0.9999 and the STS Benchmark test split's Spearman correlation within
/// 0.001 of sentence-transformers' (tests/fixtures/mpnet, made by scripts/make_mpnet_reference.py).
#[test]
fn mpnet_matches_sentence_transformers() {
    let dir = repo_root().join("models/all-mpnet-base-v2");
    assert!(dir.join("model.safetensors").exists(), "{} is missing: run scripts/fetch-models.sh", dir.display());
    let reference: Value = serde_json::from_str(
        &std::fs::read_to_string(repo_root().join("tests/fixtures/mpnet/reference.json")).unwrap(),
    )
    .unwrap();
    let (sentences, _, _) = fixtures();
    let server = Server::start(&["--model-id", dir.to_str().unwrap(), "--no-model-warmup"]);
    let body = server.post_json("/embeddings", &json!({"input": sentences})).json();
    let mut worst = 1.0f64;
    for (i, (item, want)) in
        body["data"].as_array().unwrap().iter().zip(reference["vectors"].as_array().unwrap()).enumerate()
    {
        let v = floats(&item["embedding"]);
        assert_eq!(v.len(), 768);
        let c = cosine(&v, &floats(want));
        worst = worst.min(c);
        assert!(c >= 0.9999, "sentence {i} {:?}: cosine {c}", sentences[i]);
    }
    eprintln!("all-mpnet-base-v2: worst cosine over {} sentences {worst:.7}", sentences.len());
    let counts: u64 = reference["token_counts"].as_array().unwrap().iter().map(|c| c.as_u64().unwrap()).sum();
    assert_eq!(body["usage"]["prompt_tokens"], counts);

    let tsv = std::fs::read_to_string(repo_root().join("tests/fixtures/stsb/test.tsv")).unwrap();
    let pairs: Vec<(&str, &str, f64)> = tsv
        .lines()
        .skip(1)
        .map(|l| {
            let c: Vec<&str> = l.split('\t').collect();
            (c[6], c[7], c[5].parse().unwrap())
        })
        .collect();
    assert_eq!(pairs.len(), 1379);
    let embed = |texts: Vec<&str>| -> Vec<Vec<f32>> {
        texts
            .chunks(64)
            .flat_map(|chunk| {
                let body = server.post_json("/embeddings", &json!({"input": chunk})).json();
                body["data"].as_array().unwrap().iter().map(|d| floats(&d["embedding"])).collect::<Vec<_>>()
            })
            .collect()
    };
    let a = embed(pairs.iter().map(|p| p.0).collect());
    let b = embed(pairs.iter().map(|p| p.1).collect());
    let predicted: Vec<f64> = a.iter().zip(&b).map(|(x, y)| cosine(x, y)).collect();
    let gold: Vec<f64> = pairs.iter().map(|p| p.2).collect();
    let ours = spearman(&predicted, &gold);
    let theirs = reference["sts_test_spearman"].as_f64().unwrap();
    eprintln!("STS-B test Spearman: Aleph {ours:.5}, sentence-transformers {theirs:.5}");
    assert!((ours - theirs).abs() < 0.001, "Spearman {ours} vs sentence-transformers' {theirs}");
}
