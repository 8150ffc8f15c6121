"""Infinity's option enums and return types, with Aleph's extra values.

Every enum is a ``str`` enum, so ``EngineArgs(device="cpu")`` and ``EngineArgs(device=Device.cpu)`` are the same.
"""

from __future__ import annotations

import enum
import sys
from dataclasses import dataclass
from typing import Literal, TypedDict

import numpy as np
import numpy.typing as npt

_kw_only = {"kw_only": True} if sys.version_info >= (3, 10) else {}


class EnumType(str, enum.Enum):
    def __str__(self) -> str:
        return self.value

    @classmethod
    def parse(cls, value: "str | EnumType", field: str) -> "EnumType":
        if isinstance(value, cls):
            return value
        try:
            return cls(str(value).lower())
        except ValueError:
            valid = ", ".join(m.value for m in cls)
            raise ValueError(f"{field}: `{value}` is not one of {valid}") from None


class InferenceEngine(EnumType):
    """Infinity's engines select Python machinery; Aleph runs its own kernels for ``torch``, ``optimum`` and
    ``ctranslate2`` (logged), ``candle`` for GPU compute, ``debugengine`` for a weight-free engine."""

    torch = "torch"
    ctranslate2 = "ctranslate2"
    optimum = "optimum"
    neuron = "neuron"
    debugengine = "debugengine"
    auto = "auto"
    candle = "candle"


class Device(EnumType):
    cpu = "cpu"
    cuda = "cuda"
    mps = "mps"
    tensorrt = "tensorrt"
    auto = "auto"


class Dtype(EnumType):
    float32 = "float32"
    float16 = "float16"
    bfloat16 = "bfloat16"
    int8 = "int8"
    fp8 = "fp8"
    auto = "auto"


class EmbeddingDtype(EnumType):
    float32 = "float32"
    int8 = "int8"
    uint8 = "uint8"
    binary = "binary"
    ubinary = "ubinary"

    def uses_bitpacking(self) -> bool:
        return self in (EmbeddingDtype.binary, EmbeddingDtype.ubinary)


class PoolingMethod(EnumType):
    mean = "mean"
    cls = "cls"
    auto = "auto"
    last_token = "last-token"
    max = "max"
    splade = "splade"


class DeviceID(list):
    """GPU ordinals: a list of ints, or ``"0,1"``."""

    def __init__(self, ids: "list[int] | str | None" = None):
        if ids is None:
            ids = []
        if isinstance(ids, str):
            ids = [int(i) for i in ids.split(",") if i.strip()]
        super().__init__(int(i) for i in ids)

    def __repr__(self) -> str:
        return "DeviceID(" + ", ".join(str(i) for i in self) + ")"

    def __reduce__(self):
        return (DeviceID, (list(self),))


EmbeddingReturnType = npt.NDArray[np.float32]


@dataclass(**_kw_only)
class RerankReturnType:
    relevance_score: float
    document: str
    index: int


class ClassifyReturnType(TypedDict):
    label: str
    score: float


ModelCapabilites = Literal["embed", "rerank", "classify", "image_embed", "audio_embed", "sparse", "colbert"]


@dataclass(**_kw_only)
class SparseEmbedding:
    """A sparse (lexical) embedding: vocabulary ids and their weights."""

    indices: npt.NDArray[np.uint32]
    values: npt.NDArray[np.float32]
