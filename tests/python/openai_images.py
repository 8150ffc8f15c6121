"""The official OpenAI Python SDK embedding images through Aleph's `modality` extension:
python3 openai_images.py BASE_URL MODEL IMAGE_FILE."""
import base64
import math
import sys

from openai import OpenAI


def main() -> None:
    base_url, model, image = sys.argv[1], sys.argv[2], sys.argv[3]
    client = OpenAI(base_url=base_url, api_key="unused")
    with open(image, "rb") as f:
        uri = "data:image/png;base64," + base64.b64encode(f.read()).decode()

    # `modality` travels in extra_body; the SDK's default base64 decoding applies unchanged.
    img = client.embeddings.create(model=model, input=[uri], extra_body={"modality": "image"})
    vec = img.data[0].embedding
    assert len(vec) == 24 and abs(math.sqrt(sum(x * x for x in vec)) - 1.0) < 1e-4, vec
    floats = client.embeddings.create(model=model, input=uri, encoding_format="float", extra_body={"modality": "image"})
    assert floats.data[0].embedding == vec

    # Text into the same space.
    txt = client.embeddings.create(model=model, input="a photo of a cat")
    assert len(txt.data[0].embedding) == 24
    print("openai client images ok")


if __name__ == "__main__":
    main()
