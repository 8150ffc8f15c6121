//! Page images through ColPali or ColQwen2 at their published checkpoints' widths, on Aleph's CPU kernels
//! and on candle, in one process. The weights are zeros (made on demand by a candle `VarMap`): the work of
//! every kernel does not depend on the values, so this measures speed only. Depth is reduced (flags) so a
//! run takes seconds on a small machine; time grows linearly with each tower's layer count.
//!
//!   pages [--family colpali|colqwen2] [--vision-layers 2] [--text-layers 2] [--pages 2] [--side 448]

use std::time::Instant;

use aleph_models::backend::{candle::Candle, cpu::Cpu, Ops};
use aleph_models::models::colpali::{ColPali, ColPaliConfig};
use aleph_models::models::colqwen2::{ColQwen2, ColQwen2Config, PagePrompt};
use aleph_models::Pixels;
use candle_core::{DType, Device};
use candle_nn::{VarBuilder, VarMap};
use clap::Parser;

#[derive(Parser)]
struct Args {
    #[arg(long, default_value = "colpali")]
    family: String,
    #[arg(long, default_value_t = 2)]
    vision_layers: usize,
    #[arg(long, default_value_t = 2)]
    text_layers: usize,
    #[arg(long, default_value_t = 2)]
    pages: usize,
    /// Page side in pixels (ColPali's vision tower takes exactly 448).
    #[arg(long, default_value_t = 448)]
    side: usize,
}

/// vidore/colpali-v1.2's shape: PaliGemma-3B (SigLIP So400m/14 at 448 px, Gemma-2B).
fn colpali_config(a: &Args) -> serde_json::Value {
    serde_json::json!({
        "embedding_dim": 128,
        "vlm_config": {
            "image_token_index": 1000,
            "vision_config": {
                "hidden_size": 1152, "intermediate_size": 4304, "num_hidden_layers": a.vision_layers,
                "num_attention_heads": 16, "patch_size": 14, "image_size": 448, "vision_use_head": false
            },
            "text_config": {
                "hidden_size": 2048, "intermediate_size": 16384, "num_hidden_layers": a.text_layers,
                "num_attention_heads": 8, "num_key_value_heads": 1, "head_dim": 256, "vocab_size": 1024,
                "hidden_activation": "gelu_pytorch_tanh"
            }
        }
    })
}

/// vidore/colqwen2-v1.0's shape: Qwen2-VL-2B.
fn colqwen2_config(a: &Args) -> serde_json::Value {
    serde_json::json!({
        "embedding_dim": 128,
        "vlm_config": {
            "vision_config": {
                "depth": a.vision_layers, "embed_dim": 1280, "hidden_size": 1536, "num_heads": 16, "mlp_ratio": 4.0,
                "patch_size": 14, "temporal_patch_size": 2, "spatial_merge_size": 2
            },
            "text_config": {
                "hidden_size": 1536, "intermediate_size": 8960, "num_hidden_layers": a.text_layers,
                "num_attention_heads": 12, "num_key_value_heads": 2, "vocab_size": 1024, "rope_theta": 1000000.0
            }
        }
    })
}

trait Pages {
    fn pages(&self, images: &[Pixels]) -> anyhow::Result<usize>;
}

impl<O: Ops> Pages for ColPali<O> {
    fn pages(&self, images: &[Pixels]) -> anyhow::Result<usize> {
        Ok(self.forward_images(images)?.len())
    }
}

impl<O: Ops> Pages for ColQwen2<O> {
    fn pages(&self, images: &[Pixels]) -> anyhow::Result<usize> {
        Ok(self.forward_images(images)?.len())
    }
}

fn build<O: Ops>(ops: O, a: &Args) -> anyhow::Result<Box<dyn Pages>> {
    let vars = VarMap::new();
    let vb = VarBuilder::from_varmap(&vars, DType::F32, &Device::Cpu);
    // The page prompt's length as the processors make it (`<bos>Describe the image.\n`, Qwen2-VL's chat frame).
    Ok(match a.family.as_str() {
        "colpali" => {
            let cfg: ColPaliConfig = serde_json::from_value(colpali_config(a))?;
            Box::new(ColPali::load(ops, vb, None, &cfg, (1..=6).collect())?)
        }
        "colqwen2" => {
            let cfg: ColQwen2Config = serde_json::from_value(colqwen2_config(a))?;
            let page = PagePrompt { before: (1..=5).collect(), after: (6..=16).collect() };
            Box::new(ColQwen2::load(ops, vb, None, &cfg, page)?)
        }
        other => anyhow::bail!("unknown family `{other}` (colpali or colqwen2)"),
    })
}

fn main() -> anyhow::Result<()> {
    let a = Args::parse();
    let page = Pixels { height: a.side, width: a.side, data: vec![0.1; 3 * a.side * a.side] };
    let images = vec![page; a.pages];
    println!(
        "{} at its checkpoint's widths, {} vision and {} decoder layers, {}x{} pages, {} per forward pass",
        a.family, a.vision_layers, a.text_layers, a.side, a.side, a.pages
    );
    println!("| backend | load (s) | pages/s | s/page |\n|---|---|---|---|");
    for name in ["aleph-cpu", "candle"] {
        let start = Instant::now();
        let model = match name {
            "aleph-cpu" => build(Cpu::f32(), &a)?,
            _ => build(Candle::new(Device::Cpu), &a)?,
        };
        let load = start.elapsed().as_secs_f64();
        model.pages(&images[..1])?;
        let start = Instant::now();
        let n = model.pages(&images)?;
        let secs = start.elapsed().as_secs_f64();
        println!("| {name} | {load:.1} | {:.3} | {:.2} |", n as f64 / secs, secs / n as f64);
    }
    Ok(())
}
