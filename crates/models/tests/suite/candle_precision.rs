//! Every tiny fixture on candle at each precision it serves: float32 within 1e-4 of transformers' references,
//! float16 and bfloat16 (`--engine candle --dtype ...`, what a GPU runs by default; weights and activations at
//! half width, norms and softmax in f32) within 2e-2 (bf16: 5e-2). What a family cannot run in float16 is refused
//! at load, naming why.
//!
//! On candle's CPU device by default; `ALEPH_TEST_DEVICE=cuda:0` runs the same checks on a GPU (a `cuda` build of
//! this suite, as scripts/gpu-check.sh runs it), with the fixtures at `ALEPH_TEST_TINY`.

use aleph_models::{
    load, AttentionKernel, Backend, Batch, DType, Device, LoadOptions, LoadedModel, ModelTask, Pixels, PoolingChoice,
};
use serde_json::Value;

use crate::colqwen2_reference::unpatchify;
use crate::common::{dense, fixtures, floats, max_diff, normalized, reference, rows, text_batch};

/// How far a half-precision output may be from transformers' f32 one, relative to the output's scale (its
/// largest magnitude, at least 1: SPLADE weights and logits exceed 1). float16 keeps 11 significant bits; bf16
/// keeps 8, so it rounds 8x coarser (its worst fixture here is at 0.027, float16's at 0.0034).
fn tolerance(dtype: DType) -> f32 {
    match dtype {
        DType::BFloat16 => 5e-2,
        DType::Float16 => 2e-2,
        _ => 1e-4,
    }
}

/// Where the checks run: `ALEPH_TEST_DEVICE` (`cpu`, `cuda:N`), the CPU when unset.
fn device() -> Device {
    std::env::var("ALEPH_TEST_DEVICE").map_or(Device::Cpu, |d| d.parse().expect("ALEPH_TEST_DEVICE"))
}

fn strings(v: &Value) -> Vec<&str> {
    v.as_array().unwrap().iter().map(|t| t.as_str().unwrap()).collect()
}

/// A number, a vector, or a list of per-token vectors flattened row-major (ColBERT, ColPali).
fn flat(v: &Value) -> Vec<f32> {
    match v {
        Value::Number(n) => vec![n.as_f64().unwrap() as f32],
        Value::Array(a) if a.first().is_some_and(Value::is_array) => rows(v),
        _ => floats(v),
    }
}

/// What the fixture's reference holds, as (what, ours, transformers') pairs computed by `loaded`.
fn outputs(name: &str, loaded: &LoadedModel, r: &Value) -> Vec<(String, Vec<f32>, Vec<f32>)> {
    let model = &loaded.model;
    let mut pairs = Vec::new();
    let mut push = |what: String, got: &[f32], want: Vec<f32>| pairs.push((what, got.to_vec(), want));
    // Cross-encoders' logits, or an LLM reranker's logit differences (ColBERT's documents are texts).
    let scores = r.get("logits").or(r.get("logit_differences"));
    if let (Some(query), Some(docs), Some(want)) = (r["query"].as_str(), r.get("documents").map(strings), scores) {
        let mut batch = Batch::new();
        for d in &docs {
            let e = loaded.tokenizer.encode_pair(query, d).unwrap();
            batch.push(&e.ids, &e.type_ids);
        }
        for (i, got) in model.forward(&batch).unwrap().vectors.iter().enumerate() {
            push(format!("document {i}"), got, flat(&want[i]));
        }
    }
    if let Some(texts) = r["texts"].as_array().filter(|t| t.first().is_some_and(Value::is_string)) {
        let texts: Vec<&str> = texts.iter().map(|t| t.as_str().unwrap()).collect();
        let out = model.forward(&text_batch(loaded, &texts)).unwrap().vectors;
        for (i, got) in out.iter().enumerate() {
            let want = if let Some(v) = r.get("vectors") {
                flat(&v[i])
            } else if let Some(l) = r.get("logits") {
                floats(&l[i])
            } else {
                dense(&r["sparse"][i], r["vocab"].as_u64().unwrap() as usize)
            };
            push(format!("text {i}"), got, want);
        }
    }
    // The media models' texts and queries: `{text, embedding(s)}`, one batch.
    for key in ["texts", "queries"] {
        let Some(items) = r[key].as_array().filter(|t| t.first().is_some_and(Value::is_object)) else { continue };
        let texts: Vec<&str> = items.iter().map(|t| t["text"].as_str().unwrap()).collect();
        let out = model.forward(&text_batch(loaded, &texts)).unwrap().vectors;
        for (t, got) in items.iter().zip(&out) {
            let want = match t.get("embedding") {
                // CLIP's and SigLIP's references are the towers' projections, before the normalization.
                Some(e) if name == "clip" || name == "siglip" => normalized(floats(e)),
                Some(e) => floats(e),
                None => rows(&t["embeddings"]),
            };
            push(format!("{key} {:?}", t["text"]), got, want);
        }
    }
    for img in r["images"].as_array().into_iter().flatten() {
        let pixels = match img.get("grid_thw") {
            Some(grid) => {
                let g: Vec<usize> = grid.as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as usize).collect();
                unpatchify(&floats(&img["pixel_values"]), g[1], g[2])
            }
            None => {
                let (side, _) = loaded.images.as_ref().unwrap().output_size();
                Pixels { height: side, width: side, data: floats(&img["pixel_values"]) }
            }
        };
        let want = match img.get("embedding") {
            Some(e) => normalized(floats(e)),
            None => rows(&img["embeddings"]),
        };
        let got = model.forward_images(std::slice::from_ref(&pixels)).unwrap().vectors.remove(0);
        push(format!("image {}", img["file"]), &got, want);
    }
    for clip in r["clips"].as_array().into_iter().flatten() {
        let bytes = std::fs::read(fixtures().join("media").join(clip["file"].as_str().unwrap())).unwrap();
        let features = loaded.audio.as_ref().unwrap().process(&bytes).unwrap();
        let got = model.forward_audio(std::slice::from_ref(&features)).unwrap().vectors.remove(0);
        push(format!("clip {}", clip["file"]), &got, floats(&clip["embedding"]));
    }
    pairs
}

fn options(r: &Value, dtype: DType, attention: AttentionKernel) -> LoadOptions {
    LoadOptions {
        backend: Backend::Candle,
        attention,
        device: device(),
        dtype,
        // As the server loads by default: trusting the code of the families Aleph implements.
        trust_remote_code: true,
        // A plain masked-LM folder serves sparse vectors when asked (`--pooling-method splade`).
        pooling: if r.get("sparse").is_some() { PoolingChoice::Splade } else { PoolingChoice::Auto },
        // Qwen3-Reranker is a causal LM: a reranker when asked.
        task: if r.get("logit_differences").is_some() { ModelTask::Rerank } else { ModelTask::Auto },
        ..Default::default()
    }
}

fn fixture_names() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(fixtures())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| fixtures().join(n).join("reference.json").exists())
        .collect();
    names.sort();
    assert!(names.len() >= 40, "{names:?}");
    names
}

/// One fixture at `dtype`: its worst difference (relative to the output's scale) when every output is within
/// the tolerance, else why not.
fn check_fixture(name: &str, dtype: DType, attention: AttentionKernel) -> Result<f32, String> {
    let r = reference(name);
    let opts = options(&r, dtype, attention);
    if dtype == DType::Float16 && name.starts_with("gemma3") {
        let err = load(&fixtures().join(name), &opts).err().ok_or("Gemma 3 in float16 loaded")?.to_string();
        return match err.contains("float16") && err.contains("bfloat16") {
            true => Ok(0.0),
            false => Err(format!("refused without saying why: {err}")),
        };
    }
    let loaded = load(&fixtures().join(name), &opts).map_err(|e| format!("does not load: {e}"))?;
    if name.starts_with("model2vec") || name.starts_with("st-static") {
        // A static model is a table lookup on the host at f32 whatever the backend and width asked
        // (crates/server/tests/suite/static_models.rs compares it with model2vec and sentence-transformers).
        return match (loaded.info.backend.name(), loaded.info.dtype) {
            ("aleph-cpu", DType::Float32) => Ok(0.0),
            (backend, at) => Err(format!("a static model loaded as {backend} at {at:?}")),
        };
    }
    if (loaded.info.backend.name(), loaded.info.dtype) != ("candle", dtype) {
        return Err(format!("loaded as {} at {:?}", loaded.info.backend.name(), loaded.info.dtype));
    }
    let pairs = outputs(name, &loaded, &r);
    if pairs.is_empty() {
        return Err("nothing compared".into());
    }
    let mut worst = 0f32;
    for (what, got, want) in pairs {
        if !got.iter().all(|x| x.is_finite()) {
            return Err(format!("{what}: not finite"));
        }
        let scale = want.iter().fold(1f32, |m, x| m.max(x.abs()));
        let d = max_diff(&got, &want) / scale;
        worst = worst.max(d);
        if d >= tolerance(dtype) {
            return Err(format!("{what}: differs from transformers' f32 by {d} of {scale}"));
        }
    }
    Ok(worst)
}

/// Every fixture at `dtype`, each reported on its own line (`<name> at <dtype>: worst difference <d>` or
/// `... FAILED: <why>`, which scripts/gpu-check.sh reads; the name is `<fixture>+unpadded` where the attention
/// was chosen, not the device's default), failing at the end if any did.
fn check_every_fixture(dtype: DType, attention: AttentionKernel) {
    let mut failures = Vec::new();
    for fixture in fixture_names() {
        let name = match attention {
            AttentionKernel::Auto => fixture.clone(),
            AttentionKernel::Padded => format!("{fixture}+padded"),
            AttentionKernel::Unpadded => format!("{fixture}+unpadded"),
        };
        let outcome = std::panic::catch_unwind(|| check_fixture(&fixture, dtype, attention)).unwrap_or_else(|panic| {
            let why = panic.downcast_ref::<String>().cloned().or(panic.downcast_ref::<&str>().map(|s| s.to_string()));
            Err(format!("panicked: {}", why.unwrap_or_default()))
        });
        match outcome {
            Ok(worst) => eprintln!("{name} at {dtype:?}: worst difference {worst:.5}"),
            Err(why) => {
                eprintln!("{name} at {dtype:?}: FAILED: {why}");
                failures.push(format!("{name}: {why}"));
            }
        }
    }
    assert!(failures.is_empty(), "at {dtype:?}, on {:?}:\n{}", device(), failures.join("\n"));
}

#[test]
fn every_fixture_matches_its_reference_in_float32_on_candle() {
    check_every_fixture(DType::Float32, AttentionKernel::Auto);
}

#[test]
fn every_fixture_matches_its_reference_in_float16_on_candle() {
    check_every_fixture(DType::Float16, AttentionKernel::Auto);
}

#[test]
fn every_fixture_matches_its_reference_in_bfloat16_on_candle() {
    check_every_fixture(DType::BFloat16, AttentionKernel::Auto);
}

/// Attention over packed sequences (what a GPU runs; on the CPU device its host implementation) for every
/// family: those with disentangled terms (DeBERTa) keep the padded path.
#[test]
fn every_fixture_matches_its_reference_with_unpadded_attention() {
    check_every_fixture(DType::Float32, AttentionKernel::Unpadded);
    check_every_fixture(DType::Float16, AttentionKernel::Unpadded);
}

/// `--dtype float16` is candle's: Aleph's CPU kernels refuse it, naming where it runs, and candle refuses int8.
#[test]
fn a_precision_the_backend_does_not_compute_is_refused_at_load() {
    let dir = fixtures().join("bert-rerank");
    let err = load(&dir, &LoadOptions { dtype: DType::Float16, ..Default::default() }).err().unwrap().to_string();
    assert!(err.contains("--engine candle"), "{err}");
    let opts = LoadOptions { dtype: DType::Int8, backend: Backend::Candle, ..Default::default() };
    let err = load(&dir, &opts).err().unwrap().to_string();
    assert!(err.contains("int8") && err.contains("CPU kernels"), "{err}");
    // `auto` on the CPU is float32 on either backend.
    for backend in [Backend::Auto, Backend::Candle] {
        let loaded = load(&dir, &LoadOptions { backend, ..Default::default() }).unwrap();
        assert_eq!(loaded.info.dtype, DType::Float32);
    }
}

/// The engine's token budget counts padding where attention pads: candle's padded path (and DeBERTa, padded
/// whatever is asked), not candle asked to run every batch unpadded, nor Aleph's CPU kernels.
#[test]
fn the_token_budget_counts_padding_only_where_attention_pads() {
    let pads = |name: &str, backend, attention| {
        let opts = LoadOptions { backend, attention, ..Default::default() };
        load(&fixtures().join(name), &opts).unwrap().info.pads
    };
    assert!(pads("bert-rerank", Backend::Candle, AttentionKernel::Padded));
    assert!(!pads("bert-rerank", Backend::Candle, AttentionKernel::Unpadded));
    assert!(pads("deberta-embed", Backend::Candle, AttentionKernel::Unpadded));
    assert!(!pads("bert-rerank", Backend::Auto, AttentionKernel::Padded));
}
