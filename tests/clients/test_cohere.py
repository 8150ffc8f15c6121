"""The Cohere Python SDK v2 client: `cohere.ClientV2(api_key=..., base_url=<server>)`.

Requests (cohere/v2/raw_client.py; httpx; path joined to base_url, so <server>/v2/embed and /v2/rerank):
  headers: Authorization: Bearer <api_key> (always; the SDK requires a key), Content-Type: application/json,
           User-Agent: cohere/<v>, X-Fern-Language/-Runtime/-Platform/-SDK-Name/-SDK-Version
  POST /v2/embed  {"texts": [...], "model", "input_type": "search_query"|"search_document"|"classification"|
                   "clustering"|"image", "embedding_types": [...], ["images"], ["inputs"], ["max_tokens"],
                   ["output_dimension"], ["truncate": "NONE"|"START"|"END"], ["priority"]} (omitted = not sent)
  POST /v2/rerank {"model", "query", "documents": [str], ["top_n"], ["max_tokens_per_doc"],
                   ["relevant_spans"], ["priority"]} -- this SDK version has NO return_documents argument.
Responses (construct_type: lenient, extra fields kept):
  EmbedByTypeResponse{id: str, embeddings: {float: [[float]], int8: [[int]], uint8: [[int]], binary: [[int]],
      ubinary: [[int]], base64: [str]}, texts, meta: {api_version: {version}, billed_units: {input_tokens...}},
      response_type: "embeddings_by_type"}
  V2RerankResponse{id, results: [{index, relevance_score}], meta}
  Errors: 400 BadRequestError, 401 UnauthorizedError, 404 NotFoundError, 422 UnprocessableEntityError,
  429 TooManyRequestsError, 500 InternalServerError... with e.status_code and e.body = the JSON.
Binary types (Cohere's definition): int8/uint8 one value per dimension; binary/ubinary pack 8 dimensions a
byte (sign bit: positive -> 1), so dim/8 values, binary = ubinary - 128.
"""

import cohere
import numpy as np
import pytest

from _util import EMBED_MODEL, RERANK_MODEL, TEXTS, assert_same_vectors, b64_floats

QUERY = "What is the capital of France?"
DOCS = ["Paris is the capital of France.", "Bananas are yellow.", "France's capital city is Paris.",
        "Berlin is the capital of Germany."]
TYPES = ["float", "int8", "uint8", "binary", "ubinary", "base64"]


@pytest.fixture
def co(server):
    return cohere.ClientV2(api_key=server.key, base_url=server.base, timeout=120)


def test_embed_all_types(server, co):
    got = co.embed(texts=TEXTS, model=EMBED_MODEL, input_type="search_query", embedding_types=TYPES)
    e = got.embeddings
    ref = server.raw_embeddings(TEXTS)
    assert_same_vectors(e.float_, ref, "cohere float")
    n = len(TEXTS)
    for name in ("int8", "uint8", "binary", "ubinary", "base64"):
        assert getattr(e, name) is not None and len(getattr(e, name)) == n, name
    for i, v in enumerate(ref):
        int8, uint8, binary, ubinary = e.int8[i], e.uint8[i], e.binary[i], e.ubinary[i]
        assert len(int8) == len(uint8) == 384
        assert all(isinstance(x, int) and -128 <= x <= 127 for x in int8)
        assert all(isinstance(x, int) and 0 <= x <= 255 for x in uint8)
        assert len(binary) == len(ubinary) == 384 // 8
        assert all(isinstance(x, int) and -128 <= x <= 127 for x in binary)
        # ubinary is the sign bits, packed big-endian within each byte, as numpy's packbits
        assert ubinary == np.packbits(v > 0).tolist(), "ubinary sign bits"
        assert binary == [x - 128 for x in ubinary], "binary = ubinary - 128"
        # int8 / uint8 are sentence-transformers' calibrated scalar quantization (Aleph's documented rule;
        # Cohere does not publish its own): one set of 256 buckets per dimension, uint8 = int8 + 128.
        assert uint8 == [x + 128 for x in int8], "uint8 = int8 + 128"
        assert isinstance(e.base64[i], str)
        assert_same_vectors([b64_floats(e.base64[i])], [v], "cohere base64")
    # Per dimension the buckets are ordered like the floats: a larger value never gets a smaller bucket.
    q = np.asarray(e.int8, float)
    f = np.asarray(ref)
    for d in range(f.shape[1]):
        order = np.argsort(f[:, d], kind="stable")
        assert np.all(np.diff(q[order, d]) >= 0), f"dimension {d}: buckets out of order"
    assert got.id
    assert got.texts in (None, TEXTS)


def test_embed_default_type_is_float(server, co):
    got = co.embed(texts=TEXTS[:2], model=EMBED_MODEL, input_type="search_document")
    assert_same_vectors(got.embeddings.float_, server.raw_embeddings(TEXTS[:2]), "cohere default float")


def test_embed_output_dimension(server, co):
    got = co.embed(texts=TEXTS[:2], model=EMBED_MODEL, input_type="classification", embedding_types=["float"],
                   output_dimension=128)
    assert all(len(v) == 128 for v in got.embeddings.float_)
    assert_same_vectors(got.embeddings.float_, server.raw_embeddings(TEXTS[:2], dimensions=128), "cohere dims")


def test_rerank(server, co):
    ref = server.raw_rerank(QUERY, DOCS)
    got = co.rerank(model=RERANK_MODEL, query=QUERY, documents=DOCS, top_n=3)
    assert len(got.results) == 3
    scores = [r.relevance_score for r in got.results]
    assert scores == sorted(scores, reverse=True)
    for r in got.results:
        assert abs(r.relevance_score - ref[r.index]) < 1e-6
    best = sorted(ref, key=ref.get, reverse=True)[:3]
    assert [r.index for r in got.results] == best


def test_rerank_return_documents_raw(server):
    # Not exposed by this SDK version, but Cohere's v2 API (and LiteLLM) send it: documents as {"text"}.
    body = {"model": RERANK_MODEL, "query": QUERY, "documents": DOCS, "return_documents": True, "top_n": 2}
    results = server.post("/v2/rerank", body).json()["results"]
    assert len(results) == 2
    for r in results:
        assert r["document"] == {"text": DOCS[r["index"]]}


def test_errors(server, co):
    # An unknown model is a 404 naming the served ones (Aleph's rule, and Cohere's own answer).
    with pytest.raises(cohere.errors.NotFoundError) as e:
        co.embed(texts=["x"], model="no-such-model", input_type="search_query", embedding_types=["float"])
    assert e.value.status_code == 404
    assert "no-such-model" in str(e.value.body)
    if server.api_key:
        bad = cohere.ClientV2(api_key="wrong", base_url=server.base)
        with pytest.raises(cohere.errors.UnauthorizedError):
            bad.rerank(model=RERANK_MODEL, query=QUERY, documents=DOCS)


def test_v1_client_embed(server):
    # cohere.Client (v1) POSTs <base>/v1/embed {"texts", "model", "input_type", ["embedding_types"]} in chunks
    # of 96 sent concurrently, and merges them by `response_type`, joining the ids; without
    # embedding_types the answer is `embeddings_floats`, a plain list of vectors.
    co1 = cohere.Client(api_key=server.key, base_url=server.base, timeout=120)
    got = co1.embed(texts=TEXTS, model=EMBED_MODEL, input_type="search_document")
    assert got.response_type == "embeddings_floats"
    assert_same_vectors(got.embeddings, server.raw_embeddings(TEXTS), "cohere v1 floats")
    typed = co1.embed(texts=TEXTS[:2], model=EMBED_MODEL, input_type="search_query", embedding_types=["float", "ubinary"])
    assert typed.response_type == "embeddings_by_type"
    assert_same_vectors(typed.embeddings.float_, server.raw_embeddings(TEXTS[:2]), "cohere v1 by type")
    assert len(typed.embeddings.ubinary[0]) == 384 // 8
