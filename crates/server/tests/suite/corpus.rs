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

/// A Parquet corpus of `texts` in the column `body` (optional, as pandas writes strings), beside an `id`
/// column, in row groups of `group` rows.
fn write_parquet_corpus(path: &Path, texts: &[Option<String>], group: usize) {
    use parquet::data_type::{ByteArray, ByteArrayType, Int64Type};
    use parquet::file::writer::SerializedFileWriter;
    let schema = "message corpus { required int64 id; optional binary body (STRING); }";
    let schema = std::sync::Arc::new(parquet::schema::parser::parse_message_type(schema).unwrap());
    let file = std::fs::File::create(path).unwrap();
    let mut writer = SerializedFileWriter::new(file, schema, Default::default()).unwrap();
    for (g, rows) in texts.chunks(group).enumerate() {
        let mut rg = writer.next_row_group().unwrap();
        let ids: Vec<i64> = (0..rows.len()).map(|i| (g * group + i) as i64).collect();
        let mut col = rg.next_column().unwrap().unwrap();
        col.typed::<Int64Type>().write_batch(&ids, None, None).unwrap();
        col.close().unwrap();
        let values: Vec<ByteArray> = rows.iter().flatten().map(|t| ByteArray::from(t.as_str())).collect();
        let levels: Vec<i16> = rows.iter().map(|t| i16::from(t.is_some())).collect();
        let mut col = rg.next_column().unwrap().unwrap();
        col.typed::<ByteArrayType>().write_batch(&values, Some(&levels), None).unwrap();
        col.close().unwrap();
        rg.close().unwrap();
    }
    writer.close().unwrap();
}

/// The rows of a vectors file: its `embedding` list column, read through the record API.
fn read_parquet_vectors(path: &Path) -> Vec<Vec<f32>> {
    use parquet::file::reader::{FileReader, SerializedFileReader};
    use parquet::record::{Field, RowAccessor};
    let reader = SerializedFileReader::new(std::fs::File::open(path).unwrap()).unwrap();
    let fields = reader.metadata().file_metadata().schema().get_fields();
    assert_eq!(fields.len(), 1);
    assert_eq!(fields[0].name(), "embedding");
    reader
        .get_row_iter(None)
        .unwrap()
        .map(|row| {
            let row = row.unwrap();
            let list = row.get_list(0).unwrap();
            (0..list.len())
                .map(|i| match &list.elements()[i] {
                    Field::Float(x) => *x,
                    other => panic!("a float, not {other:?}"),
                })
                .collect()
        })
        .collect()
}

#[test]
fn a_parquet_corpus_embeds_into_parquet_as_the_server_does_and_resumes() {
    let dir = temp("parquet");
    let corpus = texts(45);
    let input = dir.join("corpus.parquet");
    write_parquet_corpus(&input, &corpus.iter().cloned().map(Some).collect::<Vec<_>>(), 10);
    let output = dir.join("vectors.parquet");
    let model = minilm();
    let run_field = |input: &Path, field: &str, extra: &[&str]| {
        let mut args = vec!["--model-id", &model, "--input", input.to_str().unwrap()];
        args.extend(["--output", output.to_str().unwrap(), "--text-field", field, "--chunk-size", "7"]);
        args.extend(extra);
        let out = embed(&args);
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        (out.status.success(), stderr)
    };
    let run = |input: &Path, extra: &[&str]| run_field(input, "body", extra);
    // A first run over the corpus's first 20 rows stands for a run that stopped there.
    let head = dir.join("head.parquet");
    write_parquet_corpus(&head, &corpus[..20].iter().cloned().map(Some).collect::<Vec<_>>(), 10);
    let (ok, stderr) = run(&head, &[]);
    assert!(ok, "{stderr}");
    assert_eq!(read_parquet_vectors(&output).len(), 20);
    let (ok, stderr) = run(&input, &[]);
    assert!(ok && stderr.contains("25 texts"), "only the missing rows are embedded: {stderr}");
    let vectors = read_parquet_vectors(&output);
    assert_eq!(vectors.len(), 45);
    assert!(!dir.join("vectors.parquet.partial").exists(), "the partial file is moved into place");

    let s = Server::start(&["--model-id", &model, "--no-model-warmup"]);
    let want = s.post_json("/embeddings", &json!({"input": corpus, "encoding_format": "float"})).json();
    for (i, v) in vectors.iter().enumerate() {
        assert_eq!(v, &floats(&want["data"][i]["embedding"]), "row {i}");
    }
    // The same corpus into .npy gives the same vectors.
    let npy = dir.join("vectors.npy");
    let out = embed(&[
        "--model-id",
        &model,
        "--input",
        input.to_str().unwrap(),
        "--output",
        npy.to_str().unwrap(),
        "--text-field",
        "body",
    ]);
    assert!(out.status.success());
    assert_eq!(read_npy(&npy), vectors);

    // A null text stops the run naming its row, with the rows before it kept in a whole file.
    let mut holes: Vec<Option<String>> = corpus.iter().cloned().map(Some).collect();
    holes[31] = None;
    let with_null = dir.join("nulls.parquet");
    write_parquet_corpus(&with_null, &holes, 10);
    let (ok, stderr) = run(&with_null, &["--no-resume"]);
    assert!(!ok && stderr.contains("row 31") && stderr.contains("null"), "{stderr}");
    let kept = read_parquet_vectors(&output);
    assert!(kept.len() <= 31 && kept[..] == vectors[..kept.len()], "{} rows kept", kept.len());
    // A column that is not there, or not text, is named with the file's columns.
    let (ok, stderr) = run_field(&input, "title", &["--no-resume"]);
    assert!(!ok && stderr.contains("no column `title`") && stderr.contains("`body`"), "{stderr}");
    let (ok, stderr) = run_field(&input, "id", &["--no-resume"]);
    assert!(!ok && stderr.contains("`id`") && stderr.contains("INT64"), "{stderr}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_signal_stops_the_run_with_a_whole_output_that_says_where_to_go_on() {
    let dir = temp("signal");
    let input = dir.join("corpus.txt");
    let corpus = texts(20_000);
    std::fs::write(&input, corpus.join("\n")).unwrap();
    let output = dir.join("vectors.parquet");
    let model = minilm();
    let child = Command::new(env!("CARGO_BIN_EXE_aleph"))
        .args(["embed", "--model-id", &model, "--no-model-warmup", "--chunk-size", "16", "--input"])
        .args([input.as_os_str(), "--output".as_ref(), output.as_os_str()])
        .env_remove("ALEPH_MODEL_ID")
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The partial file appears once the model is loaded and the first chunks are under way.
    let partial = dir.join("vectors.parquet.partial");
    let started = std::time::Instant::now();
    while !partial.exists() {
        assert!(started.elapsed().as_secs() < 60, "no output after a minute");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    std::thread::sleep(std::time::Duration::from_millis(300));
    let status = Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap();
    assert!(status.success());
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("stopped by a signal"), "{stderr}");
    let vectors = read_parquet_vectors(&output);
    assert!(!vectors.is_empty() && vectors.len() < corpus.len(), "{} rows", vectors.len());
    let n = vectors.len();
    assert!(stderr.contains(&format!("go on from row {n}")), "{stderr}");
    let s = Server::start(&["--model-id", &model, "--no-model-warmup"]);
    let want = s.post_json("/embeddings", &json!({"input": [corpus[0], corpus[n - 1]], "encoding_format": "float"}));
    let want = want.json();
    assert_eq!(vectors[0], floats(&want["data"][0]["embedding"]));
    assert_eq!(vectors[n - 1], floats(&want["data"][1]["embedding"]));
    let _ = std::fs::remove_dir_all(&dir);
}
