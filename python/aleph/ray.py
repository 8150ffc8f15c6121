"""Corpus embedding on Ray Data: ``map_batches`` over an actor pool, one Aleph engine per actor.

    import ray
    from aleph import EngineArgs
    from aleph.ray import Embedder

    args = EngineArgs(model_name_or_path="sentence-transformers/all-MiniLM-L6-v2")
    ds = ray.data.read_json("corpus.jsonl")
    ds = ds.map_batches(Embedder, fn_constructor_args=(args,), concurrency=2, num_cpus=1, batch_size=256)
    ds.write_parquet("vectors/")

Each actor builds its engine from the (picklable) ``EngineArgs`` in its own process; a running engine is never
shipped. Set ``ALEPH_COMPUTE_THREADS`` in the actors' environment (``runtime_env``) to share a node's cores
among them.
"""

from __future__ import annotations

from typing import Any, Dict, Optional

import numpy as np

from aleph.args import EngineArgs
from aleph.sync_engine import SyncEngineArray


class Embedder:
    """A callable class for ``Dataset.map_batches``: adds an ``embedding`` column (a ``[rows, dim]`` float array)
    computed from ``text_column``."""

    def __init__(
        self,
        args: EngineArgs,
        text_column: str = "text",
        output_column: str = "embedding",
        prompt_name: Optional[str] = None,
        dimensions: Optional[int] = None,
    ):
        self._array = SyncEngineArray.from_args([args])
        self._model = args.served_model_name
        self._text_column = text_column
        self._output_column = output_column
        self._options = {"prompt_name": prompt_name, "dimensions": dimensions}

    def __call__(self, batch: Dict[str, Any]) -> Dict[str, Any]:
        texts = [str(t) for t in batch[self._text_column]]
        vectors, _ = self._array.embed(model=self._model, sentences=texts, **self._options).result()
        batch[self._output_column] = np.stack(vectors) if vectors else np.zeros((0, 0), np.float32)
        return batch
