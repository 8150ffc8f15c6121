//! BGE-M3 against FlagEmbedding's BGEM3FlagModel (scripts/make_bge_m3.py made the fixture): from one forward
//! pass, the dense CLS embedding, the lexical weights of `sparse_linear.pt` and the ColBERT vectors of
//! `colbert_linear.pt`, each asked for per sequence in one mixed batch, on both backends.

use crate::common;

use aleph_models::{load, read_sparse_pairs, Batch, LoadOptions, OutputKind};
use common::{backends, fixtures, floats, max_diff, reference, rows};

#[test]
fn dense_sparse_and_colbert_outputs_match_flagembedding_on_both_backends() {
    let r = reference("bge-m3");
    let texts: Vec<&str> = r["texts"].as_array().unwrap().iter().map(|t| t.as_str().unwrap()).collect();
    for (backend, name) in backends() {
        let loaded = load(&fixtures().join("bge-m3"), &LoadOptions { backend, ..Default::default() }).unwrap();
        let info = &loaded.info;
        assert!(info.sparse_output && !info.sparse, "sparse on request, dense by default");
        assert_eq!(info.colbert_dim, Some(32));
        assert_eq!(info.capabilities(), ["embed", "sparse", "colbert"]);
        // Every text three times, each time wanting another output, in one batch.
        let kinds = [OutputKind::Default, OutputKind::Sparse, OutputKind::MultiVector];
        let mut batch = Batch::new();
        for t in &texts {
            let e = loaded.tokenizer.encode(t).unwrap();
            for kind in kinds {
                batch.push_as(&e.ids, &e.type_ids, kind);
            }
        }
        let out = loaded.model.forward(&batch).unwrap().vectors;
        for (i, got) in out.chunks(3).enumerate() {
            let what = format!("{name}, text {i}");
            let d = max_diff(&got[0], &floats(&r["vectors"][i]));
            assert!(d < 1e-4, "{what}: dense differs by {d}");
            let want = r["lexical_weights"][i].as_object().unwrap();
            let lexical: Vec<(u32, f32)> = read_sparse_pairs(&got[1]).collect();
            let ids: Vec<String> = lexical.iter().map(|(id, _)| id.to_string()).collect();
            let mut want_ids: Vec<String> = want.keys().cloned().collect();
            want_ids.sort_by_key(|k| k.parse::<u32>().unwrap());
            assert_eq!(ids, want_ids, "{what}: lexical ids");
            for (id, w) in lexical {
                let expected = want[&id.to_string()].as_f64().unwrap() as f32;
                assert!((w - expected).abs() < 1e-4, "{what}: token {id} weighs {w}, not {expected}");
            }
            let colbert = rows(&r["colbert_vecs"][i]);
            assert_eq!(got[2].len(), colbert.len(), "{what}: one ColBERT vector per token after the first");
            let d = max_diff(&got[2], &colbert);
            assert!(d < 1e-4, "{what}: ColBERT vectors differ by {d}");
        }
    }
}
