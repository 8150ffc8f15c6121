//! DistilBERT and SPLADE against transformers and sentence-transformers, on both backends
//! (scripts/make_encoder_families.py made the fixtures): an embedder with a Dense module after pooling, a
//! classifier stored as two PyTorch pickle shards, and sparse encoders over DistilBERT's and BERT's
//! masked-LM heads (the BERT one a plain folder with one `pytorch_model.bin`, served with `--pooling-method
//! splade`).

use crate::common;

use aleph_models::{load, Backend, Batch, DType, LoadOptions, PoolingChoice};
use common::{backends, dense, fixtures, floats, max_diff, reference};
use serde_json::Value;

fn texts(r: &Value) -> Vec<&str> {
    r["texts"].as_array().unwrap().iter().map(|t| t.as_str().unwrap()).collect()
}

fn counts(r: &Value) -> Vec<usize> {
    r["token_counts"].as_array().unwrap().iter().map(|c| c.as_u64().unwrap() as usize).collect()
}

fn run(model: &str, opts: &LoadOptions, texts: &[&str]) -> (Vec<Vec<f32>>, Vec<usize>, aleph_models::ModelInfo) {
    let loaded = load(&fixtures().join(model), opts).unwrap();
    let mut batch = Batch::new();
    for t in texts {
        let e = loaded.tokenizer.encode(t).unwrap();
        batch.push(&e.ids, &e.type_ids);
    }
    let lens = (0..batch.len()).map(|i| batch.seq_len(i)).collect();
    (loaded.model.forward(&batch).unwrap().vectors, lens, loaded.info)
}

#[test]
fn embedder_with_dense_module_matches_sentence_transformers() {
    let r = reference("distilbert-embed");
    let want: Vec<Vec<f32>> = r["vectors"].as_array().unwrap().iter().map(floats).collect();
    for (backend, name) in backends() {
        let (got, lens, info) = run("distilbert-embed", &LoadOptions { backend, ..Default::default() }, &texts(&r));
        assert_eq!(info.backend.name(), name);
        assert_eq!(info.dim, 16, "the Dense module's width");
        assert!(info.normalize);
        assert_eq!(lens, counts(&r), "token counts");
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            let d = max_diff(g, w);
            assert!(d < 1e-4, "{name}, text {i}: vectors differ by {d}");
        }
    }
}

#[test]
fn classifier_from_sharded_pickles_matches_transformers() {
    let r = reference("distilbert-classify");
    let want: Vec<Vec<f32>> = r["logits"].as_array().unwrap().iter().map(floats).collect();
    for (backend, name) in backends() {
        let (got, lens, info) = run("distilbert-classify", &LoadOptions { backend, ..Default::default() }, &texts(&r));
        assert_eq!(info.dim, 3);
        assert_eq!(lens, counts(&r));
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            let d = max_diff(g, w);
            assert!(d < 1e-4, "{name}, text {i}: logits {g:?} vs {w:?}");
        }
    }
}

fn check_sparse(model: &str, pooling: PoolingChoice, backend: Backend, dtype: DType, tolerance: f32) {
    let r = reference(model);
    let vocab = r["vocab"].as_u64().unwrap() as usize;
    let (got, lens, info) = run(model, &LoadOptions { backend, pooling, dtype, ..Default::default() }, &texts(&r));
    assert!(info.sparse);
    assert_eq!(info.dim, vocab);
    assert_eq!(lens, counts(&r));
    for (i, (g, want)) in got.iter().zip(r["sparse"].as_array().unwrap()).enumerate() {
        let want = dense(want, vocab);
        let d = max_diff(g, &want);
        assert!(d < tolerance, "{model} {backend:?} {dtype:?}, text {i}: weights differ by {d}");
        if tolerance < 1e-3 {
            // The same entries are zero (transformers' zeros are exact: relu, then log1p).
            let nz = |v: &[f32]| v.iter().filter(|x| **x > 1e-4).count();
            assert!(nz(g).abs_diff(nz(&want)) <= 2, "text {i}: {} vs {} non-zeros", nz(g), nz(&want));
        }
    }
}

#[test]
fn sparse_encoders_match_sentence_transformers() {
    for (backend, _) in backends() {
        check_sparse("distilbert-splade", PoolingChoice::Auto, backend, DType::Auto, 1e-4);
        check_sparse("bert-splade", PoolingChoice::Splade, backend, DType::Auto, 1e-4);
    }
}

#[test]
fn a_plain_masked_lm_pools_dense_unless_asked_for_splade() {
    // bert-base-uncased's own config says BertForMaskedLM: Infinity serves it mean-pooled, and so does Aleph.
    let (got, _, info) = run("bert-splade", &LoadOptions::default(), &["a cat"]);
    assert!(!info.sparse);
    assert_eq!(got[0].len(), 32);
}

#[test]
fn int8_stays_close_to_f32() {
    let r = reference("distilbert-embed");
    let f32s = run("distilbert-embed", &LoadOptions::default(), &texts(&r)).0;
    let int8 = run("distilbert-embed", &LoadOptions { dtype: DType::Int8, ..Default::default() }, &texts(&r)).0;
    for (x, y) in f32s.iter().zip(&int8) {
        let cos: f32 = x.iter().zip(y).map(|(p, q)| p * q).sum();
        assert!(cos > 0.99, "int8 cosine {cos}");
    }
    // SPLADE weights are log-scaled logits: int8 moves them by a few hundredths at most here (8-bit weights);
    // the AVX2 kernel's 7-bit weights have twice the step, and twice the bound.
    let step = aleph_models::cpu::qgemm::weight_coarsening();
    check_sparse("distilbert-splade", PoolingChoice::Auto, Backend::Auto, DType::Int8, 0.1 * step);
}
