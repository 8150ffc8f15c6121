#!/usr/bin/env python3
"""Reference vectors for the all-MiniLM-L6-v2 parity test, computed by sentence-transformers.

Run on a developer machine with torch (not in CI):
    pip install sentence-transformers
    scripts/fetch-models.sh
    python3 scripts/make_minilm_reference.py models/all-MiniLM-L6-v2 tests/fixtures/minilm

Writes sentences.json (the inputs) and reference.json (one 384-d vector per input). Inputs are stripped of
surrounding whitespace first, as Aleph (like Infinity) does before embedding.
"""
import json
import sys
from pathlib import Path

LONG = " ".join(
    "The quick brown fox jumps over the lazy dog while the committee reviews its quarterly budget." for _ in range(40)
)

SENTENCES = [
    "",
    "Hello world",
    "  Hello world  ",
    "A man is playing a guitar.",
    "A woman is slicing an onion.",
    "The cat sat on the mat.",
    "Embeddings turn text into vectors.",
    "What is the capital of France?",
    "Paris is the capital and most populous city of France.",
    "I love machine learning!",
    "This sentence has     many    internal   spaces.",
    "UPPERCASE AND lowercase MiXeD",
    "Numbers: 3.14159, 2.71828, 1,000,000 and -42.",
    "email@example.com https://example.org/path?q=1&r=2",
    "def f(x): return x ** 2  # python code",
    "SELECT * FROM users WHERE id = 7;",
    "Café, naïve, façade, résumé, jalapeño.",
    "Straße und Fußgänger übergueren die Brücke.",
    "¿Dónde está la biblioteca?",
    "Москва — столица России.",
    "Η γρήγορη καφέ αλεπού.",
    "東京は日本の首都です。",
    "我喜欢吃苹果和香蕉。",
    "서울은 한국의 수도입니다.",
    "مرحبا بالعالم",
    "שלום עולם",
    "नमस्ते दुनिया",
    "สวัสดีชาวโลก",
    "Emoji time 🎉🚀🔥 with text",
    "👍",
    "😀😃😄😁😆😅😂🤣",
    "Mixed 日本語 and English text 🙂",
    "Tabs\tand\nnewlines\r\ninside",
    "Zero\u200bwidth\u200bspaces",
    "Control chars \u0007 bell",
    "a",
    "?",
    "...",
    "The the the the the the the the",
    "It's a dog's life, isn't it?",
    "New York-based start-up raises $20M in Series-A funding.",
    "COVID-19 vaccines were developed in record time.",
    "The Eiffel Tower is 330 metres tall.",
    "Photosynthesis converts light energy into chemical energy.",
    "She sells seashells by the seashore.",
    "To be, or not to be, that is the question.",
    "All happy families are alike; each unhappy family is unhappy in its own way.",
    "A stitch in time saves nine.",
    "The mitochondria is the powerhouse of the cell.",
    "Rust gives you memory safety without garbage collection.",
    "Tokenization never runs on the async I/O threads.",
    LONG,
    "word " * 300,
    "antidisestablishmentarianism supercalifragilisticexpialidocious",
    "x" * 1000,
]


def main() -> None:
    model_dir, out_dir = Path(sys.argv[1]), Path(sys.argv[2])
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(model_dir), device="cpu")
    assert model.max_seq_length == 256, model.max_seq_length
    stripped = [s.strip() for s in SENTENCES]
    vectors = model.encode(stripped, batch_size=8, convert_to_numpy=True, normalize_embeddings=False)
    lengths = [len(model.tokenizer(s, truncation=True, max_length=256)["input_ids"]) for s in stripped]
    # Output quantization as sentence-transformers defines it, calibrated on the corpus Aleph ships.
    from sentence_transformers.quantization import quantize_embeddings

    calib_path = Path(__file__).resolve().parent.parent / "crates/models/assets/calibration.txt"
    calib_lines = [l.strip() for l in calib_path.read_text().splitlines() if l.strip()]
    calib = model.encode(calib_lines, batch_size=32, convert_to_numpy=True)
    quantized = {
        precision: quantize_embeddings(vectors[:12], precision=precision, calibration_embeddings=calib).tolist()
        for precision in ["int8", "uint8", "binary", "ubinary"]
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "sentences.json").write_text(json.dumps(SENTENCES, ensure_ascii=False, indent=0) + "\n")
    (out_dir / "reference.json").write_text(
        json.dumps({"token_counts": lengths, "vectors": [[float(x) for x in v] for v in vectors],
                    "quantized_first_12": quantized}) + "\n"
    )
    print(f"{len(SENTENCES)} sentences, dim {vectors.shape[1]}, tokens {sum(lengths)}")


if __name__ == "__main__":
    main()
