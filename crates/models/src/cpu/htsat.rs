//! CLAP's HTSAT audio encoder on Aleph's CPU kernels: every linear layer a packed GEMM over all the
//! batch's tokens, (shifted) window attention per (window, head) in parallel, and the cyclic shift
//! done as a gather and scatter of rows instead of tensor rolls. Same weights and names as the candle
//! reference in `architectures/clap.rs`.

use candle_nn::VarBuilder;
use rayon::prelude::*;

use super::gemm::{gemm, Epilogue, MatRef};
use super::layers::{host, norm_rows, with_scratch, Dense, Norm, Scratch};
use super::{ops, Isa};
use crate::architectures::clap::{
    check_audio_config, relative_index, shift_label, stage_window, AudioConfig, SpecImage,
};
use crate::architectures::clap_fusion::Fusion;
use crate::error::{weights, ModelError};
use crate::media::audio::AudioFeatures;

struct Block {
    norm1: Norm,
    qkv: Dense,
    out: Dense,
    /// `[heads][n][n]` relative-position bias, `n = window²`.
    bias: Vec<f32>,
    norm2: Norm,
    fc1: Dense,
    fc2: Dense,
    heads: usize,
    window: usize,
    shift: usize,
}

struct Merge {
    norm: Norm,
    reduction: Dense,
}

struct Stage {
    blocks: Vec<Block>,
    merge: Option<Merge>,
    side: usize,
    dim: usize,
}

pub struct FastClapAudio {
    spec: SpecImage,
    patch: Dense,
    fusion: Option<Fusion>,
    patch_norm: Option<Norm>,
    stages: Vec<Stage>,
    norm: Norm,
    proj1: Dense,
    proj2: Dense,
    patch_size: usize,
    eps: f32,
    isa: Isa,
}

impl Block {
    fn load(
        vb: VarBuilder,
        dim: usize,
        heads: usize,
        window: usize,
        shift: usize,
        cfg: &AudioConfig,
    ) -> candle_core::Result<Self> {
        let sa = vb.pp("attention").pp("self");
        let mut w = Vec::with_capacity(3 * dim * dim);
        let mut b = Vec::with_capacity(3 * dim);
        for name in ["query", "key", "value"] {
            w.extend(host(sa.pp(name).get((dim, dim), "weight")?)?);
            if cfg.qkv_bias {
                b.extend(host(sa.pp(name).get(dim, "bias")?)?);
            } else {
                b.extend(std::iter::repeat_n(0.0, dim));
            }
        }
        let full = cfg.window_size;
        let table = host(sa.get(((2 * full - 1) * (2 * full - 1), heads), "relative_position_bias_table")?)?;
        let n = window * window;
        let mut bias = vec![0f32; heads * n * n];
        for i in 0..n {
            for j in 0..n {
                let r = relative_index(i, j, window, full);
                for head in 0..heads {
                    bias[(head * n + i) * n + j] = table[r * heads + head];
                }
            }
        }
        let hidden = (dim as f64 * cfg.mlp_ratio) as usize;
        Ok(Block {
            norm1: Norm::load(vb.pp("layernorm_before"), dim)?,
            qkv: Dense::new(&w, b, dim, 3 * dim, false),
            out: Dense::load(vb.pp("attention").pp("output").pp("dense"), dim, dim, false)?,
            bias,
            norm2: Norm::load(vb.pp("layernorm_after"), dim)?,
            fc1: Dense::load(vb.pp("intermediate").pp("dense"), dim, hidden, false)?,
            fc2: Dense::load(vb.pp("output").pp("dense"), hidden, dim, false)?,
            heads,
            window,
            shift,
        })
    }
}

impl FastClapAudio {
    pub fn load(vb: VarBuilder, proj: VarBuilder, cfg: &AudioConfig) -> Result<Self, ModelError> {
        let p = check_audio_config(cfg)?;
        if cfg.hidden_act != "gelu" {
            return Err(ModelError::Unsupported(format!("hidden_act `{}` in HTSAT", cfg.hidden_act)));
        }
        if cfg.projection_hidden_act != "relu" {
            return Err(ModelError::Unsupported(format!("projection_hidden_act `{}`", cfg.projection_hidden_act)));
        }
        let enc = vb.pp("audio_encoder");
        let spec = SpecImage::load(enc.pp("batch_norm"), cfg).map_err(weights)?;
        let d0 = cfg.patch_embeds_hidden_size;
        let pe = enc.pp("patch_embed");
        let w = pe.pp("proj").get((d0, 1, p, p), "weight").and_then(host).map_err(weights)?;
        let b = pe.pp("proj").get(d0, "bias").and_then(host).map_err(weights)?;
        let patch = Dense::new(&w, b, p * p, d0, false);
        let fusion = if cfg.enable_fusion { Some(Fusion::load(pe.clone(), cfg, p).map_err(weights)?) } else { None };
        let patch_norm =
            if cfg.enable_patch_layer_norm { Some(Norm::load(pe.pp("norm"), d0).map_err(weights)?) } else { None };
        let mut stages = Vec::new();
        let mut side = cfg.spec_size / p;
        for (i, (&depth, &heads)) in cfg.depths.iter().zip(&cfg.num_attention_heads).enumerate() {
            let dim = d0 << i;
            let (window, shift) = stage_window(side, cfg.window_size)?;
            let st = enc.pp("layers").pp(i);
            let blocks = (0..depth)
                .map(|j| {
                    Block::load(st.pp("blocks").pp(j), dim, heads, window, if j % 2 == 0 { 0 } else { shift }, cfg)
                })
                .collect::<candle_core::Result<Vec<_>>>()
                .map_err(weights)?;
            let merge = if i + 1 < cfg.depths.len() {
                let ds = st.pp("downsample");
                let load = || -> candle_core::Result<Merge> {
                    let w = host(ds.pp("reduction").get((2 * dim, 4 * dim), "weight")?)?;
                    Ok(Merge {
                        norm: Norm::load(ds.pp("norm"), 4 * dim)?,
                        reduction: Dense::new(&w, vec![0.0; 2 * dim], 4 * dim, 2 * dim, false),
                    })
                };
                Some(load().map_err(weights)?)
            } else {
                None
            };
            stages.push(Stage { blocks, merge, side, dim });
            side /= 2;
        }
        let last = cfg.hidden_size;
        let load_proj = || -> candle_core::Result<(Dense, Dense)> {
            let out = proj.pp("linear1").get_unchecked("bias")?.dim(0)?;
            Ok((Dense::load(proj.pp("linear1"), last, out, false)?, Dense::load(proj.pp("linear2"), out, out, false)?))
        };
        let (proj1, proj2) = load_proj().map_err(weights)?;
        Ok(FastClapAudio {
            spec,
            patch,
            fusion,
            patch_norm,
            stages,
            norm: Norm::load(enc.pp("norm"), last).map_err(weights)?,
            proj1,
            proj2,
            patch_size: p,
            eps: cfg.layer_norm_eps as f32,
            isa: Isa::get(),
        })
    }

    /// Width of the shared space.
    pub fn dim(&self) -> usize {
        self.proj2.b.len()
    }

    /// Tokens the first stage attends over, per clip.
    pub fn tokens_per_clip(&self) -> usize {
        (self.spec.spec_size / self.patch_size).pow(2)
    }

    pub fn weight_bytes(&self) -> u64 {
        let blocks: usize = self
            .stages
            .iter()
            .flat_map(|s| &s.blocks)
            .map(|b| b.qkv.bytes() + b.out.bytes() + b.fc1.bytes() + b.fc2.bytes() + 4 * b.bias.len())
            .sum();
        let merges: usize = self.stages.iter().filter_map(|s| s.merge.as_ref()).map(|m| m.reduction.bytes()).sum();
        (blocks + merges + self.patch.bytes() + self.proj1.bytes() + self.proj2.bytes()) as u64
    }

    /// Projected (not normalized) audio embeddings, one per clip.
    pub fn forward(&self, clips: &[AudioFeatures]) -> Result<Vec<Vec<f32>>, ModelError> {
        let (s, p) = (self.spec.spec_size, self.patch_size);
        let g = s / p;
        let b = clips.len();
        let mut patches = vec![0f32; b * g * g * p * p];
        for (i, clip) in clips.iter().enumerate() {
            let image = self.spec.image(clip, 0)?;
            for gy in 0..g {
                for gx in 0..g {
                    let dst = &mut patches[((i * g + gy) * g + gx) * p * p..][..p * p];
                    for py in 0..p {
                        dst[py * p..(py + 1) * p].copy_from_slice(&image[(gy * p + py) * s + gx * p..][..p]);
                    }
                }
            }
        }
        let d0 = self.patch.b.len();
        let mut x = vec![0f32; b * g * g * d0];
        let pm = MatRef { data: &patches, rows: b * g * g, cols: p * p, ld: p * p };
        self.patch.forward(pm, &mut x, d0, Epilogue::Bias(&self.patch.b));
        if let Some(fusion) = &self.fusion {
            for (tokens, clip) in x.chunks_exact_mut(g * g * d0).zip(clips) {
                let [c1, c2, c3] = Fusion::crop_images(&self.spec, clip)?;
                fusion.fuse(tokens, [&c1, &c2, &c3]);
            }
        }
        if let Some(norm) = &self.patch_norm {
            norm_rows(self.isa, &mut x, norm, d0, self.eps);
        }
        for stage in &self.stages {
            for block in &stage.blocks {
                x = self.block(block, &x, b, stage.side, stage.dim);
            }
            if let Some(merge) = &stage.merge {
                x = self.merge(merge, &x, b, stage.side, stage.dim);
            }
        }
        let c = self.norm.gamma.len();
        norm_rows(self.isa, &mut x, &self.norm, c, self.eps);
        // The pooled vector is the mean over every token of the final grid.
        let tokens = x.len() / (b * c);
        let mut pooled = vec![0f32; b * c];
        for (i, clip) in x.chunks(tokens * c).enumerate() {
            let dst = &mut pooled[i * c..(i + 1) * c];
            for row in clip.chunks(c) {
                ops::add_assign(dst, row);
            }
            dst.iter_mut().for_each(|v| *v /= tokens as f32);
        }
        let hid = self.proj1.b.len();
        let mut mid = vec![0f32; b * hid];
        self.proj1.forward(
            MatRef { data: &pooled, rows: b, cols: c, ld: c },
            &mut mid,
            hid,
            Epilogue::Bias(&self.proj1.b),
        );
        mid.iter_mut().for_each(|v| *v = v.max(0.0));
        let mut out = vec![0f32; b * hid];
        self.proj2.forward(
            MatRef { data: &mid, rows: b, cols: hid, ld: hid },
            &mut out,
            hid,
            Epilogue::Bias(&self.proj2.b),
        );
        Ok(out.chunks(hid).map(<[f32]>::to_vec).collect())
    }

    /// One Swin block over `b` grids of `side²` tokens of width `c`; returns the new tokens.
    fn block(&self, blk: &Block, x: &[f32], b: usize, side: usize, c: usize) -> Vec<f32> {
        let (ws, shift, nh) = (blk.window, blk.shift, blk.heads);
        let (n, per_side) = (ws * ws, side / ws);
        let windows = b * per_side * per_side;
        let tokens = b * side * side;
        // Window order: row k of the gathered matrix is token (y, x) of the cyclically shifted grid.
        let mut order = Vec::with_capacity(tokens);
        let mut labels = Vec::with_capacity(if shift > 0 { tokens } else { 0 });
        for img in 0..b {
            for wy in 0..per_side {
                for wx in 0..per_side {
                    for t in 0..n {
                        let (ys, xs) = (wy * ws + t / ws, wx * ws + t % ws);
                        let (y, xx) = ((ys + shift) % side, (xs + shift) % side);
                        order.push((img * side + y) * side + xx);
                        if shift > 0 {
                            labels.push(shift_label(ys, xs, side, side, ws, shift));
                        }
                    }
                }
            }
        }
        let mut win = vec![0f32; tokens * c];
        for (k, &src) in order.iter().enumerate() {
            win[k * c..(k + 1) * c].copy_from_slice(&x[src * c..(src + 1) * c]);
        }
        norm_rows(self.isa, &mut win, &blk.norm1, c, self.eps);
        let mut qkv = vec![0f32; tokens * 3 * c];
        blk.qkv.forward(
            MatRef { data: &win, rows: tokens, cols: c, ld: c },
            &mut qkv,
            3 * c,
            Epilogue::Bias(&blk.qkv.b),
        );

        let hd = c / nh;
        let scale = 1.0 / (hd as f32).sqrt();
        let isa = self.isa;
        let mut ctx = vec![0f32; tokens * c];
        let attend = |(w, dst): (usize, &mut [f32])| {
            with_scratch(|Scratch { scores, keys, values }| {
                for head in 0..nh {
                    let base = w * n * 3 * c + head * hd;
                    let q = MatRef { data: &qkv[base..], rows: n, cols: hd, ld: 3 * c };
                    keys.repack(hd, n, &qkv[base + c..], 1, 3 * c);
                    scores.clear();
                    scores.resize(n * n, 0.0);
                    gemm(q, keys, scores, n, Epilogue::None, false);
                    let bias = &blk.bias[head * n * n..(head + 1) * n * n];
                    for (i, row) in scores.chunks_mut(n).enumerate() {
                        for (j, v) in row.iter_mut().enumerate() {
                            *v = *v * scale + bias[i * n + j];
                            if shift > 0 && labels[w * n + i] != labels[w * n + j] {
                                *v -= 100.0;
                            }
                        }
                        ops::softmax(isa, row, 1.0);
                    }
                    values.repack(n, hd, &qkv[base + 2 * c..], 3 * c, 1);
                    let pm = MatRef { data: scores, rows: n, cols: n, ld: n };
                    gemm(pm, values, &mut dst[head * hd..], c, Epilogue::None, false);
                }
            })
        };
        super::pool().install(|| ctx.par_chunks_mut(n * c).enumerate().for_each(attend));
        debug_assert_eq!(ctx.len(), windows * n * c);

        let mut attn = vec![0f32; tokens * c];
        blk.out.forward(MatRef { data: &ctx, rows: tokens, cols: c, ld: c }, &mut attn, c, Epilogue::Bias(&blk.out.b));
        // Undo the shift and the windowing: each row goes home, onto the residual.
        let mut mid = x.to_vec();
        for (k, &dst) in order.iter().enumerate() {
            ops::add_assign(&mut mid[dst * c..(dst + 1) * c], &attn[k * c..(k + 1) * c]);
        }
        let mut normed = mid.clone();
        norm_rows(self.isa, &mut normed, &blk.norm2, c, self.eps);
        let inter_w = blk.fc1.b.len();
        let mut inter = vec![0f32; tokens * inter_w];
        blk.fc1.forward(
            MatRef { data: &normed, rows: tokens, cols: c, ld: c },
            &mut inter,
            inter_w,
            Epilogue::BiasGelu(&blk.fc1.b),
        );
        let mut out = vec![0f32; tokens * c];
        let im = MatRef { data: &inter, rows: tokens, cols: inter_w, ld: inter_w };
        blk.fc2.forward(im, &mut out, c, Epilogue::BiasResidual(&blk.fc2.b, &mid));
        out
    }

    /// Each 2 × 2 neighbourhood concatenated ((0,0), (1,0), (0,1), (1,1) as transformers orders
    /// them), normalized, and projected to twice the width.
    fn merge(&self, m: &Merge, x: &[f32], b: usize, side: usize, c: usize) -> Vec<f32> {
        let half = side / 2;
        let rows = b * half * half;
        let mut cat = vec![0f32; rows * 4 * c];
        for img in 0..b {
            for y in 0..half {
                for xx in 0..half {
                    let dst = &mut cat[((img * half + y) * half + xx) * 4 * c..][..4 * c];
                    for (q, (dy, dx)) in [(0, 0), (1, 0), (0, 1), (1, 1)].into_iter().enumerate() {
                        let src = (img * side + 2 * y + dy) * side + 2 * xx + dx;
                        dst[q * c..(q + 1) * c].copy_from_slice(&x[src * c..(src + 1) * c]);
                    }
                }
            }
        }
        norm_rows(self.isa, &mut cat, &m.norm, 4 * c, self.eps);
        let mut out = vec![0f32; rows * 2 * c];
        m.reduction.forward(MatRef { data: &cat, rows, cols: 4 * c, ld: 4 * c }, &mut out, 2 * c, Epilogue::None);
        out
    }
}
