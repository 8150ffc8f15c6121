"""huggingface_hub.InferenceClient pointed at a TEI-compatible URL.

With `model` (or its alias `base_url`) an http(s) URL, the hf-inference provider POSTs to that URL *exactly*
(inference/_providers/hf_inference.py: _prepare_url returns it unchanged; no path is appended, except for
chat completion). Headers: user-agent "unknown/None; hf_hub/<v>; python/<v>", X-Amzn-Trace-Id,
Content-Type: application/json, Authorization: Bearer <token> only when a token is given (or one is stored
in ~/.cache/huggingface/token). Errors raise HfHubHTTPError (its message includes the server's
body["error"] when present). Bodies (filter_none drops None values, recursively):
  feature_extraction(text, normalize=, truncate=, prompt_name=, truncation_direction=, dimensions=,
      encoding_format=) -> {"inputs": str | [str], <those params at the ROOT when not None>}; the answer is read
      as np.array(json, float32): [[...]] (or [...]). So POST <server> (TEI's POST /, which dispatches to the
      default model's task) or POST <server>/embed.
  sentence_similarity(sentence, other_sentences) -> {"inputs": {"source_sentence", "sentences": [...]},
      "parameters": {}} to the URL as given: use <server>/similarity. Answer: [float, ...].
  text_classification(text, top_k=, function_to_apply=) -> {"inputs": "<text>", "parameters": {<non-None of
      top_k, function_to_apply>}} (so "parameters": {} by default; TEI's /predict must ignore the unknown
      "parameters" field). The answer is parsed as a list and element [0] returned: TEI's single-input
      /predict answer [{label, score}, ...] (sorted by score, best first) therefore yields just the best
      TextClassificationOutputElement; a batch-shaped [[...]] would yield the whole list.
"""
import numpy as np
import pytest
from huggingface_hub import InferenceClient
from huggingface_hub.errors import HfHubHTTPError

from _util import TEXTS, assert_same_vector, assert_same_vectors, cosine


def _client(server, url, alias="model"):
    return InferenceClient(**{alias: url}, token=server.api_key or None, timeout=120)


@pytest.mark.parametrize("route,alias", [("", "base_url"), ("", "model"), ("/embed", "model")])
def test_feature_extraction(server, route, alias):
    client = _client(server, server.base + route, alias)
    one = client.feature_extraction(TEXTS[0])
    assert one.dtype == np.float32
    assert one.shape in ((1, 384), (384,)), one.shape
    assert_same_vector(one, server.raw_embedding(TEXTS[0]), f"feature_extraction POST {route or '/'}")
    many = client.feature_extraction(TEXTS)
    assert many.shape == (len(TEXTS), 384)
    assert_same_vectors(many, server.raw_embeddings(TEXTS), f"feature_extraction batch POST {route or '/'}")


def test_feature_extraction_parameters(server):
    client = _client(server, server.base + "/embed")
    raw = client.feature_extraction(TEXTS[1], normalize=False, truncate=True, truncation_direction="right")
    ref = server.raw_embedding(TEXTS[1])
    assert_same_vector(raw, ref, "normalize=false (direction)")
    assert abs(np.linalg.norm(raw) - 1.0) > 1e-3, "normalize=false was ignored"
    short = client.feature_extraction(TEXTS[1], dimensions=64)
    assert short.shape[-1] == 64
    assert_same_vector(short, server.raw_embedding(TEXTS[1], dimensions=64), "dimensions=64")


def test_sentence_similarity(server):
    client = _client(server, server.base + "/similarity")
    got = client.sentence_similarity(TEXTS[0], other_sentences=TEXTS[1:])
    assert isinstance(got, list) and len(got) == len(TEXTS) - 1
    src = server.raw_embedding(TEXTS[0])
    want = [cosine(src, v) for v in server.raw_embeddings(TEXTS[1:])]
    assert np.allclose(got, want, atol=1e-5), (got, want)


def test_sentence_similarity_at_the_root(server):
    """POST / routes by the body: a similarity body reaches /similarity whatever the first model is."""
    client = _client(server, server.base)
    got = client.sentence_similarity(TEXTS[0], other_sentences=TEXTS[1:])
    src = server.raw_embedding(TEXTS[0])
    want = [cosine(src, v) for v in server.raw_embeddings(TEXTS[1:])]
    assert np.allclose(got, want, atol=1e-5), (got, want)


def test_text_classification(server):
    client = _client(server, server.base + "/predict")
    text = "I love this, it is wonderful!"
    got = client.text_classification(text)
    got = got if isinstance(got, list) else [got]  # TEI's single-input shape makes the client return one
    ref = server.raw_classify([text])[0]
    best = max(ref, key=ref.get)
    assert got[0].label == best, (got, ref)
    for el in got:
        assert el.label in {"negative", "neutral", "positive"}
        assert abs(el.score - ref[el.label]) < 1e-5, (el, ref)


def test_errors(server):
    client = _client(server, server.base + "/embed")
    with pytest.raises(HfHubHTTPError) as e:
        client.feature_extraction("")  # TEI refuses empty input (422/400)
    assert e.value.response.status_code in (400, 413, 422)
    body = e.value.response.json()
    assert isinstance(body.get("error"), str) and body.get("error_type"), body  # TEI's error shape
    if server.api_key:
        bad = InferenceClient(model=server.base + "/embed", token="wrong-key")
        with pytest.raises(HfHubHTTPError) as e:
            bad.feature_extraction("x")
        assert e.value.response.status_code == 401
