#!/usr/bin/python3
"""Generates the PyTorch golden files of the attention modifiers (mha_mods)
that test_golden_mods compares against.

Run with Debian's python3-torch (1.13):  /usr/bin/python3 tests/golden/make_golden_mods.py
It rewrites tests/golden/data/mods/ (index.txt + one .bin per case)
deterministically; commit the result. The test suite never needs torch.

PyTorch 1.13 has no modifiers, so each is expressed with what it has, in
float64 on float32 data:
  RoPE     the script projects Q and K itself (x W^T + b) and rotates them
           (positions: query i at i + kv_len - q_len, key j at j); the module
           then gets identity in-projections and no in-projection bias.
  ALiBi, causal, window
           a per-head additive attn_mask [B*H, L, S]: -slope*(i'-j), -inf.
  sinks    add_zero_attn=True appends a zero key (score 0) with a zero value;
           the mask subtracts sink[h] from every real key's score, which
           leaves the softmax of [scores, sink] unchanged. The weights'
           extra column is dropped.
  lse      torch.logsumexp of the final scores with the sink, by hand.
Soft-capping (tanh before the masks) has no PyTorch counterpart here; the
double oracle covers it.

index.txt, one case per line (after '#' comments):
  name E H kv_heads kdim vdim batch q_len kv_len self causal window alibi sinks
  rope_dim rope_theta rope_interleaved
<name>.bin: little-endian float32 arrays, concatenated in this order:
  q_weight [E,E], k_weight [kv_heads*d, kdim], v_weight [kv_heads*d, vdim], out_weight [E,E],
  q_bias [E], k_bias [kv_heads*d], v_bias [kv_heads*d], out_bias [E],
  if alibi: slopes [H], if sinks: sinks [H],
  query [batch,q_len,E], if not self: key [batch,kv_len,kdim], value [batch,kv_len,vdim],
  out [batch,q_len,E], weights [batch,H,q_len,kv_len], lse [batch*q_len, H].
"""
import math
import os

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
OUT_DIR = os.path.join(HERE, "data", "mods")

FIELDS = ("E H kv_heads kdim vdim batch q_len kv_len self causal window alibi sinks rope_dim "
          "rope_theta rope_interleaved").split()

# name: E, H, kv_heads, kdim, vdim, batch, q_len, kv_len, self, causal, window, alibi, sinks,
#       rope_dim, rope_theta, rope_interleaved
CASES = {
    "rope_halves":        (16, 4, 4, 16, 16, 2, 9, 9, 1, 1, 0, 0, 0, 4, 10000, 0),
    "rope_interleaved":   (16, 2, 2, 6, 5, 2, 4, 9, 0, 0, 0, 0, 0, 8, 100, 1),
    "alibi_causal":       (16, 4, 4, 16, 16, 1, 10, 10, 1, 1, 0, 1, 0, 0, 0, 0),
    "window_causal":      (8, 2, 2, 8, 8, 2, 12, 12, 1, 1, 4, 0, 0, 0, 0, 0),
    "window_cross":       (8, 2, 2, 7, 8, 1, 5, 11, 0, 0, 3, 0, 0, 0, 0, 0),
    "sinks":              (12, 3, 3, 12, 12, 2, 6, 6, 1, 0, 0, 0, 1, 0, 0, 0),
    "all_gqa":            (16, 4, 2, 16, 16, 2, 8, 8, 1, 1, 5, 1, 1, 4, 10000, 0),
    "all_cross_end":      (16, 4, 1, 9, 10, 1, 3, 9, 0, 1, 4, 1, 1, 2, 500, 1),
}


def uniform(gen, shape, bound):
    return (torch.rand(shape, generator=gen, dtype=torch.float32) * 2 - 1) * bound


def rotate(x, heads, d, rope_dim, theta, interleaved, positions):
    """RoPE on [rows, heads*d] float64 rows at the given positions."""
    x = x.clone().reshape(x.shape[0], heads, d)
    half = rope_dim // 2
    t = torch.arange(half, dtype=torch.float64)
    angle = positions.double().unsqueeze(1) * theta ** (-2.0 * t / rope_dim)  # [rows, half]
    c, s = torch.cos(angle).unsqueeze(1), torch.sin(angle).unsqueeze(1)
    i0 = 2 * torch.arange(half) if interleaved else torch.arange(half)
    i1 = i0 + 1 if interleaved else i0 + half
    a, b = x[:, :, i0].clone(), x[:, :, i1].clone()
    x[:, :, i0] = a * c - b * s
    x[:, :, i1] = b * c + a * s
    return x.reshape(x.shape[0], heads * d)


def make_case(index, name, p):
    c = dict(zip(FIELDS, p))
    E, H, G, kdim, vdim = c["E"], c["H"], c["kv_heads"], c["kdim"], c["vdim"]
    B, L, S, d = c["batch"], c["q_len"], c["kv_len"], c["E"] // c["H"]
    gen = torch.Generator().manual_seed(2000 + index)
    w = {
        "q": uniform(gen, (E, E), E ** -0.5),
        "k": uniform(gen, (G * d, kdim), kdim ** -0.5),
        "v": uniform(gen, (G * d, vdim), vdim ** -0.5),
        "o": uniform(gen, (E, E), E ** -0.5),
        "qb": uniform(gen, (E,), 0.5),
        "kb": uniform(gen, (G * d,), 0.5),
        "vb": uniform(gen, (G * d,), 0.5),
        "ob": uniform(gen, (E,), 0.5),
    }
    # Scaled up so that the modifiers change the result visibly.
    query = uniform(gen, (B, L, E), 2.0)
    key = query if c["self"] else uniform(gen, (B, S, kdim), 2.0)
    value = query if c["self"] else uniform(gen, (B, S, vdim), 1.0)
    slopes = torch.tensor([2.0 ** (-8.0 * (h + 1) / H) for h in range(H)], dtype=torch.float32)
    sinks = uniform(gen, (H,), 2.0)

    # Projections by hand in float64, RoPE, then K and V repeated per group.
    q = query.double().reshape(B * L, E) @ w["q"].double().T + w["qb"].double()
    k = key.double().reshape(B * S, kdim) @ w["k"].double().T + w["kb"].double()
    v = value.double().reshape(B * S, vdim) @ w["v"].double().T + w["vb"].double()
    qpos = (torch.arange(L) + S - L).repeat(B)
    kpos = torch.arange(S).repeat(B)
    if c["rope_dim"]:
        q = rotate(q, H, d, c["rope_dim"], c["rope_theta"], c["rope_interleaved"], qpos)
        k = rotate(k, G, d, c["rope_dim"], c["rope_theta"], c["rope_interleaved"], kpos)
    group = H // G
    rep = lambda t: t.reshape(t.shape[0], G, d).repeat_interleave(group, 1).reshape(t.shape[0], E)
    k, v = rep(k), rep(v)

    # Per-head additive mask [B*H, L, S].
    i = (torch.arange(L) + S - L).double().unsqueeze(1)
    j = torch.arange(S).double().unsqueeze(0)
    mask = torch.zeros(H, L, S, dtype=torch.float64)
    if c["alibi"]:
        mask -= slopes.double().reshape(H, 1, 1) * (i - j)
    if c["causal"]:
        mask[:, j.expand(L, S) > i.expand(L, S)] = float("-inf")
    if c["window"]:
        mask[:, j.expand(L, S) <= i.expand(L, S) - c["window"]] = float("-inf")
    scores_mask = mask.clone()
    if c["sinks"]:
        mask -= sinks.double().reshape(H, 1, 1)
    mask = mask.repeat(B, 1, 1)

    m = torch.nn.MultiheadAttention(E, H, bias=True, batch_first=True,
                                    add_zero_attn=bool(c["sinks"])).double().eval()
    with torch.no_grad():
        m.in_proj_weight.copy_(torch.cat([torch.eye(E, dtype=torch.float64)] * 3))
        m.in_proj_bias.zero_()
        m.out_proj.weight.copy_(w["o"])
        m.out_proj.bias.copy_(w["ob"])
        out, weights = m(q.reshape(B, L, E), k.reshape(B, S, E), v.reshape(B, S, E),
                         need_weights=True, attn_mask=mask, average_attn_weights=False)
        weights = weights[..., :S]
        # lse of the final scores, by hand: [B, H, L, S] (+ the sink).
        qh = q.reshape(B, L, H, d).transpose(1, 2)
        kh = k.reshape(B, S, H, d).transpose(1, 2)
        z = qh @ kh.transpose(-1, -2) / math.sqrt(d) + scores_mask
        if c["sinks"]:
            z = torch.cat([z, sinks.double().reshape(1, H, 1, 1).expand(B, H, L, 1)], -1)
        lse = torch.logsumexp(z, -1).transpose(1, 2).reshape(B * L, H)

    arrays = [w["q"], w["k"], w["v"], w["o"], w["qb"], w["kb"], w["vb"], w["ob"]]
    if c["alibi"]:
        arrays.append(slopes)
    if c["sinks"]:
        arrays.append(sinks)
    arrays.append(query)
    if not c["self"]:
        arrays += [key, value]
    arrays += [out.float(), weights.float(), lse.float()]
    blob = np.concatenate([a.numpy().astype("<f4").ravel() for a in arrays])
    blob.tofile(os.path.join(OUT_DIR, name + ".bin"))
    assert not torch.isnan(out).any()
    return " ".join([name] + [str(c[f]) for f in FIELDS]), blob.nbytes


def main():
    os.makedirs(OUT_DIR, exist_ok=True)
    for f in os.listdir(OUT_DIR):
        if f.endswith(".bin"):
            os.remove(os.path.join(OUT_DIR, f))
    lines = ["# Generated by tests/golden/make_golden_mods.py with torch " + torch.__version__ +
             "; see the script for the format.",
             "# name " + " ".join(FIELDS)]
    total = 0
    for index, (name, p) in enumerate(CASES.items()):
        line, nbytes = make_case(index, name, p)
        lines.append(line)
        total += nbytes
        print(f"{name:20s} {nbytes:7d} bytes")
    with open(os.path.join(OUT_DIR, "index.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"{len(CASES)} cases, {total} bytes")


if __name__ == "__main__":
    main()
