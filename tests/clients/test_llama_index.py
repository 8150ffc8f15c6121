"""LlamaIndex: `OpenAILikeEmbedding` (OpenAI route) and `TextEmbeddingsInference` (TEI route).

OpenAILikeEmbedding (llama_index/embeddings/openai_like -> embeddings/openai/base.py): the OpenAI SDK's
  client.embeddings.create(input=[texts], model=model_name, **additional_kwargs) -> POST <api_base>/embeddings
  {"model", "input", "encoding_format": "base64" (SDK default)} [+ "dimensions"]; every text has "\n"
  replaced by " " first; reads data[i].embedding. Retries via tenacity (max_retries=10 by default).
TextEmbeddingsInference (llama_index/embeddings/text_embeddings_inference/base.py): httpx
  POST <base_url><endpoint="/embed"> headers {"Content-Type": "application/json",
  ["Authorization": "Bearer <auth_token>"]}, JSON {"inputs": [texts], "truncate": true} (no "normalize",
  no model); returns response.json() as is and indexes it [0]: so the body must be a bare list of float
  lists, and an error body ({"error": ...}) is returned unchecked (KeyError/garbage downstream).
  Queries/texts may get an instruction prefix from format_query/format_text for known model names (none
  for all-MiniLM-L6-v2).
"""
from llama_index.embeddings.openai_like import OpenAILikeEmbedding
from llama_index.embeddings.text_embeddings_inference import TextEmbeddingsInference

from _util import EMBED_MODEL, TEXTS, assert_same_vector, assert_same_vectors, assert_unit


def test_openai_like(server):
    emb = OpenAILikeEmbedding(model_name=EMBED_MODEL, api_base=server.v1, api_key=server.key, max_retries=0)
    assert_same_vectors(emb.get_text_embedding_batch(TEXTS), server.raw_embeddings(TEXTS), "OpenAILike batch")
    assert_same_vector(emb.get_query_embedding(TEXTS[0]), server.raw_embedding(TEXTS[0]), "OpenAILike query")
    assert_same_vector(emb.get_text_embedding(TEXTS[1]), server.raw_embedding(TEXTS[1]), "OpenAILike text")


def test_openai_like_dimensions(server):
    emb = OpenAILikeEmbedding(model_name=EMBED_MODEL, api_base=server.v1, api_key=server.key, dimensions=256,
                              max_retries=0)
    vs = emb.get_text_embedding_batch(TEXTS)
    for v in vs:
        assert len(v) == 256
        assert_unit(v, "OpenAILike dimensions=256")
    assert_same_vectors(vs, server.raw_embeddings(TEXTS, dimensions=256), "OpenAILike dims")


def test_text_embeddings_inference(server):
    emb = TextEmbeddingsInference(model_name=EMBED_MODEL, base_url=server.base, auth_token=server.api_key,
                                  timeout=120)
    assert_same_vectors(emb.get_text_embedding_batch(TEXTS), server.raw_embeddings(TEXTS), "TEI /embed batch")
    q = emb.get_query_embedding(TEXTS[3])
    assert_same_vector(q, server.raw_embedding(TEXTS[3]), "TEI /embed query")
    assert_unit(q, "TEI /embed normalizes by default")


def test_text_embeddings_inference_callable_token(server):
    # auth_token may be a callable taking the base URL.
    emb = TextEmbeddingsInference(model_name=EMBED_MODEL, base_url=server.base,
                                  auth_token=(lambda url: server.api_key) if server.api_key else None)
    assert_same_vector(emb.get_text_embedding(TEXTS[0]), server.raw_embedding(TEXTS[0]), "TEI callable token")


def test_text_embeddings_inference_without_token(server):
    emb = TextEmbeddingsInference(model_name=EMBED_MODEL, base_url=server.base)
    if server.api_key:
        # The client does not check the status: the error body comes back as the "embeddings".
        body = emb._call_api(["x"])
        assert isinstance(body, dict) and "error" in body, body  # TEI's {"error", "error_type"}
        return
    assert_same_vector(emb.get_text_embedding(TEXTS[0]), server.raw_embedding(TEXTS[0]), "TEI no token")
