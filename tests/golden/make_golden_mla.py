#!/usr/bin/python3
"""Generates the golden files of Multi-head Latent Attention (MLA) that test_golden's
"[mla]" tests compare against.

Run with Debian's python3-torch (1.13):  /usr/bin/python3 tests/golden/make_golden_mla.py
It rewrites tests/golden/data/mla/ (index.txt, one .bin per case, bf16/) deterministically;
commit the result. The test suite itself never needs torch.

The semantics are those of Hugging Face transformers' DeepseekV3Attention.forward
(DeepSeek-V2/V3, Kimi K2) in eval mode without a KV cache, transcribed here (the
transformers package is not needed): mla_forward below. The golden is that math in
float64 on float32 data and float32-rounded config values (what the C++ test passes),
stored as float32:
  q = q_b_proj(RMSNorm(q_a_proj(x))) (or q_proj(x) when q_lora is 0), per head
      [q_nope (dn), q_pe (dr)];
  [c (r), k_pe (dr)] = kv_a_proj_with_mqa(x); k_pe is one per token, shared by the heads;
  [k_nope (dn), v (dv)] per head = kv_b_proj(RMSNorm(c));
  RMSNorm(t) = t * rsqrt(mean(t^2) + eps) * weight, the same eps for both norms;
  RoPE on q_pe and k_pe at position position_offset + i (token i of the call):
      interleaved (halves 0) pairs (x[2t], x[2t+1]), halves (halves 1) pairs
      (x[t], x[t + dr/2]); pair t turned by the angle p * inv_freq[t] and scaled by the
      amplitude A: (a, b) -> (A(a cos - b sin), A(b cos + a sin));
      inv_freq: theta^(-2t/dr), or YaRN's blend (rope_parameters below);
      A: 1, or YaRN's attention factor (get_mscale(f, mscale) / get_mscale(f,
      mscale_all_dim) when both are nonzero, else get_mscale(f, 1));
  scores = scale * (q_nope . k_nope + q_pe . k_pe), scale = (dn + dr)^-0.5, times
      get_mscale(f, mscale_all_dim)^2 under YaRN when mscale_all_dim is nonzero;
  causal within the call (token i sees tokens <= i), softmax, times v, heads
      concatenated [.., H*dv], o_proj. No biases anywhere.

index.txt, one case per line (after '#' comments), whitespace separated:
  name E H q_lora r dn dr dv eps theta halves yarn_factor yarn_orig beta_fast beta_slow
  mscale mscale_all_dim batch seq position_offset
  (q_lora 0: q_proj; yarn_factor 0: plain RoPE; mscale_all_dim 0: absent. Floats are
  printed with repr and the reference uses their float32 values, e.g. float32(0.707).)
<name>.bin: little-endian float32 arrays, concatenated in this order, each only if
  present (PyTorch's [out, in] layout):
  q_proj [H*(dn+dr), E]                       (q_lora 0)
  q_a_proj [q_lora, E], q_a_layernorm [q_lora], q_b_proj [H*(dn+dr), q_lora] (q_lora > 0)
  kv_a_proj_with_mqa [r+dr, E], kv_a_layernorm [r], kv_b_proj [H*(dn+dv), r],
  o_proj [E, H*dv], x [batch, seq, E], out [batch, seq, E].
bf16/<name>.bin: PyTorch's bf16 result on the same data, as a bf16 user of HF's eager
  layer gets it: every weight and x in torch.bfloat16 and every op in bf16 (RMSNorm in
  float32 inside, cast back to bf16 before the bf16 weight multiplies; inv_freq, cos and
  sin in float32, cos and sin cast to bf16; softmax with dtype=torch.float32, then bf16),
  out widened to little-endian float32 (exact).

Weights are uniform in +-g/sqrt(fan_in): g = 3 for the projections of x (RMS 1/sqrt(3))
and sqrt(3) for those of the normed latents, so q, k and v have unit variance; g = 1
for o_proj; the two small-dim cases scale the q projection's g by q_gain (2, 1.5) for
larger scores. The scaled scores then have a standard deviation of about 1.4 to 2 (|s|
up to about 7) and the softmax is far from uniform; the script prints each case's
statistics. RMSNorm weights are uniform in [0.5, 1.5], x in [-1, 1].

Angles: the golden's are exact (float64 inv_freq times the position). HF computes them
in float32, whose rounding of p * inv_freq at p = 5000..7000 (an ulp of 2^-11 rad)
alone moves k2_offset's and v3_long's outputs by 2.6e-5 of their scale, over the test's
1e-5: an implementation must form the angles in double (float32 inv_freq is fine).

The functions below (rope_parameters, softmax_scale, rope_tables, apply_rope, rms_norm,
mla_forward, random_weights) are the reference math once;
bench/attention/mla_torch_baseline.py imports them (its prefill baseline is mla_forward
itself, its absorbed decode is checked against mla_forward by its --smoke run).
"""
import math
import os

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
OUT_DIR = os.path.join(HERE, "data", "mla")
BF16_DIR = os.path.join(OUT_DIR, "bf16")

FIELDS = ("E H q_lora r dn dr dv eps theta halves yarn_factor yarn_orig beta_fast beta_slow "
          "mscale mscale_all_dim batch seq position_offset").split()
FLOAT_FIELDS = {"eps", "theta", "yarn_factor", "beta_fast", "beta_slow", "mscale",
                "mscale_all_dim"}

# The real models' shapes (the first four cases keep r, dn, dr, dv; E and H are cut
# so the files stay small: kv_b_proj alone is H * 0.5 MB).
DEEPSEEK = dict(r=512, dn=128, dr=64, dv=128)
YARN_V3 = dict(yarn_factor=40.0, yarn_orig=4096, beta_fast=32.0, beta_slow=1.0, mscale=1.0,
               mscale_all_dim=1.0)
PLAIN = dict(yarn_factor=0.0, yarn_orig=0, beta_fast=32.0, beta_slow=1.0, mscale=0.0,
             mscale_all_dim=0.0)

CASES = {
    # DeepSeek-V3 / R1: q_lora, YaRN factor 40, mscale 1 / 1.
    "v3": dict(E=64, H=4, q_lora=48, **DEEPSEEK, eps=1e-6, theta=10000.0, halves=0, **YARN_V3,
               batch=2, seq=5, position_offset=0),
    # DeepSeek-V2-Lite: no q_lora, mscale 0.707 / 0.707 (amplitude 1, scale 0.1147).
    "v2lite_offset": dict(E=64, H=2, q_lora=0, **DEEPSEEK, eps=1e-6, theta=10000.0, halves=0,
                          **dict(YARN_V3, mscale=0.707, mscale_all_dim=0.707),
                          batch=1, seq=7, position_offset=3000),
    # Kimi K2: theta 5e4, YaRN factor 32.
    "k2_offset": dict(E=64, H=2, q_lora=48, **DEEPSEEK, eps=1e-5, theta=50000.0, halves=0,
                      **dict(YARN_V3, yarn_factor=32.0),
                      batch=1, seq=6, position_offset=5000),
    # V3 over a longer call far into the sequence.
    "v3_long": dict(E=64, H=2, q_lora=48, **DEEPSEEK, eps=1e-6, theta=10000.0, halves=0,
                    **YARN_V3, batch=1, seq=40, position_offset=7000),
    # Small dims, plain RoPE over halves.
    "plain_halves": dict(E=24, H=3, q_lora=16, r=32, dn=16, dr=8, dv=12, eps=1e-6,
                         theta=10000.0, halves=1, **PLAIN, batch=3, seq=4, position_offset=0,
                         q_gain=2.0),
    # YaRN with mscale but no mscale_all_dim: amplitude get_mscale(16, 1), plain scale.
    "yarn_mscale_only": dict(E=24, H=2, q_lora=0, r=32, dn=8, dr=6, dv=8, eps=1e-6,
                             theta=10000.0, halves=0, yarn_factor=16.0, yarn_orig=128,
                             beta_fast=32.0, beta_slow=1.0, mscale=0.707, mscale_all_dim=0.0,
                             batch=2, seq=5, position_offset=200, q_gain=1.5),
}


class Config:
    """A case's config as the C++ side sees it: the floats rounded to float32."""

    def __init__(self, case):
        for f in FIELDS:
            v = case[f]
            setattr(self, f, float(np.float32(v)) if f in FLOAT_FIELDS else int(v))


def get_mscale(scale, mscale=1.0):
    """HF's yarn get_mscale."""
    if scale <= 1:
        return 1.0
    return 0.1 * mscale * math.log(scale) + 1.0


def rope_parameters(cfg, dtype=torch.float64):
    """(inv_freq [dr/2] in dtype, amplitude A): HF's _compute_default_rope_parameters or
    _compute_yarn_parameters, computed in dtype (HF: torch.float32)."""
    dr, base = cfg.dr, cfg.theta
    pos_freqs = base ** (torch.arange(0, dr, 2, dtype=torch.int64).to(dtype) / dr)
    if not cfg.yarn_factor:
        return 1.0 / pos_freqs, 1.0
    factor = cfg.yarn_factor

    def correction_dim(rotations):
        return (dr * math.log(cfg.yarn_orig / (rotations * 2 * math.pi))) / (2 * math.log(base))

    low = max(math.floor(correction_dim(cfg.beta_fast)), 0)
    high = min(math.ceil(correction_dim(cfg.beta_slow)), dr - 1)
    if low == high:
        high += 0.001
    ramp = torch.clamp((torch.arange(dr // 2, dtype=dtype) - low) / (high - low), 0, 1)
    extrapolation = 1.0 / pos_freqs
    interpolation = 1.0 / (factor * pos_freqs)
    extrapolation_factor = 1 - ramp
    inv_freq = (interpolation * (1 - extrapolation_factor) +
                extrapolation * extrapolation_factor)
    if cfg.mscale and cfg.mscale_all_dim:
        amplitude = get_mscale(factor, cfg.mscale) / get_mscale(factor, cfg.mscale_all_dim)
    else:
        amplitude = get_mscale(factor)
    return inv_freq, amplitude


def softmax_scale(cfg):
    """HF DeepseekV3Attention.scaling."""
    scale = (cfg.dn + cfg.dr) ** -0.5
    if cfg.yarn_factor and cfg.mscale_all_dim:
        scale *= get_mscale(cfg.yarn_factor, cfg.mscale_all_dim) ** 2
    return scale


def rope_tables(cfg, positions, dtype):
    """HF DeepseekV3RotaryEmbedding: (cos, sin) [len(positions), dr] in dtype, the
    angles and their cos/sin in float32 (float64 for dtype float64), times A."""
    up = torch.float64 if dtype == torch.float64 else torch.float32
    inv_freq, amplitude = rope_parameters(cfg, up)
    freqs = positions.to(up)[:, None] * inv_freq[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    return (emb.cos() * amplitude).to(dtype), (emb.sin() * amplitude).to(dtype)


def rotate_half(t):
    half = t.shape[-1] // 2
    return torch.cat((-t[..., half:], t[..., :half]), dim=-1)


def apply_rope(t, cos, sin, halves):
    """HF apply_rotary_pos_emb (halves) or apply_rotary_pos_emb_interleave: the
    interleaved form is de-interleaved first (same dot products)."""
    if not halves:
        *lead, d = t.shape
        t = t.reshape(*lead, d // 2, 2).transpose(-1, -2).reshape(*lead, d)
    return t * cos + rotate_half(t) * sin


def weight_names(cfg):
    """The weights a case stores, in the .bin order."""
    q = ["q_a_proj", "q_a_layernorm", "q_b_proj"] if cfg.q_lora else ["q_proj"]
    return q + ["kv_a_proj_with_mqa", "kv_a_layernorm", "kv_b_proj", "o_proj"]


def weight_shapes(cfg):
    H, E = cfg.H, cfg.E
    return {
        "q_proj": (H * (cfg.dn + cfg.dr), E),
        "q_a_proj": (cfg.q_lora, E),
        "q_a_layernorm": (cfg.q_lora,),
        "q_b_proj": (H * (cfg.dn + cfg.dr), cfg.q_lora),
        "kv_a_proj_with_mqa": (cfg.r + cfg.dr, E),
        "kv_a_layernorm": (cfg.r,),
        "kv_b_proj": (H * (cfg.dn + cfg.dv), cfg.r),
        "o_proj": (E, H * cfg.dv),
    }


def random_weights(cfg, gen, q_gain=1.0, dtype=torch.float32):
    """The case's weights (see the module docstring for the bounds), float32 draws."""
    w = {}
    for name in weight_names(cfg):
        shape = weight_shapes(cfg)[name]
        u = torch.rand(shape, generator=gen, dtype=torch.float32)
        if name.endswith("layernorm"):
            w[name] = 0.5 + u
            continue
        gain = {"o_proj": 1.0, "q_proj": 3.0 * q_gain, "q_a_proj": 3.0,
                "kv_a_proj_with_mqa": 3.0, "q_b_proj": math.sqrt(3) * q_gain}
        w[name] = (u * 2 - 1) * (gain.get(name, math.sqrt(3)) / math.sqrt(shape[1]))
    return {k: v.to(dtype) for k, v in w.items()}


def rms_norm(t, weight, eps):
    """HF DeepseekV3RMSNorm: in float32 inside (float64 for float64), cast back to t's
    dtype before the weight multiplies."""
    up = torch.float64 if t.dtype == torch.float64 else torch.float32
    v = t.to(up)
    v = v * torch.rsqrt(v.pow(2).mean(-1, keepdim=True) + eps)
    return weight * v.to(t.dtype)


def eager_attention(query, key, value, scale, mask):
    """HF eager_attention_forward: [B, H, S, dv]; softmax in float32 (float64 for float64)."""
    up = torch.float64 if query.dtype == torch.float64 else torch.float32
    scores = torch.matmul(query, key.transpose(2, 3)) * scale + mask
    p = torch.nn.functional.softmax(scores, dim=-1, dtype=up).to(query.dtype)
    return torch.matmul(p, value), scores, p


def causal_mask(seq, dtype):
    """HF's additive causal mask: the dtype's lowest value above the diagonal."""
    return torch.full((seq, seq), torch.finfo(dtype).min, dtype=dtype).triu(1)


def mla_forward(cfg, w, x, position_offset, stats=None, tables=None, mask=None, attend=None):
    """HF DeepseekV3Attention.forward (eager, causal, no cache) on x [B, S, E] in x's dtype.
    w: name -> tensor in x's dtype. float64: the reference; bfloat16: HF's bf16 path
    (norms, RoPE tables and softmax in float32 inside, cast back as HF does).
    tables (cos, sin) and mask (the additive causal mask) may be given precomputed
    (HF computes them once per model forward); attend(query, key, value, scale, mask)
    may replace the eager attention (returning its output first)."""
    dt = x.dtype
    F = torch.nn.functional
    B, S, _ = x.shape
    H, dn, dr, dv, r = cfg.H, cfg.dn, cfg.dr, cfg.dv, cfg.r

    if cfg.q_lora:
        q = F.linear(rms_norm(F.linear(x, w["q_a_proj"]), w["q_a_layernorm"], cfg.eps),
                     w["q_b_proj"])
    else:
        q = F.linear(x, w["q_proj"])
    q = q.view(B, S, H, dn + dr).transpose(1, 2)
    q_nope, q_pe = torch.split(q, [dn, dr], dim=-1)
    kv = F.linear(x, w["kv_a_proj_with_mqa"])
    c, k_pe = torch.split(kv, [r, dr], dim=-1)
    kv = F.linear(rms_norm(c, w["kv_a_layernorm"], cfg.eps), w["kv_b_proj"])
    kv = kv.view(B, S, H, dn + dv).transpose(1, 2)
    k_nope, v = torch.split(kv, [dn, dv], dim=-1)
    k_pe = k_pe.reshape(B, 1, S, dr)

    if tables is None:
        tables = rope_tables(cfg, torch.arange(position_offset, position_offset + S), dt)
    cos, sin = tables
    q_pe = apply_rope(q_pe, cos, sin, cfg.halves)
    k_pe = apply_rope(k_pe, cos, sin, cfg.halves).expand(B, H, S, dr)
    query = torch.cat((q_nope, q_pe), dim=-1)
    key = torch.cat((k_nope, k_pe), dim=-1)

    if mask is None:
        mask = causal_mask(S, dt)
    o = (attend or eager_attention)(query, key, v, softmax_scale(cfg), mask)
    if stats is not None:
        _, scores, p = o
        lower = torch.ones(S, S, dtype=torch.bool).tril()
        s = scores[..., lower]
        stats.update(score_std=float(s.std()), score_absmax=float(s.abs().max()),
                     p_max_mean=float(p.max(-1).values[..., 1:].mean()) if S > 1 else 1.0)
    o = o[0] if isinstance(o, tuple) else o
    o = o.transpose(1, 2).reshape(B, S, H * dv)
    return F.linear(o, w["o_proj"])


def check_known_scales():
    """The softmax scales of the real models."""
    def scale(theta, factor, mscale, mscale_all_dim):
        case = dict(E=0, H=0, q_lora=0, **DEEPSEEK, eps=1e-6, theta=theta, halves=0,
                    yarn_factor=factor, yarn_orig=4096, beta_fast=32.0, beta_slow=1.0,
                    mscale=mscale, mscale_all_dim=mscale_all_dim, batch=0, seq=0,
                    position_offset=0)
        return softmax_scale(Config(case))
    for name, got, want in (("DeepSeek-V3", scale(1e4, 40.0, 1.0, 1.0), 0.135234),
                            ("DeepSeek-V2-Lite", scale(1e4, 40.0, 0.707, 0.707), 0.114721),
                            ("Kimi K2", scale(5e4, 32.0, 1.0, 1.0), 0.130861)):
        assert abs(got - want) < 5e-7, (name, got, want)


def make_case(index, name, case):
    cfg = Config(case)
    gen = torch.Generator().manual_seed(2000 + index)
    w = random_weights(cfg, gen, case.get("q_gain", 1.0))
    x = (torch.rand((cfg.batch, cfg.seq, cfg.E), generator=gen, dtype=torch.float32) * 2 - 1)
    stats = {}
    with torch.no_grad():
        out = mla_forward(cfg, {k: v.double() for k, v in w.items()}, x.double(),
                          cfg.position_offset, stats)
        bf = torch.bfloat16
        out16 = mla_forward(cfg, {k: v.to(bf) for k, v in w.items()}, x.to(bf),
                            cfg.position_offset)
    arrays = [w[n] for n in weight_names(cfg)] + [x, out.float()]
    blob = np.concatenate([a.numpy().astype("<f4").ravel() for a in arrays])
    blob.tofile(os.path.join(OUT_DIR, name + ".bin"))
    out16.float().numpy().astype("<f4").ravel().tofile(os.path.join(BF16_DIR, name + ".bin"))
    scale = max(1.0, float(out.abs().max()))
    stats["bf16_err"] = float((out16.double() - out).abs().max()) / scale
    line = " ".join([name] + [repr(float(case[f])) if f in FLOAT_FIELDS else str(case[f])
                              for f in FIELDS])
    return line, blob.nbytes, stats


def main():
    check_known_scales()
    os.makedirs(BF16_DIR, exist_ok=True)
    for folder in (OUT_DIR, BF16_DIR):
        for f in os.listdir(folder):
            if f.endswith(".bin"):
                os.remove(os.path.join(folder, f))
    lines = ["# Generated by tests/golden/make_golden_mla.py with torch " + torch.__version__ +
             "; see the script for the format.",
             "# name " + " ".join(FIELDS)]
    total = 0
    for index, (name, case) in enumerate(CASES.items()):
        line, nbytes, s = make_case(index, name, case)
        lines.append(line)
        total += nbytes
        print(f"{name:18s} {nbytes:8d} bytes  scores std {s['score_std']:.2f} "
              f"max {s['score_absmax']:.2f}  mean max p {s['p_max_mean']:.2f}  "
              f"PyTorch bf16 error {s['bf16_err']:.3g}")
    with open(os.path.join(OUT_DIR, "index.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"{len(CASES)} cases, {total} bytes")


if __name__ == "__main__":
    main()
