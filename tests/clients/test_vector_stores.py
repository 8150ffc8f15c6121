"""Vector stores fed by the server: chromadb's embedding functions and qdrant-client.

chromadb (chromadb/utils/embedding_functions/):
  OpenAIEmbeddingFunction(api_key=..., model_name=..., api_base=...): the OpenAI SDK,
      client.embeddings.create(model=model_name, input=[docs]) -> POST <api_base>/embeddings {"model", "input",
      "encoding_format": "base64" (SDK default)}; `dimensions` is forwarded ONLY when "text-embedding-3" is in
      model_name. Reads data[i].embedding into float32 arrays. api_key falls back to $CHROMA_OPENAI_API_KEY
      (or $OPENAI_API_KEY) and must be set.
  HuggingFaceEmbeddingServer(url=<TEI>/embed, api_key=...): requests.Session POST url {"inputs": [docs]}
      (Authorization: Bearer <api_key> when given); response.json() must be a list of float lists; the status is
      not checked (an error object would be iterated as if it were the vectors).
qdrant-client: nothing is sent to Aleph; QdrantClient(":memory:") is pure Python. With Distance.DOT the score
  is the raw dot product, which ranks like cosine only for unit vectors: so `dimensions` answers must be
  renormalized.
"""
import uuid

import numpy as np
import openai

from _util import EMBED_MODEL, assert_same_vectors, assert_unit, cosine

DOCS = [
    "Paris is the capital and largest city of France.",
    "The mitochondria is the powerhouse of the cell.",
    "Rust guarantees memory safety without a garbage collector.",
    "The Great Barrier Reef is off the coast of Australia.",
    "Bananas are rich in potassium.",
]
QUERIES = {  # query -> index of the document it is about
    "Which city is the French capital?": 0,
    "What produces energy inside cells?": 1,
    "A programming language with no GC and safe memory": 2,
    "coral reef in Queensland": 3,
    "fruit with lots of potassium": 4,
}


def _check_collection(server, col, ef_name):
    col.add(ids=[str(i) for i in range(len(DOCS))], documents=DOCS)
    stored = col.get(ids=[str(i) for i in range(len(DOCS))], include=["embeddings"])["embeddings"]
    assert_same_vectors(stored, server.raw_embeddings(DOCS), f"chromadb {ef_name} stored")
    raw_docs = server.raw_embeddings(DOCS)
    for q, want in QUERIES.items():
        res = col.query(query_texts=[q], n_results=2)
        got = int(res["ids"][0][0])
        qv = server.raw_embedding(q)
        by_cosine = int(np.argmax([cosine(qv, d) for d in raw_docs]))
        assert got == by_cosine, (q, res)
        assert got == want, f"{q!r} -> {DOCS[got]!r}"


def test_chromadb_openai_embedding_function(server):
    import chromadb
    from chromadb.utils.embedding_functions import OpenAIEmbeddingFunction

    ef = OpenAIEmbeddingFunction(api_key=server.key, model_name=EMBED_MODEL, api_base=server.v1)
    client = chromadb.EphemeralClient()
    col = client.create_collection(f"openai-{uuid.uuid4().hex}", embedding_function=ef,
                                   configuration={"hnsw": {"space": "cosine"}})
    _check_collection(server, col, "OpenAIEmbeddingFunction")


def test_chromadb_huggingface_embedding_server(server):
    import chromadb
    from chromadb.utils.embedding_functions import HuggingFaceEmbeddingServer

    ef = HuggingFaceEmbeddingServer(url=f"{server.base}/embed", api_key=server.api_key)
    client = chromadb.EphemeralClient()
    col = client.create_collection(f"tei-{uuid.uuid4().hex}", embedding_function=ef,
                                   configuration={"hnsw": {"space": "cosine"}})
    _check_collection(server, col, "HuggingFaceEmbeddingServer")


def test_qdrant_dot_product_on_shortened_vectors(server):
    from qdrant_client import QdrantClient
    from qdrant_client.models import Distance, PointStruct, VectorParams

    oa = openai.OpenAI(base_url=server.v1, api_key=server.key, max_retries=0)
    dims = 128
    docs = [np.asarray(d.embedding) for d in oa.embeddings.create(model=EMBED_MODEL, input=DOCS, dimensions=dims).data]
    assert_same_vectors(docs, server.raw_embeddings(DOCS, dimensions=dims), "dimensions=128 via the SDK")
    for v in docs:
        assert len(v) == dims
        assert_unit(v, "dimensions=128")
    qc = QdrantClient(":memory:")
    qc.create_collection("docs", vectors_config=VectorParams(size=dims, distance=Distance.DOT))
    qc.upsert("docs", points=[PointStruct(id=i, vector=v.tolist(), payload={"text": t})
                              for i, (v, t) in enumerate(zip(docs, DOCS))])
    for q, want in QUERIES.items():
        qv = np.asarray(oa.embeddings.create(model=EMBED_MODEL, input=q, dimensions=dims).data[0].embedding)
        assert_unit(qv, "query dimensions=128")
        hits = qc.query_points("docs", query=qv.tolist(), limit=len(DOCS)).points
        by_dot = [h.id for h in hits]
        cosines = [cosine(qv, d) for d in docs]
        by_cosine = sorted(range(len(DOCS)), key=lambda i: -cosines[i])
        assert by_dot == by_cosine, (q, by_dot, by_cosine)
        for h in hits:  # unit vectors: the dot product IS the cosine
            assert abs(h.score - cosines[h.id]) < 1e-5, (h.score, cosines[h.id])
        assert by_dot[0] == want, f"{q!r} -> {DOCS[by_dot[0]]!r}"
