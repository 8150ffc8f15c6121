"""Infinity's Python API, call by call, each answer compared with the server's for the same model."""
from __future__ import annotations

import asyncio
import base64
import dataclasses
import io
import pickle
import sys

import numpy as np
import pytest

import aleph
from aleph import (
    AsyncEmbeddingEngine,
    AsyncEngineArray,
    EngineArgs,
    ModelNotDeployedError,
    SyncEngineArray,
)
from conftest import MINILM, TEXTS, TINY, engine_args

MEDIA = TINY / "media"


def run(coro):
    return asyncio.run(coro)


def f32(values) -> np.ndarray:
    """The server's JSON numbers (f32 printed as f64) back to the f32 they were."""
    return np.asarray(values, dtype=np.float64).astype(np.float32)


async def started(name: str, **kwargs) -> AsyncEmbeddingEngine:
    engine = AsyncEmbeddingEngine.from_args(engine_args(name, **kwargs))
    await engine.astart()
    return engine


# --- EngineArgs ------------------------------------------------------------------------------------------------


def test_engine_args_has_infinitys_fields_and_defaults():
    args = EngineArgs()
    assert args.model_name_or_path == "michaelfeil/bge-small-en-v1.5"
    assert args.batch_size == 32 and args.revision is None and args.trust_remote_code is True
    assert args.engine == "torch" and args.model_warmup is True and args.vector_disk_cache_path == ""
    assert args.device == "auto" and list(args.device_id) == [] and args.compile is False
    assert args.bettertransformer is True and args.dtype == "auto" and args.pooling_method == "auto"
    assert args.lengths_via_tokenize is False and args.embedding_dtype == "float32"
    assert args.served_model_name == "michaelfeil/bge-small-en-v1.5"
    assert EngineArgs(model_name_or_path="/a/b/c/model").served_model_name == "c/model"
    assert EngineArgs(device_id="0,1").device_id == [0, 1]
    assert EngineArgs(embedding_dtype=aleph.EmbeddingDtype.int8).embedding_dtype == "int8"
    assert set(args.to_dict()) >= {"model_name_or_path", "engine", "served_model_name", "max_batch_tokens"}


def test_engine_args_are_frozen_keyword_only_and_picklable():
    args = EngineArgs(model_name_or_path=str(MINILM), batch_size=8, device_id=[0])
    with pytest.raises(dataclasses.FrozenInstanceError):
        args.batch_size = 4
    if sys.version_info >= (3, 10):
        with pytest.raises(TypeError):
            EngineArgs(str(MINILM))
    assert pickle.loads(pickle.dumps(args)) == args
    assert args.copy() == args


def test_bad_engine_args_name_the_field():
    with pytest.raises(ValueError, match="device"):
        EngineArgs(device="quantum")
    with pytest.raises(ValueError, match="embedding_dtype"):
        EngineArgs(embedding_dtype="int4")
    with pytest.raises(ValueError, match="batch_size"):
        EngineArgs(batch_size=0)


def test_python_only_engines_load_and_an_unknown_model_is_refused_at_load():
    engine = AsyncEmbeddingEngine.from_args(engine_args("minilm", engine="optimum", compile=True))
    assert engine.capabilities == {"embed"}
    with pytest.raises(RuntimeError, match="nothing-here"):
        AsyncEmbeddingEngine(model_name_or_path=str(TINY / "nothing-here"), model_warmup=False)
    with pytest.raises(ValueError, match="neuron"):
        AsyncEmbeddingEngine.from_args(engine_args("minilm", engine="neuron"))


# --- embed -----------------------------------------------------------------------------------------------------


def test_embed_matches_the_server_byte_for_byte(server):
    async def go():
        async with AsyncEmbeddingEngine.from_args(engine_args("minilm")) as engine:
            assert engine.is_running and engine.running
            return await engine.embed(sentences=TEXTS)

    embeddings, usage = run(go())
    want = server.post("/embeddings", {"model": "minilm", "input": TEXTS, "encoding_format": "float"})
    assert isinstance(embeddings, list) and len(embeddings) == len(TEXTS)
    for got, item in zip(embeddings, want["data"]):
        assert isinstance(got, np.ndarray) and got.dtype == np.float32 and got.shape == (384,)
        assert got.tobytes() == f32(item["embedding"]).tobytes()
    assert usage == want["usage"]["prompt_tokens"]


def test_matryoshka_dim_cuts_and_renormalizes_as_the_server(server):
    async def go():
        async with AsyncEmbeddingEngine(model_name_or_path=str(MINILM), served_model_name="minilm",
                                        model_warmup=False) as engine:
            return await engine.embed(TEXTS[:2], matryoshka_dim=64)

    embeddings, _ = run(go())
    want = server.post("/embeddings", {"model": "minilm", "input": TEXTS[:2], "dimensions": 64})
    for got, item in zip(embeddings, want["data"]):
        assert got.shape == (64,)
        assert abs(float(np.linalg.norm(got)) - 1.0) < 1e-5
        assert got.tobytes() == f32(item["embedding"]).tobytes()


def test_embedding_dtypes_come_as_numpy_integers():
    async def go(dtype):
        async with AsyncEmbeddingEngine.from_args(engine_args("minilm", embedding_dtype=dtype)) as engine:
            return (await engine.embed(TEXTS[:1]))[0][0]

    assert run(go("int8")).dtype == np.int8
    packed = run(go("ubinary"))
    assert packed.dtype == np.uint8 and packed.shape == (384 // 8,)


def test_sparse_and_colbert_outputs_match_the_server(server):
    async def go():
        async with AsyncEngineArray.from_args([engine_args("splade"), engine_args("bge-m3")]) as array:
            sparse = await array.embed(model="splade", sentences=TEXTS[:2], output="sparse")
            colbert = await array.embed(model="bge-m3", sentences=TEXTS[:2], output="colbert")
            return sparse, colbert

    (sparse, _), (colbert, _) = run(go())
    want = server.post("/embeddings", {"model": "splade", "input": TEXTS[:2], "output": "sparse"})
    for got, item in zip(sparse, want["data"]):
        assert isinstance(got, aleph.SparseEmbedding)
        assert got.indices.tolist() == [e["index"] for e in item["embedding"]]
        assert got.values.tobytes() == f32([e["value"] for e in item["embedding"]]).tobytes()
    want = server.post("/embeddings", {"model": "bge-m3", "input": TEXTS[:2], "output": "colbert"})
    for got, item in zip(colbert, want["data"]):
        assert got.ndim == 2 and got.tobytes() == f32(item["embedding"]).tobytes()


def test_prompts_by_name(server, tmp_path):
    async def go():
        async with AsyncEmbeddingEngine.from_args(engine_args("minilm")) as engine:
            with pytest.raises(ValueError, match="prompt"):
                await engine.embed(TEXTS[:1], prompt_name="query")
            return await engine.embed(["query: " + TEXTS[0]])

    prefixed, _ = run(go())
    assert prefixed[0].shape == (384,)


def test_a_task_picks_jina_v3s_adapter_as_the_server_does(server):
    async def go():
        async with AsyncEmbeddingEngine.from_args(engine_args("jina-v3")) as engine:
            with pytest.raises(ValueError, match="summarize"):
                await engine.embed(TEXTS[:1], task="summarize")
            return await engine.embed(TEXTS, task="retrieval.query"), await engine.embed(TEXTS)

    (adapted, usage), (plain, _) = run(go())
    want = server.post("/embeddings", {"model": "jina-v3", "input": TEXTS, "task": "retrieval.query"})
    assert usage == want["usage"]["prompt_tokens"]
    for got, item in zip(adapted, want["data"]):
        assert got.tobytes() == f32(item["embedding"]).tobytes()
    assert not np.allclose(adapted[0], plain[0], atol=1e-3)


def test_image_embed_takes_bytes_data_uris_paths_and_pil_images(server):
    png = (MEDIA / "wide.png").read_bytes()
    uri = "data:image/png;base64," + base64.b64encode(png).decode()
    from PIL import Image

    pil = Image.open(io.BytesIO(png))

    async def go():
        async with AsyncEmbeddingEngine.from_args(engine_args("clip")) as engine:
            assert {"embed", "image_embed"} <= engine.capabilities
            return await engine.image_embed(images=[png, uri, str(MEDIA / "wide.png"), pil])

    embeddings, _ = run(go())
    want = server.post("/embeddings", {"model": "clip", "input": [uri], "modality": "image"})
    expected = f32(want["data"][0]["embedding"]).tobytes()
    for got in embeddings[:3]:
        assert got.tobytes() == expected
    # PIL re-encodes the pixels losslessly: the same image.
    assert np.allclose(embeddings[3], embeddings[0], atol=1e-6)


def test_audio_embed_matches_the_server(server):
    wav = (MEDIA / "speech-16k.wav").read_bytes()
    uri = "data:audio/wav;base64," + base64.b64encode(wav).decode()

    async def go():
        async with AsyncEmbeddingEngine.from_args(engine_args("clap")) as engine:
            return await engine.audio_embed(audios=[wav, uri])

    embeddings, _ = run(go())
    want = server.post("/embeddings", {"model": "clap", "input": [uri], "modality": "audio"})
    for got in embeddings:
        assert got.tobytes() == f32(want["data"][0]["embedding"]).tobytes()


# --- rerank and classify ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("raw_scores", [False, True])
def test_rerank_matches_the_server(server, raw_scores):
    docs = TEXTS

    async def go():
        async with AsyncEmbeddingEngine.from_args(engine_args("rerank")) as engine:
            full = await engine.rerank(query="What is the capital of France?", docs=docs, raw_scores=raw_scores)
            top = await engine.rerank(query="What is the capital of France?", docs=docs, top_n=2)
            return full, top

    (results, usage), (top, _) = run(go())
    want = server.post("/rerank", {"model": "rerank", "query": "What is the capital of France?", "documents": docs,
                                   "raw_scores": raw_scores, "return_documents": True})
    assert [r.index for r in results] == [w["index"] for w in want["results"]]
    assert [r.document for r in results] == [w["document"] for w in want["results"]]
    assert [np.float32(r.relevance_score) for r in results] == list(f32([w["relevance_score"] for w in want["results"]]))
    assert usage == want["usage"]["prompt_tokens"]
    scores = [r.relevance_score for r in results]
    assert scores == sorted(scores, reverse=True)
    assert len(top) == 2


def test_colbert_reranks_by_maxsim(server):
    async def go():
        async with AsyncEmbeddingEngine.from_args(engine_args("colbert")) as engine:
            assert "rerank" in engine.capabilities
            return await engine.rerank(query="capital of France", docs=TEXTS)

    results, _ = run(go())
    want = server.post("/rerank", {"model": "colbert", "query": "capital of France", "documents": TEXTS})
    assert [r.index for r in results] == [w["index"] for w in want["results"]]


@pytest.mark.parametrize("raw_scores", [False, True])
def test_classify_matches_the_server(server, raw_scores):
    async def go():
        async with AsyncEmbeddingEngine.from_args(engine_args("classify")) as engine:
            return await engine.classify(sentences=TEXTS, raw_scores=raw_scores)

    labels, usage = run(go())
    want = server.post("/classify", {"model": "classify", "input": TEXTS, "raw_scores": raw_scores})
    for got, item in zip(labels, want["data"]):
        assert [g["label"] for g in got] == [w["label"] for w in item]
        assert [np.float32(g["score"]) for g in got] == list(f32([w["score"] for w in item]))
    assert usage == want["usage"]["prompt_tokens"]


# --- errors ----------------------------------------------------------------------------------------------------


def test_calls_before_astart_and_after_astop_raise():
    engine = AsyncEmbeddingEngine.from_args(engine_args("minilm"))
    with pytest.raises(ValueError, match="start"):
        run(engine.embed(TEXTS))

    async def restart():
        await engine.astart()
        await engine.astop()
        assert not engine.is_running
        with pytest.raises(ValueError):
            await engine.embed(TEXTS)
        await engine.astart()
        out, _ = await engine.embed(TEXTS[:1])
        await engine.astop()
        return out

    assert run(restart())[0].shape == (384,)


def test_calls_a_model_cannot_serve_raise_model_not_deployed():
    async def go():
        async with AsyncEmbeddingEngine.from_args(engine_args("minilm")) as engine:
            with pytest.raises(ModelNotDeployedError, match="rerank"):
                await engine.rerank(query="q", docs=["d"])
            with pytest.raises(ModelNotDeployedError, match="classify"):
                await engine.classify(sentences=["s"])
            with pytest.raises(ModelNotDeployedError, match="image_embed"):
                await engine.image_embed(images=[b"x"])
            with pytest.raises(ModelNotDeployedError, match="sparse"):
                await engine.embed(TEXTS, output="sparse")
            with pytest.raises(ValueError, match="dimensions"):
                await engine.embed(TEXTS, matryoshka_dim=385)
            with pytest.raises(TypeError):
                await engine.embed("one string, not a list")

    run(go())


def test_bad_media_raises_value_error_and_the_engine_keeps_serving():
    async def go():
        async with AsyncEmbeddingEngine.from_args(engine_args("clip")) as engine:
            with pytest.raises(ValueError):
                await engine.image_embed(images=[b"not an image"])
            with pytest.raises(ValueError):
                await engine.image_embed(images=[str(MEDIA / "missing.png")])
            return await engine.image_embed(images=[(MEDIA / "tall.jpg").read_bytes()])

    assert len(run(go())[0]) == 1


# --- arrays ----------------------------------------------------------------------------------------------------


def test_async_engine_array_routes_by_name_and_position():
    array = AsyncEngineArray.from_args([engine_args("minilm"), engine_args("rerank")])
    assert list(array.engines_dict) == ["minilm", "rerank"]
    assert array[0] is array["minilm"] and array[1] is array["rerank"]
    with pytest.raises(IndexError, match="available|Available"):
        array["nope"]
    with pytest.raises(ValueError, match="unique"):
        AsyncEngineArray([array[0], array[0]])

    async def go():
        async with array:
            assert array.is_running()
            emb, _ = await array.embed(model="minilm", sentences=TEXTS[:1])
            ranked, _ = await array.rerank(model="rerank", query="q", docs=TEXTS[:2])
            return emb, ranked

    emb, ranked = run(go())
    assert emb[0].shape == (384,) and len(ranked) == 2


def test_sync_engine_array_answers_futures(server):
    array = SyncEngineArray.from_args([engine_args("minilm"), engine_args("classify")])
    assert array.is_running
    futures = [array.embed(model="minilm", sentences=[t]) for t in TEXTS]
    labels = array.classify(model="classify", sentences=TEXTS[:1]).result()
    want = server.post("/embeddings", {"model": "minilm", "input": TEXTS})
    for f, item in zip(futures, want["data"]):
        assert f.result()[0][0].tobytes() == f32(item["embedding"]).tobytes()
    assert labels[0][0][0]["label"] in {"negative", "neutral", "positive"}
    array.stop()
    assert not array.is_running
    with pytest.raises(RuntimeError):
        array.embed(model="minilm", sentences=TEXTS)
