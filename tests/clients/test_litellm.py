"""LiteLLM's SDK (`litellm.embedding`, `litellm.rerank`) with the providers users pick for a self-hosted
Infinity/TEI/Cohere-compatible server.

What it sends (litellm/llms/...):
  openai/<model>, api_base=<server>/v1: through the OpenAI SDK (its own client) -> POST /v1/embeddings
      {"model", "input": [...], "encoding_format": null?...}; see test_openai_provider_body for the exact JSON.
      Header Authorization: Bearer <api_key> (LiteLLM substitutes a placeholder when none is given).
  infinity/<model> embeddings (llms/infinity/embedding/transformation.py): POST ensure_api_route(api_base,
      "embeddings") -> <api_base>/embeddings, JSON {"input": [...], "model", **optional} where `dimensions`
      is renamed `output_dimension`, plus "encoding_format"/"modality" when given. Headers Authorization:
      Bearer <key>, accept, Content-Type: application/json. Parses data/model/object and usage.prompt_tokens/
      total_tokens (data is passed through unchanged).
  infinity/<model> rerank (llms/infinity/rerank/transformation.py, request from CohereRerankConfig):
      POST <api_base>/rerank {"model", "query", "documents", "top_n", "return_documents": true (litellm's
      default)}, nulls dropped. Parses results[].index/relevance_score/document (a string, wrapped as
      {"text": ...}), usage.prompt_tokens/total_tokens, id.
  cohere/<model> rerank (CohereRerankV2Config): POST ensure_api_route(api_base, "v2/rerank") ->
      <api_base>/v2/rerank {"model", "query", "documents", "top_n", "return_documents"} (exclude_none), parsed by
      RerankResponse.model_validate: results[].document must be {"text": str} (a bare string fails).
  cohere/<model> embeddings (llms/cohere/embed/transformation.py): POST api_base *as given* (so pass the full
      <server>/v2/embed) {"model", "texts", "input_type": "search_document", "embedding_types": [fmt]...};
      reads embeddings.float (or the requested types).
  hosted_vllm/<model> rerank (llms/hosted_vllm/rerank/transformation.py): POST <api_base>/rerank (a trailing
      /v1/rerank is rewritten to /rerank) {"model","query","documents","top_n","return_documents",...};
      parses results[] requiring index and relevance_score, and `result.get("document", {}).get("text")`:
      a document that is a *string* (Infinity's /rerank shape) raises AttributeError, so with documents
      returned it needs {"text": ...} objects.
"""
import numpy as np
import pytest

import litellm
from _util import EMBED_MODEL, RERANK_MODEL, TEXTS, assert_same_vectors, assert_unit

litellm.telemetry = False
litellm.drop_params = False
litellm.suppress_debug_info = True

QUERY = "What is the capital of France?"
DOCS = ["Paris is the capital of France.", "Berlin is in Germany.", "The capital of France is a city.",
        "Bananas are yellow."]


def _vectors(resp):
    out = []
    for d in resp.data:
        e = d["embedding"] if isinstance(d, dict) else d.embedding
        out.append(np.asarray(e, dtype=np.float32))
    return out


def test_openai_provider_embedding(server):
    resp = litellm.embedding(model=f"openai/{EMBED_MODEL}", input=TEXTS, api_base=server.v1, api_key=server.key)
    assert_same_vectors(_vectors(resp), server.raw_embeddings(TEXTS), "litellm openai/")
    assert resp.usage.prompt_tokens > 0


def test_openai_provider_dimensions(server):
    # LiteLLM refuses `dimensions` client-side for openai/ models whose name lacks "text-embedding-3"
    # (UnsupportedParamsError) unless allowed_openai_params lists it.
    resp = litellm.embedding(model=f"openai/{EMBED_MODEL}", input=TEXTS[:2], api_base=server.v1,
                             api_key=server.key, dimensions=64, allowed_openai_params=["dimensions"])
    vs = _vectors(resp)
    assert all(len(v) == 64 for v in vs)
    for v in vs:
        assert_unit(v, "litellm openai/ dimensions=64")
    assert_same_vectors(vs, server.raw_embeddings(TEXTS[:2], dimensions=64), "litellm openai/ dims")


def test_infinity_provider_embedding(server):
    resp = litellm.embedding(model=f"infinity/{EMBED_MODEL}", input=TEXTS, api_base=server.base,
                             api_key=server.key)
    assert_same_vectors(_vectors(resp), server.raw_embeddings(TEXTS), "litellm infinity/")
    assert resp.usage.prompt_tokens > 0


def test_infinity_provider_output_dimension(server):
    # LiteLLM renames dimensions to output_dimension for Infinity.
    resp = litellm.embedding(model=f"infinity/{EMBED_MODEL}", input=TEXTS[:2], api_base=server.base,
                             api_key=server.key, dimensions=96)
    vs = _vectors(resp)
    assert all(len(v) == 96 for v in vs)
    for v in vs:
        assert_unit(v, "litellm infinity/ output_dimension=96")
    assert_same_vectors(vs, server.raw_embeddings(TEXTS[:2], dimensions=96), "litellm infinity/ dims")


def _check_rerank(resp, reference, documents, top_n=None, with_docs=True):
    results = resp.results
    assert results, resp
    if top_n is not None:
        assert len(results) == top_n
    scores = [r["relevance_score"] for r in results]
    assert scores == sorted(scores, reverse=True), "best first"
    for r in results:
        assert abs(r["relevance_score"] - reference[r["index"]]) < 1e-6, (r, reference)
        if with_docs:
            assert r["document"]["text"] == documents[r["index"]], r


def test_infinity_provider_rerank(server):
    ref = server.raw_rerank(QUERY, DOCS)
    resp = litellm.rerank(model=f"infinity/{RERANK_MODEL}", query=QUERY, documents=DOCS, api_base=server.base,
                          api_key=server.key)
    _check_rerank(resp, ref, DOCS)
    resp = litellm.rerank(model=f"infinity/{RERANK_MODEL}", query=QUERY, documents=DOCS, top_n=2,
                          return_documents=False, api_base=server.base, api_key=server.key)
    _check_rerank(resp, ref, DOCS, top_n=2, with_docs=False)


def test_cohere_provider_rerank_v2(server):
    ref = server.raw_rerank(QUERY, DOCS)
    resp = litellm.rerank(model=f"cohere/{RERANK_MODEL}", query=QUERY, documents=DOCS, top_n=3,
                          api_base=server.base, api_key=server.key)
    _check_rerank(resp, ref, DOCS, top_n=3)


def test_cohere_provider_embedding(server):
    # LiteLLM posts to api_base verbatim for cohere embeddings, so it is the full /v2/embed URL.
    resp = litellm.embedding(model=f"cohere/{EMBED_MODEL}", input=TEXTS, api_base=f"{server.base}/v2/embed",
                             api_key=server.key)
    assert_same_vectors(_vectors(resp), server.raw_embeddings(TEXTS), "litellm cohere/")


def test_hosted_vllm_rerank(server):
    ref = server.raw_rerank(QUERY, DOCS)
    # Documents not returned: works against the Infinity-shaped POST /rerank.
    resp = litellm.rerank(model=f"hosted_vllm/{RERANK_MODEL}", query=QUERY, documents=DOCS,
                          return_documents=False, api_base=server.base, api_key=server.key)
    _check_rerank(resp, ref, DOCS, with_docs=False)


def test_hosted_vllm_rerank_with_documents(server):
    # LiteLLM's default return_documents=True: hosted_vllm reads result["document"]["text"], so POST /rerank
    # must answer documents as {"text": ...} objects for it (vLLM's shape), or it raises AttributeError on
    # Infinity's bare strings. Pointing api_base at /v2 (Cohere's shape) works either way.
    ref = server.raw_rerank(QUERY, DOCS)
    resp = litellm.rerank(model=f"hosted_vllm/{RERANK_MODEL}", query=QUERY, documents=DOCS, top_n=2,
                          api_base=f"{server.base}/v2", api_key=server.key)
    _check_rerank(resp, ref, DOCS, top_n=2)


def test_errors_surface(server):
    # unknown model: 400 (Infinity) or 404 (OpenAI) -> litellm's BadRequestError / NotFoundError
    with pytest.raises((litellm.exceptions.BadRequestError, litellm.exceptions.NotFoundError)) as e:
        litellm.embedding(model="openai/no-such-model", input=["x"], api_base=server.v1, api_key=server.key,
                          num_retries=0)
    assert "no-such-model" in str(e.value)
    if server.api_key:
        with pytest.raises(litellm.exceptions.AuthenticationError):
            litellm.embedding(model=f"openai/{EMBED_MODEL}", input=["x"], api_base=server.v1, api_key="wrong",
                              num_retries=0)
