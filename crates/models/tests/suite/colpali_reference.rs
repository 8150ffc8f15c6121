//! ColPali against transformers: the tiny seeded `ColPaliForRetrieval` from scripts/make_tiny_colpali.py,
//! with the token ids, pixel values and per-token vectors transformers computed for test pages and queries.

use aleph_models::{load, Backend, LoadOptions, Pixels};

use crate::common;
use common::{
    backends, check_multivector_queries, fixtures, floats, ids, max_diff, preprocess_like_transformers, reference, rows,
};

#[test]
fn page_vectors_match_transformers() {
    for (backend, name) in backends() {
        check_pages(backend, name);
    }
}

/// Every page alone from transformers' pixels and from Aleph's preprocessing, then all of them in one batch.
fn check_pages(backend: Backend, name: &str) {
    let loaded = load(&fixtures().join("colpali"), &LoadOptions { backend, ..Default::default() }).unwrap();
    assert_eq!(loaded.info.backend.name(), name);
    let mut all = Vec::new();
    assert_eq!(loaded.info.capabilities(), vec!["embed", "rerank", "image_embed"]);
    let dim = loaded.info.dim;
    let r = reference("colpali");
    let image_token = r["image_token_id"].as_u64().unwrap() as u32;
    let processor = loaded.images.as_ref().unwrap();
    let (side, _) = processor.output_size();
    for page in r["images"].as_array().unwrap() {
        let file = page["file"].as_str().unwrap();
        let want = rows(&page["embeddings"]);
        // The sequence: one image token per patch, then the page prompt.
        let input = ids(&page["input_ids"]);
        let patches = input.iter().filter(|&&i| i == image_token).count();
        assert_eq!(loaded.info.image_cost, input.len(), "{file}: sequence length");
        let prompt = loaded.tokenizer.encode_raw("<bos>Describe the image.\n").unwrap().ids;
        assert_eq!(&input[patches..], &prompt[..], "{file}: page prompt ids");

        // The model alone, from transformers' pixels.
        let pixels = Pixels { height: side, width: side, data: floats(&page["pixel_values"]) };
        let out = loaded.model.forward_images(std::slice::from_ref(&pixels)).unwrap();
        assert_eq!(out.vectors[0].len(), input.len() * dim);
        let d = max_diff(&out.vectors[0], &want);
        assert!(d < 1e-4, "{file} on {name}: vectors from transformers' pixels differ by {d}");
        all.push((pixels.clone(), want.clone()));

        // Aleph's preprocessing, end to end.
        if let Some(ours) = preprocess_like_transformers(processor, file, &pixels.data) {
            let out = loaded.model.forward_images(std::slice::from_ref(&ours)).unwrap();
            let d = max_diff(&out.vectors[0], &want);
            assert!(d < 1e-4, "{file}: vectors differ by {d}");
        }
    }
    // All pages packed in one forward pass: each as it was alone.
    let (pixels, wants): (Vec<Pixels>, Vec<Vec<f32>>) = all.into_iter().unzip();
    let out = loaded.model.forward_images(&pixels).unwrap();
    for (got, want) in out.vectors.iter().zip(&wants) {
        let d = max_diff(got, want);
        assert!(d < 1e-4, "{name}: a page batched with the others differs by {d}");
    }
}

#[test]
fn query_ids_and_vectors_match_transformers() {
    for (backend, _) in backends() {
        check_multivector_queries("colpali", backend);
    }
}
