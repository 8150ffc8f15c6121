#!/usr/bin/env python3
"""Reference values for `aleph eval`, computed by the implementations its numbers must equal.

Run on a developer machine (not in CI; torch is needed for the model parts):
    pip install sentence-transformers pytrec_eval-terrier scipy scikit-learn
    scripts/fetch-models.sh
    python3 scripts/make_eval_fixtures.py

Writes under tests/fixtures/eval/:
- metrics.json: toy inputs and what scipy (Pearson, Spearman), scikit-learn (accuracy, macro-F1) and pytrec_eval
  (ndcg_cut_10, recall_100, recip_rank over the first 10, as MTEB calls it) make of them;
- beir-toy/: a BEIR folder (corpus.jsonl, queries.jsonl, qrels/test.tsv) built from STS Benchmark test pairs, and
  reference.json: MTEB's dense exact search with all-MiniLM-L6-v2 (cosine, first 100), with and without a rerank
  of the first 5 by the tiny bert-rerank cross-encoder, scored by pytrec_eval; and MiniLM's STS-B test Spearman
  by sentence-transformers' EmbeddingSimilarityEvaluator;
- classify.tsv and classify.reference.json: texts with labels and what the tiny bert-classify model's argmax
  (transformers) scores on them.
"""
import csv
import json
import random
from pathlib import Path

import numpy as np
import pytrec_eval
from scipy.stats import pearsonr, spearmanr
from sklearn.metrics import accuracy_score, f1_score

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests/fixtures/eval"


def pytrec(qrels, run, k_mrr=10):
    """nDCG@10, recall@100 and MRR@10 per query as MTEB computes them with pytrec_eval."""
    ev = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10", "recall.100"})
    scores = ev.evaluate(run)
    # MRR@10: the reciprocal rank over each run cut to its first 10 (trec_eval's order: score, then doc id desc).
    cut = {}
    for q, docs in run.items():
        ranked = sorted(docs.items(), key=lambda kv: (-kv[1], tuple(-ord(c) for c in kv[0])))
        cut[q] = dict(ranked[:k_mrr])
    rr = pytrec_eval.RelevanceEvaluator(qrels, {"recip_rank"}).evaluate(cut)
    per_query = {
        q: {"ndcg_at_10": scores[q]["ndcg_cut_10"], "recall_at_100": scores[q]["recall_100"], "mrr_at_10": rr[q]["recip_rank"]}
        for q in scores
    }
    mean = {m: float(np.mean([v[m] for v in per_query.values()])) for m in ("ndcg_at_10", "mrr_at_10", "recall_at_100")}
    return per_query, mean


def metrics_fixture():
    rng = random.Random(7)
    a = [round(rng.uniform(0, 1), 2) for _ in range(40)]  # rounding makes ties
    b = [round(x + rng.gauss(0, 0.3), 1) for x in a]
    gold = [rng.choice(["cat", "dog", "bird", "fish"]) for _ in range(50)]
    pred = [g if rng.random() < 0.6 else rng.choice(["cat", "dog", "bird", "eel"]) for g in gold]
    qrels = {
        "q1": {"d1": 2, "d2": 1, "d3": 0, "d9": 1},
        "q2": {"d4": 1},
        "q3": {"d5": 3, "d6": 2, "d7": 1, "d8": 1, "d99": 2},  # d99 is never retrieved
        "q4": {"d2": 0},  # judged, nothing relevant
        "q5": {"d12": 1},
    }
    docs = [f"d{i}" for i in range(1, 16)]
    run = {}
    for q in qrels:
        run[q] = {d: round(rng.uniform(-1, 1), 4) for d in docs}
    run["q5"]["d12"] = run["q5"]["d11"] = 0.5  # a tie: trec_eval puts d12 before d11 (doc id, descending)
    run["q2"] = {d: s for d, s in list(run["q2"].items())[:12]}  # a shorter run
    per_query, mean = pytrec(qrels, run)
    return {
        "correlation": {"a": a, "b": b, "pearson": pearsonr(a, b)[0], "spearman": spearmanr(a, b)[0]},
        "classification": {
            "gold": gold,
            "predicted": pred,
            "accuracy": accuracy_score(gold, pred),
            "macro_f1": f1_score(gold, pred, average="macro", zero_division=0),
        },
        "retrieval": {"qrels": qrels, "run": run, "per_query": per_query, "mean": mean},
    }


def sts_rows():
    with open(ROOT / "tests/fixtures/stsb/test.tsv", newline="") as f:
        return list(csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE))


def beir_fixture(minilm, reranker):
    rows = sts_rows()
    # Documents: the second sentence of 80 pairs (every fourth one with a title); queries: the first
    # sentence of the pairs among them scored 3.5 or more, judged 2 (score 4.5+) or 1 against their partner,
    # plus a few zero judgements (then filtered, below).
    rows = rows[:80]
    folder = OUT / "beir-toy"
    (folder / "qrels").mkdir(parents=True, exist_ok=True)
    corpus, queries, qrels = {}, {}, {}
    with open(folder / "corpus.jsonl", "w") as f:
        for i, r in enumerate(rows):
            doc = {"_id": f"doc{i}", "text": r["sentence2"]}
            if i % 4 == 0:
                doc["title"] = r["genre"]
            corpus[doc["_id"]] = doc
            f.write(json.dumps(doc) + "\n")
    for i, r in enumerate(rows):
        if float(r["score"]) >= 3.5:
            qid = f"q{i}"
            queries[qid] = r["sentence1"]
            qrels[qid] = {f"doc{i}": 2 if float(r["score"]) >= 4.5 else 1}
            if len(queries) % 5 == 0:
                qrels[qid][f"doc{(i + 1) % len(rows)}"] = 0

    # MTEB's dense exact search: title and text joined, cosine similarity, the first 100.
    doc_ids = list(corpus)
    texts = [(corpus[d].get("title", "") + " " + corpus[d]["text"]).strip() for d in doc_ids]
    doc_emb = minilm.encode(texts, convert_to_numpy=True, normalize_embeddings=True)
    qids = list(qrels)
    q_emb = minilm.encode([queries[q] for q in qids], convert_to_numpy=True, normalize_embeddings=True)
    sims = q_emb @ doc_emb.T
    run = {}
    for qi, q in enumerate(qids):
        top = np.argsort(-sims[qi], kind="stable")[:100]
        run[q] = {doc_ids[j]: float(sims[qi][j]) for j in top}
    # BEIR's Rerank: the first k rescored by the cross-encoder (sigmoid of its logit); the rest dropped.
    k = 5
    reranked = {}
    for q in qids:
        top = sorted(run[q].items(), key=lambda kv: -kv[1])[:k]
        pairs = [[queries[q], texts[doc_ids.index(d)]] for d, _ in top]
        scores = reranker.predict(pairs, activation_fn=__import__("torch").nn.Sigmoid())
        reranked[q] = {d: float(s) for (d, _), s in zip(top, scores)}
    # The tiny reranker's vocabulary maps many of these sentences to the same few tokens, so some of its
    # scores tie or nearly tie, and float noise between implementations would reorder them: keep only the
    # queries whose first-stage and reranked orders are decided by at least 1e-4.
    def decided(scores):
        s = sorted(scores)
        return all(b - a >= 1e-4 for a, b in zip(s, s[1:]))

    kept = [q for q in qids if decided(reranked[q].values()) and decided(list(run[q].values())[:k + 1])][:20]
    qrels = {q: qrels[q] for q in kept}
    run = {q: run[q] for q in kept}
    reranked = {q: reranked[q] for q in kept}
    with open(folder / "queries.jsonl", "w") as f:
        for q in kept:
            f.write(json.dumps({"_id": q, "text": queries[q]}) + "\n")
        f.write(json.dumps({"_id": "unjudged", "text": "A query with no judgements is not evaluated."}) + "\n")
    with open(folder / "qrels" / "test.tsv", "w") as f:
        f.write("query-id\tcorpus-id\tscore\n")
        for q, docs in qrels.items():
            for d, g in docs.items():
                f.write(f"{q}\t{d}\t{g}\n")
    _, dense = pytrec(qrels, run)
    _, rerank = pytrec(qrels, reranked)
    return {"dense": dense, "rerank_top_k": k, "rerank": rerank, "queries": len(kept), "documents": len(doc_ids)}


def sts_spearman(minilm):
    from sentence_transformers.evaluation import EmbeddingSimilarityEvaluator

    rows = sts_rows()
    ev = EmbeddingSimilarityEvaluator(
        [r["sentence1"] for r in rows], [r["sentence2"] for r in rows], [float(r["score"]) / 5 for r in rows], name="sts-test"
    )
    result = ev(minilm)
    return {"pairs": len(rows), "spearman": result["sts-test_spearman_cosine"], "pearson": result["sts-test_pearson_cosine"]}


def classify_fixture():
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    folder = ROOT / "tests/fixtures/tiny/bert-classify"
    tok = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForSequenceClassification.from_pretrained(folder).eval()
    rows = sts_rows()[:60]
    labels = [model.config.id2label[i] for i in range(model.config.num_labels)]
    texts = [r["sentence1"] for r in rows]
    # Gold labels from the STS score, so some agree with the random model and some do not.
    gold = [labels[min(2, int(float(r["score"]) // 1.7))] for r in rows]
    with torch.no_grad():
        enc = tok(texts, padding=True, truncation=True, return_tensors="pt")
        pred = [labels[i] for i in model(**enc).logits.argmax(-1).tolist()]
    with open(OUT / "classify.tsv", "w") as f:
        f.write("text\tlabel\n")
        for i, (t, g) in enumerate(zip(texts, gold)):
            # Half the gold labels by index, as a file may give them.
            f.write(f"{t}\t{labels.index(g) if i % 2 else g}\n")
    return {
        "texts": len(texts),
        "predicted": pred,
        "accuracy": accuracy_score(gold, pred),
        "macro_f1": f1_score(gold, pred, average="macro", zero_division=0),
    }


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "metrics.json").write_text(json.dumps(metrics_fixture(), indent=1) + "\n")
    from sentence_transformers import CrossEncoder, SentenceTransformer

    minilm = SentenceTransformer(str(ROOT / "models/all-MiniLM-L6-v2"), device="cpu")
    reranker = CrossEncoder(str(ROOT / "tests/fixtures/tiny/bert-rerank"), device="cpu")
    reference = beir_fixture(minilm, reranker)
    reference["sts_b_test"] = sts_spearman(minilm)
    (OUT / "beir-toy" / "reference.json").write_text(json.dumps(reference, indent=1) + "\n")
    (OUT / "classify.reference.json").write_text(json.dumps(classify_fixture(), indent=1) + "\n")


if __name__ == "__main__":
    main()
