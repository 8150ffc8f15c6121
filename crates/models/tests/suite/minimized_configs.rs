//! Configs as transformers writes them: `save_pretrained` leaves out every field equal to its config
//! class's default (4.32-4.49 in nested configs too, 4.50-4.57 a nested config's token ids), and
//! hand-written configs leave out anything. Aleph must read the omitted fields as transformers does.
//!
//! Each config of `tests/fixtures/minimized/<writer>/` (scripts/make_minimized_configs.py) is put beside
//! its fixture's weights and tokenizer; the model must compute exactly what it computes from the full
//! config, whose outputs the reference tests hold to transformers'.

use crate::common;

use std::path::{Path, PathBuf};

use aleph_models::{load, Backend, Batch, LoadOptions, LoadedModel};
use common::{backends, fixtures, max_diff};

fn minimized_root() -> PathBuf {
    fixtures().join("../minimized")
}

/// The fixture `name` with `config` in place of its config.json.
fn with_config(name: &str, source: &Path, config: &Path, writer: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("aleph-minimized-{writer}-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    for entry in std::fs::read_dir(source).unwrap() {
        let path = entry.unwrap().path();
        let file = path.file_name().unwrap();
        if file != "config.json" {
            std::os::unix::fs::symlink(&path, dir.join(file)).unwrap();
        }
    }
    std::fs::copy(config, dir.join("config.json")).unwrap();
    dir
}

fn source_of(name: &str) -> Option<PathBuf> {
    if name == "models-all-MiniLM-L6-v2" {
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../models/all-MiniLM-L6-v2");
        return dir.join("model.safetensors").exists().then_some(dir);
    }
    Some(fixtures().join(name))
}

fn outputs(m: &LoadedModel) -> Vec<Vec<f32>> {
    let mut batch = Batch::new();
    for text in ["a photo of a cat", "the sound of rain on a roof, recorded at night"] {
        let e = m.tokenizer.encode(text).unwrap();
        batch.push(&e.ids, &e.type_ids);
    }
    let mut out = m.model.forward(&batch).unwrap().vectors;
    if let Some(images) = &m.images {
        let png = std::fs::read(fixtures().join("media/wide.png")).unwrap();
        out.extend(m.model.forward_images(&[images.process(&png).unwrap()]).unwrap().vectors);
    }
    if let Some(audio) = &m.audio {
        let wav = std::fs::read(fixtures().join("media/chirp-48k.wav")).unwrap();
        out.extend(m.model.forward_audio(&[audio.process(&wav).unwrap()]).unwrap().vectors);
    }
    out
}

#[test]
fn minimized_configs_compute_what_full_ones_do() {
    let mut checked = 0;
    for writer in ["4.57", "4.49", "strict"] {
        let mut names: Vec<String> = std::fs::read_dir(minimized_root().join(writer))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        for name in names {
            let Some(source) = source_of(&name) else { continue };
            let config = minimized_root().join(writer).join(&name).join("config.json");
            let variant = with_config(&name, &source, &config, writer);
            // Page retrievers run on candle only; the rest on both backends.
            let backends: Vec<Backend> = if name.starts_with("col") && name != "colbert" {
                vec![Backend::Candle]
            } else {
                backends().iter().map(|(b, _)| *b).collect()
            };
            for backend in backends {
                // As the server loads by default: the code of the families Aleph implements is trusted.
                let opts = LoadOptions { backend, trust_remote_code: true, ..Default::default() };
                let full = load(&source, &opts).unwrap_or_else(|e| panic!("{name}: {e}"));
                let mini = load(&variant, &opts).unwrap_or_else(|e| panic!("{writer}/{name} on {backend:?}: {e}"));
                assert_eq!(
                    (mini.info.dim, mini.info.window, &mini.info.task),
                    (full.info.dim, full.info.window, &full.info.task),
                    "{writer}/{name}"
                );
                for (a, b) in outputs(&full).iter().zip(outputs(&mini).iter()) {
                    assert!(
                        max_diff(a, b) < 1e-6,
                        "{writer}/{name} on {backend:?}: outputs differ by {}",
                        max_diff(a, b)
                    );
                }
                checked += 1;
            }
            let _ = std::fs::remove_dir_all(&variant);
        }
    }
    assert!(checked >= 30, "{checked} (writer, fixture, backend) cases");
}
