//! jina-embeddings-v3 (tests/fixtures/tiny/jina-v3-embed, from scripts/make_jina_v3.py): every task's adapter
//! against the remote code's vectors, on both backends, alone and mixed in one batch.

use aleph_models::{load, Batch, DType, LoadOptions, OutputKind};
use serde_json::Value;

use super::common::{backends, fixtures, floats, max_diff, reference};

const MODEL: &str = "jina-v3-embed";

/// One reference case: a task ("" is no task, no adapter), its adapter, inputs, vectors and token counts.
type Case = (String, Option<u16>, Vec<String>, Vec<Vec<f32>>, Vec<usize>);

fn cases() -> Vec<Case> {
    let r = reference(MODEL);
    let tasks: Vec<&str> = r["tasks"].as_array().unwrap().iter().map(|t| t.as_str().unwrap()).collect();
    let strings = |v: &Value| v.as_array().unwrap().iter().map(|t| t.as_str().unwrap().to_string()).collect();
    r["cases"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(task, case)| {
            let adapter = tasks.iter().position(|t| t == task).map(|i| i as u16);
            let vectors = case["vectors"].as_array().unwrap().iter().map(floats).collect();
            let counts = case["token_counts"].as_array().unwrap().iter().map(|c| c.as_u64().unwrap() as usize);
            (task.clone(), adapter, strings(&case["inputs"]), vectors, counts.collect())
        })
        .collect()
}

fn batch_of(loaded: &aleph_models::LoadedModel, items: &[(&str, Option<u16>)]) -> Batch {
    let mut batch = Batch::new();
    for (text, adapter) in items {
        let e = loaded.tokenizer.encode(text).unwrap();
        batch.push_with(&e.ids, &e.type_ids, OutputKind::Default, *adapter);
    }
    batch
}

#[test]
fn every_task_matches_the_remote_code_on_both_backends_alone_and_mixed() {
    let cases = cases();
    assert_eq!(cases.len(), 6, "no task and five tasks");
    for (backend, name) in backends() {
        let loaded = load(&fixtures().join(MODEL), &LoadOptions { backend, ..Default::default() }).unwrap();
        assert_eq!(loaded.info.backend.name(), name);
        let tasks: Vec<&str> = cases.iter().filter(|c| c.1.is_some()).map(|c| c.0.as_str()).collect();
        assert_eq!(loaded.info.adapters.len(), 5);
        assert!(tasks.iter().all(|t| loaded.info.adapters.iter().any(|a| a == t)));
        assert!(loaded.info.normalize);
        for (task, adapter, inputs, want, counts) in &cases {
            let items: Vec<(&str, Option<u16>)> = inputs.iter().map(|t| (t.as_str(), *adapter)).collect();
            let batch = batch_of(&loaded, &items);
            assert_eq!((0..batch.len()).map(|i| batch.seq_len(i)).collect::<Vec<_>>(), *counts, "{task}: counts");
            for (i, (g, w)) in loaded.model.forward(&batch).unwrap().vectors.iter().zip(want).enumerate() {
                let d = max_diff(g, w);
                assert!(d < 1e-4, "task `{task}` on {name}, text {i}: vectors differ by {d}");
            }
        }
        // Every case's texts in one batch, the tasks interleaved: each text gets its own task's vector.
        let mut items = Vec::new();
        let mut want = Vec::new();
        for j in 0..cases[0].2.len() {
            for c in &cases {
                items.push((c.2[j].as_str(), c.1));
                want.push(&c.3[j]);
            }
        }
        let got = loaded.model.forward(&batch_of(&loaded, &items)).unwrap().vectors;
        for (i, (g, w)) in got.iter().zip(want).enumerate() {
            let d = max_diff(g, w);
            assert!(d < 1e-4, "mixed batch on {name}, item {i}: vectors differ by {d}");
        }
        // An adapter past the list fails the batch with a message, no panic.
        let bad = batch_of(&loaded, &[("hello", Some(5))]);
        let err = loaded.model.forward(&bad).unwrap_err().to_string();
        assert!(err.contains("adapter 5"), "{err}");
    }
}

#[test]
fn int8_and_bf16_stay_close_to_f32_under_every_adapter() {
    let dir = fixtures().join(MODEL);
    let f32_model = load(&dir, &LoadOptions::default()).unwrap();
    for (dtype, min_cos) in [(DType::Int8, 0.99), (DType::BFloat16, 0.999)] {
        let other = load(&dir, &LoadOptions { dtype, ..Default::default() }).unwrap();
        assert!(other.info.weight_bytes < f32_model.info.weight_bytes, "{dtype:?} holds fewer bytes");
        for (task, adapter, inputs, _, _) in cases() {
            let items: Vec<(&str, Option<u16>)> = inputs.iter().map(|t| (t.as_str(), adapter)).collect();
            let a = f32_model.model.forward(&batch_of(&f32_model, &items)).unwrap().vectors;
            let b = other.model.forward(&batch_of(&other, &items)).unwrap().vectors;
            for (x, y) in a.iter().zip(&b) {
                let cos: f32 = x.iter().zip(y).map(|(p, q)| p * q).sum();
                assert!(cos >= min_cos, "task `{task}` at {dtype:?}: cosine {cos}");
            }
        }
    }
}
