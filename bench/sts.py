"""The STS Benchmark sentences, as the Rust benchmarks read them (both sentence columns, file order)."""
import gzip


def sentences(path, n=None):
    out = []
    with gzip.open(path, "rt", encoding="utf-8") as f:
        for line in f:
            cols = line.rstrip("\n").split("\t")
            if len(cols) >= 7:
                try:
                    float(cols[5])
                except ValueError:
                    continue
                out.extend(cols[6:8])
            if n is not None and len(out) >= n:
                break
    return out if n is None else out[:n]
