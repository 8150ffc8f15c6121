"""Spawns the real `aleph` binary for the client-library suite.

Every test takes the `server` fixture, which is parametrized over two processes: one without an API key
(`[open]`) and one started with `--api-key` (`[key]`). Both serve three models in one process, over HTTP and TEI's gRPC API (`--grpc-port`):

    all-MiniLM-L6-v2  models/all-MiniLM-L6-v2            (embeddings; the first model, so the default)
    tiny-rerank       tests/fixtures/tiny/bert-rerank     (cross-encoder)
    tiny-classify     tests/fixtures/tiny/bert-classify   (negative / neutral / positive)

Environment:
    ALEPH_BIN           the binary (default: target/debug/aleph)
    ALEPH_TEST_MINILM   the all-MiniLM-L6-v2 folder (default: models/all-MiniLM-L6-v2, from scripts/fetch-models.sh)
    ALEPH_TEST_TINY     the tiny fixture folder (default: tests/fixtures/tiny)

The server's output goes to a log file; a failing test gets its tail in the report.
"""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# Before any client library is imported: nothing here may reach the internet.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # LiteLLM fetches its price map at import
os.environ.setdefault("LITELLM_TELEMETRY", "False")
os.environ.setdefault("HAYSTACK_TELEMETRY_ENABLED", "False")
os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")  # chromadb
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
for var in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "CO_API_KEY", "CO_API_URL", "HF_TOKEN", "HF_API_TOKEN",
            "CHROMA_OPENAI_API_KEY", "HUGGINGFACE_API_KEY", "INFINITY_API_KEY", "INFINITY_API_URL",
            "COHERE_API_BASE", "HOSTED_VLLM_API_KEY"):
    os.environ.pop(var, None)

import pytest
import requests

sys.path.insert(0, str(Path(__file__).parent))
from _util import CLASSIFY_MODEL, EMBED_MODEL, RERANK_MODEL, Server  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
API_KEY = "aleph-client-suite-key"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _paths():
    binary = Path(os.environ.get("ALEPH_BIN", REPO / "target/debug/aleph"))
    if not binary.is_absolute():
        binary = REPO / binary
    minilm = Path(os.environ.get("ALEPH_TEST_MINILM", REPO / "models/all-MiniLM-L6-v2"))
    tiny = Path(os.environ.get("ALEPH_TEST_TINY", REPO / "tests/fixtures/tiny"))
    if not binary.exists():
        pytest.fail(f"{binary} does not exist: build it (cargo build -p aleph-server) or set ALEPH_BIN", pytrace=False)
    if not (minilm / "model.safetensors").exists():
        pytest.fail(f"{minilm}/model.safetensors is missing: run scripts/fetch-models.sh", pytrace=False)
    return binary, minilm, tiny


def _start(api_key: str | None, log_dir: Path) -> Server:
    binary, minilm, tiny = _paths()
    port, grpc_port = _free_port(), _free_port()
    args = [
        str(binary), "v2",
        "--model-id", str(minilm), "--served-model-name", EMBED_MODEL,
        "--model-id", str(tiny / "bert-rerank"), "--served-model-name", RERANK_MODEL,
        "--model-id", str(tiny / "bert-classify"), "--served-model-name", CLASSIFY_MODEL,
        "--host", "127.0.0.1", "--port", str(port), "--grpc-port", str(grpc_port), "--no-model-warmup",
    ]
    if api_key:
        args += ["--api-key", api_key]
    log_path = log_dir / f"aleph-{'key' if api_key else 'open'}-{port}.log"
    log = open(log_path, "wb")
    env = {k: v for k, v in os.environ.items() if k != "RUST_LOG"}
    proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env,
                            cwd=REPO)
    srv = Server(proc=proc, base=f"http://127.0.0.1:{port}", api_key=api_key, log_path=log_path, argv=args,
                 grpc_port=grpc_port)
    # The port opens before the models load: ready means GET /health answers 200.
    deadline = time.monotonic() + float(os.environ.get("ALEPH_START_TIMEOUT", "180"))
    while True:
        if proc.poll() is not None:
            pytest.fail(f"aleph exited with {proc.returncode} before serving\n{' '.join(args)}\n{srv.logs()}",
                        pytrace=False)
        try:
            if requests.get(f"{srv.base}/health", timeout=2).status_code == 200:
                return srv
        except requests.RequestException:
            pass
        if time.monotonic() > deadline:
            srv.stop()
            pytest.fail(f"aleph did not become healthy in time\n{' '.join(args)}\n{srv.logs()}", pytrace=False)
        time.sleep(0.1)


@pytest.fixture(scope="session")
def _log_dir():
    with tempfile.TemporaryDirectory(prefix="aleph-clients-") as d:
        yield Path(d)


@pytest.fixture(scope="session", params=["open", "key"])
def server(request, _log_dir) -> Server:
    srv = _start(API_KEY if request.param == "key" else None, _log_dir)
    yield srv
    srv.stop()


@pytest.fixture(autouse=True)
def _server_still_alive(request):
    yield
    srv = request.node.funcargs.get("server")
    if srv is not None and srv.proc.poll() is not None:
        pytest.fail(f"aleph died during the test (exit {srv.proc.returncode})\n{srv.logs()}", pytrace=False)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    srv = getattr(item, "funcargs", {}).get("server")
    if rep.failed and srv is not None:
        rep.sections.append((f"aleph log ({srv.log_path.name}, last 80 lines)", srv.logs(80)))
