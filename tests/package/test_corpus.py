"""`aleph embed` over Parquet files as pyarrow writes them (dictionary-encoded strings, each default codec,
large_string, several row groups), with its vectors read back by pyarrow and compared with the server's."""
from __future__ import annotations

import subprocess

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from conftest import BIN, MINILM

TEXTS = [f"row {i}: {'some words ' * (i % 5)}about subject {i % 3}" for i in range(37)]


def embed(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN), "embed", "--model-id", str(MINILM), "--no-model-warmup", *args],
                          capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("codec", ["snappy", "gzip", "lz4", "none"])
@pytest.mark.parametrize("string_type", [pa.string(), pa.large_string()])
def test_a_pyarrow_corpus_embeds_as_the_server_does(server, tmp_path, codec, string_type):
    table = pa.table({"id": pa.array(range(len(TEXTS))), "passage": pa.array(TEXTS, type=string_type)})
    corpus = tmp_path / "corpus.parquet"
    pq.write_table(table, corpus, compression=codec, row_group_size=10)
    out = tmp_path / "vectors.parquet"
    run = embed("--input", str(corpus), "--output", str(out), "--text-field", "passage", "--chunk-size", "8")
    assert run.returncode == 0, run.stderr
    vectors = pq.read_table(out)
    assert vectors.column_names == ["embedding"]
    assert pa.types.is_list(vectors.schema.field("embedding").type)
    got = np.asarray(vectors.column("embedding").to_pylist(), dtype=np.float32)
    want = server.post("/embeddings", {"model": "minilm", "input": TEXTS, "encoding_format": "float"})
    want = np.asarray([d["embedding"] for d in want["data"]], dtype=np.float64).astype(np.float32)
    assert got.shape == (len(TEXTS), 384)
    assert got.tobytes() == want.tobytes()


def test_pandas_reads_quantized_vectors_and_unread_codecs_are_named(tmp_path):
    corpus = tmp_path / "corpus.parquet"
    pq.write_table(pa.table({"text": TEXTS[:5]}), corpus)
    out = tmp_path / "vectors.parquet"
    run = embed("--input", str(corpus), "--output", str(out), "--embedding-dtype", "int8")
    assert run.returncode == 0, run.stderr
    column = pq.read_table(out).column("embedding")
    assert column.type.value_type == pa.int8()
    rows = np.asarray(column.to_pylist())
    assert rows.shape == (5, 384) and rows.min() >= -128 and rows.max() <= 127 and rows.std() > 1
    frame = pq.read_table(out).to_pandas()
    assert len(frame["embedding"][0]) == 384

    zstd = tmp_path / "zstd.parquet"
    pq.write_table(pa.table({"text": TEXTS[:5]}), zstd, compression="zstd")
    run = embed("--input", str(zstd), "--output", str(tmp_path / "z.parquet"))
    assert run.returncode != 0 and "ZSTD" in run.stderr.upper(), run.stderr
