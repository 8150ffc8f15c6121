"""The engine in a Python process: threads, the GIL, Ctrl-C, fork, pickling and the compute threads' bound."""
from __future__ import annotations

import asyncio
import multiprocessing
import os
import pickle
import signal
import subprocess
import sys
import textwrap
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from aleph import AsyncEmbeddingEngine, SyncEngineArray
from conftest import MINILM, REPO, engine_args

SENTENCES = [f"sentence number {i} about topic {i % 7}" for i in range(64)]


@pytest.fixture(scope="module")
def engine():
    engine = AsyncEmbeddingEngine.from_args(engine_args("minilm"))
    asyncio.run(engine.astart())
    yield engine
    asyncio.run(engine.astop())


def test_threads_at_once_each_get_their_own_answer(engine):
    alone = {s: engine._embed_sync([s])[0][0] for s in SENTENCES[:16]}
    with ThreadPoolExecutor(16) as pool:
        answers = list(pool.map(lambda s: (s, engine._embed_sync([s])[0][0]), SENTENCES[:16] * 4))
    for s, v in answers:
        assert v.tobytes() == alone[s].tobytes(), s


def test_coroutines_at_once_are_batched_and_answered_in_order(engine):
    async def go():
        return await asyncio.gather(*(engine.embed([s]) for s in SENTENCES))

    results = asyncio.run(go())
    stacked = np.stack([r[0][0] for r in results])
    together = np.stack(engine._embed_sync(SENTENCES)[0])
    assert np.array_equal(stacked, together)


def test_the_gil_is_released_while_the_engine_works(engine):
    ticks = []
    stop = threading.Event()

    def tick():
        while not stop.is_set():
            ticks.append(time.perf_counter())
            time.sleep(0.001)

    t = threading.Thread(target=tick)
    t.start()
    started = time.perf_counter()
    engine._embed_sync(SENTENCES * 8)
    elapsed = time.perf_counter() - started
    stop.set()
    t.join()
    during = [x for x in ticks if started <= x <= started + elapsed]
    # A held GIL would starve the ticking thread for the whole call.
    assert len(during) >= max(3, int(elapsed / 0.001 * 0.2)), (len(during), elapsed)


def test_a_running_engine_refuses_to_pickle(engine):
    with pytest.raises(TypeError, match="EngineArgs"):
        pickle.dumps(engine)
    with pytest.raises(TypeError, match="EngineArgs"):
        pickle.dumps(engine._native)
    assert pickle.loads(pickle.dumps(engine.engine_args)) == engine.engine_args


def _child_embeds(engine, queue):
    try:
        engine._embed_sync(["from the child"])
        queue.put("answered")
    except RuntimeError as e:
        queue.put(f"RuntimeError: {e}")


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork only")
def test_an_engine_used_in_a_forked_child_raises_instead_of_hanging(engine):
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    child = ctx.Process(target=_child_embeds, args=(engine, queue))
    child.start()
    child.join(timeout=60)
    assert child.exitcode == 0, "the child hung or crashed"
    message = queue.get(timeout=5)
    assert message.startswith("RuntimeError") and "fork" in message, message
    # The parent's engine is unaffected.
    assert engine._embed_sync(["still here"])[0][0].shape == (384,)


def _script(body: str, env: dict | None = None, **kwargs) -> subprocess.Popen:
    code = textwrap.dedent(
        f"""
        import sys
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        from aleph import AsyncEmbeddingEngine, EngineArgs
        args = EngineArgs(model_name_or_path={str(MINILM)!r}, model_warmup=False)
        """
    ) + textwrap.dedent(body)
    return subprocess.Popen([sys.executable, "-c", code], env={**os.environ, **(env or {})},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kwargs)


def test_ctrl_c_interrupts_a_wait():
    proc = _script(
        """
        import time
        array = __import__("aleph").SyncEngineArray.from_args([args])
        engine = array[0]
        print("ready", flush=True)
        started = time.time()
        try:
            engine._embed_sync(["a long sentence to embed again and again " * 20] * 20000)
            print("finished", flush=True)
        except KeyboardInterrupt:
            print(f"interrupted after {time.time() - started:.2f}", flush=True)
        """
    )
    assert proc.stdout.readline().strip() == "ready"
    time.sleep(1.0)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert out.startswith("interrupted"), (out, err[-2000:])
    # Interrupted within a few checks of the signal, not at the end of the work.
    assert float(out.split()[-1]) < 5.0, out


def test_compute_threads_are_bounded_by_the_environment():
    proc = _script(
        """
        import asyncio, os
        engine = AsyncEmbeddingEngine.from_args(args)
        asyncio.run(engine.astart())
        engine._embed_sync(["count the threads"] * 64)
        names = [open(f"/proc/self/task/{t}/comm").read().strip() for t in os.listdir("/proc/self/task")]
        print(sum(n.startswith("aleph-compute") for n in names), sum(n.startswith("aleph-tok") for n in names))
        """,
        env={"ALEPH_COMPUTE_THREADS": "1"},
    )
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err[-2000:]
    compute, tokenizers = (int(x) for x in out.split())
    assert compute == 1 and tokenizers == 1, out


def test_sync_engine_array_stops_its_engines():
    array = SyncEngineArray.from_args([engine_args("minilm")])
    engine = array[0]
    assert array.embed(model="minilm", sentences=["x"]).result()[0][0].shape == (384,)
    array.stop()
    array.stop()
    assert not engine.is_running and engine._native is None
