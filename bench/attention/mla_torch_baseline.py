#!/usr/bin/python3
"""PyTorch baselines of Multi-head Latent Attention (DeepSeek-V2/V3, Kimi K2) for the MLA bench.

  /usr/bin/python3 bench/attention/mla_torch_baseline.py [--threads N] [--smoke] [--json FILE]

The strongest PyTorch a user would write for one MLA layer, in fp32 and in bf16 (weights,
cache and activations torch.bfloat16), under torch.inference_mode():

  decode/<model>/b<B>/kv4096: the absorbed form with a latent cache, as vLLM and SGLang
    run decode: one new token per sequence x [B, 1, E] -> q (q_a_proj, RMSNorm, q_b_proj,
    or q_proj) -> q_nope, q_pe; [c, k_pe] = kv_a_proj_with_mqa(x), c normed; RoPE on q_pe
    and k_pe; q_lat = q_nope . W_UK (bmm, W_UK [H, dn, r] split from kv_b_proj beforehand);
    [c, k_pe] written into a preallocated latent cache [B, 4096 + 1, r + dr] at position
    4096 (the same slot every iteration, so the length stays 4096 + the new token);
    scores = [q_lat, q_pe] . [c, k_pe]^T (one bmm over r + dr = 576 columns, which is
    q_lat . c^T + q_pe . k_pe^T; the softmax scale folded into the query first); softmax
    (bf16: in float32, then bf16, as HF does); o_lat = p . c (bmm on the cache's c
    columns in place); o = o_lat . W_UV (bmm, W_UV^T [H, r, dv] prepared beforehand);
    o_proj. The RoPE row of position 4096 (cos and sin, computed in float32 as HF does,
    cast to the dtype) is prepared outside the timed region.
    Models: v2lite (DeepSeek-V2-Lite: E 2048, H 16, no q_lora) at B 1 and 8, and v3_h32
    (DeepSeek-V3's layer with 32 of its 128 heads: E 7168, q_lora 1536) at B 1; all with
    r 512, dn 128, dr 64, dv 128.
  prefill/v2lite/b1/s1024: HF's eager DeepseekV3Attention on 1024 tokens (kv_b_proj
    decompresses k_nope and v; q and k concatenated per head; matmul, causal mask added,
    softmax in float32, matmul, o_proj), the reference math of
    tests/golden/make_golden_mla.py (mla_forward) with its RoPE tables and causal mask
    prepared once, as HF's model forward does for all layers. Where torch has
    torch.nn.functional.scaled_dot_product_attention (2.0 on; Debian's 1.13 has not), the
    same layer with SDPA(is_causal=True) for the attention is timed too: rows
    .../eager and .../sdpa, and the plain row is the faster of the two.

Timing: one warm-up call, a second to size the run, then the median over enough calls
for about --min-time seconds (at least 3; --smoke: one call). Debian's torch runs fp32
matmuls on OpenBLAS, whose threads torch.set_num_threads does not limit, so the script
sets OMP_NUM_THREADS, OPENBLAS_NUM_THREADS and MKL_NUM_THREADS to N before importing
torch, then torch.set_num_threads(N). PyTorch 1.13's bf16 matmuls without AVX512_BF16
run at a few GFLOP/s: the bf16 prefill takes tens of seconds a call there.

Output: one line per case, and with --json a list of
  {"name": ..., "dtype": "fp32"|"bf16", "threads": N, "ms": median_ms}
(prefill rows also carry "variant": "eager" or "sdpa"; the plain prefill row is the
faster variant's).

--smoke: tiny shapes (E 64, H 2, the real r and head dims, cache 16, prefill 8), one
call each; it also checks the absorbed decode against the reference layer
(mla_forward on the cache's history plus the new token, float64 and fp32) and SDPA
against eager where SDPA exists. Exits 1 if a check fails.
"""

import argparse
import json
import math
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
GOLDEN = os.path.join(os.path.dirname(os.path.dirname(HERE)), "tests", "golden")

DEEPSEEK = dict(r=512, dn=128, dr=64, dv=128, eps=1e-6, theta=10000.0, halves=0,
                yarn_factor=40.0, yarn_orig=4096, beta_fast=32.0, beta_slow=1.0)
MODELS = {
    "v2lite": dict(E=2048, H=16, q_lora=0, **DEEPSEEK, mscale=0.707, mscale_all_dim=0.707),
    "v3_h32": dict(E=7168, H=32, q_lora=1536, **DEEPSEEK, mscale=1.0, mscale_all_dim=1.0),
}
SMOKE_MODELS = {
    "v2lite": dict(MODELS["v2lite"], E=64, H=2),
    "v3_h32": dict(MODELS["v3_h32"], E=64, H=2, q_lora=48),
}
# (model, batch) of the decode cases; prefill: (model, batch).
DECODE = [("v2lite", 1), ("v2lite", 8), ("v3_h32", 1)]
PREFILL = [("v2lite", 1)]
CACHE_LEN, PREFILL_LEN = 4096, 1024
SMOKE_CACHE_LEN, SMOKE_PREFILL_LEN = 16, 8


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    p.add_argument("--smoke", action="store_true", help="tiny shapes, one call, checks")
    p.add_argument("--json", metavar="FILE", help="write the rows as JSON")
    p.add_argument("--min-time", type=float, default=1.0, help="seconds per case (1)")
    return p.parse_args()


def make_config(ref, model):
    return ref.Config(dict(model, batch=0, seq=0, position_offset=0))


class AbsorbedDecode:
    """One decode step of the absorbed form over a latent cache; call it to run the step."""

    def __init__(self, torch, ref, cfg, w, batch, cache_len, dtype, gen, history=None):
        self.torch, self.ref, self.cfg, self.w = torch, ref, cfg, w
        H, dn, dv, r, dr = cfg.H, cfg.dn, cfg.dv, cfg.r, cfg.dr
        self.L = cache_len
        kv_b = w["kv_b_proj"].view(H, dn + dv, r)
        self.w_uk = kv_b[:, :dn, :].contiguous()                  # [H, dn, r]
        self.w_uv_t = kv_b[:, dn:, :].transpose(1, 2).contiguous()  # [H, r, dv]
        cos, sin = ref.rope_tables(cfg, torch.tensor([cache_len]), dtype)
        self.cos, self.sin = cos[0], sin[0]
        self.scale = ref.softmax_scale(cfg)
        self.cache = torch.empty((batch, cache_len + 1, r + dr), dtype=dtype)
        if history is None:
            self.cache[:, :cache_len].copy_(
                (torch.rand((batch, cache_len, r + dr), generator=gen) * 2 - 1).to(dtype))
        else:
            self.cache[:, :cache_len].copy_(history)
        self.x = (torch.rand((batch, 1, cfg.E), generator=gen) * 2 - 1).to(dtype)

    @staticmethod
    def latent_rows(torch, ref, cfg, w, x):
        """[c normed, k_pe roped] of tokens x [B, S, E] at positions 0.., as the step stores
        them (k_pe in the de-interleaved order apply_rope returns)."""
        F = torch.nn.functional
        kv = F.linear(x, w["kv_a_proj_with_mqa"])
        c = ref.rms_norm(kv[..., :cfg.r], w["kv_a_layernorm"], cfg.eps)
        cos, sin = ref.rope_tables(cfg, torch.arange(x.shape[1]), x.dtype)
        return torch.cat((c, ref.apply_rope(kv[..., cfg.r:], cos, sin, cfg.halves)), -1)

    def __call__(self):
        torch, ref, cfg, w = self.torch, self.ref, self.cfg, self.w
        F = torch.nn.functional
        H, dn, dr, dv, r, L = cfg.H, cfg.dn, cfg.dr, cfg.dv, cfg.r, self.L
        x = self.x
        b = x.shape[0]
        if cfg.q_lora:
            q = F.linear(ref.rms_norm(F.linear(x, w["q_a_proj"]), w["q_a_layernorm"], cfg.eps),
                         w["q_b_proj"])
        else:
            q = F.linear(x, w["q_proj"])
        q = q.view(b, H, dn + dr)
        q_nope, q_pe = q[..., :dn], q[..., dn:]
        kv = F.linear(x, w["kv_a_proj_with_mqa"]).view(b, r + dr)
        slot = self.cache[:, L]
        slot[:, :r].copy_(ref.rms_norm(kv[:, :r], w["kv_a_layernorm"], cfg.eps))
        slot[:, r:].copy_(ref.apply_rope(kv[:, r:], self.cos, self.sin, cfg.halves))
        q_pe = ref.apply_rope(q_pe, self.cos, self.sin, cfg.halves)
        q_lat = torch.bmm(q_nope.transpose(0, 1), self.w_uk)        # [H, b, r]
        query = torch.cat((q_lat.transpose(0, 1), q_pe), -1) * self.scale  # [b, H, r+dr]
        lat = self.cache[:, :L + 1]                                  # [b, T, r+dr]
        scores = torch.bmm(query, lat.transpose(1, 2))               # [b, H, T]
        if scores.dtype in (torch.float32, torch.float64):
            p = torch.softmax(scores, dim=-1)
        else:  # bf16: in float32, as HF does
            p = torch.softmax(scores, dim=-1, dtype=torch.float32).to(scores.dtype)
        o_lat = torch.bmm(p, lat[..., :r])                           # [b, H, r]
        o = torch.bmm(o_lat.transpose(0, 1), self.w_uv_t)           # [H, b, dv]
        return F.linear(o.transpose(0, 1).reshape(b, 1, H * dv), w["o_proj"])


def sdpa_attention(torch):
    """attend() for mla_forward with scaled_dot_product_attention, or None without it."""
    sdpa = getattr(torch.nn.functional, "scaled_dot_product_attention", None)
    if sdpa is None:
        return None
    q = torch.zeros(1, 1, 2, 4)
    try:
        sdpa(q, q, q, is_causal=True, scale=0.5)
        return lambda query, key, value, scale, mask: sdpa(query, key, value, is_causal=True,
                                                           scale=scale)
    except TypeError:  # torch 2.0: no scale argument; the default is 1/sqrt(head dim)
        return lambda query, key, value, scale, mask: sdpa(
            query * (scale * math.sqrt(query.shape[-1])), key, value, is_causal=True)


def time_ms(torch, fn, smoke, min_time):
    """Median milliseconds of fn() (see the module docstring)."""
    with torch.inference_mode():
        fn()  # warm-up
        if smoke:
            start = time.perf_counter()
            fn()
            return (time.perf_counter() - start) * 1e3
        start = time.perf_counter()
        fn()
        once = time.perf_counter() - start
        runs = max(3, min(100000, math.ceil(min_time / max(once, 1e-9))))
        times = []
        for _ in range(runs):
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def relative_error(torch, ours, want):
    return float((ours.double() - want.double()).abs().max()) / max(1.0, float(want.abs().max()))


def smoke_checks(torch, ref, models, attend_sdpa):
    """The absorbed decode and SDPA against the reference layer; returns the failures."""
    failures = []
    gen = torch.Generator().manual_seed(7)
    for name, model in models.items():
        cfg = make_config(ref, model)
        w32 = ref.random_weights(cfg, gen)
        x = torch.rand((2, SMOKE_CACHE_LEN + 1, cfg.E), generator=gen) * 2 - 1
        for dtype, limit in ((torch.float64, 1e-12), (torch.float32, 1e-5)):
            w = {k: v.to(dtype) for k, v in w32.items()}
            with torch.inference_mode():
                want = ref.mla_forward(cfg, w, x.to(dtype), 0)[:, -1:]
                history = AbsorbedDecode.latent_rows(torch, ref, cfg, w,
                                                     x[:, :-1].to(dtype))
                step = AbsorbedDecode(torch, ref, cfg, w, 2, SMOKE_CACHE_LEN, dtype, gen,
                                      history)
                step.x = x[:, -1:].to(dtype)
                err = relative_error(torch, step(), want)
            print(f"check decode/{name} {str(dtype)[6:]:7s}: absorbed vs mla_forward {err:.3g}"
                  f" (limit {limit:g})")
            if not err <= limit:
                failures.append(f"decode/{name} {dtype}")
        if attend_sdpa is not None:
            with torch.inference_mode():
                xs = x[:, :SMOKE_PREFILL_LEN]
                want = ref.mla_forward(cfg, w32, xs, 0)
                err = relative_error(torch, ref.mla_forward(cfg, w32, xs, 0, attend=attend_sdpa),
                                     want)
            print(f"check prefill/{name} sdpa vs eager {err:.3g} (limit 1e-5)")
            if not err <= 1e-5:
                failures.append(f"prefill/{name} sdpa")
    return failures


def main():
    args = parse_args()
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(args.threads)
    import torch
    sys.path.insert(0, GOLDEN)
    import make_golden_mla as ref

    torch.set_num_threads(args.threads)
    models = SMOKE_MODELS if args.smoke else MODELS
    cache_len = SMOKE_CACHE_LEN if args.smoke else CACHE_LEN
    prefill_len = SMOKE_PREFILL_LEN if args.smoke else PREFILL_LEN
    attend_sdpa = sdpa_attention(torch)
    print(f"torch {torch.__version__}, {args.threads} threads, "
          f"scaled_dot_product_attention: {'yes' if attend_sdpa else 'no'}", flush=True)
    failures = smoke_checks(torch, ref, models, attend_sdpa) if args.smoke else []

    rows = []

    def report(name, dtype_name, ms, variant=None):
        row = {"name": name, "dtype": dtype_name, "threads": args.threads, "ms": ms}
        if variant:
            row["variant"] = variant
        rows.append(row)
        print(f"{name:32s} {dtype_name:4s} {args.threads:3d} threads  {ms:10.3f} ms"
              + (f"  ({variant})" if variant else ""), flush=True)

    def decode_ms(model_name, batch, dtype):
        cfg = make_config(ref, models[model_name])
        gen = torch.Generator().manual_seed(3)
        w = ref.random_weights(cfg, gen, dtype=dtype)
        step = AbsorbedDecode(torch, ref, cfg, w, batch, cache_len, dtype, gen)
        return time_ms(torch, step, args.smoke, args.min_time)

    def prefill_ms(model_name, batch, dtype, attend):
        cfg = make_config(ref, models[model_name])
        gen = torch.Generator().manual_seed(4)
        w = ref.random_weights(cfg, gen, dtype=dtype)
        x = (torch.rand((batch, prefill_len, cfg.E), generator=gen) * 2 - 1).to(dtype)
        tables = ref.rope_tables(cfg, torch.arange(prefill_len), dtype)
        mask = ref.causal_mask(prefill_len, dtype)
        return time_ms(torch, lambda: ref.mla_forward(cfg, w, x, 0, tables=tables, mask=mask,
                                                      attend=attend),
                       args.smoke, args.min_time)

    for dtype_name, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
        for model_name, batch in DECODE:
            report(f"decode/{model_name}/b{batch}/kv{cache_len}", dtype_name,
                   decode_ms(model_name, batch, dtype))
        for model_name, batch in PREFILL:
            name = f"prefill/{model_name}/b{batch}/s{prefill_len}"
            variants = {"eager": None}
            if attend_sdpa is not None:
                variants["sdpa"] = attend_sdpa
            times = {}
            for variant, attend in variants.items():
                times[variant] = prefill_ms(model_name, batch, dtype, attend)
                if len(variants) > 1:
                    report(f"{name}/{variant}", dtype_name, times[variant], variant)
            best = min(times, key=times.get)
            report(name, dtype_name, times[best], best)

    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
            f.write("\n")
    if failures:
        print("FAILED checks: " + ", ".join(failures), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
