"""``AsyncEmbeddingEngine`` and ``AsyncEngineArray``: Infinity's asynchronous Python API over Aleph's engine.

Each engine is one model with its own queue, batcher and inference threads (the server's engine, in-process).
A call waits on a worker thread with the GIL released, so concurrent calls from coroutines or threads are
batched together by the engine, each getting its own answer.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Iterable, Iterator, Optional, Union

import numpy as np

from aleph import _native
from aleph._media import to_bytes
from aleph.args import EngineArgs
from aleph.primitives import (
    ClassifyReturnType,
    EmbeddingDtype,
    EmbeddingReturnType,
    RerankReturnType,
    SparseEmbedding,
)

logger = logging.getLogger("aleph")

ModelNotDeployedError = _native.ModelNotDeployedError
OverloadedError = _native.OverloadedError

# Waiting threads for the asynchronous calls: a waiter only blocks (GIL released) while the engine works, so
# many of them let many requests be batched together.
_WAITERS = ThreadPoolExecutor(max_workers=256, thread_name_prefix="aleph-wait")

_NUMPY_DTYPE = {
    EmbeddingDtype.float32: np.float32,
    EmbeddingDtype.int8: np.int8,
    EmbeddingDtype.uint8: np.uint8,
    EmbeddingDtype.binary: np.int8,
    EmbeddingDtype.ubinary: np.uint8,
}


class AsyncEmbeddingEngine:
    """One model, loaded when the engine is built and serving between ``astart`` and ``astop``.

    Build it with ``AsyncEmbeddingEngine.from_args(EngineArgs(...))`` or with ``EngineArgs``' fields as keywords.
    """

    def __init__(
        self,
        model_name_or_path: Optional[str] = None,
        _show_deprecation_warning: bool = False,
        *,
        _engine_args: Optional[EngineArgs] = None,
        **kwargs,
    ):
        if _engine_args is None:
            if model_name_or_path is not None:
                kwargs["model_name_or_path"] = model_name_or_path
            _engine_args = EngineArgs(**kwargs)
        self._engine_args = _engine_args
        self.running = False
        self._native: Optional[Any] = None
        ignored = _engine_args.no_effect()
        if ignored:
            logger.info("%s select Infinity's Python machinery: accepted, no effect in Aleph", ", ".join(ignored))
        self._load()

    @classmethod
    def from_args(cls, engine_args: EngineArgs) -> "AsyncEmbeddingEngine":
        return cls(_engine_args=engine_args)

    def _load(self) -> None:
        if self._native is None:
            self._native = _native.Engine.load(**self._engine_args._native_options())

    def __str__(self) -> str:
        return f"AsyncEmbeddingEngine(running={self.running}, {self._engine_args})"

    __repr__ = __str__

    def __reduce__(self):
        raise TypeError(
            f"an aleph engine (`{self._engine_args.served_model_name}`) cannot be pickled: pickle its EngineArgs "
            "(engine.engine_args) and build the engine where it is used"
        )

    async def astart(self) -> None:
        """Starts serving (loading the model again if it was stopped)."""
        if not self.running:
            if self._native is None:
                await asyncio.get_running_loop().run_in_executor(_WAITERS, self._load)
            self.running = True

    async def astop(self) -> None:
        """Stops serving: queued work finishes, the threads end and the model's memory is freed."""
        if self.running or self._native is not None:
            self.running = False
            native, self._native = self._native, None
            if native is not None:
                await asyncio.get_running_loop().run_in_executor(_WAITERS, native.stop)

    async def __aenter__(self) -> "AsyncEmbeddingEngine":
        await self.astart()
        return self

    async def __aexit__(self, *args) -> None:
        await self.astop()

    @property
    def is_running(self) -> bool:
        return self.running

    @property
    def engine_args(self) -> EngineArgs:
        return self._engine_args

    @property
    def capabilities(self) -> "set[str]":
        return set(self._live().capabilities) if self._native is not None else set()

    def info(self) -> dict:
        """The model's facts: dimensions, window, architecture, pooling, normalization, prompts, labels."""
        return self._live().info()

    def overload_status(self) -> dict:
        return {"running": self.running}

    def is_overloaded(self) -> bool:
        return False

    # The calls, synchronous: what the coroutines below run on a waiting thread, and what SyncEngineArray
    # runs directly.

    def _assert_running(self) -> None:
        if not self.running:
            raise ValueError(
                "didn't start `AsyncEmbeddingEngine`: use `async with engine: ...` or `await engine.astart()` first"
            )

    def _live(self) -> Any:
        native = self._native
        if native is None:
            raise ValueError(f"engine `{self._engine_args.served_model_name}` is stopped")
        return native

    def _require(self, capability: str) -> Any:
        self._assert_running()
        native = self._live()
        caps = native.capabilities
        if capability not in caps:
            raise ModelNotDeployedError(
                f"the loaded model `{native.name}` cannot fulfill `{capability}`. Options are {sorted(caps)}."
            )
        return native

    def _embed_sync(
        self,
        inputs: list,
        *,
        modality: str = "text",
        matryoshka_dim: Optional[int] = None,
        dimensions: Optional[int] = None,
        prompt_name: Optional[str] = None,
        output: str = "dense",
        task: Optional[str] = None,
    ) -> "tuple[list, int]":
        capability = {"text": "embed", "image": "image_embed", "audio": "audio_embed"}[modality]
        if output == "sparse":
            capability = "sparse"
        native = self._require(capability)
        if isinstance(inputs, str):
            raise TypeError("embed takes a list of sentences, not one str")
        dims = dimensions if dimensions is not None else matryoshka_dim
        kind, payload, usage = native.embed(
            list(inputs), modality=modality, dimensions=dims, prompt_name=prompt_name, output=output, task=task
        )
        if kind == "dense":
            flat, width = payload
            count = len(inputs)
            array = np.frombuffer(flat, dtype=np.float32).reshape(count, width if count else 0)
            dtype = _NUMPY_DTYPE[self._engine_args.embedding_dtype]
            array = array.astype(dtype) if dtype is not np.float32 else array.copy()
            return list(array), usage
        if kind == "sparse":
            out = [
                SparseEmbedding(
                    indices=np.frombuffer(ids, dtype=np.uint32).copy(),
                    values=np.frombuffer(values, dtype=np.float32).copy(),
                )
                for ids, values in payload
            ]
            return out, usage
        # One matrix of token vectors per input.
        rows = []
        for flat, width in payload:
            m = np.frombuffer(flat, dtype=np.float32)
            rows.append(m.reshape(-1, width).copy() if width else m.reshape(0, 0).copy())
        return rows, usage

    def _rerank_sync(
        self,
        *,
        query: str,
        docs: "list[str]",
        raw_scores: bool = False,
        top_n: Optional[int] = None,
        instruction: Optional[str] = None,
    ) -> "tuple[list[RerankReturnType], int]":
        native = self._require("rerank")
        docs = list(docs)
        scores, usage = native.rerank(query, docs, raw_scores=raw_scores, instruction=instruction)
        results = [RerankReturnType(relevance_score=s, document=d, index=i) for i, (s, d) in enumerate(zip(scores, docs))]
        # Stable: equal scores keep document order.
        results.sort(key=lambda r: r.relevance_score, reverse=True)
        if top_n is not None and top_n > 0:
            results = results[:top_n]
        return results, usage

    def _classify_sync(
        self, *, sentences: "list[str]", raw_scores: bool = False
    ) -> "tuple[list[list[ClassifyReturnType]], int]":
        native = self._require("classify")
        labels, usage = native.classify(list(sentences), raw_scores=raw_scores)
        return [[ClassifyReturnType(label=label, score=score) for label, score in one] for one in labels], usage

    async def _run(self, fn, **kwargs):
        return await asyncio.get_running_loop().run_in_executor(_WAITERS, functools.partial(fn, **kwargs))

    async def embed(
        self,
        sentences: "list[str]",
        matryoshka_dim: Optional[int] = None,
        *,
        prompt_name: Optional[str] = None,
        dimensions: Optional[int] = None,
        output: str = "dense",
        task: Optional[str] = None,
    ) -> "tuple[list[EmbeddingReturnType], int]":
        """Embeds sentences: a numpy array each (``output="sparse"``: a ``SparseEmbedding`` each;
        ``output="colbert"``: a ``[tokens, dim]`` array each), and the tokens used.

        ``matryoshka_dim`` (or ``dimensions``) keeps the first dimensions, re-normalized where the model
        normalizes; ``prompt_name`` names a prompt of the model's sentence-transformers config; ``task``
        picks jina-embeddings-v3's adapter for that task (and its prompt, unless ``prompt_name`` names another).
        """
        self._assert_running()
        return await self._run(
            self._embed_sync,
            inputs=sentences,
            matryoshka_dim=matryoshka_dim,
            dimensions=dimensions,
            prompt_name=prompt_name,
            output=output,
            task=task,
        )

    async def rerank(
        self,
        *,
        query: str,
        docs: "list[str]",
        raw_scores: bool = False,
        top_n: Optional[int] = None,
        instruction: Optional[str] = None,
    ) -> "tuple[list[RerankReturnType], int]":
        """Documents by relevance to the query, best first (``top_n`` of them when it is above 0), and the
        tokens used. Scores are sigmoids of the logits unless ``raw_scores``."""
        self._assert_running()
        return await self._run(
            self._rerank_sync, query=query, docs=docs, raw_scores=raw_scores, top_n=top_n, instruction=instruction
        )

    async def classify(
        self, *, sentences: "list[str]", raw_scores: bool = False
    ) -> "tuple[list[list[ClassifyReturnType]], int]":
        """Per sentence, every label with its score, best first; and the tokens used."""
        self._assert_running()
        return await self._run(self._classify_sync, sentences=sentences, raw_scores=raw_scores)

    async def image_embed(
        self, *, images: "list[Union[str, bytes, Any]]", matryoshka_dim: Optional[int] = None
    ) -> "tuple[list[EmbeddingReturnType], int]":
        """Embeds images given as URLs, data URIs, paths, bytes or PIL images."""
        self._assert_running()
        encoded = await self._run(_encode_all, items=images, kind="image")
        return await self._run(self._embed_sync, inputs=encoded, modality="image", matryoshka_dim=matryoshka_dim)

    async def audio_embed(
        self, *, audios: "list[Union[str, bytes]]", matryoshka_dim: Optional[int] = None
    ) -> "tuple[list[EmbeddingReturnType], int]":
        """Embeds audio clips given as URLs, data URIs, paths or bytes (WAV, FLAC, MP3, OGG)."""
        self._assert_running()
        encoded = await self._run(_encode_all, items=audios, kind="audio")
        return await self._run(self._embed_sync, inputs=encoded, modality="audio", matryoshka_dim=matryoshka_dim)


def _encode_all(*, items, kind: str) -> "list[bytes]":
    if isinstance(items, (str, bytes)):
        raise TypeError(f"{kind}_embed takes a list")
    return [to_bytes(i, kind) for i in items]


class AsyncEngineArray:
    """Several engines, one per served model name."""

    def __init__(self, engines: Iterable[AsyncEmbeddingEngine]):
        engines = list(engines)
        if not engines:
            raise ValueError("Engines cannot be empty")
        names = [e.engine_args.served_model_name for e in engines]
        if len(names) != len(set(names)):
            raise ValueError("Engines must have unique model names")
        self.engines_dict = dict(zip(names, engines))

    @classmethod
    def from_args(cls, engine_args_array: Iterable[EngineArgs]) -> "AsyncEngineArray":
        return cls(engines=tuple(AsyncEmbeddingEngine.from_args(a) for a in engine_args_array))

    def __iter__(self) -> Iterator[AsyncEmbeddingEngine]:
        return iter(self.engines_dict.values())

    def __len__(self) -> int:
        return len(self.engines_dict)

    def __getitem__(self, index_or_name: Union[str, int]) -> AsyncEmbeddingEngine:
        """By served name or position; with one engine, that engine whatever is asked."""
        engines = list(self.engines_dict.values())
        if len(engines) == 1:
            return engines[0]
        if isinstance(index_or_name, int):
            return engines[index_or_name]
        if isinstance(index_or_name, str) and index_or_name in self.engines_dict:
            return self.engines_dict[index_or_name]
        raise IndexError(
            f"Engine for model name `{index_or_name}` not found. "
            f"Available model names are {list(self.engines_dict.keys())}"
        )

    def __reduce__(self):
        raise TypeError("an aleph engine array cannot be pickled: pickle its EngineArgs and build it where it is used")

    async def astart(self) -> None:
        for engine in self.engines_dict.values():
            await engine.astart()

    async def astop(self) -> None:
        for engine in self.engines_dict.values():
            await engine.astop()

    async def __aenter__(self) -> "AsyncEngineArray":
        await self.astart()
        return self

    async def __aexit__(self, *args) -> None:
        await self.astop()

    def is_running(self) -> bool:
        return all(e.is_running for e in self.engines_dict.values())

    async def embed(self, *, model: str, sentences: "list[str]", matryoshka_dim: Optional[int] = None, **kwargs):
        return await self[model].embed(sentences, matryoshka_dim=matryoshka_dim, **kwargs)

    async def rerank(
        self,
        *,
        model: str,
        query: str,
        docs: "list[str]",
        raw_scores: bool = False,
        top_n: Optional[int] = None,
        **kwargs,
    ):
        return await self[model].rerank(query=query, docs=docs, raw_scores=raw_scores, top_n=top_n, **kwargs)

    async def classify(self, *, model: str, sentences: "list[str]", raw_scores: bool = False):
        return await self[model].classify(sentences=sentences, raw_scores=raw_scores)

    async def image_embed(self, *, model: str, images: list, matryoshka_dim: Optional[int] = None):
        return await self[model].image_embed(images=images, matryoshka_dim=matryoshka_dim)

    async def audio_embed(self, *, model: str, audios: list, matryoshka_dim: Optional[int] = None):
        return await self[model].audio_embed(audios=audios, matryoshka_dim=matryoshka_dim)
