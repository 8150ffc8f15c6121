//! `aleph embed` as a user runs it: a corpus on disk through the binary into a .npy file, each vector compared
//! with what the server answers for the same text; resuming after a run that stopped part way.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::json;

use crate::common::{floats, minilm, Server};

fn embed(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_aleph"))
        .arg("embed")
        .args(args)
        .arg("--no-model-warmup")
        .env_remove("ALEPH_MODEL_ID")
        .output()
        .expect("running aleph embed")
}

fn temp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("aleph-corpus-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// `[rows, dim]` f32 vectors of an .npy file.
fn read_npy(path: &Path) -> Vec<Vec<f32>> {
    let bytes = std::fs::read(path).unwrap();
    assert_eq!(&bytes[..6], b"\x93NUMPY");
    let header_len = u16::from_le_bytes([bytes[8], bytes[9]]) as usize + 10;
    let header = String::from_utf8_lossy(&bytes[10..header_len]).into_owned();
    assert!(header.contains("'descr': '<f4'"), "{header}");
    let shape: Vec<usize> = header
        .split("'shape': (")
        .nth(1)
        .unwrap()
        .split(')')
        .next()
        .unwrap()
        .split(',')
        .filter_map(|d| d.trim().parse().ok())
        .collect();
    let data: Vec<f32> =
        bytes[header_len..].chunks_exact(4).map(|b| f32::from_le_bytes(b.try_into().unwrap())).collect();
    assert_eq!(data.len(), shape[0] * shape[1], "the header counts the rows: {header}");
    data.chunks(shape[1]).map(<[f32]>::to_vec).collect()
}

fn texts(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("document {i}: {} about topic {}", "words ".repeat(i % 9), i % 5)).collect()
}

#[test]
fn a_jsonl_corpus_embeds_as_the_server_does_and_resumes_where_it_stopped() {
    let dir = temp("jsonl");
    let corpus = texts(45);
    let input = dir.join("corpus.jsonl");
    let lines: Vec<String> = corpus.iter().enumerate().map(|(i, t)| json!({"id": i, "body": t}).to_string()).collect();
    std::fs::write(&input, lines.join("\n") + "\n\n").unwrap();
    let output = dir.join("vectors.npy");
    let model = minilm();
    let args = [
        "--model-id",
        &model,
        "--input",
        input.to_str().unwrap(),
        "--output",
        output.to_str().unwrap(),
        "--text-field",
        "body",
        "--chunk-size",
        "8",
    ];
    let out = embed(&args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("45 texts") && stderr.contains("texts/s"), "it prints its throughput: {stderr}");
    let vectors = read_npy(&output);
    assert_eq!(vectors.len(), 45);

    let s = Server::start(&["--model-id", &model, "--no-model-warmup"]);
    let want = s.post_json("/embeddings", &json!({"input": corpus, "encoding_format": "float"})).json();
    for (i, v) in vectors.iter().enumerate() {
        assert_eq!(v, &floats(&want["data"][i]["embedding"]), "text {i}");
    }

    // A run that stopped part way: 20 whole rows and a torn one. The next run embeds only the rest.
    let full = std::fs::read(&output).unwrap();
    let header_len = u16::from_le_bytes([full[8], full[9]]) as usize + 10;
    std::fs::write(&output, &full[..header_len + 20 * 384 * 4 + 7]).unwrap();
    let out = embed(&args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("25 texts"), "only the missing texts are embedded: {stderr}");
    assert_eq!(read_npy(&output), vectors);

    // --no-resume starts over; --dimensions cuts (and re-normalizes) as the server's `dimensions` does.
    let mut cut = args.to_vec();
    cut.extend(["--no-resume", "--dimensions", "32"]);
    assert!(embed(&cut).status.success());
    let short = read_npy(&output);
    let want = s.post_json("/embeddings", &json!({"input": corpus[..2], "dimensions": 32})).json();
    assert_eq!(short.len(), 45);
    assert_eq!(short[1], floats(&want["data"][1]["embedding"]));
    // Resuming into a file of another width is refused, naming it.
    let out = embed(&args);
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("--no-resume"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_text_corpus_takes_one_text_per_line_and_bad_input_is_refused_naming_the_line() {
    let dir = temp("txt");
    let input = dir.join("corpus.txt");
    std::fs::write(&input, texts(5).join("\n")).unwrap();
    let output = dir.join("out.npy");
    let model = minilm();
    let out = embed(&["--model-id", &model, "--input", input.to_str().unwrap(), "--output", output.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(read_npy(&output).len(), 5);

    let bad = dir.join("bad.jsonl");
    std::fs::write(&bad, "{\"text\": \"fine\"}\n{\"title\": \"no text\"}\n").unwrap();
    let bad_out = dir.join("bad.npy");
    let out = embed(&["--model-id", &model, "--input", bad.to_str().unwrap(), "--output", bad_out.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && stderr.contains("line 2") && stderr.contains("`text`"), "{stderr}");
    let out = embed(&["--model-id", &model, "--input", input.to_str().unwrap(), "--output", "vectors.csv"]);
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains(".npy"));
    let _ = std::fs::remove_dir_all(&dir);
}
