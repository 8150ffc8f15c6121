"""``SyncEngineArray``: the engines' calls from synchronous code, answering ``concurrent.futures.Future``."""

from __future__ import annotations

import functools
import weakref
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Iterator, Optional

from aleph.args import EngineArgs
from aleph.engine import AsyncEmbeddingEngine, AsyncEngineArray, _encode_all


def _stop_all(engines: "list[AsyncEmbeddingEngine]", pool: ThreadPoolExecutor) -> None:
    for engine in engines:
        native, engine._native = engine._native, None
        engine.running = False
        if native is not None:
            native.stop()
    pool.shutdown(wait=False)


class SyncEngineArray:
    """Every call returns a ``Future`` at once; the engines batch the calls in flight together."""

    def __init__(self, _engine_args_array: "list[EngineArgs]"):
        self.async_engine_array = AsyncEngineArray.from_args(_engine_args_array)
        for engine in self.async_engine_array:
            engine.running = True
        self._pool = ThreadPoolExecutor(max_workers=256, thread_name_prefix="aleph-sync")
        self._finalizer = weakref.finalize(self, _stop_all, list(self.async_engine_array), self._pool)

    @classmethod
    def from_args(cls, engine_args_array: "list[EngineArgs]") -> "SyncEngineArray":
        return cls(_engine_args_array=engine_args_array)

    @property
    def is_running(self) -> bool:
        return self.async_engine_array.is_running()

    def __iter__(self) -> Iterator[AsyncEmbeddingEngine]:
        return iter(self.async_engine_array)

    def __getitem__(self, index_or_name) -> AsyncEmbeddingEngine:
        return self.async_engine_array[index_or_name]

    def __reduce__(self):
        raise TypeError("an aleph engine array cannot be pickled: pickle its EngineArgs and build it where it is used")

    def stop(self) -> None:
        """Stops every engine (queued work finishes first)."""
        self._finalizer()

    def _submit(self, fn, **kwargs) -> Future:
        if not self._finalizer.alive:
            raise RuntimeError("the SyncEngineArray is stopped")
        return self._pool.submit(functools.partial(fn, **kwargs))

    def embed(self, *, model: str, sentences: "list[str]", matryoshka_dim: Optional[int] = None, **kwargs) -> Future:
        engine = self[model]
        return self._submit(engine._embed_sync, inputs=sentences, matryoshka_dim=matryoshka_dim, **kwargs)

    def rerank(
        self,
        *,
        model: str,
        query: str,
        docs: "list[str]",
        raw_scores: bool = False,
        top_n: Optional[int] = None,
        **kwargs,
    ) -> Future:
        engine = self[model]
        return self._submit(engine._rerank_sync, query=query, docs=docs, raw_scores=raw_scores, top_n=top_n, **kwargs)

    def classify(self, *, model: str, sentences: "list[str]", raw_scores: bool = False) -> Future:
        return self._submit(self[model]._classify_sync, sentences=sentences, raw_scores=raw_scores)

    def image_embed(self, *, model: str, images: list, matryoshka_dim: Optional[int] = None) -> Future:
        engine = self[model]

        def run():
            return engine._embed_sync(_encode_all(items=images, kind="image"), modality="image",
                                      matryoshka_dim=matryoshka_dim)

        return self._submit(run)

    def audio_embed(self, *, model: str, audios: list, matryoshka_dim: Optional[int] = None) -> Future:
        engine = self[model]

        def run():
            return engine._embed_sync(_encode_all(items=audios, kind="audio"), modality="audio",
                                      matryoshka_dim=matryoshka_dim)

        return self._submit(run)
