"""TEI's gRPC API (`tei.v1`, `--grpc-port`) through grpcio, the reference gRPC implementation, with stubs
generated at test time from crates/tei-proto/proto/tei.proto (TEI's proto) by grpcio-tools.

Each answer is compared with the HTTP route that computes the same thing (TEI's /embed, /embed_all, /predict,
/rerank, /tokenize, /decode). proto3's defaults differ from HTTP's: `truncate`, `add_special_tokens` and
`skip_special_tokens` are false unless sent, and an absent `normalize` means true (TEI 1.9). With `--api-key`
the tei.v1 services want `authorization: Bearer <key>`; health stays open.
"""
from __future__ import annotations

import importlib
import sys
import tempfile
from pathlib import Path

import grpc
import numpy as np
import pytest
from grpc_tools import protoc

from _util import CLASSIFY_MODEL, REPO, RERANK_MODEL, TEXTS, assert_same_vector

HEALTH_PROTO = """
syntax = "proto3";
package grpc.health.v1;
message HealthCheckRequest { string service = 1; }
message HealthCheckResponse {
  enum ServingStatus { UNKNOWN = 0; SERVING = 1; NOT_SERVING = 2; SERVICE_UNKNOWN = 3; }
  ServingStatus status = 1;
}
service Health { rpc Check(HealthCheckRequest) returns (HealthCheckResponse); }
"""


@pytest.fixture(scope="module")
def pb():
    """The generated modules: tei_pb2, tei_pb2_grpc, health_pb2, health_pb2_grpc."""
    with tempfile.TemporaryDirectory(prefix="aleph-grpc-") as d:
        out = Path(d)
        (out / "health.proto").write_text(HEALTH_PROTO)
        proto_dir = REPO / "crates/tei-proto/proto"
        for include, name in ((proto_dir, "tei.proto"), (out, "health.proto")):
            rc = protoc.main(["protoc", f"-I{include}", f"--python_out={out}", f"--grpc_python_out={out}",
                              str(include / name)])
            assert rc == 0, f"protoc failed on {name}"
        sys.path.insert(0, str(out))
        try:
            yield {m: importlib.import_module(m) for m in ("tei_pb2", "tei_pb2_grpc", "health_pb2", "health_pb2_grpc")}
        finally:
            sys.path.remove(str(out))


@pytest.fixture
def channel(server):
    with grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}") as ch:
        grpc.channel_ready_future(ch).result(timeout=30)
        yield ch


def auth(server):
    return [("authorization", f"Bearer {server.api_key}")] if server.api_key else []


def stub(pb, channel, service):
    return getattr(pb["tei_pb2_grpc"], f"{service}Stub")(channel)


def test_info_describes_the_first_model(server, pb, channel):
    info = stub(pb, channel, "Info").Info(pb["tei_pb2"].InfoRequest(), metadata=auth(server))
    http = server.get("/info").json()
    assert info.model_id == http["model_id"]
    assert info.model_type == pb["tei_pb2"].MODEL_TYPE_EMBEDDING
    assert info.max_input_length == http["max_input_length"] == 256
    assert info.max_client_batch_size == http["max_client_batch_size"]
    assert info.version == http["version"]


def test_embed_matches_http_embed(server, pb, channel):
    t = pb["tei_pb2"]
    embed = stub(pb, channel, "Embed")
    reply, call = embed.Embed.with_call(t.EmbedRequest(inputs=TEXTS[0]), metadata=auth(server))
    # An absent `normalize` is true.
    assert_same_vector(reply.embeddings, server.post("/embed", {"inputs": TEXTS[0]}).json()[0], "Embed")
    assert abs(np.linalg.norm(reply.embeddings) - 1) < 1e-5
    assert reply.metadata.compute_tokens > 0 and reply.metadata.compute_chars == len(TEXTS[0])
    assert reply.metadata.total_time_ns > 0
    headers = dict(call.initial_metadata())
    assert int(headers["x-compute-tokens"]) == reply.metadata.compute_tokens
    assert "x-inference-time" in headers
    raw = embed.Embed(t.EmbedRequest(inputs=TEXTS[1], normalize=False), metadata=auth(server))
    want = server.post("/embed", {"inputs": TEXTS[1], "normalize": False}).json()[0]
    assert_same_vector(raw.embeddings, want, "Embed normalize=false")
    assert abs(np.linalg.norm(raw.embeddings) - 1) > 1e-3
    short = embed.Embed(t.EmbedRequest(inputs=TEXTS[1], dimensions=64), metadata=auth(server))
    assert len(short.embeddings) == 64
    assert_same_vector(short.embeddings, server.post("/embed", {"inputs": TEXTS[1], "dimensions": 64}).json()[0])


def test_proto3_defaults_do_not_truncate(server, pb, channel):
    t = pb["tei_pb2"]
    embed = stub(pb, channel, "Embed")
    long = "word " * 400
    with pytest.raises(grpc.RpcError) as e:
        embed.Embed(t.EmbedRequest(inputs=long), metadata=auth(server))
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT, e.value
    cut = embed.Embed(t.EmbedRequest(inputs=long, truncate=True), metadata=auth(server))
    assert cut.metadata.compute_tokens == 256
    for bad in (t.EmbedRequest(inputs=""), t.EmbedRequest(inputs="x", dimensions=10_000),
                t.EmbedRequest(inputs="x", prompt_name="no-such-prompt")):
        with pytest.raises(grpc.RpcError) as e:
            embed.Embed(bad, metadata=auth(server))
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT, (bad, e.value)


def test_embed_stream_answers_in_order(server, pb, channel):
    t = pb["tei_pb2"]
    embed = stub(pb, channel, "Embed")
    texts = [f"{TEXTS[i % len(TEXTS)]} #{i}" for i in range(40)]
    replies = list(embed.EmbedStream(iter(t.EmbedRequest(inputs=x) for x in texts), metadata=auth(server)))
    assert len(replies) == len(texts)
    want = server.post("/embed", {"inputs": texts}).json()
    for i, (reply, w) in enumerate(zip(replies, want)):
        assert_same_vector(reply.embeddings, w, f"EmbedStream[{i}]")


def test_embed_all_and_sparse(server, pb, channel):
    t = pb["tei_pb2"]
    embed = stub(pb, channel, "Embed")
    reply = embed.EmbedAll(t.EmbedAllRequest(inputs=TEXTS[3]), metadata=auth(server))
    want = server.post("/embed_all", {"inputs": TEXTS[3]}).json()[0]
    assert len(reply.token_embeddings) == len(want) == reply.metadata.compute_tokens
    for i, (g, w) in enumerate(zip(reply.token_embeddings, want)):
        assert_same_vector(g.embeddings, w, f"EmbedAll token {i}")
    streamed = list(embed.EmbedAllStream(iter([t.EmbedAllRequest(inputs=TEXTS[3])] * 3), metadata=auth(server)))
    assert [len(s.token_embeddings) for s in streamed] == [len(want)] * 3
    # MiniLM has no sparse output: FAILED_PRECONDITION, as TEI answers a model without SPLADE pooling.
    with pytest.raises(grpc.RpcError) as e:
        embed.EmbedSparse(t.EmbedSparseRequest(inputs="x"), metadata=auth(server))
    assert e.value.code() == grpc.StatusCode.FAILED_PRECONDITION, e.value


def test_predict_matches_http_predict(server, pb, channel):
    t = pb["tei_pb2"]
    predict = stub(pb, channel, "Predict")
    reply = predict.Predict(t.PredictRequest(inputs=TEXTS[0]), metadata=auth(server))
    want = server.post("/predict", {"inputs": TEXTS[0], "model": CLASSIFY_MODEL}).json()
    assert [p.label for p in reply.predictions] == [w["label"] for w in want]
    assert np.allclose([p.score for p in reply.predictions], [w["score"] for w in want], atol=1e-6)
    raw = predict.Predict(t.PredictRequest(inputs=TEXTS[0], raw_scores=True), metadata=auth(server))
    raw_want = server.post("/predict", {"inputs": TEXTS[0], "raw_scores": True, "model": CLASSIFY_MODEL}).json()
    assert np.allclose([p.score for p in raw.predictions], [w["score"] for w in raw_want], atol=1e-5)
    pair = predict.PredictPair(t.PredictPairRequest(inputs=TEXTS[:2]), metadata=auth(server))
    pair_want = server.post("/predict", {"inputs": TEXTS[:2], "model": CLASSIFY_MODEL}).json()
    assert [p.label for p in pair.predictions] == [w["label"] for w in pair_want]
    with pytest.raises(grpc.RpcError) as e:
        predict.PredictPair(t.PredictPairRequest(inputs=TEXTS[:3]), metadata=auth(server))
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    streamed = list(predict.PredictStream(iter(t.PredictRequest(inputs=x) for x in TEXTS), metadata=auth(server)))
    assert [s.predictions[0].label for s in streamed] == [
        server.post("/predict", {"inputs": x, "model": CLASSIFY_MODEL}).json()[0]["label"] for x in TEXTS
    ]


def test_rerank_matches_http_rerank(server, pb, channel):
    t = pb["tei_pb2"]
    rerank = stub(pb, channel, "Rerank")
    query, texts = "What is the capital of France?", TEXTS
    reply = rerank.Rerank(t.RerankRequest(query=query, texts=texts, return_text=True), metadata=auth(server))
    want = server.post("/rerank", {"query": query, "texts": texts, "model": RERANK_MODEL}).json()
    assert [r.index for r in reply.ranks] == [w["index"] for w in want]
    assert np.allclose([r.score for r in reply.ranks], [w["score"] for w in want], atol=1e-6)
    assert [r.text for r in reply.ranks] == [texts[r.index] for r in reply.ranks]
    assert reply.metadata.compute_chars == len(query) * len(texts) + sum(map(len, texts))
    streamed = rerank.RerankStream(iter(t.RerankStreamRequest(query=query, text=x) for x in texts),
                                   metadata=auth(server))
    assert [r.index for r in streamed.ranks] == [w["index"] for w in want]
    assert np.allclose([r.score for r in streamed.ranks], [w["score"] for w in want], atol=1e-6)
    assert all(not r.HasField("text") for r in streamed.ranks), "return_text was not asked for"
    with pytest.raises(grpc.RpcError) as e:
        rerank.Rerank(t.RerankRequest(query=query, texts=[]), metadata=auth(server))
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_tokenize_and_decode(server, pb, channel):
    t = pb["tei_pb2"]
    tok = stub(pb, channel, "Tokenize")
    for special in (False, True):
        reply = tok.Tokenize(t.EncodeRequest(inputs=TEXTS[3], add_special_tokens=special), metadata=auth(server))
        want = server.post("/tokenize", {"inputs": TEXTS[3], "add_special_tokens": special}).json()[0]
        assert [(x.id, x.text, x.special) for x in reply.tokens] == [(w["id"], w["text"], w["special"]) for w in want]
        assert [x.start if x.HasField("start") else None for x in reply.tokens] == [w["start"] for w in want]
    ids = [x.id for x in tok.Tokenize(t.EncodeRequest(inputs=TEXTS[3], add_special_tokens=True),
                                      metadata=auth(server)).tokens]
    assert ids[0] != ids[1]
    # skip_special_tokens is false unless sent.
    kept = tok.Decode(t.DecodeRequest(ids=ids), metadata=auth(server)).text
    skipped = tok.Decode(t.DecodeRequest(ids=ids, skip_special_tokens=True), metadata=auth(server)).text
    assert skipped == "hello world" and "[CLS]" in kept, (kept, skipped)
    streamed = list(tok.DecodeStream(iter([t.DecodeRequest(ids=ids, skip_special_tokens=True)] * 2),
                                     metadata=auth(server)))
    assert [s.text for s in streamed] == ["hello world"] * 2


def test_health_and_keys(server, pb, channel):
    health = pb["health_pb2_grpc"].HealthStub(channel)
    req = pb["health_pb2"].HealthCheckRequest
    serving = pb["health_pb2"].HealthCheckResponse.SERVING
    # Open without a key; each service serving as the models allow (an embedder, a reranker, a classifier).
    for service in ("", "tei.v1.Info", "tei.v1.Embed", "tei.v1.Predict", "tei.v1.Rerank", "tei.v1.Tokenize"):
        assert health.Check(req(service=service)).status == serving, service
    if not server.api_key:
        return
    info = stub(pb, channel, "Info")
    for metadata in ([], [("authorization", "Bearer wrong")]):
        with pytest.raises(grpc.RpcError) as e:
            info.Info(pb["tei_pb2"].InfoRequest(), metadata=metadata)
        assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED, e.value


def test_model_metadata_picks_a_served_model(server, pb, channel):
    """Aleph serves several models: a call's `model` metadata names one (TEI serves one and has no such field)."""
    t = pb["tei_pb2"]
    with_model = auth(server) + [("model", RERANK_MODEL)]
    info = stub(pb, channel, "Info").Info(t.InfoRequest(), metadata=with_model)
    assert info.model_type == t.MODEL_TYPE_RERANKER
    # Predict on the reranker: its one logit as LABEL_0, as TEI's /predict answers for a reranker.
    reply = stub(pb, channel, "Predict").PredictPair(t.PredictPairRequest(inputs=TEXTS[:2]), metadata=with_model)
    want = server.post("/predict", {"inputs": TEXTS[:2], "model": RERANK_MODEL}).json()
    assert [(p.label, round(p.score, 5)) for p in reply.predictions] == [(w["label"], round(w["score"], 5)) for w in want]
    with pytest.raises(grpc.RpcError) as e:
        stub(pb, channel, "Embed").Embed(t.EmbedRequest(inputs="x"), metadata=with_model)
    assert e.value.code() == grpc.StatusCode.FAILED_PRECONDITION, e.value
    with pytest.raises(grpc.RpcError) as e:
        stub(pb, channel, "Info").Info(t.InfoRequest(), metadata=auth(server) + [("model", "no-such-model")])
    assert e.value.code() == grpc.StatusCode.NOT_FOUND, e.value
