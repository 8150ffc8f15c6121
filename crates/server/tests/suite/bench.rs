//! `aleph bench` as a user runs it: the binary, real model files, HTTP over a local port, the plot files
//! read back. Speeds are not asserted (they are the output); what is checked is that each measurement ran
//! what it says it ran: the inputs' token counts, every answer checked, each dtype loaded as asked.

use std::process::{Command, Output};

use serde_json::Value;

use crate::common::{minilm, tiny};

fn bench(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_aleph"))
        .arg("bench")
        .args(args)
        .env_remove("ALEPH_MODEL_ID")
        .output()
        .expect("running aleph bench")
}

/// The JSON report of a run that must succeed.
fn bench_json(args: &[&str]) -> Value {
    let mut all = args.to_vec();
    all.push("--json");
    let out = bench(&all);
    assert!(out.status.success(), "aleph bench {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("--json prints one JSON object")
}

fn rows<'a>(report: &'a Value, key: &str) -> &'a Vec<Value> {
    report[key].as_array().unwrap_or_else(|| panic!("no {key} in {report}"))
}

fn num(row: &Value, key: &str) -> f64 {
    row[key].as_f64().unwrap_or_else(|| panic!("no {key} in {row}"))
}

#[test]
fn minilm_at_three_dtypes_in_process_and_over_http_with_a_plot() {
    let dir = tempfile_dir("minilm");
    let plot = dir.join("minilm.svg");
    let report = bench_json(&[
        "--model-id",
        &minilm(),
        "--no-model-warmup",
        "--lengths",
        "16,300",
        "--batch-sizes",
        "1,4",
        "--concurrency",
        "1,4",
        "--seconds",
        "0.2",
        "--plot",
        plot.to_str().unwrap(),
    ]);
    let variants = rows(&report, "variants");
    let dtypes: Vec<&str> = variants.iter().map(|v| v["dtype"].as_str().unwrap()).collect();
    assert_eq!(dtypes, ["float32", "bfloat16", "int8"]);
    // Each loaded as asked: the weights held shrink with the dtype.
    let bytes: Vec<f64> = variants.iter().map(|v| num(v, "weight_bytes")).collect();
    assert!(bytes[0] > 1.9 * bytes[1] && bytes[1] > 1.5 * bytes[2], "weights held {bytes:?}");
    assert!(variants.iter().all(|v| v["note"].is_null() && v["architecture"] == "BertModel"), "{variants:?}");

    let in_process = rows(&report, "in_process");
    assert_eq!(in_process.len(), 3 * 2 * 2, "{in_process:?}");
    for row in in_process {
        assert!(num(row, "calls") >= 3.0 && num(row, "items_per_s") > 0.0, "{row}");
        assert!(num(row, "p50_ms") <= num(row, "p90_ms"), "{row}");
        // The inputs have the asked length in MiniLM's tokens ([CLS] and [SEP] included), or its window.
        let fed = num(row, "tokens_per_input");
        match num(row, "length") as usize {
            16 => assert!((fed - 16.0).abs() <= 1.0, "{row}"),
            300 => assert_eq!(fed, 256.0, "cut to the 256-token window: {row}"),
            other => panic!("length {other} was not asked for"),
        }
        let tokens_per_s = num(row, "tokens_per_s");
        assert!((tokens_per_s / (num(row, "items_per_s") * fed) - 1.0).abs() < 1e-9, "{row}");
    }

    let http = rows(&report, "http");
    assert_eq!(http.len(), 3 * 2, "{http:?}");
    for row in http {
        // Every answer was checked (status 200, 8 embeddings for 8 sentences).
        assert_eq!(num(row, "errors"), 0.0, "{row}");
        assert!(num(row, "requests") >= 1.0 && num(row, "request_size") == 8.0, "{row}");
        assert!(num(row, "p50_ms") <= num(row, "p99_ms"), "{row}");
        let per_request = num(row, "items_per_s") / num(row, "requests_per_s");
        assert!((per_request - 8.0).abs() < 1e-9, "{row}");
    }

    let svg = std::fs::read_to_string(&plot).expect("--plot wrote the SVG");
    assert!(svg.starts_with("<svg") || svg.contains("<svg "), "{}", &svg[..svg.len().min(200)]);
    for label in ["Throughput", "Latency", "requests in flight", "float32", "bfloat16", "int8"] {
        assert!(svg.contains(label), "the plot lacks `{label}`");
    }
}

#[test]
fn tables_on_stdout_and_a_png_plot() {
    let dir = tempfile_dir("tables");
    let plot = dir.join("debug.png");
    let out = bench(&[
        "--engine",
        "debug",
        "--dtypes",
        "float32",
        "--lengths",
        "8",
        "--batch-sizes",
        "2",
        "--concurrency",
        "1,2,8",
        "--seconds",
        "0.1",
        "--plot",
        plot.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let tables = String::from_utf8(out.stdout).unwrap();
    for part in ["Machine:", "| model | dtype |", "In-process,", "| tokens | batch | float32 |", "HTTP,", "| 8 |"] {
        assert!(tables.contains(part), "no `{part}` in\n{tables}");
    }
    let png = image::open(&plot).expect("--plot wrote a PNG image").to_rgb8();
    assert_eq!(png.dimensions(), (1280, 520));
    // The first series' colour is drawn, and most of the picture is the white background.
    let blue = png.pixels().filter(|p| p.0 == [31, 119, 180]).count();
    let white = png.pixels().filter(|p| p.0 == [255, 255, 255]).count();
    assert!(blue > 200, "{blue} pixels of the first series' colour");
    assert!(white > png.pixels().len() / 2, "{white} white pixels");
    // Labels are drawn with the shipped font: dark pixels in the caption strip above the left chart.
    let dark = (0..40).flat_map(|y| (0..640).map(move |x| (x, y))).filter(|&(x, y)| png.get_pixel(x, y).0[0] < 100);
    assert!(dark.count() > 50, "no caption text in the PNG");
}

#[test]
fn rerankers_and_classifiers_are_driven_through_their_own_routes() {
    for model in ["bert-rerank", "bert-classify"] {
        let report = bench_json(&[
            "--model-id",
            &tiny(model),
            "--dtypes",
            "model",
            "--lengths",
            "12",
            "--batch-sizes",
            "3",
            "--concurrency",
            "2",
            "--request-size",
            "5",
            "--seconds",
            "0.1",
        ]);
        let http = rows(&report, "http");
        assert_eq!(http.len(), 1);
        // /rerank answers are checked for 5 results; /classify ones for status 200.
        assert_eq!(num(&http[0], "errors"), 0.0, "{model}: {}", http[0]);
        assert!(num(&http[0], "requests") >= 1.0, "{model}");
        let row = &rows(&report, "in_process")[0];
        assert!(num(row, "calls") >= 3.0, "{model}: {row}");
    }
}

#[test]
fn bad_options_are_refused_before_any_model_loads() {
    let cases: [(&[&str], &str); 5] = [
        (&["--plot", "out.txt"], "name an .svg or a .png file"),
        (&["--mode", "in-process", "--plot", "out.svg"], "keep `http` in --mode"),
        (&["--dtypes", "fp8"], "--dtypes: dtype `fp8` is not supported"),
        (&["--batch-sizes", "0"], "--batch-sizes: give one or more numbers, each at least 1"),
        (&["--seconds", "0"], "--seconds must be a positive number"),
    ];
    for (args, why) in cases {
        // A model that does not exist: the option must be refused before anything tries to load it.
        let mut all = vec!["--model-id", "/nonexistent/model"];
        all.extend_from_slice(args);
        let out = bench(&all);
        assert!(!out.status.success(), "{args:?} should fail");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(why), "{args:?}: {stderr}");
        assert!(!stderr.contains("nonexistent"), "{args:?} got as far as loading: {stderr}");
    }
}

#[test]
fn a_dtype_the_model_cannot_run_gets_a_row_saying_why() {
    let report = bench_json(&[
        "--model-id",
        &tiny("bert-rerank"),
        "--dtypes",
        "float16,float32",
        "--mode",
        "in-process",
        "--lengths",
        "8",
        "--batch-sizes",
        "1",
        "--seconds",
        "0.05",
    ]);
    let variants = rows(&report, "variants");
    assert_eq!(variants.len(), 2);
    let note = variants[0]["note"].as_str().expect("float16 on the CPU is refused with a note");
    assert!(note.contains("--dtype float16 runs on candle"), "{note}");
    assert!(variants[1]["note"].is_null());
    // Only the dtype that loaded was measured.
    let in_process = rows(&report, "in_process");
    assert_eq!(in_process.len(), 1);
    assert_eq!(in_process[0]["dtype"], "float32");
}

/// A fresh folder under the target dir for one test's outputs.
fn tempfile_dir(name: &str) -> std::path::PathBuf {
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("bench-{name}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// `--mode tokenize`: the tokenizer pool alone, once per model whatever its dtypes, on the threads asked for.
#[test]
fn the_tokenizer_pool_is_measured_alone_once_per_model() {
    let report = bench_json(&[
        "--model-id",
        &minilm(),
        "--no-model-warmup",
        "--mode",
        "tokenize",
        "--dtypes",
        "float32,bfloat16",
        "--seconds",
        "0.2",
        "--tokenizer-workers",
        "2",
    ]);
    assert!(rows(&report, "in_process").is_empty() && rows(&report, "http").is_empty());
    let t = rows(&report, "tokenize");
    assert_eq!(t.len(), 1, "{t:?}");
    assert_eq!(num(&t[0], "workers"), 2.0);
    // The first two jobs per thread, 32 sentences each, at least.
    assert!(num(&t[0], "sentences") >= 128.0, "{t:?}");
    // STS-B's sentences are about 14 MiniLM tokens each, special tokens included.
    let per_sentence = num(&t[0], "tokens_per_s") / num(&t[0], "sentences_per_s");
    assert!((8.0..30.0).contains(&per_sentence), "{per_sentence}");
}
