//! CLIP against transformers: the tiny seeded model and test media from
//! `scripts/make_tiny_media_models.py`, with the pixel values and embeddings transformers computed.

use aleph_models::media::image::{composite_on_white, decode_rgb, ImageLimits};
use aleph_models::media::resample::Rgb8;
use aleph_models::{load, Backend, Batch, LoadOptions};
use base64::Engine as _;
use serde_json::Value;

use crate::common;
use common::{backends, fixtures, floats, max_diff, normalized, reference};

/// The pixels Pillow decoded, as RGB (transparency composited onto white as transformers does).
fn pil_decoded(img: &Value) -> Rgb8 {
    let bytes = base64::engine::general_purpose::STANDARD.decode(img["decoded"].as_str().unwrap()).unwrap();
    let shape: Vec<usize> = img["shape"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as usize).collect();
    let (h, w, c) = (shape[0], shape[1], shape[2]);
    match c {
        4 => composite_on_white(w, h, &bytes),
        _ => Rgb8 { width: w, height: h, data: bytes },
    }
}

#[test]
fn image_preprocessing_and_embeddings_match_transformers() {
    for (backend, name) in backends() {
        check_images(backend, name);
    }
}

fn check_images(backend: Backend, name: &str) {
    let loaded = load(&fixtures().join("clip"), &LoadOptions { backend, ..Default::default() }).unwrap();
    assert_eq!(loaded.info.backend.name(), name);
    let processor = loaded.images.as_ref().unwrap();
    let r = reference("clip");
    for img in r["images"].as_array().unwrap() {
        let file = img["file"].as_str().unwrap();
        let bytes = std::fs::read(fixtures().join("media").join(file)).unwrap();
        let want_pixels = floats(&img["pixel_values"]);
        let want_embedding = normalized(floats(&img["embedding"]));

        // Decoding: lossless formats exactly as Pillow; JPEG within the inverse-DCT rounding that
        // separates pure-Rust decoders from libjpeg-turbo.
        let pil = pil_decoded(img);
        let ours = decode_rgb(&bytes, &ImageLimits::default()).unwrap();
        assert_eq!((ours.width, ours.height), (pil.width, pil.height), "{file}");
        let worst = ours.data.iter().zip(&pil.data).map(|(a, b)| a.abs_diff(*b)).max().unwrap();
        let lossy = file.ends_with(".jpg");
        assert!(worst <= if lossy { 2 } else { 0 }, "{file}: decoded pixels differ by up to {worst} levels");

        // Resize, crop, rescale, normalize: from Pillow's pixels, transformers' values exactly.
        let d = max_diff(&processor.process_rgb(&pil).data, &want_pixels);
        assert!(d < 1e-4, "{file}: pixel values differ by {d}");

        // The whole path from the file's bytes.
        let pixels = processor.process(&bytes).unwrap();
        if !lossy {
            assert!(max_diff(&pixels.data, &want_pixels) < 1e-4, "{file}");
        }
        let out = loaded.model.forward_images(&[pixels]).unwrap();
        let d = max_diff(&out.vectors[0], &want_embedding);
        assert!(d < if lossy { 2e-3 } else { 1e-4 }, "{name}, {file}: embedding differs by {d}");
        if !lossy {
            // And from Pillow's decode, the JPEG too.
            let out = loaded.model.forward_images(&[processor.process_rgb(&pil)]).unwrap();
            assert!(max_diff(&out.vectors[0], &want_embedding) < 1e-4, "{file}");
        }
    }
}

#[test]
fn text_tower_matches_transformers_in_one_batch() {
    for (backend, name) in backends() {
        check_texts(backend, name);
    }
}

fn check_texts(backend: Backend, name: &str) {
    let loaded = load(&fixtures().join("clip"), &LoadOptions { backend, ..Default::default() }).unwrap();
    assert_eq!(loaded.info.backend.name(), name);
    let r = reference("clip");
    let texts = r["texts"].as_array().unwrap();
    let mut batch = Batch::new();
    for t in texts {
        let enc = loaded.tokenizer.encode(t["text"].as_str().unwrap()).unwrap();
        let want: Vec<u32> = t["input_ids"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect();
        assert_eq!(enc.ids, want, "token ids of {:?}", t["text"]);
        batch.push(&enc.ids, &enc.type_ids);
    }
    let out = loaded.model.forward(&batch).unwrap();
    for (t, got) in texts.iter().zip(&out.vectors) {
        let d = max_diff(got, &normalized(floats(&t["embedding"])));
        assert!(d < 1e-4, "{name}, {:?}: embedding differs by {d}", t["text"]);
    }
    assert_eq!(loaded.info.capabilities(), vec!["embed", "image_embed"]);
}
