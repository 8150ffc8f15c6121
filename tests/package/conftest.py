"""The `aleph` Python package against the real `aleph` binary: one server process serves every model the tests
embed with in-process, so each answer can be compared with the server's, byte for byte at f32.

Environment:
    ALEPH_BIN           the binary (default: target/debug/aleph)
    ALEPH_TEST_MINILM   the all-MiniLM-L6-v2 folder (default: models/all-MiniLM-L6-v2)
    ALEPH_TEST_TINY     the tiny fixtures (default: tests/fixtures/tiny)
"""
from __future__ import annotations

import json
import os
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
import requests

REPO = Path(__file__).resolve().parents[2]
BIN = Path(os.environ.get("ALEPH_BIN", REPO / "target/debug/aleph"))
MINILM = Path(os.environ.get("ALEPH_TEST_MINILM", REPO / "models/all-MiniLM-L6-v2"))
TINY = Path(os.environ.get("ALEPH_TEST_TINY", REPO / "tests/fixtures/tiny"))

# served name -> folder; the same names in-process (EngineArgs.served_model_name) and on the server.
MODELS = {
    "minilm": MINILM,
    "rerank": TINY / "bert-rerank",
    "classify": TINY / "bert-classify",
    "splade": TINY / "distilbert-splade",
    "colbert": TINY / "colbert",
    "bge-m3": TINY / "bge-m3",
    "clip": TINY / "clip",
    "clap": TINY / "clap",
    "jina-v3": TINY / "jina-v3-embed",
}

TEXTS = [
    "The quick brown fox jumps over the lazy dog.",
    "Paris is the capital of France.",
    "Rust is a systems programming language.",
    "hello world",
]


class Server:
    def __init__(self, base: str, proc: subprocess.Popen, log: Path):
        self.base, self.proc, self.log = base, proc, log

    def post(self, path: str, body: dict) -> dict:
        r = requests.post(self.base + path, json=body, timeout=120)
        assert r.status_code == 200, f"POST {path}: {r.status_code} {r.text}"
        return r.json()


@pytest.fixture(scope="session")
def server():
    if not BIN.exists():
        pytest.fail(f"{BIN} is missing: cargo build -p aleph-server (or set ALEPH_BIN)", pytrace=False)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    args = [str(BIN), "v2", "--host", "127.0.0.1", "--port", str(port), "--no-model-warmup"]
    for name, path in MODELS.items():
        args += ["--model-id", str(path), "--served-model-name", name]
    log = Path(tempfile.mkdtemp(prefix="aleph-package-")) / "server.log"
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=open(log, "wb"))
    base = f"http://127.0.0.1:{port}"
    deadline = time.time() + 120
    while time.time() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"the server exited: {log.read_text()[-3000:]}", pytrace=False)
        try:
            if requests.get(base + "/health", timeout=1).status_code == 200:
                break
        except requests.RequestException:
            pass
        time.sleep(0.2)
    else:
        proc.kill()
        pytest.fail(f"the server did not become ready: {log.read_text()[-3000:]}", pytrace=False)
    yield Server(base, proc, log)
    proc.terminate()
    proc.wait(timeout=30)


def engine_args(name: str, **kwargs):
    from aleph import EngineArgs

    return EngineArgs(model_name_or_path=str(MODELS[name]), served_model_name=name, model_warmup=False, **kwargs)


def reference(name: str) -> dict:
    return json.loads((MODELS[name] / "reference.json").read_text())
