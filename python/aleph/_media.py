"""Turning Infinity's image and audio inputs (URLs, data URIs, paths, bytes, PIL images) into encoded bytes."""

from __future__ import annotations

import base64
import io
import urllib.request
from typing import Any

_TIMEOUT_S = 20.0


def to_bytes(item: Any, kind: str) -> bytes:
    if isinstance(item, (bytes, bytearray, memoryview)):
        return bytes(item)
    if isinstance(item, str):
        if item.startswith("data:"):
            _, _, payload = item.partition(",")
            try:
                return base64.b64decode(payload, validate=False)
            except ValueError as e:
                raise ValueError(f"{kind}: a data URI that is not base64: {e}") from None
        if item.startswith(("http://", "https://")):
            try:
                with urllib.request.urlopen(item, timeout=_TIMEOUT_S) as r:  # noqa: S310 (the caller's URL)
                    return r.read()
            except OSError as e:
                raise ValueError(f"{kind} {item}: {e}") from None
        try:
            with open(item, "rb") as f:
                return f.read()
        except OSError as e:
            raise ValueError(f"{kind} `{item}` is neither a URL, a data URI nor a readable file: {e}") from None
    # A PIL image (or anything with its `save`): encoded as PNG, losslessly.
    if kind == "image" and hasattr(item, "save"):
        buf = io.BytesIO()
        item.save(buf, format="PNG")
        return buf.getvalue()
    raise TypeError(f"{kind} inputs are URLs, data URIs, paths or bytes, not {type(item).__name__}")
