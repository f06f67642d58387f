#!/usr/bin/python3
"""Times PyTorch's nn.MultiheadAttention, in fp32 and in bf16, on the attention bench's shapes.

  torch_mha.py --threads T --repetitions N --min-time S --out FILE CONFIG [CONFIG ...]
  CONFIG: name:E:H:batch:q_len:kv_len:causal (causal 0 or 1)

mha_bench.py runs it (under /usr/bin/python3, whose site-packages hold Debian's
python3-torch) once per thread count, with OPENBLAS_NUM_THREADS and OMP_NUM_THREADS
set to T: Debian's torch runs its fp32 matmuls on OpenBLAS, whose own threads
torch.set_num_threads does not limit (BERT s128 at "1 thread" took 5.6 ms on
two cores, 12.9 ms on one). It writes Google Benchmark JSON with rows named
attention/<name>/pytorch[_bf16]/threads:T, so records and reports read them as
any bench row.

Each module is built as a user builds it: nn.MultiheadAttention(E, H,
batch_first=True) in eval mode under torch.no_grad(), need_weights=False, and
for bf16 .to(torch.bfloat16) with bf16 input and mask. A causal config passes an
additive -inf mask. Exits 3 when torch cannot be imported.
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


def flops(E, batch, q_len, kv_len, causal):
    """As AttentionConfig::flops (bench/attention/composed.hpp)."""
    scores = 4.0 * batch * q_len * kv_len * E
    return 8.0 * batch * q_len * E * E + (scores / 2 if causal else scores)


def parse_config(text):
    parts = text.split(":")
    if len(parts) != 7:
        raise ValueError("config '{}': expected name:E:H:batch:q_len:kv_len:causal".format(text))
    return [parts[0]] + [int(p) for p in parts[1:]]


def time_forward(torch, name, E, H, batch, q_len, kv_len, causal, dtype, args):
    module = torch.nn.MultiheadAttention(E, H, batch_first=True).eval().to(dtype)
    gen = torch.Generator().manual_seed(3)
    x = torch.rand((batch, q_len, E), generator=gen).to(dtype)
    mask = None
    if causal:
        i = torch.arange(q_len).unsqueeze(1)
        j = torch.arange(kv_len).unsqueeze(0)
        mask = torch.zeros(q_len, kv_len)
        mask[j > i + (kv_len - q_len)] = float("-inf")
        mask = mask.to(dtype)

    def forward():
        module(x, x, x, need_weights=False, attn_mask=mask)

    with torch.no_grad():
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
    impl = "pytorch" if dtype == torch.float32 else "pytorch_bf16"
    run_name = "attention/{}/{}/threads:{}/real_time".format(name, impl, args.threads)
    gflop = flops(E, batch, q_len, kv_len, causal) * 1e-9
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
    print("  [pytorch] {:<40s} {:10.3f} ms{}".format(
        run_name, median * 1e3, " (one forward: slower than {:.0f} s)".format(SLOW_SECONDS)
        if first > SLOW_SECONDS else ""), flush=True)
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, required=True)
    parser.add_argument("--repetitions", type=int, default=5)
    parser.add_argument("--min-time", type=float, default=0.1)
    parser.add_argument("--out", required=True)
    parser.add_argument("configs", nargs="+")
    args = parser.parse_args()
    try:
        import torch
    except ImportError as e:
        print("torch_mha: PyTorch is not installed ({})".format(e), file=sys.stderr)
        return NO_TORCH
    torch.set_num_threads(args.threads)
    benchmarks = []
    for text in args.configs:
        config = parse_config(text)
        for dtype in (torch.float32, torch.bfloat16):
            benchmarks += time_forward(torch, *config, dtype, args)
    context = {"pytorch_version": torch.__version__, "pytorch_threads": torch.get_num_threads(),
               "library_build_type": "release"}
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump({"context": context, "benchmarks": benchmarks}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
