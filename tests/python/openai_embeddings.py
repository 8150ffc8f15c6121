"""The official OpenAI Python SDK against a running Aleph: python3 openai_embeddings.py BASE_URL MODEL."""
import math
import sys

from openai import OpenAI


def main() -> None:
    base_url, model = sys.argv[1], sys.argv[2]
    client = OpenAI(base_url=base_url, api_key="unused")

    # The SDK's default asks for base64 and decodes the little-endian float32 itself.
    default = client.embeddings.create(model=model, input=["Hello world", "A second sentence"])
    assert len(default.data) == 2, default
    assert [d.index for d in default.data] == [0, 1]
    assert default.model == model, default.model
    assert default.usage.prompt_tokens == default.usage.total_tokens > 0
    first = default.data[0].embedding
    assert len(first) == 384 and all(isinstance(x, float) for x in first)
    assert abs(math.sqrt(sum(x * x for x in first)) - 1.0) < 1e-4

    floats = client.embeddings.create(model=model, input="Hello world", encoding_format="float")
    assert floats.data[0].embedding == first, "base64 and float decode to the same numbers"

    # A cut vector comes back rescaled to unit length, as OpenAI's own do.
    short = client.embeddings.create(model=model, input="Hello world", dimensions=16, encoding_format="float")
    prefix_norm = math.sqrt(sum(x * x for x in first[:16]))
    assert all(abs(a - b / prefix_norm) < 1e-6 for a, b in zip(short.data[0].embedding, first[:16]))
    assert abs(math.sqrt(sum(x * x for x in short.data[0].embedding)) - 1.0) < 1e-5

    models = client.models.list()
    assert [m.id for m in models.data] == [model], models
    print("openai client ok")


if __name__ == "__main__":
    main()
