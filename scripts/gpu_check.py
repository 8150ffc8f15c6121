#!/usr/bin/env python3
"""The GPU check's steps (scripts/gpu-check.sh runs this; standard library only: a GPU machine here has no network,
and may have no numpy or torch).

  (a) fixtures: every tiny fixture on candle at float32, float16 and bfloat16 against transformers' references, by
      the models suite's candle_precision tests run on the device (ALEPH_TEST_DEVICE);
  (b) parity: random models at real shapes (scripts/make_shaped_model.py) served on the device at each dtype,
      against the same binary on the CPU at float32 (Aleph's kernels): the least cosine over real sentences;
  (c) speed: `aleph bench` in-process (batch sizes x lengths) and over HTTP (concurrency levels) on the device,
      with the device's peak memory (nvidia-smi) while each runs; unpadded attention, then padded at fp16; the
      tokenizer pool alone on 1 thread and on every core;
  (d) yardstick: where PyTorch is installed, fp16 SDPA encoders of the same shapes on the same device.

Prints one table per step and writes everything to OUT/gpu-check.json.
"""
import argparse
import json
import math
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def table(title, header, rows):
    print(f"\n### {title}\n")
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for r in rows:
        print("| " + " | ".join(str(c) for c in r) + " |")
    sys.stdout.flush()


def machine(args):
    info = {"device": args.device, "cpus": os.cpu_count()}
    if shutil.which("nvidia-smi"):
        q = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                           capture_output=True, text=True)
        info["gpus"] = [line.strip() for line in q.stdout.splitlines() if line.strip()]
    v = subprocess.run([args.aleph, "--version"], capture_output=True, text=True)
    info["aleph"] = (v.stdout or v.stderr).strip()
    return info


# --- (a) fixtures ------------------------------------------------------------------------------------------------
def fixtures(args):
    env = {**os.environ, "ALEPH_TEST_DEVICE": args.device, "ALEPH_TEST_TINY": str(ROOT / "tests/fixtures/tiny")}
    t0 = time.time()
    run = subprocess.run([args.suite, "candle_precision", "--test-threads", "1", "--nocapture"], env=env,
                         capture_output=True, text=True, timeout=args.step_timeout)
    results = {}
    for line in (run.stdout + run.stderr).splitlines():
        m = re.match(r"^(\S+) at (\w+): (?:worst difference ([\d.]+)|FAILED: (.*))$", line)
        if m:
            name, dtype, worst, why = m.groups()
            results.setdefault(name, {})[dtype] = float(worst) if worst is not None else f"FAILED: {why}"
    dtypes = ["Float32", "Float16", "BFloat16"]
    rows = [[n] + [fmt_worst(results[n].get(d)) for d in dtypes] for n in sorted(results)]
    table(f"(a) fixtures on {args.device} against transformers (worst difference / scale)", ["fixture"] + dtypes, rows)
    passed = run.returncode == 0 and bool(results)
    if not passed:
        tail = "\n".join((run.stdout + run.stderr).splitlines()[-30:])
        log(f"gpu-check: the fixture suite failed (rc {run.returncode}):\n{tail}")
    return {"passed": passed, "seconds": round(time.time() - t0, 1), "worst": results}


def fmt_worst(v):
    if v is None:
        return "-"
    return v if isinstance(v, str) else f"{v:.4f}"


# --- servers ------------------------------------------------------------------------------------------------------
def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, aleph, model, extra, log_path):
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        cmd = [aleph, "v2", "--model-id", str(model), "--host", "127.0.0.1", "--port", str(self.port),
               "--no-model-warmup", *extra]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=open(log_path, "w"))
        t0 = time.time()
        while True:
            try:
                with urllib.request.urlopen(self.base + "/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if self.proc.poll() is not None or time.time() - t0 > 300:
                self.stop()
                raise RuntimeError(f"{' '.join(cmd)} did not start:\n{Path(log_path).read_text()[-3000:]}")
            time.sleep(0.2)
        self.load_seconds = time.time() - t0

    def embed(self, texts):
        body = json.dumps({"input": texts}).encode()
        req = urllib.request.Request(self.base + "/embeddings", body, {"content-type": "application/json"})
        with urllib.request.urlopen(req, timeout=300) as r:
            return [d["embedding"] for d in json.load(r)["data"]]

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def cosine(a, b):
    dot = sum(x * y for x, y in zip(a, b))
    return dot / (math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b)) or 1.0)


def shaped_model(args, shape):
    out = Path(args.work) / "models" / shape
    if not (out / "model.safetensors").exists():
        subprocess.run([sys.executable, str(ROOT / "scripts/make_shaped_model.py"), shape, str(out)], check=True,
                       stdout=sys.stderr)
    return out


def device_flags(args, dtype):
    return ["--device", args.device, "--engine", "candle", "--dtype", dtype]


# --- (b) parity ---------------------------------------------------------------------------------------------------
def parity(args):
    sentences = json.loads((ROOT / "tests/fixtures/minilm/sentences.json").read_text())[: args.sentences]
    rows, results = [], []
    for shape in args.shapes:
        model = shaped_model(args, shape)
        cpu = Server(args.aleph, model, ["--device", "cpu", "--dtype", "float32"], Path(args.work) / f"{shape}-cpu.log")
        try:
            want = cpu.embed(sentences)
        finally:
            cpu.stop()
        for dtype in args.dtypes:
            entry = {"shape": shape, "dtype": dtype}
            try:
                s = Server(args.aleph, model, device_flags(args, dtype), Path(args.work) / f"{shape}-{dtype}.log")
                try:
                    got = s.embed(sentences)
                    entry["load_s"] = round(s.load_seconds, 2)
                finally:
                    s.stop()
                entry["min_cosine"] = min(cosine(g, w) for g, w in zip(got, want))
                entry["passed"] = entry["min_cosine"] >= (0.9999 if dtype == "float32" else 0.99)
            except (RuntimeError, OSError) as e:
                entry.update(passed=False, error=str(e)[-2000:])
            results.append(entry)
            rows.append([shape, dtype, f"{entry['min_cosine']:.6f}" if "min_cosine" in entry else "-",
                         entry.get("load_s", "-"), "ok" if entry["passed"] else entry.get("error", "low")[:80]])
    table(f"(b) random models at real shapes on {args.device} against the CPU at float32 ({len(sentences)} sentences)",
          ["shape", "dtype", "least cosine", "load s", ""], rows)
    return results


# --- (c) speed ----------------------------------------------------------------------------------------------------
class PeakMemory:
    """The device's peak memory use (MiB, nvidia-smi) while it runs; None without nvidia-smi."""

    def __init__(self):
        self.peak, self.stop_flag = None, threading.Event()
        self.thread = threading.Thread(target=self.poll, daemon=True) if shutil.which("nvidia-smi") else None

    def poll(self):
        while not self.stop_flag.is_set():
            q = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                               capture_output=True, text=True)
            used = [int(x) for x in q.stdout.split() if x.isdigit()]
            if used:
                self.peak = max(self.peak or 0, max(used))
            time.sleep(0.2)

    def __enter__(self):
        if self.thread:
            self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop_flag.set()
        if self.thread:
            self.thread.join()


def bench(args, shape, model, attention, dtypes):
    """One `aleph bench` run with attention `attention` (ALEPH_ATTENTION) at `dtypes`: its report, or an error."""
    cmd = [args.aleph, "bench", "--model-id", str(model), "--device", args.device, "--engine", "candle",
           "--dtypes", ",".join(dtypes), "--batch-sizes", ",".join(map(str, args.batch_sizes)),
           "--lengths", ",".join(map(str, args.lengths)), "--concurrency", ",".join(map(str, args.concurrency)),
           "--seconds", str(args.seconds), "--batch-size", str(max(args.batch_sizes)),
           "--max-batch-tokens", str(args.max_batch_tokens), "--json"]
    env = {**os.environ, "ALEPH_ATTENTION": attention}
    with PeakMemory() as mem:
        run = subprocess.run(cmd, capture_output=True, text=True, timeout=args.step_timeout, env=env)
    if run.returncode != 0:
        log(f"gpu-check: aleph bench on {shape} ({attention}) failed:\n{run.stderr[-3000:]}")
        return {"shape": shape, "attention": attention, "error": run.stderr[-2000:]}
    report = json.loads(run.stdout)
    for v in report["variants"]:
        if v.get("note"):
            log(f"gpu-check: {shape} {v.get('dtype')}: {v['note']}")
    return {"shape": shape, "attention": attention, "peak_device_mib": mem.peak, **report}


def tokenizer_pool(args, model):
    """The tokenizer pool alone (`aleph bench --mode tokenize`) on 1 thread and on every core: whether it keeps
    the device fed. The shaped models borrow a fixture's WordPiece tokenizer."""
    rows = []
    for workers in sorted({1, os.cpu_count() or 1}):
        cmd = [args.aleph, "bench", "--model-id", str(model), "--device", "cpu", "--mode", "tokenize",
               "--dtypes", "float32", "--seconds", str(max(args.seconds, 1.0)), "--tokenizer-workers", str(workers),
               "--no-model-warmup", "--json"]
        run = subprocess.run(cmd, capture_output=True, text=True, timeout=args.step_timeout)
        if run.returncode != 0:
            return {"error": run.stderr[-2000:]}
        rows.extend(json.loads(run.stdout)["tokenize"])
    table("(c) tokenizer pool", ["threads", "sentences/s", "tokens/s"],
          [[r["workers"], f"{r['sentences_per_s']:.0f}", f"{r['tokens_per_s']:.0f}"] for r in rows])
    return rows


def speed(args):
    """Each shape at every bench dtype with the device's default attention, then (`--attentions`) the other
    attention at the first bench dtype: unpadded against padded, side by side on one device."""
    results = []
    for shape in args.shapes:
        model = shaped_model(args, shape)
        for i, attention in enumerate(args.attentions):
            results.append(bench(args, shape, model, attention, args.bench_dtypes if i == 0 else args.bench_dtypes[:1]))
    rows = [[r["shape"], r["attention"], x["dtype"], x["batch"], x["length"], f"{x['items_per_s']:.0f}",
             f"{x['tokens_per_s']:.0f}", f"{x['p50_ms']:.2f}", r.get("peak_device_mib") or "-"]
            for r in results for x in r.get("in_process", [])]
    table(f"(c) in-process on {args.device}", ["shape", "attention", "dtype", "batch", "tokens", "sentences/s",
                                                "tokens/s", "p50 ms", "peak MiB"], rows)
    rows = [[r["shape"], r["attention"], x["dtype"], x["concurrency"], f"{x['items_per_s']:.0f}", f"{x['p50_ms']:.2f}",
             f"{x['p99_ms']:.2f}", x["errors"]] for r in results for x in r.get("http", [])]
    table(f"(c) over HTTP on {args.device}", ["shape", "attention", "dtype", "concurrency", "sentences/s", "p50 ms",
                                              "p99 ms", "errors"], rows)
    pool = tokenizer_pool(args, shaped_model(args, args.shapes[0]))
    if isinstance(pool, dict):
        results.append({"shape": args.shapes[0], "attention": "-", **pool})
    else:
        results.append({"shape": args.shapes[0], "tokenizer_pool": pool})
    return results


# --- (d) yardstick ------------------------------------------------------------------------------------------------
YARDSTICK = r'''
import json, sys, time, torch
import torch.nn.functional as F
shape, batches, lengths, seconds, device = json.loads(sys.argv[1])
dtype = torch.float16 if device.startswith("cuda") else torch.float32
torch.manual_seed(0)
h, layers, heads, kv, hd, inter, gated = shape
def w(*s): return (torch.randn(*s, device=device, dtype=dtype) * 0.02)
blocks = [dict(qkv=w((heads + 2 * kv) * hd, h), o=w(h, heads * hd), up=w(inter * (2 if gated else 1), h), down=w(h, inter))
          for _ in range(layers)]
def forward(x):
    b, l, _ = x.shape
    for p in blocks:
        y = F.layer_norm(x, (h,))
        q, k, v = (y @ p["qkv"].T).split([heads * hd, kv * hd, kv * hd], -1)
        q = q.view(b, l, heads, hd).transpose(1, 2)
        k = k.view(b, l, kv, hd).transpose(1, 2).repeat_interleave(heads // kv, 1)
        v = v.view(b, l, kv, hd).transpose(1, 2).repeat_interleave(heads // kv, 1)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=gated).transpose(1, 2).reshape(b, l, heads * hd)
        x = x + a @ p["o"].T
        u = F.layer_norm(x, (h,)) @ p["up"].T
        u = F.silu(u[..., :inter]) * u[..., inter:] if gated else F.gelu(u)
        x = x + u @ p["down"].T
    return x.mean(1)
rows = []
with torch.inference_mode():
    for l in lengths:
        for b in batches:
            x = torch.randn(b, l, h, device=device, dtype=dtype)
            forward(x)
            if device.startswith("cuda"): torch.cuda.synchronize()
            n, t0 = 0, time.time()
            while time.time() - t0 < seconds or n < 3:
                forward(x); n += 1
            if device.startswith("cuda"): torch.cuda.synchronize()
            rows.append(dict(batch=b, length=l, items_per_s=b * n / (time.time() - t0)))
print(json.dumps(rows))
'''

SHAPE_DIMS = {  # hidden, layers, heads, kv heads, head width, intermediate, gated (decoder)
    "minilm": (384, 6, 12, 12, 32, 1536, False), "bert-base": (768, 12, 12, 12, 64, 3072, False),
    "qwen3-0.6b": (1024, 28, 16, 8, 128, 3072, True), "tiny-bert": (64, 2, 4, 4, 16, 128, False),
    "tiny-qwen3": (64, 2, 4, 2, 16, 128, True),
}


def yardstick(args):
    probe = subprocess.run([sys.executable, "-c", "import torch; print(torch.cuda.is_available())"],
                           capture_output=True, text=True)
    if probe.returncode != 0:
        print("\n### (d) PyTorch yardstick\n\nPyTorch is not installed here: skipped.")
        return {"skipped": "no torch"}
    device = "cuda" if args.device.startswith("cuda") else "cpu"
    results = []
    for shape in args.shapes:
        spec = [SHAPE_DIMS[shape], args.batch_sizes, args.lengths, args.seconds, device]
        run = subprocess.run([sys.executable, "-c", YARDSTICK, json.dumps(spec)], capture_output=True, text=True,
                             timeout=args.step_timeout)
        if run.returncode != 0:
            results.append({"shape": shape, "error": run.stderr[-2000:]})
            continue
        results.append({"shape": shape, "rows": json.loads(run.stdout)})
    rows = [[r["shape"], x["batch"], x["length"], f"{x['items_per_s']:.0f}"] for r in results for x in r.get("rows", [])]
    table(f"(d) PyTorch SDPA ({'fp16' if device == 'cuda' else 'f32'}) on {device}, same shapes",
          ["shape", "batch", "tokens", "sentences/s"], rows)
    return results


def failures(report):
    """What failed, one line each: a step that raised, the fixture suite, a shape's parity or bench."""
    out = [f"{k}: {v['error'][:200]}" for k, v in report.items() if isinstance(v, dict) and "error" in v]
    if isinstance(report.get("fixtures"), dict) and report["fixtures"].get("passed") is False:
        out.append("fixtures: the candle_precision suite failed")
    for e in report.get("parity", []) if isinstance(report.get("parity"), list) else []:
        if not e.get("passed"):
            out.append(f"parity: {e['shape']} at {e['dtype']}: {e.get('error', e.get('min_cosine'))}"[:300])
    for e in report.get("speed", []) if isinstance(report.get("speed"), list) else []:
        if "error" in e:
            out.append(f"speed: {e['shape']} ({e.get('attention')}): {e['error'][:200]}")
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--aleph", required=True)
    p.add_argument("--suite", required=True, help="the models test suite binary (a cuda build on a GPU)")
    p.add_argument("--device", default="cuda:0")
    p.add_argument("--shapes", default="minilm,bert-base,qwen3-0.6b")
    p.add_argument("--dtypes", default="float32,float16,bfloat16", help="(b)'s precisions")
    p.add_argument("--bench-dtypes", default="float16,float32", help="(c)'s precisions (each costs device time)")
    p.add_argument("--attentions", default="unpadded,padded",
                   help="(c)'s attention (ALEPH_ATTENTION): the first at every bench dtype, the others at the first")
    p.add_argument("--batch-sizes", default="1,32,256")
    p.add_argument("--lengths", default="16,128,512")
    p.add_argument("--concurrency", default="1,16,64")
    p.add_argument("--max-batch-tokens", type=int, default=131072)
    p.add_argument("--seconds", type=float, default=1.0)
    p.add_argument("--sentences", type=int, default=55)
    p.add_argument("--steps", default="a,b,c,d")
    p.add_argument("--step-timeout", type=float, default=400)
    p.add_argument("--work", required=True)
    p.add_argument("--out", required=True)
    args = p.parse_args()
    args.shapes = args.shapes.split(",")
    args.dtypes = args.dtypes.split(",")
    args.bench_dtypes = args.bench_dtypes.split(",")
    args.attentions = args.attentions.split(",")
    args.batch_sizes = [int(x) for x in args.batch_sizes.split(",")]
    args.lengths = [int(x) for x in args.lengths.split(",")]
    args.concurrency = [int(x) for x in args.concurrency.split(",")]
    Path(args.work).mkdir(parents=True, exist_ok=True)
    Path(args.out).mkdir(parents=True, exist_ok=True)

    report = {"machine": machine(args)}
    print(f"## Aleph GPU check: {json.dumps(report['machine'])}")
    steps = {"a": ("fixtures", fixtures), "b": ("parity", parity), "c": ("speed", speed), "d": ("yardstick", yardstick)}
    for step in args.steps.split(","):
        name, run = steps[step]
        t0 = time.time()
        try:
            report[name] = run(args)
        except Exception as e:  # one step's failure is reported; the others still run
            log(f"gpu-check: step {name} failed: {e!r}")
            report[name] = {"error": repr(e)}
        log(f"gpu-check: {name} took {time.time() - t0:.0f} s")
        (Path(args.out) / "gpu-check.json").write_text(json.dumps(report, indent=1))
    ok = not failures(report)
    for f in failures(report):
        log(f"gpu-check: {f}")
    print(f"\ngpu-check: {'passed' if ok else 'FAILED'} (JSON in {Path(args.out) / 'gpu-check.json'})")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
