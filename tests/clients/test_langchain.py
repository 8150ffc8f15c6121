"""LangChain: `langchain_openai.OpenAIEmbeddings` and `langchain_community.embeddings.InfinityEmbeddings`.

OpenAIEmbeddings (langchain_openai/embeddings/base.py) wraps the OpenAI SDK's `client.embeddings`:
  check_embedding_ctx_length=False: POST <base_url>/embeddings {"model", "input": [texts, <= chunk_size=1000
      per request], ["dimensions"]} -- no encoding_format, so the SDK sends "base64" and decodes it.
  check_embedding_ctx_length=True (the default): the texts are first tokenized with *tiktoken*
      (encoding_for_model(model), falling back to cl100k_base for unknown names) and split at
      embedding_ctx_length=8191; the request carries {"input": [[cl100k token ids], ...]}. Those ids are not
      MiniLM's vocabulary: ids < 30522 embed as unrelated BERT tokens (a silently wrong vector, no error);
      ids >= 30522 must be refused with 400/422 (openai.BadRequestError/UnprocessableEntityError). Users of a non-OpenAI model must set
      check_embedding_ctx_length=False (or tiktoken_enabled=False, which needs `transformers`).
  embed_query(text) = embed_documents([text])[0]. Responses are read with response.model_dump()["data"][i]
      ["embedding"].

InfinityEmbeddings (langchain_community/embeddings/infinity.py, TinyAsyncOpenAIInfinityEmbeddingClient):
  POST <infinity_api_url>/embeddings with requests, headers only {"content-type": "application/json"} -- it
  has NO api-key option, so against a server started with --api-key it gets 401 and raises
  Exception("Infinity returned an unexpected response with status 401: <body>").
  JSON {"input": [texts], "model"}; texts are sorted by length (longest first) and batched by 128, then
  unsorted; reads response.json()["data"][i]["embedding"] (must be a float list).
"""
import importlib.util
import os
from pathlib import Path

import numpy as np
import openai
import pytest
from langchain_community.embeddings import InfinityEmbeddings
from langchain_openai import OpenAIEmbeddings

from _util import EMBED_MODEL, TEXTS, assert_same_vector, assert_same_vectors, assert_unit, cosine


def _offline_tiktoken():
    """tiktoken downloads cl100k_base on first use; LiteLLM's wheel ships that file, so point tiktoken at it."""
    spec = importlib.util.find_spec("litellm")
    bundled = Path(next(iter(spec.submodule_search_locations))) / "litellm_core_utils" / "tokenizers"
    if not os.environ.get("TIKTOKEN_CACHE_DIR") and bundled.is_dir():
        os.environ["TIKTOKEN_CACHE_DIR"] = str(bundled)
    import tiktoken

    return tiktoken.get_encoding("cl100k_base")


def test_openai_embeddings_without_ctx_check(server):
    emb = OpenAIEmbeddings(model=EMBED_MODEL, base_url=server.v1, api_key=server.key,
                           check_embedding_ctx_length=False, max_retries=0)
    docs = emb.embed_documents(TEXTS)
    assert_same_vectors(docs, server.raw_embeddings(TEXTS), "OpenAIEmbeddings.embed_documents")
    assert_same_vector(emb.embed_query(TEXTS[2]), server.raw_embedding(TEXTS[2]), "OpenAIEmbeddings.embed_query")


def test_openai_embeddings_dimensions(server):
    emb = OpenAIEmbeddings(model=EMBED_MODEL, base_url=server.v1, api_key=server.key, dimensions=128,
                           check_embedding_ctx_length=False, max_retries=0)
    docs = emb.embed_documents(TEXTS)
    assert all(len(d) == 128 for d in docs)
    for d in docs:
        assert_unit(d, "OpenAIEmbeddings dimensions=128")
    assert_same_vectors(docs, server.raw_embeddings(TEXTS, dimensions=128), "OpenAIEmbeddings dims")


def test_openai_embeddings_default_sends_tiktoken_ids(server):
    # Outcome (recorded): with the default check_embedding_ctx_length=True, LangChain sends cl100k_base ids.
    # "hello world" -> [15339, 1917]: valid BERT ids, so the server answers 200 with a vector that has
    # nothing to do with the text. "Paris is the capital of France." has id 60704 >= 30522: refused (422 now),
    # surfaced as openai.UnprocessableEntityError. Either way the server keeps serving.
    enc = _offline_tiktoken()
    assert enc.encode_ordinary("hello world") == [15339, 1917]
    emb = OpenAIEmbeddings(model=EMBED_MODEL, base_url=server.v1, api_key=server.key, max_retries=0)
    wrong = emb.embed_query("hello world")
    assert len(wrong) == 384
    assert np.isfinite(wrong).all()
    assert_unit(wrong, "embedding of tiktoken ids")
    assert_same_vector(wrong, server.raw_embedding([15339, 1917]), "tiktoken ids sent as token-id input")
    assert cosine(wrong, server.raw_embedding("hello world")) < 0.99, "tiktoken ids happened to embed like the text"
    assert max(enc.encode_ordinary(TEXTS[1])) >= 30522
    with pytest.raises((openai.BadRequestError, openai.UnprocessableEntityError)) as e:
        emb.embed_documents([TEXTS[1]])
    assert "60704" in str(e.value)
    assert server.alive()


@pytest.mark.parametrize("suffix", ["", "/v1"])  # the client's own default URL ends in /v1
def test_infinity_embeddings(server, suffix):
    emb = InfinityEmbeddings(model=EMBED_MODEL, infinity_api_url=server.base + suffix)
    if server.api_key:
        # No way to send a key: the keyed server refuses it.
        with pytest.raises(Exception, match="status 401"):
            emb.embed_documents(TEXTS)
        return
    assert_same_vectors(emb.embed_documents(TEXTS), server.raw_embeddings(TEXTS), "InfinityEmbeddings docs")
    assert_same_vector(emb.embed_query(TEXTS[0]), server.raw_embedding(TEXTS[0]), "InfinityEmbeddings query")
