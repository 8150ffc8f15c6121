//! Every backend against the plain formulas, computed here in f64: what a family may rely on.

use candle_core::{Device, Tensor};

use crate::pooling::Pooling;

use super::candle::Candle;
use super::cpu::Cpu;
use super::record::Recording;
use super::varlen::AttentionChoice;
use super::{Activation, AttentionSpec, Disentangled, Norm, NormKind, Ops, Post, RelativeBias, ScoreBias};

fn values(n: usize, seed: usize) -> Vec<f32> {
    (0..n).map(|i| (((i * 37 + seed * 11) % 29) as f32 - 14.0) * 0.05).collect()
}

fn close(got: &[f32], want: &[f64], tol: f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!((*g as f64 - w).abs() <= tol * (1.0 + w.abs()), "{what}[{i}]: {g} vs {w}");
    }
}

fn tensor(data: &[f32], rows: usize, cols: usize) -> Tensor {
    Tensor::from_vec(data.to_vec(), (rows, cols), &Device::Cpu).unwrap()
}

fn act(a: Activation, x: f64) -> f64 {
    let sigmoid = |v: f64| 1.0 / (1.0 + (-v).exp());
    match a {
        Activation::GeluErf => 0.5 * x * (1.0 + libm_erf(x / std::f64::consts::SQRT_2)),
        Activation::GeluTanh => {
            0.5 * x * (1.0 + ((2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x.powi(3))).tanh())
        }
        Activation::QuickGelu => x * sigmoid(1.702 * x),
        Activation::Relu => x.max(0.0),
        Activation::Silu => x * sigmoid(x),
        Activation::Tanh => x.tanh(),
    }
}

// Abramowitz–Stegun 7.1.26 is too coarse for a 1e-5 check; a series and a continued fraction are not.
fn libm_erf(x: f64) -> f64 {
    if x.abs() > 3.0 {
        return x.signum() * (1.0 - (-x * x).exp() / (x.abs() * std::f64::consts::PI.sqrt()));
    }
    let mut sum = 0.0;
    let mut term = x;
    for n in 0..60 {
        sum += term / (2 * n + 1) as f64;
        term *= -x * x / (n + 1) as f64;
    }
    2.0 / std::f64::consts::PI.sqrt() * sum
}

const ACTIVATIONS: [Activation; 6] = [
    Activation::GeluErf,
    Activation::GeluTanh,
    Activation::QuickGelu,
    Activation::Relu,
    Activation::Silu,
    Activation::Tanh,
];

fn linear_and_norm<O: Ops>(o: &O, name: &str, slack: f64) {
    let (rows, inp, out) = (5, 7, 6);
    let (x, w, b, r) = (values(rows * inp, 1), values(out * inp, 2), values(out, 3), values(rows * out, 4));
    let dense = |i: usize, j: usize| -> f64 {
        (0..inp).map(|k| x[i * inp + k] as f64 * w[j * inp + k] as f64).sum::<f64>() + b[j] as f64
    };
    let l = o.linear(tensor(&w, out, inp), Some(Tensor::new(&b[..], &Device::Cpu).unwrap()), "l").unwrap();
    let xt = o.upload(rows, inp, x.clone()).unwrap();
    let rt = o.upload(rows, out, r.clone()).unwrap();
    let mut y = o.empty().unwrap();
    let plain: Vec<f64> = (0..rows * out).map(|e| dense(e / out, e % out)).collect();
    o.linear_fwd(&xt, &l, Post::None, &mut y).unwrap();
    assert_eq!(o.dims(&y), (rows, out));
    close(&o.host(&y).unwrap(), &plain, 1e-5 + slack, &format!("{name} linear"));
    for a in ACTIVATIONS {
        o.linear_fwd(&xt, &l, Post::Act(a), &mut y).unwrap();
        let want: Vec<f64> = plain.iter().map(|&v| act(a, v)).collect();
        close(&o.host(&y).unwrap(), &want, 1e-5 + slack, &format!("{name} linear {a:?}"));
        // The same activation on its own, after the product.
        o.linear_fwd(&xt, &l, Post::None, &mut y).unwrap();
        o.activate(&mut y, a).unwrap();
        close(&o.host(&y).unwrap(), &want, 1e-5 + slack, &format!("{name} activate {a:?}"));
    }
    o.linear_fwd(&xt, &l, Post::Residual(&rt), &mut y).unwrap();
    let want: Vec<f64> = plain.iter().zip(&r).map(|(p, r)| p + *r as f64).collect();
    close(&o.host(&y).unwrap(), &want, 1e-5 + slack, &format!("{name} linear + residual"));

    let (g, beta) = (values(out, 5), values(out, 6));
    let norm = Norm {
        kind: NormKind::Layer,
        weight: o.param(Tensor::new(&g[..], &Device::Cpu).unwrap()).unwrap(),
        bias: Some(o.param(Tensor::new(&beta[..], &Device::Cpu).unwrap()).unwrap()),
        eps: 1e-5,
    };
    o.norm(&mut y, &norm).unwrap();
    let mut want_norm = Vec::new();
    for row in want.chunks(out) {
        let mean = row.iter().sum::<f64>() / out as f64;
        let var = row.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / out as f64;
        want_norm.extend(
            row.iter().enumerate().map(|(j, v)| (v - mean) / (var + 1e-5).sqrt() * g[j] as f64 + beta[j] as f64),
        );
    }
    close(&o.host(&y).unwrap(), &want_norm, 1e-5 + slack, &format!("{name} layer norm"));
}

fn embed<O: Ops>(o: &O, name: &str, slack: f64) {
    let (a, b) = (values(4 * 3, 7), values(6 * 3, 8));
    let ta = o.table(tensor(&a, 4, 3)).unwrap();
    // The second table read in place from a mapped checkpoint where the backend can.
    let dir = std::env::temp_dir().join(format!("aleph-conformance-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("model.safetensors");
    candle_core::safetensors::save(&std::collections::HashMap::from([("t".to_string(), tensor(&b, 6, 3))]), &file)
        .unwrap();
    let mapped = crate::loader::Checkpoint::find(&dir).unwrap().mapped().unwrap().unwrap();
    let tb =
        o.mapped_table(&mapped.matrix("t").unwrap().unwrap()).unwrap_or_else(|| o.table(tensor(&b, 6, 3)).unwrap());
    std::fs::remove_dir_all(&dir).unwrap();
    let (ia, ib) = ([3u32, 0, 3], [5u32, 1, 0]);
    let mut y = o.empty().unwrap();
    o.embed(&mut y, 3, &[(&ta, &ia), (&tb, &ib)]).unwrap();
    let want: Vec<f64> =
        (0..9).map(|e| a[ia[e / 3] as usize * 3 + e % 3] as f64 + b[ib[e / 3] as usize * 3 + e % 3] as f64).collect();
    close(&o.host(&y).unwrap(), &want, 1e-6 + slack, &format!("{name} embed"));
    assert!(o.embed(&mut y, 3, &[(&ta, &[4])]).is_err(), "{name}: an id past the table is an error");
    assert!(o.embed(&mut y, 3, &[(&tb, &[6])]).is_err(), "{name}: an id past the mapped table is an error");
    let mut z = o.upload(2, 3, vec![1.0; 6]).unwrap();
    o.add_rows(&mut z, &tb, &[2, 5]).unwrap();
    let want: Vec<f64> = (0..6).map(|e| 1.0 + b[[2, 5][e / 3] * 3 + e % 3] as f64).collect();
    close(&o.host(&z).unwrap(), &want, 1e-6 + slack, &format!("{name} add_rows from the second table"));
}

/// `softmax(scale · q kᵀ) v` per sequence and query head, from the fused layout.
fn naive_attention(qkv: &[f32], cu: &[usize], spec: &AttentionSpec) -> Vec<f64> {
    naive_biased(qkv, cu, spec, None)
}

/// DeBERTa's terms for the naive formula: (pos_key, pos_query, rows, span), see [`Disentangled`].
type NaiveDisentangled<'a> = (&'a [f32], &'a [f32], &'a [u32], usize);

/// [`naive_attention`] plus a relative bias `table[head][j − i + span − 1]`.
fn naive_biased(qkv: &[f32], cu: &[usize], spec: &AttentionSpec, rel: Option<(&[f32], usize)>) -> Vec<f64> {
    naive_full(qkv, cu, spec, rel, None)
}

/// [`naive_biased`] plus, before the scale, `q_i · pos_key[row] + k_j · pos_query[row]` for
/// `row = rows[i − j + span − 1]`.
fn naive_full(
    qkv: &[f32],
    cu: &[usize],
    spec: &AttentionSpec,
    rel: Option<(&[f32], usize)>,
    dis: Option<NaiveDisentangled>,
) -> Vec<f64> {
    let (hd, ld) = (spec.head_dim, spec.qkv_width());
    let group = spec.heads / spec.kv_heads;
    let tokens = *cu.last().unwrap();
    let mut out = vec![0.0; tokens * spec.out_width()];
    for s in 0..cu.len() - 1 {
        let (r0, n) = (cu[s], cu[s + 1] - cu[s]);
        for head in 0..spec.heads {
            let kv = head / group;
            let at = |t: usize, col: usize| qkv[(r0 + t) * ld + col] as f64;
            for i in 0..n {
                // Visible keys, written out from the spec's meaning rather than its helper.
                let visible: Vec<usize> = (0..n)
                    .filter(|&j| !(spec.causal && j > i) && spec.window.is_none_or(|w| i.abs_diff(j) <= w))
                    .collect();
                let scores: Vec<f64> = visible
                    .iter()
                    .map(|&j| {
                        let dot: f64 = (0..hd).map(|d| at(i, head * hd + d) * at(j, (spec.heads + kv) * hd + d)).sum();
                        let bias = rel.map_or(0.0, |(t, span)| t[head * (2 * span - 1) + j + span - 1 - i] as f64);
                        let terms = dis.map_or(0.0, |(pk, pq, rows, span)| {
                            let (row, w) = (rows[i + span - 1 - j] as usize, spec.out_width());
                            (0..hd)
                                .map(|d| {
                                    let c = row * w + head * hd + d;
                                    at(i, head * hd + d) * pk[c] as f64
                                        + at(j, (spec.heads + kv) * hd + d) * pq[c] as f64
                                })
                                .sum()
                        });
                        (dot + terms) * spec.scale as f64 + bias
                    })
                    .collect();
                let max = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let exps: Vec<f64> = scores.iter().map(|v| (v - max).exp()).collect();
                let total: f64 = exps.iter().sum();
                for d in 0..hd {
                    let v: f64 = exps
                        .iter()
                        .zip(&visible)
                        .map(|(e, &j)| e / total * at(j, (spec.heads + spec.kv_heads + kv) * hd + d))
                        .sum();
                    out[(r0 + i) * spec.out_width() + head * hd + d] = v;
                }
            }
        }
    }
    out
}

fn attention<O: Ops>(o: &O, name: &str, slack: f64) {
    let cu = [0usize, 3, 4, 9];
    let specs = [
        AttentionSpec::new(8, 2, false),
        AttentionSpec::new(8, 2, true),
        // Grouped-query: four query heads over two key/value heads, a scale that is not 1/√d.
        AttentionSpec { heads: 4, kv_heads: 2, head_dim: 3, scale: 0.3, causal: true, window: None },
        AttentionSpec { heads: 4, kv_heads: 1, head_dim: 2, scale: 0.7, causal: false, window: None },
        // Local windows (ModernBERT): narrower than some sequences, wider than others; and behind the token.
        AttentionSpec::new(8, 2, false).windowed(Some(1)),
        AttentionSpec::new(8, 2, false).windowed(Some(3)),
        AttentionSpec { heads: 4, kv_heads: 2, head_dim: 3, scale: 0.3, causal: true, window: Some(2) },
    ];
    let seqs = o.seqs(&cu).unwrap();
    for spec in specs {
        let qkv = values(9 * spec.qkv_width(), spec.heads + spec.head_dim);
        let x = o.upload(9, spec.qkv_width(), qkv.clone()).unwrap();
        let mut y = o.empty().unwrap();
        o.attention(&x, &seqs, &spec, ScoreBias::None, &mut y).unwrap();
        assert_eq!(o.dims(&y), (9, spec.out_width()));
        close(&o.host(&y).unwrap(), &naive_attention(&qkv, &cu, &spec), 1e-5 + slack, &format!("{name} {spec:?}"));
    }
    // A bias by relative offset (MPNet), with a span longer than the longest sequence.
    let spec = AttentionSpec::new(8, 2, false);
    let (qkv, span) = (values(9 * spec.qkv_width(), 19), 6);
    let table = values(spec.heads * (2 * span - 1), 20);
    let x = o.upload(9, spec.qkv_width(), qkv.clone()).unwrap();
    let mut y = o.empty().unwrap();
    o.attention(&x, &seqs, &spec, ScoreBias::Relative(RelativeBias { table: &table, span }), &mut y).unwrap();
    let want = naive_biased(&qkv, &cu, &spec, Some((&table, span)));
    close(&o.host(&y).unwrap(), &want, 1e-5 + slack, &format!("{name} relative bias"));
    // The same bias within a window.
    let windowed = spec.windowed(Some(2));
    o.attention(&x, &seqs, &windowed, ScoreBias::Relative(RelativeBias { table: &table, span }), &mut y).unwrap();
    let want = naive_biased(&qkv, &cu, &windowed, Some((&table, span)));
    close(&o.host(&y).unwrap(), &want, 1e-5 + slack, &format!("{name} relative bias in a window"));
    let short = RelativeBias { table: &table[..table.len() - 1], span };
    assert!(
        o.attention(&x, &seqs, &spec, ScoreBias::Relative(short), &mut y).is_err(),
        "{name}: a short bias table is an error"
    );
    // DeBERTa's content-by-position terms over a bucketed row table (several offsets share a row, the
    // ends clamp), each kind alone and both; and a row past the tables is an error.
    let span = 6;
    let rows: Vec<u32> = (0..2 * span - 1).map(|e| [0, 0, 1, 2, 3, 4, 5, 6, 7, 7, 8][e]).collect();
    let (pk, pq) = (values(9 * spec.out_width(), 21), values(9 * spec.out_width(), 22));
    let param = |t: &[f32]| o.param(tensor(t, 9, spec.out_width())).unwrap();
    let (pk_p, pq_p) = (param(&pk), param(&pq));
    let zero = vec![0.0; pk.len()];
    for (with_key, with_query) in [(true, false), (false, true), (true, true)] {
        let d = Disentangled {
            pos_key: with_key.then_some(&pk_p),
            pos_query: with_query.then_some(&pq_p),
            rows: &rows,
            span,
        };
        o.attention(&x, &seqs, &spec, ScoreBias::Disentangled(d), &mut y).unwrap();
        let naive = (if with_key { &pk } else { &zero }, if with_query { &pq } else { &zero });
        let want = naive_full(&qkv, &cu, &spec, None, Some((naive.0, naive.1, &rows, span)));
        close(&o.host(&y).unwrap(), &want, 1e-5 + slack, &format!("{name} disentangled {with_key} {with_query}"));
    }
    let past: Vec<u32> = rows.iter().map(|r| r + 2).collect();
    let d = Disentangled { pos_key: Some(&pk_p), pos_query: None, rows: &past, span };
    assert!(o.attention(&x, &seqs, &spec, ScoreBias::Disentangled(d), &mut y).is_err(), "{name}: rows past the table");
    let wrong = o.upload(9, 5, values(45, 0)).unwrap();
    let mut y = o.empty().unwrap();
    assert!(
        o.attention(&wrong, &seqs, &specs[0], ScoreBias::None, &mut y).is_err(),
        "{name}: a mis-shaped input is an error"
    );
}

fn rms_glu_and_rows<O: Ops>(o: &O, name: &str, slack: f64) {
    let (rows, w) = (3, 8);
    let x = values(rows * w, 9);
    let g = values(w, 10);
    let norm = Norm {
        kind: NormKind::Rms,
        weight: o.param(Tensor::new(&g[..], &Device::Cpu).unwrap()).unwrap(),
        bias: None,
        eps: 1e-6,
    };
    let mut y = o.upload(rows, w, x.clone()).unwrap();
    o.norm(&mut y, &norm).unwrap();
    let want: Vec<f64> = x
        .chunks(w)
        .flat_map(|row| {
            let rms = (row.iter().map(|v| (*v as f64).powi(2)).sum::<f64>() / w as f64 + 1e-6).sqrt();
            row.iter().zip(&g).map(|(v, g)| *v as f64 / rms * *g as f64).collect::<Vec<_>>()
        })
        .collect();
    close(&o.host(&y).unwrap(), &want, 1e-5 + slack, &format!("{name} rms norm"));

    // The same norm added to a residual (Gemma 3's sandwich).
    let base = values(rows * w, 14);
    let (mut block, mut acc) = (o.upload(rows, w, x.clone()).unwrap(), o.upload(rows, w, base.clone()).unwrap());
    o.add_norm(&mut block, &norm, &mut acc).unwrap();
    let summed: Vec<f64> = want.iter().zip(&base).map(|(n, b)| n + *b as f64).collect();
    close(&o.host(&acc).unwrap(), &summed, 1e-5 + slack, &format!("{name} add norm"));
    let mut short = o.upload(rows - 1, w, base[w..].to_vec()).unwrap();
    assert!(o.add_norm(&mut block, &norm, &mut short).is_err(), "{name}: shapes differ");

    let xt = o.upload(rows, w, x.clone()).unwrap();
    for a in ACTIVATIONS {
        let mut out = o.empty().unwrap();
        o.glu(&xt, a, &mut out).unwrap();
        assert_eq!(o.dims(&out), (rows, w / 2));
        let want: Vec<f64> = (0..rows * w / 2)
            .map(|e| act(a, x[(e / 4) * w + e % 4] as f64) * x[(e / 4) * w + 4 + e % 4] as f64)
            .collect();
        close(&o.host(&out).unwrap(), &want, 1e-5 + slack, &format!("{name} glu {a:?}"));
    }

    // Rows picked from two matrices, a table added, the result read as another shape.
    let (a, b) = (o.upload(2, 4, values(8, 11)).unwrap(), o.upload(3, 4, values(12, 12)).unwrap());
    let (av, bv) = (values(8, 11), values(12, 12));
    let mut out = o.empty().unwrap();
    o.gather_rows(&mut out, &[&a, &b], &[(1, 2), (0, 0), (1, 0)]).unwrap();
    let table = values(5 * 4, 13);
    o.add_rows(&mut out, &o.table(tensor(&table, 5, 4)).unwrap(), &[4, 0, 4]).unwrap();
    let picked = [&bv[8..12], &av[0..4], &bv[0..4]];
    let want: Vec<f64> =
        (0..12).map(|e| picked[e / 4][e % 4] as f64 + table[[4, 0, 4][e / 4] * 4 + e % 4] as f64).collect();
    o.reshape(&mut out, 2, 6).unwrap();
    assert_eq!(o.dims(&out), (2, 6));
    close(&o.host(&out).unwrap(), &want, 1e-6 + slack, &format!("{name} gather + add rows + reshape"));
    assert!(o.gather_rows(&mut out, &[&a], &[(0, 2)]).is_err(), "{name}: a row past the matrix is an error");
    assert!(o.reshape(&mut out, 5, 5).is_err(), "{name}: a reshape must keep the element count");
}

/// Rotary positions, then grouped-query causal attention: what a decoder layer runs.
fn rotary_attention<O: Ops>(o: &O, name: &str, slack: f64) {
    let cu = [0usize, 4, 7];
    let spec = AttentionSpec { heads: 4, kv_heads: 2, head_dim: 4, scale: 0.5, causal: true, window: None };
    let (rows, half) = (7, 2);
    let qkv = values(rows * spec.qkv_width(), 14);
    let ang: Vec<f32> = (0..rows * half).map(|i| (i as f32 * 0.37).sin() * 3.0).collect();
    let (cos, sin): (Vec<f32>, Vec<f32>) = ang.iter().map(|a| (a.cos(), a.sin())).unzip();
    let mut rotated = qkv.clone();
    for r in 0..rows {
        for head in 0..spec.heads + spec.kv_heads {
            let base = r * spec.qkv_width() + head * spec.head_dim;
            for j in 0..half {
                let (x, y) = (qkv[base + j], qkv[base + half + j]);
                let (c, s) = (cos[r * half + j], sin[r * half + j]);
                rotated[base + j] = x * c - y * s;
                rotated[base + half + j] = y * c + x * s;
            }
        }
    }
    let mut x = o.upload(rows, spec.qkv_width(), qkv).unwrap();
    let (ct, st) = (o.upload(rows, half, cos).unwrap(), o.upload(rows, half, sin).unwrap());
    o.rotary(&mut x, &spec, &ct, &st).unwrap();
    let want: Vec<f64> = rotated.iter().map(|v| *v as f64).collect();
    close(&o.host(&x).unwrap(), &want, 1e-6 + slack, &format!("{name} rotary"));
    let mut y = o.empty().unwrap();
    o.attention(&x, &o.seqs(&cu).unwrap(), &spec, ScoreBias::None, &mut y).unwrap();
    close(
        &o.host(&y).unwrap(),
        &naive_attention(&rotated, &cu, &spec),
        1e-5 + slack,
        &format!("{name} rotary attention"),
    );
}

/// One query row per sequence over that sequence's keys and values.
fn pooled<O: Ops>(o: &O, name: &str, slack: f64) {
    let cu = [0usize, 3, 8];
    for spec in [
        AttentionSpec { heads: 2, kv_heads: 2, head_dim: 3, scale: 0.6, causal: false, window: None },
        AttentionSpec { heads: 4, kv_heads: 2, head_dim: 2, scale: 1.0, causal: false, window: None },
    ] {
        let (qw, kvw) = (spec.heads * spec.head_dim, 2 * spec.kv_heads * spec.head_dim);
        let (q, kv) = (values(2 * qw, 15), values(8 * kvw, 16));
        // As a full attention whose query rows are the pooled query: each sequence's first output row.
        let mut fused = Vec::new();
        for s in 0..2 {
            for t in cu[s]..cu[s + 1] {
                fused.extend_from_slice(&q[s * qw..(s + 1) * qw]);
                fused.extend_from_slice(&kv[t * kvw..(t + 1) * kvw]);
            }
        }
        let full = naive_attention(&fused, &cu, &spec);
        let want: Vec<f64> = (0..2).flat_map(|s| full[cu[s] * qw..(cu[s] + 1) * qw].to_vec()).collect();
        let mut y = o.empty().unwrap();
        let (qt, kvt) = (o.upload(2, qw, q).unwrap(), o.upload(8, kvw, kv).unwrap());
        o.pooled_attention(&qt, &kvt, &o.seqs(&cu).unwrap(), &spec, &mut y).unwrap();
        close(&o.host(&y).unwrap(), &want, 1e-5 + slack, &format!("{name} pooled {spec:?}"));
    }
}

/// Windows of `n` rows with a per-head bias and, optionally, shift groups.
fn windows<O: Ops>(o: &O, name: &str, slack: f64) {
    let (n, w) = (4usize, 3usize);
    let spec = AttentionSpec { heads: 2, kv_heads: 2, head_dim: 3, scale: 0.8, causal: false, window: None };
    let qkv = values(n * w * spec.qkv_width(), 17);
    let bias = values(spec.heads * n * n, 18);
    let groups: Vec<u32> = (0..n * w).map(|r| (r % 3 == 0) as u32).collect();
    let x = o.upload(n * w, spec.qkv_width(), qkv.clone()).unwrap();
    let b = o.param(tensor(&bias, spec.heads * n, n)).unwrap();
    for grouped in [false, true] {
        let mut y = o.empty().unwrap();
        o.window_attention(&x, n, &spec, &b, grouped.then_some(&groups[..]), &mut y).unwrap();
        let (hd, ld) = (spec.head_dim, spec.qkv_width());
        let at = |r: usize, col: usize| qkv[r * ld + col] as f64;
        let mut want = vec![0.0; n * w * spec.out_width()];
        for win in 0..w {
            for head in 0..spec.heads {
                for i in 0..n {
                    let r = win * n + i;
                    let scores: Vec<f64> = (0..n)
                        .map(|j| {
                            let c = win * n + j;
                            let dot: f64 = (0..hd).map(|d| at(r, head * hd + d) * at(c, (2 + head) * hd + d)).sum();
                            let mut v = dot * spec.scale as f64 + bias[(head * n + i) * n + j] as f64;
                            if grouped && groups[r] != groups[c] {
                                v -= 100.0;
                            }
                            v
                        })
                        .collect();
                    let max = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                    let exps: Vec<f64> = scores.iter().map(|v| (v - max).exp()).collect();
                    let total: f64 = exps.iter().sum();
                    for d in 0..hd {
                        want[r * spec.out_width() + head * hd + d] =
                            (0..n).map(|j| exps[j] / total * at(win * n + j, (4 + head) * hd + d)).sum();
                    }
                }
            }
        }
        close(&o.host(&y).unwrap(), &want, 1e-5 + slack, &format!("{name} window attention, groups {grouped}"));
    }
}

/// Qwen3's per-head RMS norms on queries and keys (grouped: two key heads), values untouched.
fn head_norms<O: Ops>(o: &O, name: &str, slack: f64) {
    let spec = AttentionSpec { heads: 4, kv_heads: 2, head_dim: 3, scale: 0.5, causal: true, window: None };
    let (rows, hd, width) = (5, 3, spec.qkv_width());
    let qkv = values(rows * width, 21);
    let (qw, kw) = (values(hd, 22), values(hd, 23));
    let norm = |w: &[f32]| Norm {
        kind: NormKind::Rms,
        weight: o.param(tensor(w, 1, hd).flatten_all().unwrap()).unwrap(),
        bias: None,
        eps: 1e-6,
    };
    let mut x = o.upload(rows, width, qkv.clone()).unwrap();
    o.head_norm(&mut x, &spec, &norm(&qw), &norm(&kw)).unwrap();
    let mut want: Vec<f64> = qkv.iter().map(|&v| v as f64).collect();
    for r in 0..rows {
        for head in 0..spec.heads + spec.kv_heads {
            let w = if head < spec.heads { &qw } else { &kw };
            let h = &mut want[r * width + head * hd..][..hd];
            let rms = (h.iter().map(|v| v * v).sum::<f64>() / hd as f64 + 1e-6).sqrt();
            h.iter_mut().zip(w).for_each(|(v, &g)| *v = *v / rms * g as f64);
        }
    }
    close(&o.host(&x).unwrap(), &want, 1e-5 + slack, &format!("{name} head norms"));
}

/// Sequences longer than the CPU kernels' query block (256 rows), so queries run a block at a time: each
/// masking kind, and a relative bias.
fn long_sequences<O: Ops>(o: &O, name: &str, slack: f64) {
    let cu = [0usize, 600, 900];
    let seqs = o.seqs(&cu).unwrap();
    let base = AttentionSpec { heads: 2, kv_heads: 1, head_dim: 4, scale: 0.5, causal: false, window: None };
    let specs = [base, AttentionSpec { causal: true, ..base }, base.windowed(Some(50))];
    let qkv = values(900 * base.qkv_width(), 31);
    let x = o.upload(900, base.qkv_width(), qkv.clone()).unwrap();
    let mut y = o.empty().unwrap();
    for spec in specs {
        o.attention(&x, &seqs, &spec, ScoreBias::None, &mut y).unwrap();
        close(&o.host(&y).unwrap(), &naive_attention(&qkv, &cu, &spec), 1e-5 + slack, &format!("{name} long {spec:?}"));
    }
    let span = 600;
    let table = values(base.heads * (2 * span - 1), 32);
    o.attention(&x, &seqs, &base, ScoreBias::Relative(RelativeBias { table: &table, span }), &mut y).unwrap();
    let want = naive_biased(&qkv, &cu, &base, Some((&table, span)));
    close(&o.host(&y).unwrap(), &want, 1e-5 + slack, &format!("{name} long, relative bias"));
}

/// Every pooling over packed sequences (one of them empty), against sentence-transformers' formulas.
fn pools<O: Ops>(o: &O, name: &str, slack: f64) {
    let width = 6;
    for cu in [vec![0usize, 1, 5, 12], vec![0, 3, 3, 7]] {
        let tokens = *cu.last().unwrap();
        let data = values(tokens * width, 41);
        for pooling in
            [Pooling::Mean, Pooling::Cls, Pooling::LastToken, Pooling::Max, Pooling::MeanSqrtLen, Pooling::WeightedMean]
        {
            let x = o.upload(tokens, width, data.clone()).unwrap();
            let got = o.pool(x, &cu, pooling).unwrap();
            assert_eq!(got.len(), cu.len() - 1, "{name} {pooling:?}");
            for (i, w) in cu.windows(2).enumerate() {
                let rows: Vec<&[f32]> = data[w[0] * width..w[1] * width].chunks(width).collect();
                let n = rows.len();
                let want: Vec<f64> = (0..width)
                    .map(|c| {
                        let col = rows.iter().map(|r| r[c] as f64);
                        match (pooling, n) {
                            (_, 0) => 0.0,
                            (Pooling::Cls, _) => rows[0][c] as f64,
                            (Pooling::LastToken, _) => rows[n - 1][c] as f64,
                            (Pooling::Max, _) => col.fold(f64::MIN, f64::max),
                            (Pooling::Mean, _) => col.sum::<f64>() / n as f64,
                            (Pooling::MeanSqrtLen, _) => col.sum::<f64>() / (n as f64).sqrt(),
                            (Pooling::WeightedMean, _) => {
                                col.enumerate().map(|(t, v)| (t + 1) as f64 * v).sum::<f64>() / (n * (n + 1) / 2) as f64
                            }
                        }
                    })
                    .collect();
                close(&got[i], &want, 1e-6 + slack, &format!("{name} {pooling:?} of {cu:?}, sequence {i}"));
            }
        }
    }
}

/// `o` against the formulas, each check's tolerance widened by `slack` for a backend that rounds to half width.
fn conforms<O: Ops>(o: &O, name: &str, slack: f64) {
    pools(o, name, slack);
    long_sequences(o, name, slack);
    head_norms(o, name, slack);
    windows(o, name, slack);
    linear_and_norm(o, name, slack);
    embed(o, name, slack);
    attention(o, name, slack);
    rms_glu_and_rows(o, name, slack);
    rotary_attention(o, name, slack);
    pooled(o, name, slack);
}

#[test]
fn the_cpu_backend_computes_the_formulas() {
    conforms(&Cpu::f32(), "cpu", 0.0);
}

/// `--dtype bfloat16`'s attention: bf16 products where they are fast here (AMX tiles for a head width of whole
/// tiles, AVX512-BF16 otherwise), f32 elsewhere; within bf16's rounding of the formula over several key blocks,
/// bidirectional, causal and windowed.
#[test]
fn bf16_attention_stays_within_rounding_of_the_formula() {
    let o = Cpu::bf16();
    let cu = [0usize, 600, 900];
    let seqs = o.seqs(&cu).unwrap();
    for hd in [4, 64] {
        let base = AttentionSpec {
            heads: 2,
            kv_heads: 1,
            head_dim: hd,
            scale: 1.0 / (hd as f32).sqrt(),
            causal: false,
            window: None,
        };
        for spec in [base, AttentionSpec { causal: true, ..base }, base.windowed(Some(50))] {
            let qkv = values(900 * spec.qkv_width(), 31);
            let x = o.upload(900, spec.qkv_width(), qkv.clone()).unwrap();
            let mut y = o.empty().unwrap();
            o.attention(&x, &seqs, &spec, ScoreBias::None, &mut y).unwrap();
            close(&o.host(&y).unwrap(), &naive_attention(&qkv, &cu, &spec), 1e-2, &format!("bf16 {spec:?}"));
        }
    }
}

#[test]
fn the_candle_backend_computes_the_formulas() {
    conforms(&Candle::new(Device::Cpu), "candle", 0.0);
    // Attention over packed sequences (what a GPU runs), on candle's CPU device.
    let unpadded = Candle::new(Device::Cpu).with_attention(AttentionChoice::Unpadded).unwrap();
    conforms(&unpadded, "candle unpadded", 0.0);
}

/// Half widths on candle: weights and activations rounded to f16 (11 significant bits) or bf16 (8), the norms
/// and softmax in f32; each op within a few of those roundings of the formula.
#[test]
fn the_candle_backend_computes_the_formulas_in_half_precision() {
    for (dtype, slack) in [(candle_core::DType::F16, 1e-2), (candle_core::DType::BF16, 4e-2)] {
        let o = Candle::with_dtype(Device::Cpu, dtype).unwrap();
        conforms(&o, &format!("candle {dtype:?}"), slack);
    }
    assert!(Candle::with_dtype(Device::Cpu, candle_core::DType::U8).is_err());
}

#[test]
fn recording_computes_as_its_inner_backend_and_keeps_per_channel_maxima() {
    let rec = Recording::new(Cpu::f32());
    conforms(&rec, "recording", 0.0);
    // Every linear call above was named "l" with a 7-wide input drawn from `values(_, 1)`.
    let maxima = rec.into_maxima();
    let x = values(5 * 7, 1);
    let want: Vec<f32> = (0..7).map(|c| (0..5).map(|r| x[r * 7 + c].abs()).fold(0.0, f32::max)).collect();
    assert_eq!(maxima["l"], want);
}

#[test]
fn int8_linear_layers_stay_close_to_f32() {
    let (rows, inp, out) = (4, 64, 8);
    let (x, w) = (values(rows * inp, 1), values(out * inp, 2));
    let run = |o: &Cpu| {
        let l = o.linear(tensor(&w, out, inp), None, "l").unwrap();
        let mut y = o.empty().unwrap();
        o.linear_fwd(&o.upload(rows, inp, x.clone()).unwrap(), &l, Post::None, &mut y).unwrap();
        y.data
    };
    let (f, q) = (run(&Cpu::f32()), run(&Cpu::int8(Default::default())));
    let scale = f.iter().fold(0f32, |m, v| m.max(v.abs()));
    for (a, b) in f.iter().zip(&q) {
        assert!((a - b).abs() < 0.02 * scale, "{a} vs {b}");
    }
}
