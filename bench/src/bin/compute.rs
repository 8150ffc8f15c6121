//! Compute microbenchmark: the machine's f32 GEMM rate at the model's shapes, and the encoder's
//! forward rate (tokens/s, achieved GFLOP/s) for each backend, batch size and length, in one run.
//!
//!   compute --model models/all-MiniLM-L6-v2 [--corpus ../shared/data/stsbenchmark.tsv.gz]
//!
//! With `--corpus`, also the sentences/s on real sentences in batches of 32 (what the ONNX Runtime
//! comparison, bench/onnx_compare.py, runs on the same batches).

use std::path::PathBuf;
use std::time::Instant;

use aleph_eval::metrics::spearman;
use aleph_models::cpu::bgemm::{gemm_bf16, PackedBf16};
use aleph_models::cpu::gemm::{gemm, Epilogue, MatRef, PackedB};
use aleph_models::cpu::qgemm::{gemm_i8, PackedI8};
use aleph_models::cpu::Isa;
use aleph_models::{Backend, Batch, DType, LoadOptions, LoadedModel};
use clap::Parser;

#[derive(Parser)]
struct Args {
    /// Model folder (BERT family).
    #[arg(long, default_value = "models/all-MiniLM-L6-v2")]
    model: PathBuf,
    /// STS Benchmark .tsv.gz, for the real-sentence run.
    #[arg(long)]
    corpus: Option<String>,
    /// Sentences in the real-sentence run.
    #[arg(long, default_value_t = 1024)]
    sentences: usize,
    /// Seconds to spend per measurement (at least 3 repetitions each).
    #[arg(long, default_value_t = 1.0)]
    seconds: f64,
    /// Skip the candle backend.
    #[arg(long)]
    no_candle: bool,
    /// Only the real-sentence run (for profiling it).
    #[arg(long)]
    corpus_only: bool,
    /// `--pooling-method` for the model (`splade` serves a masked LM as a sparse encoder).
    #[arg(long, default_value = "auto")]
    pooling: aleph_models::PoolingChoice,
    /// Skip the accuracy section (random-weight models have nothing to score).
    #[arg(long)]
    no_accuracy: bool,
    /// Only these forward-pass shapes, as batch×tokens (e.g. `--shape 32x256`); all when absent.
    #[arg(long, value_parser = parse_shape)]
    shape: Vec<(usize, usize)>,
    /// Only the f32 GEMM at these shapes, as m×k×n (e.g. `--gemm 2048x1024x3072`), then exit.
    #[arg(long, value_parser = parse_gemm)]
    gemm: Vec<(usize, usize, usize)>,
    /// Aleph's CPU kernels at these dtypes (for profiling one of them).
    #[arg(long, value_delimiter = ',', default_value = "float32,bfloat16,int8")]
    dtypes: Vec<String>,
    /// The real-sentence run's sequences under this adapter (jina-embeddings-v3's task LoRA, by index).
    #[arg(long)]
    adapter: Option<u16>,
}

fn parse_gemm(s: &str) -> Result<(usize, usize, usize), String> {
    let v: Vec<usize> = s.split('x').map(|x| x.parse().map_err(|_| "expected MxKxN")).collect::<Result<_, _>>()?;
    match v[..] {
        [m, k, n] => Ok((m, k, n)),
        _ => Err("expected MxKxN".into()),
    }
}

fn parse_shape(s: &str) -> Result<(usize, usize), String> {
    let (b, l) = s.split_once('x').ok_or("expected BATCHxTOKENS")?;
    Ok((b.parse().map_err(|_| "bad batch")?, l.parse().map_err(|_| "bad tokens")?))
}

/// Median seconds of `f` over at least 3 runs and about `budget` seconds.
fn time(budget: f64, mut f: impl FnMut()) -> f64 {
    f(); // warm
    let mut runs = Vec::new();
    let start = Instant::now();
    while runs.len() < 3 || start.elapsed().as_secs_f64() < budget {
        let t = Instant::now();
        f();
        runs.push(t.elapsed().as_secs_f64());
        if runs.len() >= 200 {
            break;
        }
    }
    runs.sort_by(f64::total_cmp);
    runs[runs.len() / 2]
}

/// The geometry, under BERT's names, DistilBERT's or GPT-2's (NomicBERT's remote code).
#[derive(serde::Deserialize)]
struct Cfg {
    #[serde(alias = "dim", alias = "n_embd")]
    hidden_size: usize,
    #[serde(alias = "hidden_dim", alias = "n_inner")]
    intermediate_size: usize,
    #[serde(alias = "n_layers", alias = "n_layer")]
    num_hidden_layers: usize,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let cfg: Cfg = serde_json::from_str(&std::fs::read_to_string(args.model.join("config.json"))?)?;
    let (h, i, layers) = (cfg.hidden_size, cfg.intermediate_size, cfg.num_hidden_layers);
    let threads = aleph_models::cpu::pool().current_num_threads();
    println!(
        "# CPU: {} kernels (bf16: {}, int8: {}), {threads} compute threads",
        Isa::get().name(),
        aleph_models::cpu::bgemm::kernel_name(),
        aleph_models::cpu::qgemm::kernel_name()
    );

    println!(
        "\n## GEMM, C[m×n] = A[m×k]·B[k×n] (B packed, as the model's weights): f32, bf16 weights, int8 (A quantized \
         per row inside); each the median of 5 rounds taken in turn"
    );
    println!(
        "| m | k | n | what | f32 GFLOP/s | bf16 GFLOP/s | int8 GOP/s | bf16 / f32 | int8 / f32 |\n\
         |---|---|---|---|---:|---:|---:|---:|---:|"
    );
    let mut peak: f64 = 0.0;
    let custom: Vec<(usize, usize, usize, &str)> = args.gemm.iter().map(|&(m, k, n)| (m, k, n, "--gemm")).collect();
    let default_shapes = [
        (2048, h, 3 * h, "QKV"),
        (2048, h, h, "attention out"),
        (2048, h, i, "FFN in"),
        (2048, i, h, "FFN out"),
        (256, h, 3 * h, "QKV, 256 tokens"),
        (16, h, i, "FFN in, 16 tokens"),
    ];
    let shapes: &[_] = if !custom.is_empty() {
        &custom
    } else if args.corpus_only {
        &[]
    } else {
        &default_shapes
    };
    for &(m, k, n, what) in shapes {
        let a: Vec<f32> = (0..m * k).map(|x| (x % 7) as f32 * 0.1).collect();
        let w: Vec<f32> = (0..k * n).map(|x| (x % 5) as f32 * 0.1).collect();
        let packed = PackedB::pack(k, n, &w, 1, k);
        let half = PackedBf16::pack(k, n, &w);
        let quantized = PackedI8::quantize(k, n, &w);
        let mut c = vec![0f32; m * n];
        let a = MatRef { data: &a, rows: m, cols: k, ld: k };
        let mut secs = [Vec::new(), Vec::new(), Vec::new()];
        for _ in 0..5 {
            secs[0].push(time(args.seconds / 5.0, || gemm(a, &packed, &mut c, n, Epilogue::None, true)));
            secs[1].push(time(args.seconds / 5.0, || gemm_bf16(a, &half, &mut c, n, Epilogue::None, true)));
            secs[2].push(time(args.seconds / 5.0, || gemm_i8(a, &quantized, &mut c, n, Epilogue::None, true)));
        }
        let [f32s, bf16s, int8s] = secs.map(|mut s| {
            s.sort_by(f64::total_cmp);
            2.0 * (m * k * n) as f64 / s[2] / 1e9
        });
        peak = peak.max(f32s);
        println!(
            "| {m} | {k} | {n} | {what} | {f32s:.1} | {bf16s:.1} | {int8s:.1} | {:.2}× | {:.2}× |",
            bf16s / f32s,
            int8s / f32s
        );
    }
    println!("\nbest GEMM rate at the model's shapes: {peak:.1} GFLOP/s");
    if !custom.is_empty() {
        return Ok(());
    }

    let tokenizer_text = "the quick brown fox jumps over the lazy dog ".repeat(64);
    let mut backends: Vec<_> = [
        (Backend::Auto, DType::Auto, "aleph-cpu", "float32"),
        (Backend::Auto, DType::BFloat16, "aleph-cpu-bf16", "bfloat16"),
        (Backend::Auto, DType::Int8, "aleph-cpu-int8", "int8"),
    ]
    .into_iter()
    .filter(|(_, _, _, dtype)| args.dtypes.iter().any(|d| d == dtype))
    .map(|(b, d, name, _)| (b, d, name))
    .collect();
    if !args.no_candle {
        backends.push((Backend::Candle, DType::Auto, "candle"));
    }
    let models: Vec<(&str, LoadedModel)> = backends
        .iter()
        .map(|(b, dtype, name)| {
            let opts = LoadOptions { backend: *b, dtype: *dtype, pooling: args.pooling, ..Default::default() };
            Ok((*name, aleph_models::load(&args.model, &opts)?))
        })
        .collect::<anyhow::Result<_>>()?;
    let full = models[0].1.tokenizer.encode(&tokenizer_text)?;

    println!("\n## Forward pass (encoder + pooling), synthetic inputs of equal length");
    println!("FLOPs per token = layers × (2·(4h² + 2hi) + 4·len·h), h={h}, i={i}, layers={layers}");
    println!("| backend | batch | tokens | ms | tokens/s | GFLOP/s | % of best GEMM |\n|---|---|---|---|---|---|---|");
    let all = [(1, 16), (1, 64), (1, 256), (8, 16), (8, 64), (8, 256), (32, 16), (32, 64), (32, 256)];
    let shapes = if args.shape.is_empty() { &all[..] } else { &args.shape[..] };
    for &(bs, len) in shapes {
        let mut batch = Batch::new();
        // The sample's ids over and over, for lengths past it (long-input shapes such as 1x4096).
        let ids: Vec<u32> = full.ids.iter().copied().cycle().take(len).collect();
        let types = vec![0u32; len];
        for _ in 0..bs {
            batch.push(&ids, &types);
        }
        let flops_per_token = layers as f64 * (2.0 * (4 * h * h + 2 * h * i) as f64 + 4.0 * (len * h) as f64);
        for (name, m) in &models {
            let secs = time(args.seconds, || {
                m.model.forward(&batch).expect("forward");
            });
            let tokens = (bs * len) as f64;
            let gflops = tokens * flops_per_token / secs / 1e9;
            println!(
                "| {name} | {bs} | {len} | {:.2} | {:.0} | {gflops:.1} | {:.0}% |",
                secs * 1e3,
                tokens / secs,
                100.0 * gflops / peak
            );
        }
    }

    if let Some(corpus) = &args.corpus {
        let sentences: Vec<String> = aleph_bench::load_sentences(corpus)?
            .into_iter()
            .take(args.sentences)
            .map(|s| s.trim().to_string())
            .collect();
        println!(
            "\n## Real sentences: {} STS Benchmark sentences in batches of 32; each backend the median of 5 rounds \
             taken in turn",
            sentences.len()
        );
        println!("| backend | sentences/s | tokens/s | / first |\n|---|---|---|---:|");
        let runs: Vec<(Vec<Batch>, usize)> = models
            .iter()
            .map(|(_, m)| {
                let batches: Vec<Batch> = sentences
                    .chunks(32)
                    .map(|chunk| {
                        let mut b = Batch::new();
                        for s in chunk {
                            let e = m.tokenizer.encode(s).expect("tokenize");
                            b.push_with(&e.ids, &e.type_ids, Default::default(), args.adapter);
                        }
                        b
                    })
                    .collect();
                let tokens = batches.iter().map(Batch::total_tokens).sum();
                (batches, tokens)
            })
            .collect();
        // Rounds in turn, so a slow spell of a shared host falls on every backend alike.
        let mut secs = vec![Vec::new(); models.len()];
        for _ in 0..5 {
            for (i, ((_, m), (batches, _))) in models.iter().zip(&runs).enumerate() {
                secs[i].push(time(args.seconds * 3.0 / 5.0, || {
                    for b in batches {
                        m.model.forward(b).expect("forward");
                    }
                }));
            }
        }
        let mut first = None;
        for (((name, _), (_, tokens)), mut s) in models.iter().zip(&runs).zip(secs) {
            s.sort_by(f64::total_cmp);
            let rate = sentences.len() as f64 / s[2];
            let base = *first.get_or_insert(rate);
            println!("| {name} | {rate:.1} | {:.0} | {:.2}× |", *tokens as f64 / s[2], rate / base);
        }
    }
    if let (Some(corpus), false) = (&args.corpus, args.no_accuracy) {
        accuracy(&models, corpus, &args.model)?;
    }
    Ok(())
}

/// Cosine of each backend's vectors to the f32 CPU path's on the parity sentences, and the STS Benchmark
/// test-split Spearman correlation (cosine of each pair against the human score) per backend.
fn accuracy(models: &[(&str, LoadedModel)], corpus: &str, model_dir: &std::path::Path) -> anyhow::Result<()> {
    let embed = |m: &LoadedModel, texts: &[String]| -> anyhow::Result<Vec<Vec<f32>>> {
        let mut out = Vec::new();
        for chunk in texts.chunks(32) {
            let mut b = Batch::new();
            for t in chunk {
                let e = m.tokenizer.encode(t.trim())?;
                b.push(&e.ids, &e.type_ids);
            }
            out.extend(m.model.forward(&b)?.vectors);
        }
        Ok(out)
    };
    let fixtures = model_dir.join("../../tests/fixtures/minilm/sentences.json");
    let parity: Vec<String> = match std::fs::read_to_string(&fixtures) {
        Ok(s) => serde_json::from_str(&s)?,
        Err(_) => Vec::new(),
    };
    let pairs = aleph_eval::datasets::read_sts(std::path::Path::new(corpus), "test")?;
    let (scores, s1, s2) = (pairs.gold, pairs.first, pairs.second);
    println!("\n## Accuracy");
    println!(
        "| backend | cosine to {} (mean / min, {} parity sentences) | STS-B test Spearman ({} pairs) |",
        models[0].0,
        parity.len(),
        scores.len()
    );
    println!("|---|---|---|");
    let reference = embed(&models[0].1, &parity)?;
    for (name, m) in models {
        let v = embed(m, &parity)?;
        let cos: Vec<f64> = v.iter().zip(&reference).map(|(a, b)| cosine(a, b)).collect();
        let mean = cos.iter().sum::<f64>() / cos.len().max(1) as f64;
        let min = cos.iter().copied().fold(1.0, f64::min);
        let (a, b) = (embed(m, &s1)?, embed(m, &s2)?);
        let sims: Vec<f64> = a.iter().zip(&b).map(|(x, y)| cosine(x, y)).collect();
        println!("| {name} | {mean:.6} / {min:.6} | {:.4} |", spearman(&sims, &scores));
    }
    Ok(())
}

fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let dot: f64 = a.iter().zip(b).map(|(x, y)| *x as f64 * *y as f64).sum();
    let na: f64 = a.iter().map(|x| (*x as f64).powi(2)).sum::<f64>().sqrt();
    let nb: f64 = b.iter().map(|x| (*x as f64).powi(2)).sum::<f64>().sqrt();
    dot / (na * nb).max(1e-30)
}
