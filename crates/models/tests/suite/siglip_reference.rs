//! SigLIP against transformers: the tiny seeded `SiglipModel` from scripts/make_tiny_media_models.py, with
//! the pixel values, token ids and pooled embeddings transformers computed for the test images and texts.

use aleph_models::{load, Backend, Batch, LoadOptions, Pixels};

use crate::common;
use common::{backends, fixtures, floats, max_diff, normalized, preprocess_like_transformers, reference};

#[test]
fn images_match_transformers() {
    for (backend, name) in backends() {
        check_images(backend, name);
    }
}

fn check_images(backend: Backend, name: &str) {
    let loaded = load(&fixtures().join("siglip"), &LoadOptions { backend, ..Default::default() }).unwrap();
    assert_eq!(loaded.info.backend.name(), name);
    assert_eq!(loaded.info.capabilities(), vec!["embed", "image_embed"]);
    let processor = loaded.images.as_ref().unwrap();
    let (side, _) = processor.output_size();
    for img in reference("siglip")["images"].as_array().unwrap() {
        let file = img["file"].as_str().unwrap();
        let want = normalized(floats(&img["embedding"]));
        // The towers alone, from transformers' pixels.
        let pixels = Pixels { height: side, width: side, data: floats(&img["pixel_values"]) };
        let out = loaded.model.forward_images(std::slice::from_ref(&pixels)).unwrap();
        let d = max_diff(&out.vectors[0], &want);
        assert!(d < 1e-4, "{name}, {file}: embedding from transformers' pixels differs by {d}");
        // Aleph's preprocessing (bicubic to 32×32, no crop, mean and std 0.5), end to end.
        if let Some(ours) = preprocess_like_transformers(processor, file, &pixels.data) {
            let out = loaded.model.forward_images(std::slice::from_ref(&ours)).unwrap();
            let d = max_diff(&out.vectors[0], &want);
            assert!(d < 1e-4, "{name}, {file}: embedding differs by {d}");
        }
    }
}

#[test]
fn texts_match_transformers_padded_to_the_window() {
    for (backend, name) in backends() {
        check_texts(backend, name);
    }
}

fn check_texts(backend: Backend, name: &str) {
    let loaded = load(&fixtures().join("siglip"), &LoadOptions { backend, ..Default::default() }).unwrap();
    assert_eq!(loaded.info.backend.name(), name);
    let texts = reference("siglip")["texts"].as_array().unwrap().clone();
    let mut batch = Batch::new();
    for t in &texts {
        let enc = loaded.tokenizer.encode(t["text"].as_str().unwrap()).unwrap();
        // transformers' ids are padded to the window with the padding token (0 here); Aleph pads inside.
        let want: Vec<u32> = t["input_ids"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect();
        assert_eq!(&want[..enc.ids.len()], &enc.ids[..], "ids of {:?}", t["text"]);
        assert!(want[enc.ids.len()..].iter().all(|&i| i == 0), "padding of {:?}", t["text"]);
        batch.push(&enc.ids, &enc.type_ids);
    }
    let out = loaded.model.forward(&batch).unwrap();
    for (t, got) in texts.iter().zip(&out.vectors) {
        let d = max_diff(got, &normalized(floats(&t["embedding"])));
        assert!(d < 1e-4, "{name}, {:?}: embedding differs by {d}", t["text"]);
    }
}
