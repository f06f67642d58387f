#!/usr/bin/python3
"""Times PyTorch on the attention and GEMM bench's shapes, in fp32 and in bf16.

  torch_mha.py --threads T --repetitions N --min-time S --out FILE [--gemm SPEC ...] [CONFIG ...]
  CONFIG: name:E:H:batch:q_len:kv_len:causal[:kv_heads[:decode]] (causal, decode 0 or 1;
          kv_heads 0 or absent: H)
  SPEC:   name:M:N:K:trans_b (trans_b 1: B stored [N, K], as a Linear's weight)

mha_bench.py runs it once per thread count, under the python3 given with --python
(default: its own, or Debian's /usr/bin/python3, whose site-packages hold
python3-torch), with OPENBLAS_NUM_THREADS and OMP_NUM_THREADS set to T: Debian's
torch runs its fp32 matmuls on OpenBLAS, whose own threads torch.set_num_threads
does not limit (BERT s128 at "1 thread" took 5.6 ms on two cores, 12.9 ms on one).
It writes Google Benchmark JSON with rows named <suite>/<name>/pytorch[_bf16]/threads:T
(GEMM in bf16: gemm/bf16_<name>/pytorch/threads:T, as bench_gemm names its bf16
rows), so records and reports read them as any bench row.

Each model is built as a user builds it, in eval mode under torch.inference_mode()
(torch.no_grad() before 1.9), and for bf16 .to(torch.bfloat16) with bf16 inputs:
  - multi-head prefill: nn.MultiheadAttention(E, H, batch_first=True),
    need_weights=False, a causal config with an additive -inf mask;
  - GQA prefill (kv_heads < H): four nn.Linear and
    torch.nn.functional.scaled_dot_product_attention, with enable_gqa=True where
    torch has it (2.5 on), else K and V heads repeated with repeat_interleave;
  - decode: the same Linear + attention for one new token per batch row against
    a static cache of kv_len positions (preallocated, kv_len - 1 filled; the new
    key and value written in place), as a static-cache generate loop does;
  - GEMM: torch.matmul (A @ W.t() for trans_b).
Without scaled_dot_product_attention (torch < 2.0) the attention is
softmax(Q·Kᵀ·scale)·V from torch.matmul. The context's pytorch_attention says
which path ran. Exits 3 when torch cannot be imported.
"""

import argparse
import json
import statistics
import sys
import time

NO_TORCH = 3
# A forward slower than this is timed once, not per repetition: PyTorch 1.13's bf16
# matmul without AVX512_BF16 runs at about 1.6 GFLOP/s (BERT s128: 408 ms, fp32 13 ms).
SLOW_SECONDS = 1.0


def flops(E, batch, q_len, kv_len, causal, kv_dim=None):
    """As AttentionConfig::flops (bench/attention/composed.hpp)."""
    kv_dim = E if kv_dim is None else kv_dim
    scores = 4.0 * batch * q_len * kv_len * E
    return 4.0 * batch * q_len * E * (E + kv_dim) + (scores / 2 if causal else scores)


def parse_config(text):
    parts = text.split(":")
    if len(parts) not in (7, 8, 9):
        raise ValueError("config '{}': expected name:E:H:batch:q_len:kv_len:causal"
                         "[:kv_heads[:decode]]".format(text))
    values = [int(p) for p in parts[1:]] + [0] * (9 - len(parts))
    return [parts[0]] + values


def parse_gemm(text):
    parts = text.split(":")
    if len(parts) != 5:
        raise ValueError("gemm '{}': expected name:M:N:K:trans_b".format(text))
    return [parts[0]] + [int(p) for p in parts[1:]]


def inference(torch):
    return torch.inference_mode() if hasattr(torch, "inference_mode") else torch.no_grad()


class Attend:
    """softmax(q·kᵀ·scale [+ causal mask])·v over heads, k and v with fewer heads (GQA)."""

    def __init__(self, torch, heads, kv_heads):
        self.torch, self.group = torch, heads // kv_heads
        self.sdpa = getattr(torch.nn.functional, "scaled_dot_product_attention", None)
        self.gqa = False
        if self.sdpa is not None and self.group > 1:
            q = torch.zeros(1, 2, 1, 4)
            kv = torch.zeros(1, 1, 1, 4)
            try:
                self.sdpa(q, kv, kv, enable_gqa=True)
                self.gqa = True
            except TypeError:  # torch < 2.5
                pass
        self.path = ("sdpa enable_gqa" if self.gqa else
                     "sdpa" + (" repeat_interleave" if self.group > 1 else "")
                     if self.sdpa is not None else
                     "matmul softmax" + (" repeat_interleave" if self.group > 1 else ""))

    def __call__(self, q, k, v, causal):
        torch = self.torch
        if self.gqa:
            return self.sdpa(q, k, v, is_causal=causal, enable_gqa=True)
        if self.group > 1:
            k = k.repeat_interleave(self.group, dim=1)
            v = v.repeat_interleave(self.group, dim=1)
        if self.sdpa is not None:
            return self.sdpa(q, k, v, is_causal=causal)
        scores = torch.matmul(q, k.transpose(-2, -1)) * (q.shape[-1] ** -0.5)
        if causal:
            n, m = scores.shape[-2:]
            scores = scores.masked_fill(
                torch.ones(n, m, dtype=torch.bool).triu(m - n + 1), float("-inf"))
        return torch.matmul(torch.softmax(scores, dim=-1), v)


class LinearAttention:
    """Q, K, V and output nn.Linear around Attend: GQA prefill, or decode over a static cache."""

    def __init__(self, torch, E, H, kv_heads, batch, q_len, kv_len, causal, decode, dtype, gen):
        nn = torch.nn
        self.torch, self.H, self.kvh, self.d = torch, H, kv_heads, E // H
        self.causal = causal and not decode
        kv_dim = kv_heads * self.d
        self.proj = [nn.Linear(E, n).eval().to(dtype) for n in (E, kv_dim, kv_dim, E)]
        self.attend = Attend(torch, H, kv_heads)
        self.x = torch.rand((batch, q_len, E), generator=gen).to(dtype)
        self.cache = None
        if decode:
            # Positions [0, kv_len - 1) hold the history; each step writes kv_len - 1.
            shape = (batch, kv_heads, kv_len, self.d)
            self.cache = [torch.rand(shape, generator=gen).to(dtype) for _ in range(2)]

    def heads(self, t, n):
        return t.view(t.shape[0], t.shape[1], n, self.d).transpose(1, 2)

    def __call__(self):
        wq, wk, wv, wo = self.proj
        x = self.x
        q, k, v = self.heads(wq(x), self.H), self.heads(wk(x), self.kvh), self.heads(wv(x), self.kvh)
        if self.cache is not None:
            kc, vc = self.cache
            kc[:, :, -1:].copy_(k)
            vc[:, :, -1:].copy_(v)
            k, v = kc, vc
        o = self.attend(q, k, v, self.causal)
        return wo(o.transpose(1, 2).reshape(x.shape))


def build_attention(torch, E, H, batch, q_len, kv_len, causal, kv_heads, decode, dtype):
    """(forward, path): the PyTorch model of one attention config."""
    gen = torch.Generator().manual_seed(3)
    kv_heads = kv_heads or H
    if kv_heads == H and not decode:
        module = torch.nn.MultiheadAttention(E, H, batch_first=True).eval().to(dtype)
        x = torch.rand((batch, q_len, E), generator=gen).to(dtype)
        mask = None
        if causal:
            i = torch.arange(q_len).unsqueeze(1)
            j = torch.arange(kv_len).unsqueeze(0)
            mask = torch.zeros(q_len, kv_len)
            mask[j > i + (kv_len - q_len)] = float("-inf")
            mask = mask.to(dtype)
        return (lambda: module(x, x, x, need_weights=False, attn_mask=mask),
                "nn.MultiheadAttention")
    model = LinearAttention(torch, E, H, kv_heads, batch, q_len, kv_len, causal, decode, dtype, gen)
    return model, "Linear + " + model.attend.path


def build_gemm(torch, M, N, K, trans_b, dtype):
    gen = torch.Generator().manual_seed(3)
    a = torch.rand((M, K), generator=gen).to(dtype)
    b = torch.rand((N, K) if trans_b else (K, N), generator=gen).to(dtype)
    if trans_b:
        return lambda: torch.matmul(a, b.t())
    return lambda: torch.matmul(a, b)


def time_rows(torch, forward, run_name, flop, args):
    """Google Benchmark rows (repetitions and median, cv aggregates) for forward()."""
    with inference(torch):
        start = time.perf_counter()
        forward()  # warm-up
        first = time.perf_counter() - start
        repetitions = 1 if first > SLOW_SECONDS else args.repetitions
        times = []
        for _ in range(repetitions):
            iterations, start = 0, time.perf_counter()
            while True:
                forward()
                iterations += 1
                elapsed = time.perf_counter() - start
                if elapsed >= args.min_time or first > SLOW_SECONDS:
                    break
            times.append((elapsed / iterations, iterations))
    run_name = "{}/threads:{}/real_time".format(run_name, args.threads)
    gflop = flop * 1e-9
    rows = [{"name": run_name, "run_name": run_name, "run_type": "iteration",
             "repetitions": repetitions, "repetition_index": k, "iterations": n,
             "real_time": t * 1e3, "cpu_time": t * 1e3, "time_unit": "ms", "GFLOPS": gflop / t}
            for k, (t, n) in enumerate(times)]
    median = statistics.median(t for t, _ in times)
    mean = statistics.mean(t for t, _ in times)
    cv = statistics.pstdev([t for t, _ in times]) / mean if len(times) > 1 else 0.0
    for aggregate, value in (("median", median), ("cv", cv)):
        rows.append({"name": run_name + "_" + aggregate, "run_name": run_name,
                     "run_type": "aggregate", "aggregate_name": aggregate,
                     "repetitions": repetitions, "time_unit": "ms",
                     "real_time": value * 1e3 if aggregate == "median" else value,
                     "GFLOPS": gflop / median})
    print("  [pytorch] {:<48s} {:10.3f} ms{}".format(
        run_name, median * 1e3, " (one call: slower than {:.0f} s)".format(SLOW_SECONDS)
        if first > SLOW_SECONDS else ""), flush=True)
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, required=True)
    parser.add_argument("--repetitions", type=int, default=5)
    parser.add_argument("--min-time", type=float, default=0.1)
    parser.add_argument("--out", required=True)
    parser.add_argument("--gemm", action="append", default=[], metavar="SPEC")
    parser.add_argument("configs", nargs="*")
    args = parser.parse_args()
    try:
        configs = [parse_config(c) for c in args.configs]
        gemms = [parse_gemm(g) for g in args.gemm]
    except ValueError as e:
        parser.error(str(e))
    try:
        import torch
    except ImportError as e:
        print("torch_mha: PyTorch is not installed ({})".format(e), file=sys.stderr)
        return NO_TORCH
    torch.set_num_threads(args.threads)
    benchmarks, paths = [], {}
    for name, E, H, batch, q_len, kv_len, causal, kv_heads, decode in configs:
        kv_dim = (kv_heads or H) * (E // H)
        flop = flops(E, batch, q_len, kv_len, causal, kv_dim)
        for dtype, impl in ((torch.float32, "pytorch"), (torch.bfloat16, "pytorch_bf16")):
            forward, path = build_attention(torch, E, H, batch, q_len, kv_len, causal, kv_heads,
                                            decode, dtype)
            if name not in paths.setdefault(path, []):
                paths[path].append(name)
            benchmarks += time_rows(torch, forward, "attention/{}/{}".format(name, impl), flop,
                                    args)
    for name, M, N, K, trans_b in gemms:
        for dtype, config in ((torch.float32, name), (torch.bfloat16, "bf16_" + name)):
            benchmarks += time_rows(torch, build_gemm(torch, M, N, K, trans_b, dtype),
                                    "gemm/{}/pytorch".format(config), 2.0 * M * N * K, args)
    context = {"pytorch_version": torch.__version__, "pytorch_threads": torch.get_num_threads(),
               "pytorch_attention": "; ".join("{}: {}".format(p, ",".join(n))
                                              for p, n in paths.items()),
               "library_build_type": "release"}
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump({"context": context, "benchmarks": benchmarks}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
