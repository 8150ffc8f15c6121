//! Media for the image and audio tests: the generated fixtures, data URIs, a stand-in for the web.

use std::path::PathBuf;
use std::time::Duration;

use axum::extract::Path;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use base64::Engine as _;

use super::repo_root;

pub fn media_dir() -> PathBuf {
    repo_root().join("tests/fixtures/tiny/media")
}

pub fn data_uri(mime: &str, bytes: &[u8]) -> String {
    format!("data:{mime};base64,{}", base64::engine::general_purpose::STANDARD.encode(bytes))
}

/// A fixture file as a data URI with the MIME type its extension names.
pub fn file_uri(name: &str) -> String {
    let mime = match name.rsplit('.').next() {
        Some("jpg") => "image/jpeg",
        Some("wav") => "audio/wav",
        Some("flac") => "audio/flac",
        Some("ogg") => "audio/ogg",
        Some("mp3") => "audio/mpeg",
        _ => "image/png",
    };
    data_uri(mime, &std::fs::read(media_dir().join(name)).unwrap())
}

pub fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}

async fn media_file(Path(name): Path<String>) -> Response {
    match std::fs::read(media_dir().join(&name)) {
        Ok(bytes) => bytes.into_response(),
        Err(_) => StatusCode::NOT_FOUND.into_response(),
    }
}

/// A stand-in for the web: media files, redirects, a huge body, a slow answer.
pub fn start_web() -> String {
    let app = Router::new()
        .route("/media/{name}", get(media_file))
        .route(
            "/redirect/{name}",
            get(|Path(name): Path<String>| async move {
                (StatusCode::FOUND, [(header::LOCATION, format!("/media/{name}"))]).into_response()
            }),
        )
        .route(
            "/to-metadata",
            get(|| async {
                (StatusCode::FOUND, [(header::LOCATION, "http://169.254.169.254/latest/meta-data/")]).into_response()
            }),
        )
        .route("/big", get(|| async { vec![0u8; 3 << 20] }))
        .route(
            "/slow",
            get(|| async {
                tokio::time::sleep(Duration::from_secs(5)).await;
                "late"
            }),
        );
    super::serve_router(app)
}

/// A real (tiny) PCM WAV file.
pub fn wav_16bit_mono(rate: u32, samples: &[i16]) -> Vec<u8> {
    let data: Vec<u8> = samples.iter().flat_map(|s| s.to_le_bytes()).collect();
    let mut w = b"RIFF".to_vec();
    w.extend((36 + data.len() as u32).to_le_bytes());
    w.extend(b"WAVEfmt ");
    w.extend(16u32.to_le_bytes());
    w.extend(1u16.to_le_bytes()); // PCM
    w.extend(1u16.to_le_bytes()); // mono
    w.extend(rate.to_le_bytes());
    w.extend((rate * 2).to_le_bytes());
    w.extend(2u16.to_le_bytes());
    w.extend(16u16.to_le_bytes());
    w.extend(b"data");
    w.extend((data.len() as u32).to_le_bytes());
    w.extend(data);
    w
}

/// Flags and environment for each compute path a media model can take: candle, and Aleph's kernels
/// narrowed to AVX2 and to scalar code (the default run covers the widest).
pub type Run = (&'static [&'static str], &'static [(&'static str, &'static str)]);

pub const OTHER_PATHS: [Run; 3] =
    [(&["--engine", "candle"], &[]), (&[], &[("ALEPH_CPU_ISA", "avx2")]), (&[], &[("ALEPH_CPU_ISA", "scalar")])];
