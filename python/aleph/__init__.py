"""Aleph in-process: Infinity's Python API (``EngineArgs``, ``AsyncEmbeddingEngine``, ``AsyncEngineArray``,
``SyncEngineArray``) over Aleph's Rust engine.

    from aleph import AsyncEmbeddingEngine, EngineArgs

    engine = AsyncEmbeddingEngine.from_args(EngineArgs(model_name_or_path="sentence-transformers/all-MiniLM-L6-v2"))
    async with engine:
        embeddings, usage = await engine.embed(sentences=["Embed this sentence."])
"""

from aleph._native import __version__
from aleph.args import EngineArgs
from aleph.engine import AsyncEmbeddingEngine, AsyncEngineArray, ModelNotDeployedError, OverloadedError
from aleph.primitives import (
    ClassifyReturnType,
    Device,
    DeviceID,
    Dtype,
    EmbeddingDtype,
    InferenceEngine,
    PoolingMethod,
    RerankReturnType,
    SparseEmbedding,
)
from aleph.sync_engine import SyncEngineArray

__all__ = [
    "__version__",
    "AsyncEmbeddingEngine",
    "AsyncEngineArray",
    "ClassifyReturnType",
    "Device",
    "DeviceID",
    "Dtype",
    "EmbeddingDtype",
    "EngineArgs",
    "InferenceEngine",
    "ModelNotDeployedError",
    "OverloadedError",
    "PoolingMethod",
    "RerankReturnType",
    "SparseEmbedding",
    "SyncEngineArray",
]
