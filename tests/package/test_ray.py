"""The corpus job on a real local Ray cluster: Ray Data's map_batches over two actors, each with its own Aleph
engine, and every vector compared with the server's."""
from __future__ import annotations

import json

import os

import numpy as np
import pytest
import ray

from aleph.ray import Embedder
from conftest import engine_args

class WhoEmbedder(Embedder):
    """Says which process embedded each row."""

    def __call__(self, batch):
        batch = super().__call__(batch)
        batch["pid"] = np.full(len(batch["text"]), os.getpid())
        return batch


TEXTS = [f"passage {i}: {'more words ' * (i % 6)}on subject {i % 4}" for i in range(96)]


@pytest.fixture(scope="module")
def cluster():
    # Two actors of one CPU each, and one more for Ray Data's read tasks.
    ray.init(num_cpus=3, include_dashboard=False, log_to_driver=False, configure_logging=False,
             # The workers import this module (WhoEmbedder) wherever pytest was started.
             runtime_env={"env_vars": {"ALEPH_COMPUTE_THREADS": "1", "PYTHONPATH": os.path.dirname(__file__)}})
    yield
    ray.shutdown()


def test_map_batches_over_two_actors_matches_the_server(cluster, server, tmp_path):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"id": i, "text": t}) + "\n" for i, t in enumerate(TEXTS)))
    ds = ray.data.read_json(str(corpus))
    ds = ds.map_batches(WhoEmbedder, fn_constructor_args=(engine_args("minilm"),), concurrency=2, num_cpus=1,
                        batch_size=16)
    rows = sorted(ds.take_all(), key=lambda r: r["id"])
    assert [r["text"] for r in rows] == TEXTS
    want = server.post("/embeddings", {"model": "minilm", "input": TEXTS, "encoding_format": "float"})
    for row, item in zip(rows, want["data"]):
        got = np.asarray(row["embedding"], dtype=np.float32)
        assert got.tobytes() == np.asarray(item["embedding"], dtype=np.float64).astype(np.float32).tobytes()
    # Two actors did the work, each in its own process (not this one).
    pids = {int(r["pid"]) for r in rows}
    assert len(pids) == 2 and os.getpid() not in pids, pids
