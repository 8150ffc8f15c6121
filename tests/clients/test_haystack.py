"""Haystack 2.x/3.x: `OpenAITextEmbedder`, `OpenAIDocumentEmbedder` (haystack-ai) and
`HuggingFaceAPITextEmbedder` / `HuggingFaceAPIDocumentEmbedder` (huggingface-api-haystack; moved out of
haystack-ai in 3.x).

OpenAI*Embedder (haystack/components/embedders/openai_*_embedder.py): OpenAI SDK, base_url=api_base_url,
  api_key=Secret; client.embeddings.create(model, input, encoding_format="float" (explicit), [dimensions])
  -> POST <api_base_url>/embeddings. The document embedder batches by batch_size=32, input = prefix + meta
  fields + content + suffix; an APIError in a batch is logged and the batch skipped (raise_on_failure=False).
  meta: {"model": response.model, "usage": dict(response.usage)}.
HuggingFaceAPITextEmbedder(api_type="text_embeddings_inference", api_params={"url": U}, token=Secret):
  huggingface_hub.InferenceClient(model=U, token=...).feature_extraction(text, truncate=True,
  normalize=False) -> POST U exactly as given (so U=<server> hits POST /, U=<server>/embed hits /embed),
  headers Authorization: Bearer <token> (only when a token is given), JSON {"inputs": "<text>",
  "truncate": true, "normalize": false}. NOTE normalize=false is Haystack's default: the TEI route must honour
  it and return the raw pooled vector (not unit norm for MiniLM). The answer is read as a float32 array of
  shape (1, dim) or (dim,). The document embedder sends {"inputs": [texts], "truncate", "normalize"}
  (batch_size 32) and expects shape (n, dim).
"""
import numpy as np
import pytest
from haystack import Document
from haystack.components.embedders import OpenAIDocumentEmbedder, OpenAITextEmbedder
from haystack.utils import Secret
from haystack_integrations.components.embedders.huggingface_api import (HuggingFaceAPIDocumentEmbedder,
                                                                         HuggingFaceAPITextEmbedder)

from _util import EMBED_MODEL, TEXTS, assert_same_vector, assert_same_vectors, assert_unit


def _token(server):
    return Secret.from_token(server.key)


def test_openai_text_embedder(server):
    emb = OpenAITextEmbedder(api_key=_token(server), model=EMBED_MODEL, api_base_url=server.v1, max_retries=0)
    out = emb.run(text=TEXTS[0])
    assert_same_vector(out["embedding"], server.raw_embedding(TEXTS[0]), "OpenAITextEmbedder")
    assert out["meta"]["model"] == EMBED_MODEL
    assert out["meta"]["usage"]["prompt_tokens"] > 0


def test_openai_text_embedder_dimensions(server):
    emb = OpenAITextEmbedder(api_key=_token(server), model=EMBED_MODEL, api_base_url=server.v1, dimensions=48,
                             max_retries=0)
    v = emb.run(text=TEXTS[1])["embedding"]
    assert len(v) == 48
    assert_unit(v, "OpenAITextEmbedder dimensions=48")
    assert_same_vector(v, server.raw_embedding(TEXTS[1], dimensions=48), "OpenAITextEmbedder dims")


def test_openai_document_embedder(server):
    docs = [Document(content=t, meta={"topic": f"t{i}"}) for i, t in enumerate(TEXTS)]
    emb = OpenAIDocumentEmbedder(api_key=_token(server), model=EMBED_MODEL, api_base_url=server.v1, batch_size=3,
                                 raise_on_failure=True, max_retries=0)
    out = emb.run(documents=docs)
    got = [d.embedding for d in out["documents"]]
    assert_same_vectors(got, server.raw_embeddings(TEXTS), "OpenAIDocumentEmbedder")
    # meta fields are embedded as "<meta>\n<content>"
    emb_meta = OpenAIDocumentEmbedder(api_key=_token(server), model=EMBED_MODEL, api_base_url=server.v1,
                                      meta_fields_to_embed=["topic"], raise_on_failure=True, max_retries=0)
    got = emb_meta.run(documents=[Document(content=TEXTS[0], meta={"topic": "animals"})])["documents"][0]
    assert_same_vector(got.embedding, server.raw_embedding("animals\n" + TEXTS[0]), "meta_fields_to_embed")


@pytest.mark.parametrize("route", ["", "/embed"])
def test_hf_api_text_embedder_tei(server, route):
    emb = HuggingFaceAPITextEmbedder(api_type="text_embeddings_inference", api_params={"url": server.base + route},
                                     token=Secret.from_token(server.api_key) if server.api_key else None)
    v = emb.run(text=TEXTS[0])["embedding"]
    ref = server.raw_embedding(TEXTS[0])
    assert_same_vector(v, ref, f"HuggingFaceAPITextEmbedder POST {route or '/'} (direction)")
    # normalize=False is sent: MiniLM's pooled vector before its Normalize module is not unit length.
    assert abs(np.linalg.norm(v) - 1.0) > 1e-3, "normalize=false was ignored"
    emb_norm = HuggingFaceAPITextEmbedder(api_type="text_embeddings_inference",
                                          api_params={"url": server.base + route}, normalize=True,
                                          token=Secret.from_token(server.api_key) if server.api_key else None)
    vn = emb_norm.run(text=TEXTS[0])["embedding"]
    assert_unit(vn, "normalize=true")
    assert_same_vector(vn, ref, "normalize=true vs raw /embeddings")


def test_hf_api_document_embedder_tei(server):
    emb = HuggingFaceAPIDocumentEmbedder(api_type="text_embeddings_inference", api_params={"url": server.base + "/embed"},
                                         token=Secret.from_token(server.api_key) if server.api_key else None,
                                         normalize=True, batch_size=3)
    out = emb.run(documents=[Document(content=t) for t in TEXTS])
    assert_same_vectors([d.embedding for d in out["documents"]], server.raw_embeddings(TEXTS),
                        "HuggingFaceAPIDocumentEmbedder")
