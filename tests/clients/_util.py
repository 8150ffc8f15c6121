"""Shared helpers: the spawned server, its raw HTTP answers (the reference every library result is compared
with), and vector comparisons."""
from __future__ import annotations

import base64
import json
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import requests

EMBED_MODEL = "all-MiniLM-L6-v2"
RERANK_MODEL = "tiny-rerank"
CLASSIFY_MODEL = "tiny-classify"
DIM = 384
REPO = Path(__file__).resolve().parents[2]

TEXTS = [
    "The quick brown fox jumps over the lazy dog.",
    "Paris is the capital of France.",
    "Rust is a systems programming language.",
    "hello world",
]


@dataclass
class Server:
    proc: subprocess.Popen
    base: str
    api_key: str | None
    log_path: Path
    argv: list = field(default_factory=list)
    grpc_port: int = 0

    # --- what a client is configured with -----------------------------------------------------------------
    @property
    def key(self) -> str:
        """The key a client sends: the real one, or any placeholder when the server has none."""
        return self.api_key or "unused-placeholder"

    @property
    def v1(self) -> str:
        return f"{self.base}/v1"

    def headers(self, auth: bool = True) -> dict:
        h = {"Content-Type": "application/json"}
        if auth and self.api_key:
            h["Authorization"] = f"Bearer {self.api_key}"
        return h

    # --- raw HTTP -------------------------------------------------------------------------------------------
    def post(self, path: str, body, auth: bool = True, expect: int | None = 200) -> requests.Response:
        r = requests.post(self.base + path, data=json.dumps(body), headers=self.headers(auth), timeout=120)
        if expect is not None:
            assert r.status_code == expect, f"POST {path} {body!r}: {r.status_code} {r.text}"
        return r

    def get(self, path: str, auth: bool = True, expect: int | None = 200) -> requests.Response:
        r = requests.get(self.base + path, headers=self.headers(auth), timeout=60)
        if expect is not None:
            assert r.status_code == expect, f"GET {path}: {r.status_code} {r.text}"
        return r

    def raw_embeddings(self, inputs, model: str = EMBED_MODEL, **extra) -> list[np.ndarray]:
        """The reference: `POST /embeddings` with encoding_format float, one vector per input, in order."""
        body = {"model": model, "input": inputs, "encoding_format": "float", **extra}
        data = self.post("/embeddings", body).json()["data"]
        assert [d["index"] for d in data] == list(range(len(data))), data
        return [np.asarray(d["embedding"], dtype=np.float32) for d in data]

    def raw_embedding(self, text, **extra) -> np.ndarray:
        return self.raw_embeddings([text], **extra)[0]

    def raw_rerank(self, query: str, documents: list[str], model: str = RERANK_MODEL) -> dict[int, float]:
        """The reference: `POST /rerank` (Infinity shape), as {document index: relevance_score}."""
        body = {"model": model, "query": query, "documents": documents, "return_documents": False}
        results = self.post("/rerank", body).json()["results"]
        assert sorted(r["index"] for r in results) == list(range(len(documents))), results
        return {r["index"]: r["relevance_score"] for r in results}

    def raw_classify(self, texts: list[str], model: str = CLASSIFY_MODEL) -> list[dict[str, float]]:
        data = self.post("/classify", {"model": model, "input": texts}).json()["data"]
        return [{d["label"]: d["score"] for d in row} for row in data]

    # --- the process -----------------------------------------------------------------------------------------
    def logs(self, last: int | None = None) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError as e:
            return f"(no log: {e})"
        return "\n".join(text.splitlines()[-last:]) if last else text

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)

    def alive(self) -> bool:
        return self.proc.poll() is None and requests.get(self.base + "/health", timeout=10).status_code == 200


# --- comparisons -------------------------------------------------------------------------------------------------
def cosine(a, b) -> float:
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    return float(a @ b / max(np.linalg.norm(a) * np.linalg.norm(b), 1e-30))


def assert_same_vector(got, want, what: str = "", exact: bool = False):
    """The library's vector equals the raw answer: same length, and cosine >= 0.99999 or elementwise within
    1e-6 (exact=True: bit for bit, for base64 paths)."""
    got = np.asarray(got, dtype=np.float32).ravel()
    want = np.asarray(want, dtype=np.float32).ravel()
    assert got.shape == want.shape, f"{what}: length {got.shape} != {want.shape}"
    if exact:
        assert np.array_equal(got, want), f"{what}: not bit-identical (max diff {np.abs(got - want).max()})"
        return
    close = np.allclose(got, want, rtol=0, atol=1e-6)
    cos = cosine(got, want)
    assert close or cos >= 0.99999, f"{what}: cosine {cos}, max diff {np.abs(got - want).max()}"


def assert_same_vectors(got, want, what: str = "", exact: bool = False):
    got = list(got)
    assert len(got) == len(want), f"{what}: {len(got)} vectors, expected {len(want)}"
    for i, (g, w) in enumerate(zip(got, want)):
        assert_same_vector(g, w, f"{what}[{i}]", exact=exact)


def assert_unit(v, what: str = "", tol: float = 1e-4):
    n = float(np.linalg.norm(np.asarray(v, dtype=np.float64)))
    assert abs(n - 1.0) < tol, f"{what}: norm {n}, expected a unit vector"


def b64_floats(s: str) -> np.ndarray:
    return np.frombuffer(base64.b64decode(s), dtype="<f4")


def minilm_tokenizer():
    from tokenizers import Tokenizer
    import os

    folder = Path(os.environ.get("ALEPH_TEST_MINILM", REPO / "models/all-MiniLM-L6-v2"))
    tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
    tok.no_padding()  # the file pads to 128
    tok.no_truncation()
    return tok
