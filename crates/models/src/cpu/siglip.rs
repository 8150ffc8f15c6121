//! SigLIP's towers on Aleph's CPU kernels: CLIP's pre-norm stack (`clip::PreNorm`), a biased patch
//! GEMM, the attention-probe pooling head, and a text tower over texts padded to its window. Same
//! weights and names as the candle reference in `architectures/siglip.rs`.

use candle_nn::VarBuilder;

use super::clip::{embed_token, flatten_patches, PreNorm};
use super::gemm::{Epilogue, MatRef};
use super::layers::{host, norm_rows, Act, Dense, Norm};
use super::ops;
use crate::architectures::siglip::{SiglipConfig, SiglipTextConfig, SiglipVisionConfig};
use crate::batch::Batch;
use crate::error::{weights, ModelError};
use crate::media::image::Pixels;

/// The attention-probe pooling head. The probe is a constant, so its query is computed once at load.
struct PoolHead {
    /// Each head's scaled query, `[hidden]`.
    query: Vec<f32>,
    kv: Dense,
    out: Dense,
    norm: Norm,
    fc1: Dense,
    fc2: Dense,
    act: Act,
    heads: usize,
}

impl PoolHead {
    fn load(vb: VarBuilder, cfg: &SiglipVisionConfig) -> Result<Self, ModelError> {
        let (h, i, nh) = (cfg.tower.hidden_size, cfg.tower.intermediate_size, cfg.tower.num_attention_heads);
        let att = vb.pp("attention");
        let load = || -> candle_core::Result<PoolHead> {
            let w = host(att.get((3 * h, h), "in_proj_weight")?)?;
            let b = host(att.get(3 * h, "in_proj_bias")?)?;
            let probe = host(vb.get((1, 1, h), "probe")?)?;
            let scale = 1.0 / ((h / nh) as f32).sqrt();
            let query = (0..h)
                .map(|o| (b[o] + w[o * h..(o + 1) * h].iter().zip(&probe).map(|(a, x)| a * x).sum::<f32>()) * scale)
                .collect();
            let mlp = vb.pp("mlp");
            Ok(PoolHead {
                query,
                kv: Dense::new(&w[h * h..], b[h..].to_vec(), h, 2 * h, false),
                out: Dense::load(att.pp("out_proj"), h, h, false)?,
                norm: Norm::load(vb.pp("layernorm"), h)?,
                fc1: Dense::load(mlp.pp("fc1"), h, i, false)?,
                fc2: Dense::load(mlp.pp("fc2"), i, h, false)?,
                act: Act::GeluTanh,
                heads: nh,
            })
        };
        let mut head = load().map_err(weights)?;
        head.act = Act::parse(&cfg.tower.hidden_act)?;
        Ok(head)
    }

    /// `x`: `b` images of `n` rows of width `h` → `[b, h]`.
    fn forward(&self, x: &[f32], b: usize, n: usize, h: usize, eps: f32, isa: super::Isa) -> Vec<f32> {
        let hd = h / self.heads;
        let mut kv = vec![0f32; b * n * 2 * h];
        self.kv.forward(MatRef { data: x, rows: b * n, cols: h, ld: h }, &mut kv, 2 * h, Epilogue::Bias(&self.kv.b));
        let mut ctx = vec![0f32; b * h];
        let mut scores = vec![0f32; n];
        for i in 0..b {
            let rows = &kv[i * n * 2 * h..(i + 1) * n * 2 * h];
            for head in 0..self.heads {
                let q = &self.query[head * hd..(head + 1) * hd];
                for (s, row) in scores.iter_mut().zip(rows.chunks_exact(2 * h)) {
                    *s = q.iter().zip(&row[head * hd..(head + 1) * hd]).map(|(a, k)| a * k).sum();
                }
                ops::softmax(isa, &mut scores, 1.0);
                let dst = &mut ctx[i * h + head * hd..i * h + (head + 1) * hd];
                for (p, row) in scores.iter().zip(rows.chunks_exact(2 * h)) {
                    let v = &row[h + head * hd..h + (head + 1) * hd];
                    dst.iter_mut().zip(v).for_each(|(d, v)| *d += p * v);
                }
            }
        }
        let mut y = vec![0f32; b * h];
        self.out.forward(MatRef { data: &ctx, rows: b, cols: h, ld: h }, &mut y, h, Epilogue::Bias(&self.out.b));
        let mut normed = y.clone();
        norm_rows(isa, &mut normed, &self.norm, h, eps);
        let inter_w = self.fc1.b.len();
        let mut inter = vec![0f32; b * inter_w];
        let nm = MatRef { data: &normed, rows: b, cols: h, ld: h };
        self.fc1.forward(nm, &mut inter, inter_w, self.act.epilogue(&self.fc1.b));
        self.act.finish(isa, &mut inter);
        let mut out = vec![0f32; b * h];
        let im = MatRef { data: &inter, rows: b, cols: inter_w, ld: inter_w };
        self.fc2.forward(im, &mut out, h, Epilogue::BiasResidual(&self.fc2.b, &y));
        out
    }

    fn bytes(&self) -> usize {
        self.kv.bytes() + self.out.bytes() + self.fc1.bytes() + self.fc2.bytes()
    }
}

pub struct FastSiglipVision {
    patch: Dense,
    positions: Vec<f32>,
    encoder: PreNorm,
    post_norm: Norm,
    head: PoolHead,
    image_size: usize,
    patch_size: usize,
    channels: usize,
}

impl FastSiglipVision {
    fn load(vb: VarBuilder, cfg: &SiglipVisionConfig) -> Result<Self, ModelError> {
        let (h, p, c) = (cfg.tower.hidden_size, cfg.patch_size, cfg.num_channels);
        if p == 0 || !cfg.image_size.is_multiple_of(p) {
            return Err(ModelError::Unsupported(format!("image_size {} with patch_size {p}", cfg.image_size)));
        }
        if !cfg.vision_use_head {
            return Err(ModelError::Unsupported("SigLIP without the vision pooling head (vision_use_head)".into()));
        }
        let g = cfg.image_size / p;
        let emb = vb.pp("embeddings");
        let load = || -> candle_core::Result<(Dense, Vec<f32>, Norm)> {
            let w = host(emb.pp("patch_embedding").get((h, c, p, p), "weight")?)?;
            let b = host(emb.pp("patch_embedding").get(h, "bias")?)?;
            Ok((
                Dense::new(&w, b, c * p * p, h, false),
                host(emb.pp("position_embedding").get((g * g, h), "weight")?)?,
                Norm::load(vb.pp("post_layernorm"), h)?,
            ))
        };
        let (patch, positions, post_norm) = load().map_err(weights)?;
        Ok(FastSiglipVision {
            patch,
            positions,
            encoder: PreNorm::load(vb.pp("encoder"), &cfg.tower.layers())?,
            post_norm,
            head: PoolHead::load(vb.pp("head"), cfg)?,
            image_size: cfg.image_size,
            patch_size: p,
            channels: c,
        })
    }

    pub fn image_size(&self) -> usize {
        self.image_size
    }

    /// Patches per image: the tower's sequence length.
    pub fn tokens_per_image(&self) -> usize {
        (self.image_size / self.patch_size).pow(2)
    }

    /// Pooled (not normalized) embeddings, one per image.
    pub fn forward(&self, images: &[Pixels]) -> Result<Vec<Vec<f32>>, ModelError> {
        let (s, p, c, h) = (self.image_size, self.patch_size, self.channels, self.encoder.hidden);
        let n = (s / p) * (s / p);
        let b = images.len();
        let k = c * p * p;
        let patches = flatten_patches(images, s, p, c)?;
        let mut x = vec![0f32; b * n * h];
        let pm = MatRef { data: &patches, rows: b * n, cols: k, ld: k };
        self.patch.forward(pm, &mut x, h, Epilogue::Bias(&self.patch.b));
        for img in x.chunks_exact_mut(n * h) {
            ops::add_assign(img, &self.positions);
        }
        let cu: Vec<usize> = (0..=b).map(|i| i * n).collect();
        self.encoder.forward(&mut x, &cu, false);
        let (isa, eps) = (self.encoder.isa, self.encoder.eps);
        norm_rows(isa, &mut x, &self.post_norm, h, eps);
        let pooled = self.head.forward(&x, b, n, h, eps, isa);
        Ok(pooled.chunks(h).map(<[f32]>::to_vec).collect())
    }
}

pub struct FastSiglipText {
    token: Vec<f32>,
    positions: Vec<f32>,
    encoder: PreNorm,
    final_norm: Norm,
    head: Dense,
    window: usize,
    pad: u32,
}

impl FastSiglipText {
    fn load(vb: VarBuilder, cfg: &SiglipTextConfig, pad: u32) -> Result<Self, ModelError> {
        let h = cfg.tower.hidden_size;
        let out = cfg.projection_size.unwrap_or(h);
        let emb = vb.pp("embeddings");
        let load = || -> candle_core::Result<(Vec<f32>, Vec<f32>, Norm, Dense)> {
            Ok((
                host(emb.pp("token_embedding").get((cfg.vocab_size, h), "weight")?)?,
                host(emb.pp("position_embedding").get((cfg.max_position_embeddings, h), "weight")?)?,
                Norm::load(vb.pp("final_layer_norm"), h)?,
                Dense::load(vb.pp("head"), h, out, false)?,
            ))
        };
        let (token, positions, final_norm, head) = load().map_err(weights)?;
        if pad as usize >= cfg.vocab_size {
            return Err(ModelError::Unsupported(format!("padding token id {pad} is outside the vocabulary")));
        }
        Ok(FastSiglipText {
            token,
            positions,
            encoder: PreNorm::load(vb.pp("encoder"), &cfg.tower.layers())?,
            final_norm,
            head,
            window: cfg.max_position_embeddings,
            pad,
        })
    }

    /// Pooled (not normalized) embeddings: each text padded to the window, the last position's state.
    pub fn forward(&self, batch: &Batch) -> Result<Vec<Vec<f32>>, ModelError> {
        let (h, n, b) = (self.encoder.hidden, self.window, batch.len());
        let mut x = vec![0f32; b * n * h];
        for i in 0..b {
            let ids = &batch.input_ids[batch.cu_seqlens[i]..batch.cu_seqlens[i + 1]];
            if ids.len() > n {
                return Err(ModelError::Forward(format!("{} tokens exceed the window of {n}", ids.len())));
            }
            for t in 0..n {
                let id = ids.get(t).copied().unwrap_or(self.pad);
                embed_token(&mut x[(i * n + t) * h..(i * n + t + 1) * h], id, t, &self.token, &self.positions)?;
            }
        }
        let cu: Vec<usize> = (0..=b).map(|i| i * n).collect();
        self.encoder.forward(&mut x, &cu, false);
        let mut last: Vec<f32> =
            (0..b).flat_map(|i| x[((i + 1) * n - 1) * h..(i + 1) * n * h].iter().copied()).collect();
        let (isa, eps) = (self.encoder.isa, self.encoder.eps);
        norm_rows(isa, &mut last, &self.final_norm, h, eps);
        let out = self.head.b.len();
        let mut y = vec![0f32; b * out];
        self.head.forward(MatRef { data: &last, rows: b, cols: h, ld: h }, &mut y, out, Epilogue::Bias(&self.head.b));
        Ok(y.chunks(out).map(<[f32]>::to_vec).collect())
    }
}

/// Both towers on the CPU path.
pub struct FastSiglip {
    pub text: FastSiglipText,
    pub vision: FastSiglipVision,
}

impl FastSiglip {
    pub fn load(vb: VarBuilder, cfg: &SiglipConfig, pad: u32) -> Result<Self, ModelError> {
        let model = FastSiglip {
            text: FastSiglipText::load(vb.pp("text_model"), &cfg.text_config, pad)?,
            vision: FastSiglipVision::load(vb.pp("vision_model"), &cfg.vision_config)?,
        };
        if model.dim() != cfg.vision_config.tower.hidden_size {
            return Err(ModelError::Weights(format!(
                "the text head gives {}-d vectors, the vision tower {}-d",
                model.dim(),
                cfg.vision_config.tower.hidden_size
            )));
        }
        Ok(model)
    }

    /// Width of the shared space.
    pub fn dim(&self) -> usize {
        self.text.head.b.len()
    }

    pub fn weight_bytes(&self) -> u64 {
        let (t, v) = (&self.text, &self.vision);
        let floats = t.token.len() + t.positions.len() + v.positions.len();
        (4 * floats + t.encoder.bytes() + v.encoder.bytes() + t.head.bytes() + v.patch.bytes() + v.head.bytes()) as u64
    }
}
