"""infinity_client, the client generated (openapi-python-client) from Infinity's OpenAPI document.

Requests (infinity_client/api/default/*.py; httpx, headers Content-Type: application/json, and with
AuthenticatedClient "Authorization: Bearer <token>"):
  GET  /models, GET /health
  POST /embeddings  OpenAIEmbeddingInputText.to_dict(): {"input", "model": "default/not-specified" (default),
       "dimensions": 0 (ALWAYS sent; 0 must mean "full size"), "modality": "text" (always), ["encoding_format":
       "float"] (the enum has only float), ["user"]}
  POST /rerank      {"query", "documents", "return_documents": false, "raw_scores": false,
       "model": "default/not-specified", ["top_n"]} -- all but top_n always sent.
  POST /classify    {"input": [..], "model": "default/not-specified", "raw_scores": false}
Responses (from_dict; a missing required key raises KeyError, a value outside an enum raises ValueError):
  /models: {"data": [ModelInfo]} required; ModelInfo requires "id" and "stats" (any object); optional
       "object" must be "model", "owned_by" must be "infinity" (enum ModelInfoOwnedBy), "created",
       "backend", "capabilities" (list of str).
  /embeddings: "data", "model", "usage"{"prompt_tokens","total_tokens"} required; "object" must be "list";
       data[i]: "embedding" must be a JSON list (a base64 string raises TypeError), "index" required,
       "object" must be "embedding".
  /rerank: "results", "model", "usage" required; "object" must be "rerank"; results[i]: "relevance_score",
       "index" required, "document" str|null.
  /classify: "data" (list of lists of {"score","label"}), "model", "usage" required; "object" "classify".
  200 -> parsed model; 422 -> HTTPValidationError.from_dict: "detail" must be a LIST of {"loc": [...],
       "msg", "type"} (FastAPI's shape): a string detail is iterated character by character and crashes
       with AttributeError('str' object has no attribute 'copy'); any other status -> None, or
       errors.UnexpectedStatus(status, content) with raise_on_unexpected_status=True.
"""
import json

import pytest
from infinity_client import AuthenticatedClient, Client, errors
from infinity_client.api.default import classify, embeddings, health, models, rerank
from infinity_client.models import (ClassifyInput, EmbeddingEncodingFormat, HTTPValidationError, ModelInfoObject,
                                    ModelInfoOwnedBy, OpenAIEmbeddingInputText, RerankInput)

from _util import (CLASSIFY_MODEL, EMBED_MODEL, RERANK_MODEL, TEXTS, assert_same_vector, assert_same_vectors,
                   assert_unit)

QUERY = "Where is the Eiffel tower?"
DOCS = ["The Eiffel tower is in Paris.", "Bananas are yellow.", "Paris has a tower.", "Rust is fast."]


def _client(server, **kw):
    if server.api_key:
        return AuthenticatedClient(base_url=server.base, token=server.api_key, timeout=120, **kw)
    return Client(base_url=server.base, timeout=120, **kw)


def test_health(server):
    assert health.sync_detailed(client=_client(server)).status_code == 200


def test_models(server):
    got = models.sync(client=_client(server, raise_on_unexpected_status=True))
    assert [m.id for m in got.data] == [EMBED_MODEL, RERANK_MODEL, CLASSIFY_MODEL]
    for m in got.data:
        assert m.owned_by == ModelInfoOwnedBy.INFINITY
        assert m.object_ == ModelInfoObject.MODEL
        assert isinstance(m.capabilities, list) and m.capabilities
    caps = {m.id: set(m.capabilities) for m in got.data}
    assert "embed" in caps[EMBED_MODEL] and "rerank" in caps[RERANK_MODEL] and "classify" in caps[CLASSIFY_MODEL]


def test_embeddings(server):
    c = _client(server, raise_on_unexpected_status=True)
    got = embeddings.sync(client=c, body=OpenAIEmbeddingInputText(input_=TEXTS, model=EMBED_MODEL,
                                                                   encoding_format=EmbeddingEncodingFormat.FLOAT))
    assert got.model == EMBED_MODEL and got.usage.prompt_tokens > 0
    assert [d.index for d in got.data] == list(range(len(TEXTS)))
    assert_same_vectors([d.embedding for d in got.data], server.raw_embeddings(TEXTS), "infinity_client embeddings")


def test_embeddings_defaults(server):
    # dimensions 0 (= full size) and modality "text", as always sent; a single string input.
    got = embeddings.sync(client=_client(server, raise_on_unexpected_status=True),
                          body=OpenAIEmbeddingInputText(input_=TEXTS[0], model=EMBED_MODEL))
    assert len(got.data) == 1 and len(got.data[0].embedding) == 384
    assert_same_vector(got.data[0].embedding, server.raw_embedding(TEXTS[0]), "infinity_client defaults")
    # The default model "default/not-specified" only resolves when ONE model is served (Infinity's
    # AsyncEngineArray); with three it is an unknown model: 400 in Infinity, 404 here now.
    resp = embeddings.sync_detailed(client=_client(server), body=OpenAIEmbeddingInputText(input_=TEXTS[0]))
    assert resp.status_code in (400, 404) and b"default/not-specified" in resp.content


def test_embeddings_dimensions(server):
    got = embeddings.sync(client=_client(server, raise_on_unexpected_status=True),
                          body=OpenAIEmbeddingInputText(input_=TEXTS, model=EMBED_MODEL, dimensions=64))
    for d in got.data:
        assert len(d.embedding) == 64
        assert_unit(d.embedding, "infinity_client dimensions=64")
    assert_same_vectors([d.embedding for d in got.data], server.raw_embeddings(TEXTS, dimensions=64), "dims")


def test_rerank(server):
    ref = server.raw_rerank(QUERY, DOCS)
    c = _client(server, raise_on_unexpected_status=True)
    got = rerank.sync(client=c, body=RerankInput(query=QUERY, documents=DOCS, model=RERANK_MODEL,
                                                 return_documents=True))
    assert got.model == RERANK_MODEL
    assert sorted(r.index for r in got.results) == list(range(len(DOCS)))
    scores = [r.relevance_score for r in got.results]
    assert scores == sorted(scores, reverse=True)
    for r in got.results:
        assert abs(r.relevance_score - ref[r.index]) < 1e-6
        assert r.document == DOCS[r.index]
    top = rerank.sync(client=c, body=RerankInput(query=QUERY, documents=DOCS, model=RERANK_MODEL, top_n=2))
    assert [r.index for r in top.results] == [r.index for r in got.results[:2]]
    assert all(r.document is None for r in top.results)


def test_classify(server):
    texts = ["I love it", "I hate it", "It is a table"]
    ref = server.raw_classify(texts)
    got = classify.sync(client=_client(server, raise_on_unexpected_status=True),
                        body=ClassifyInput(input_=texts, model=CLASSIFY_MODEL))
    assert got.model == CLASSIFY_MODEL and len(got.data) == len(texts)
    for row, want in zip(got.data, ref):
        assert {o.label for o in row} == {"negative", "neutral", "positive"}
        for o in row:
            assert abs(o.score - want[o.label]) < 1e-6


def test_error_400_detail(server):
    # A model that cannot rerank: 400, which the client does not parse; the body carries `detail`.
    c = _client(server)
    resp = rerank.sync_detailed(client=c, body=RerankInput(query=QUERY, documents=DOCS, model=EMBED_MODEL))
    assert resp.status_code == 400 and resp.parsed is None
    body = json.loads(resp.content)
    assert isinstance(body["detail"], str) and body["detail"], body
    assert body["error"]["message"] == body["detail"]
    with pytest.raises(errors.UnexpectedStatus) as e:
        rerank.sync(client=_client(server, raise_on_unexpected_status=True),
                    body=RerankInput(query=QUERY, documents=DOCS, model=EMBED_MODEL))
    assert e.value.status_code == 400 and b"detail" in e.value.content


def test_error_422_is_fastapi_shaped(server):
    # top_n must be > 0: a schema error, 422, which the client parses as HTTPValidationError -- it needs
    # "detail": [{"loc": [...], "msg": "...", "type": "..."}], like FastAPI.
    resp = rerank.sync_detailed(client=_client(server),
                                body=RerankInput(query=QUERY, documents=DOCS, model=RERANK_MODEL, top_n=0))
    assert resp.status_code == 422
    assert isinstance(resp.parsed, HTTPValidationError), resp.content
    assert resp.parsed.detail and resp.parsed.detail[0].msg, resp.content
    assert isinstance(resp.parsed.detail[0].loc, list)


def test_auth(server):
    resp = models.sync_detailed(client=Client(base_url=server.base))
    if not server.api_key:
        assert resp.status_code == 200
        return
    assert resp.status_code == 401
    wrong = AuthenticatedClient(base_url=server.base, token="wrong")
    assert embeddings.sync_detailed(client=wrong, body=OpenAIEmbeddingInputText(input_="x")).status_code == 401
