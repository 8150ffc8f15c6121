"""The OpenAI Python SDK (openai>=3), as users point it at Aleph: `OpenAI(base_url=<server>/v1, api_key=...)`.

What the SDK sends (openai/resources/embeddings.py, openai/lib/_parsing/_embeddings.py, _base_client.py):
  POST {base_url}/embeddings  (so /v1/embeddings here)
  headers: Authorization: Bearer <api_key> (always; the SDK refuses an empty key), Content-Type: application/json,
           Accept: application/json, User-Agent: OpenAI/Python <v>, X-Stainless-* (lang, os, arch, runtime,
           retry-count, read-timeout...)
  JSON: {"model", "input", ["user"], ["dimensions"], "encoding_format"}; when the caller gives no
        encoding_format the SDK sends "base64" and decodes data[i].embedding with
        np.frombuffer(b64decode(s), "float32") (little-endian float32). Omitted arguments are not sent.
  Response: CreateEmbeddingResponse{data: [{embedding, index, object: "embedding"}], model, object: "list",
            usage: {prompt_tokens, total_tokens}} (built without validation; a missing field is just absent).
  GET {base_url}/models -> {object: "list", data: [Model{id, created, object: "model", owned_by}]}
  GET {base_url}/models/{id}: the id is percent-encoded as one path segment (path_template), so
      "org/name" arrives as /v1/models/org%2Fname.
  Errors: status >= 400 -> APIStatusError subclass by status (400 BadRequestError, 401 AuthenticationError,
      404 NotFoundError, 422 UnprocessableEntityError, 429 RateLimitError, >=500 InternalServerError);
      e.body = json["error"] (else the whole JSON); e.code = str(body["code"]), e.type, e.param from it;
      str(e) = "Error code: <status> - <whole JSON>". 408/409/429/5xx are retried (max_retries, default 2).
"""
import numpy as np
import openai
import pytest

from _util import (CLASSIFY_MODEL, DIM, EMBED_MODEL, RERANK_MODEL, TEXTS, assert_same_vector, assert_same_vectors,
                   assert_unit, b64_floats, minilm_tokenizer)


@pytest.fixture
def client(server):
    return openai.OpenAI(base_url=server.v1, api_key=server.key, max_retries=0, timeout=120)


def test_create_default_is_base64_and_decodes_exactly(server, client):
    got = client.embeddings.create(model=EMBED_MODEL, input=TEXTS)
    assert got.object == "list" and got.model == EMBED_MODEL
    assert [d.index for d in got.data] == list(range(len(TEXTS)))
    assert all(d.object == "embedding" for d in got.data)
    assert got.usage.prompt_tokens > 0 and got.usage.total_tokens >= got.usage.prompt_tokens
    # The SDK asked for base64 and decoded it: bit-identical to the server's own base64 answer...
    b64 = server.post("/v1/embeddings", {"model": EMBED_MODEL, "input": TEXTS, "encoding_format": "base64"}).json()
    assert all(isinstance(d["embedding"], str) for d in b64["data"])
    assert_same_vectors([d.embedding for d in got.data], [b64_floats(d["embedding"]) for d in b64["data"]],
                        "sdk(base64) vs raw base64", exact=True)
    # ...and equal to the float answer.
    assert_same_vectors([d.embedding for d in got.data], server.raw_embeddings(TEXTS), "sdk(base64) vs raw float")
    for d in got.data:
        assert len(d.embedding) == DIM
        assert_unit(d.embedding, "default MiniLM output")


def test_create_float(server, client):
    got = client.embeddings.create(model=EMBED_MODEL, input=TEXTS, encoding_format="float")
    assert all(isinstance(d.embedding, list) and isinstance(d.embedding[0], float) for d in got.data)
    assert_same_vectors([d.embedding for d in got.data], server.raw_embeddings(TEXTS), "sdk(float)")


def test_create_explicit_base64_is_returned_undecoded(server, client):
    # An explicit encoding_format="base64" makes the SDK hand back the string as the server sent it.
    got = client.embeddings.create(model=EMBED_MODEL, input=TEXTS[:2], encoding_format="base64")
    assert all(isinstance(d.embedding, str) for d in got.data)
    assert_same_vectors([b64_floats(d.embedding) for d in got.data], server.raw_embeddings(TEXTS[:2]), "b64")


def test_single_string_input_and_user(server, client):
    got = client.embeddings.create(model=EMBED_MODEL, input=TEXTS[1], user="client-suite")
    assert len(got.data) == 1
    assert_same_vector(got.data[0].embedding, server.raw_embedding(TEXTS[1]), "single string")


def test_null_optional_fields(server, client):
    # Wrappers that forward unset OpenAI params as JSON null (LiteLLM did, for some versions): null = default.
    got = client.embeddings.create(model=EMBED_MODEL, input=TEXTS[:2], encoding_format="float",
                                   extra_body={"dimensions": None, "user": None, "modality": None})
    assert_same_vectors([d.embedding for d in got.data], server.raw_embeddings(TEXTS[:2]), "nulls")
    assert all(len(d.embedding) == DIM for d in got.data)


def test_modality_text_via_extra_body(server, client):
    got = client.embeddings.create(model=EMBED_MODEL, input=[TEXTS[0]], extra_body={"modality": "text"})
    assert_same_vector(got.data[0].embedding, server.raw_embedding(TEXTS[0]), "modality=text")


@pytest.mark.parametrize("dims", [128, 32])
def test_dimensions_truncate_and_renormalize(server, client, dims):
    got = client.embeddings.create(model=EMBED_MODEL, input=TEXTS, dimensions=dims)
    full = server.raw_embeddings(TEXTS)
    raw = server.raw_embeddings(TEXTS, dimensions=dims)
    for i, d in enumerate(got.data):
        assert len(d.embedding) == dims
        # MiniLM normalizes, so the shortened vector is renormalized to unit length (Matryoshka style)
        assert_unit(d.embedding, f"dimensions={dims}[{i}]")
        assert_same_vector(d.embedding, raw[i], f"dimensions={dims} vs raw")
        prefix = full[i][:dims] / np.linalg.norm(full[i][:dims])
        assert_same_vector(d.embedding, prefix, f"dimensions={dims} vs renormalized prefix of the full vector")


def test_models_list(server, client):
    models = client.models.list()
    ids = [m.id for m in models.data]
    assert ids == [EMBED_MODEL, RERANK_MODEL, CLASSIFY_MODEL], ids  # in --model-id order
    for m in models.data:
        assert m.object == "model"
        assert m.owned_by == "infinity"
        assert isinstance(m.created, int)


def test_models_retrieve(server, client):
    for name in (EMBED_MODEL, RERANK_MODEL, CLASSIFY_MODEL):
        m = client.models.retrieve(name)
        assert m.id == name and m.object == "model" and m.owned_by == "infinity"


def test_models_retrieve_unknown_with_slash_is_404(server, client):
    # The SDK sends /v1/models/org%2Fno-such-model: the server must decode it as one id and answer 404.
    with pytest.raises(openai.NotFoundError) as e:
        client.models.retrieve("org/no-such-model")
    assert e.value.status_code == 404
    assert isinstance(e.value.body, dict) and e.value.body.get("message"), e.value.body


def test_token_id_input(server, client):
    ids = minilm_tokenizer().encode("hello world").ids
    assert ids == [101, 7592, 2088, 102]  # [CLS] hello world [SEP] in MiniLM's BERT vocabulary
    text = server.raw_embedding("hello world")
    many = client.embeddings.create(model=EMBED_MODEL, input=[ids, ids[:]], encoding_format="float")
    assert len(many.data) == 2
    for d in many.data:
        assert_same_vector(d.embedding, text, "token ids [[...]] vs the text")
    one = client.embeddings.create(model=EMBED_MODEL, input=ids)  # a flat list of ints is ONE input
    assert len(one.data) == 1
    assert_same_vector(one.data[0].embedding, text, "token ids [...] vs the text")


def _assert_openai_error(err: openai.APIStatusError, status: int):
    assert err.status_code == status
    body = err.body
    assert isinstance(body, dict), body  # the SDK took json["error"]
    assert isinstance(body.get("message"), str) and body["message"], body
    assert err.code == str(status), (err.code, body)
    assert err.type, body
    assert body["message"] in str(err)
    return body["message"]


def test_unknown_model(server, client):
    # Infinity answers 400 ("Invalid model: ..."), OpenAI's API 404 (model_not_found): either surfaces as a
    # typed SDK error carrying the message.
    with pytest.raises((openai.BadRequestError, openai.NotFoundError)) as e:
        client.embeddings.create(model="no-such-model", input=["x"])
    msg = _assert_openai_error(e.value, e.value.status_code)
    assert "no-such-model" in msg
    assert server.alive()


def test_model_without_the_capability_is_bad_request(server, client):
    with pytest.raises(openai.BadRequestError) as e:
        client.embeddings.create(model=RERANK_MODEL, input=["x"])
    _assert_openai_error(e.value, 400)


def test_token_id_outside_the_vocabulary_is_refused(server, client):
    with pytest.raises((openai.BadRequestError, openai.UnprocessableEntityError)) as e:
        client.embeddings.create(model=EMBED_MODEL, input=[[101, 30522, 102]])
    msg = _assert_openai_error(e.value, e.value.status_code)
    assert "30522" in msg
    assert server.alive()


def test_wrong_type_is_unprocessable(server, client):
    with pytest.raises(openai.UnprocessableEntityError) as e:
        client.embeddings.create(model=EMBED_MODEL, input=[{"not": "text"}])
    _assert_openai_error(e.value, 422)


def test_auth(server, client):
    bad = openai.OpenAI(base_url=server.v1, api_key="wrong-key", max_retries=0)
    if server.api_key is None:
        # No --api-key: any Authorization header is accepted.
        assert bad.embeddings.create(model=EMBED_MODEL, input=["x"]).data
        return
    with pytest.raises(openai.AuthenticationError) as e:
        bad.embeddings.create(model=EMBED_MODEL, input=["x"])
    _assert_openai_error(e.value, 401)
    with pytest.raises(openai.AuthenticationError):
        bad.models.list()
