"""``EngineArgs``: Infinity's fields and defaults, plus Aleph's per-model options."""

from __future__ import annotations

import logging
import os
import sys
from copy import deepcopy
from dataclasses import asdict, dataclass, field
from typing import Optional, Union

from aleph.primitives import (
    Device,
    DeviceID,
    Dtype,
    EmbeddingDtype,
    InferenceEngine,
    PoolingMethod,
)

logger = logging.getLogger("aleph")

_kw_only = {"kw_only": True} if sys.version_info >= (3, 10) else {}

# Engines that select Infinity's Python machinery: Aleph runs its own kernels instead.
_PYTHON_ENGINES = {InferenceEngine.torch, InferenceEngine.optimum, InferenceEngine.ctranslate2}


def _env(name: str, default: str) -> str:
    """Infinity reads its defaults from ``INFINITY_*`` (Aleph's ``ALEPH_*`` first)."""
    for prefix in ("ALEPH_", "INFINITY_"):
        value = os.environ.get(prefix + name)
        if value:
            return value.split(";")[0]
    return default


def _env_bool(name: str, default: bool) -> bool:
    return _env(name, str(default)).strip().lower() in {"true", "t", "1", "yes", "y"}


@dataclass(frozen=True, **_kw_only)
class EngineArgs:
    """How to load and serve one model; every field is keyword-only (Python 3.10+), and the object is frozen
    and picklable.

    Infinity's fields keep Infinity's meaning and defaults. ``engine`` torch/optimum/ctranslate2,
    ``bettertransformer``, ``compile`` and ``lengths_via_tokenize`` select Python machinery Aleph does not have:
    they are accepted and logged. Aleph's own options follow the command line's flags of the same names.
    """

    model_name_or_path: str = field(default_factory=lambda: _env("MODEL_ID", "michaelfeil/bge-small-en-v1.5"))
    batch_size: int = field(default_factory=lambda: int(_env("BATCH_SIZE", "32")))
    revision: Optional[str] = None
    trust_remote_code: bool = field(default_factory=lambda: _env_bool("TRUST_REMOTE_CODE", True))
    engine: Union[InferenceEngine, str] = InferenceEngine.torch
    model_warmup: bool = field(default_factory=lambda: _env_bool("MODEL_WARMUP", True))
    vector_disk_cache_path: Union[str, bool] = ""
    device: Union[Device, str] = Device.auto
    device_id: Union[DeviceID, list, str] = field(default_factory=DeviceID)
    compile: bool = False
    bettertransformer: bool = True
    dtype: Union[Dtype, str] = Dtype.auto
    pooling_method: Union[PoolingMethod, str] = PoolingMethod.auto
    lengths_via_tokenize: bool = False
    embedding_dtype: Union[EmbeddingDtype, str] = EmbeddingDtype.float32
    served_model_name: str = ""
    # Aleph's options (the `aleph v2` flags of the same names).
    max_batch_tokens: Optional[int] = None
    default_prompt_name: Optional[str] = None
    truncate_dim: Optional[int] = None
    model_task: str = "auto"
    rerank_template: str = "auto"
    rerank_instruction: Optional[str] = None
    queue_size: int = 32000
    max_request_tokens: int = 0
    compute_weight: float = 1.0
    tokenizer_workers: Optional[int] = None

    def __post_init__(self):
        def put(name, value):
            object.__setattr__(self, name, value)

        put("engine", InferenceEngine.parse(self.engine, "engine"))
        put("device", Device.parse(Device.auto if self.device is None else self.device, "device"))
        if not isinstance(self.device_id, DeviceID):
            put("device_id", DeviceID(self.device_id))
        put("dtype", Dtype.parse(self.dtype, "dtype"))
        put("pooling_method", PoolingMethod.parse(self.pooling_method, "pooling_method"))
        put("embedding_dtype", EmbeddingDtype.parse(self.embedding_dtype, "embedding_dtype"))
        if not isinstance(self.batch_size, int) or self.batch_size < 1:
            raise ValueError(f"batch_size must be a positive int, not {self.batch_size!r}")
        if not self.served_model_name:
            put("served_model_name", "/".join(self.model_name_or_path.rstrip("/").split("/")[-2:]))
        if self.revision == "":
            put("revision", None)
        if isinstance(self.vector_disk_cache_path, bool):
            name = f"{self.engine}_{self.model_name_or_path.replace('/', '_')}"
            put("vector_disk_cache_path", name if self.vector_disk_cache_path else "")

    def to_dict(self) -> dict:
        return asdict(self)

    def copy(self) -> "EngineArgs":
        return deepcopy(self)

    @classmethod
    def from_env(cls) -> "list[EngineArgs]":
        """One ``EngineArgs`` per model in ``INFINITY_MODEL_ID`` (or ``ALEPH_MODEL_ID``), ``;``-separated."""
        ids = (os.environ.get("ALEPH_MODEL_ID") or os.environ.get("INFINITY_MODEL_ID") or "").split(";")
        return [cls(model_name_or_path=i) for i in ids if i] or [cls()]

    def no_effect(self) -> "list[str]":
        """The Python-only settings given, which change nothing in Aleph."""
        out = []
        if self.engine in _PYTHON_ENGINES and self.engine != InferenceEngine.torch:
            out.append(f"engine={self.engine}")
        if self.compile:
            out.append("compile=True")
        if not self.bettertransformer:
            out.append("bettertransformer=False")
        if self.lengths_via_tokenize:
            out.append("lengths_via_tokenize=True")
        return out

    def _native_options(self) -> dict:
        """The options as the native engine reads them."""
        if self.engine in _PYTHON_ENGINES:
            engine = "auto"
        else:
            engine = self.engine.value
        return {
            "model_name_or_path": self.model_name_or_path,
            "served_model_name": self.served_model_name,
            "revision": self.revision,
            "engine": engine,
            "batch_size": self.batch_size,
            "max_batch_tokens": self.max_batch_tokens,
            "device": self.device.value,
            "device_id": list(self.device_id),
            "dtype": self.dtype.value,
            "pooling_method": self.pooling_method.value,
            "embedding_dtype": self.embedding_dtype.value,
            "trust_remote_code": self.trust_remote_code,
            "model_warmup": self.model_warmup,
            "vector_disk_cache_path": self.vector_disk_cache_path or None,
            "model_task": self.model_task,
            "rerank_template": self.rerank_template,
            "rerank_instruction": self.rerank_instruction,
            "default_prompt_name": self.default_prompt_name,
            "truncate_dim": self.truncate_dim,
            "compute_weight": self.compute_weight,
            "queue_size": self.queue_size,
            "max_request_tokens": self.max_request_tokens,
            "tokenizer_workers": self.tokenizer_workers,
        }


__all__ = ["EngineArgs"]
