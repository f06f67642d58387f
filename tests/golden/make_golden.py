#!/usr/bin/python3
"""Generates the PyTorch golden files that test_golden compares against.

Run with Debian's python3-torch (1.13):  /usr/bin/python3 tests/golden/make_golden.py
It rewrites tests/golden/data/ (index.txt + one .bin per case) deterministically;
commit the result. The test suite itself never needs torch.

Each case builds torch.nn.MultiheadAttention(batch_first=True) in eval mode and
runs it in float64 on float32 data, so a golden is PyTorch's result free of
PyTorch's own float32 rounding; it is stored as float32 (6e-8 relative).
GQA/MQA, which nn.MultiheadAttention cannot express directly, is emulated by
repeating each K/V head's weight rows for its group of query heads; the file
stores the un-repeated weights the library takes.

index.txt, one case per line (after '#' comments):
  name E H kv_heads kdim vdim batch q_len kv_len self bias causal padding additive weights
  self:     1 = key and value are the query (not stored again)
  additive: 0 none, 1 [q_len, kv_len], 2 [batch*H, q_len, kv_len]
  weights:  0 none, 1 per head [batch, H, q_len, kv_len], 2 averaged [batch, q_len, kv_len]
<name>.bin: little-endian float32 arrays, concatenated in this order:
  q_weight [E,E], k_weight [kv_heads*d, kdim], v_weight [kv_heads*d, vdim], out_weight [E,E],
  if bias: q_bias [E], k_bias [kv_heads*d], v_bias [kv_heads*d], out_bias [E],
  query [batch,q_len,E], if not self: key [batch,kv_len,kdim], value [batch,kv_len,vdim],
  if additive: the mask, if padding: key_padding as 0/1 [batch,kv_len],
  out [batch,q_len,E], if weights: the weights.
NaN in out/weights marks rows PyTorch leaves undefined (every key masked); the
library's rule for those rows (zeros) is checked by test_golden separately.
bf16/<name>.bin: PyTorch's bf16 result on the same data, as a bf16 user gets it
(module.to(torch.bfloat16), query/key/value and the additive mask in bf16): out,
then the weights if the case has them, widened to little-endian float32 (exact).
test_golden holds the library's bf16 objects to PyTorch's bf16 error against
the float64 golden.
"""
import copy
import os

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
OUT_DIR = os.path.join(HERE, "data")
BF16_DIR = os.path.join(OUT_DIR, "bf16")

FIELDS = ("E H kv_heads kdim vdim batch q_len kv_len self bias causal padding additive "
          "weights").split()

# name: E, H, kv_heads, kdim, vdim, batch, q_len, kv_len, self, bias, causal, padding,
#       additive, weights (kdim/vdim/kv_heads are the resolved values)
CASES = {
    "self_basic":         (16, 4, 4, 16, 16, 2, 7, 7, 1, 1, 0, 0, 0, 2),
    "self_plain":         (8, 2, 2, 8, 8, 1, 5, 5, 1, 0, 0, 0, 0, 0),
    "cross":              (16, 2, 2, 16, 16, 2, 5, 9, 0, 1, 0, 0, 0, 1),
    "cross_kdim_vdim":    (12, 3, 3, 5, 7, 2, 4, 6, 0, 1, 0, 0, 0, 1),
    "causal_self":        (16, 4, 4, 16, 16, 1, 10, 10, 1, 1, 1, 0, 0, 2),
    "causal_cross":       (8, 2, 2, 8, 8, 2, 4, 9, 0, 1, 1, 0, 0, 1),
    "padding":            (16, 2, 2, 16, 16, 3, 6, 8, 0, 1, 0, 1, 0, 2),
    "additive_2d":        (8, 2, 2, 8, 8, 1, 5, 5, 1, 0, 0, 0, 1, 1),
    "additive_per_head":  (12, 3, 3, 12, 12, 2, 4, 6, 0, 1, 0, 0, 2, 1),
    "additive_neg_inf":   (8, 2, 2, 8, 8, 2, 6, 7, 0, 1, 0, 0, 1, 2),
    "all_masks":          (16, 4, 4, 9, 11, 2, 6, 8, 0, 1, 1, 1, 2, 1),
    "gqa":                (16, 4, 2, 16, 16, 2, 5, 7, 0, 1, 0, 0, 0, 1),
    "mqa_causal":         (24, 6, 1, 24, 24, 1, 8, 8, 1, 1, 1, 0, 0, 2),
    "gqa_kdim_padding":   (16, 8, 4, 10, 3, 2, 5, 6, 0, 1, 0, 1, 0, 1),
    "head_dim_1":         (4, 4, 4, 4, 4, 1, 3, 3, 1, 1, 0, 0, 0, 2),
    "single_token":       (8, 1, 1, 8, 8, 1, 1, 1, 0, 1, 0, 0, 0, 1),
    "longer_causal":      (32, 4, 4, 32, 32, 1, 64, 64, 1, 1, 1, 0, 0, 0),
    "fully_masked_batch": (8, 2, 2, 8, 8, 2, 3, 4, 0, 1, 0, 1, 0, 1),
}


def uniform(gen, shape, bound):
    return (torch.rand(shape, generator=gen, dtype=torch.float32) * 2 - 1) * bound


def make_case(index, name, p):
    c = dict(zip(FIELDS, p))
    E, H, G, kdim, vdim = c["E"], c["H"], c["kv_heads"], c["kdim"], c["vdim"]
    B, L, S, d = c["batch"], c["q_len"], c["kv_len"], c["E"] // c["H"]
    gen = torch.Generator().manual_seed(1000 + index)

    w = {
        "q": uniform(gen, (E, E), E ** -0.5),
        "k": uniform(gen, (G * d, kdim), kdim ** -0.5),
        "v": uniform(gen, (G * d, vdim), vdim ** -0.5),
        "o": uniform(gen, (E, E), E ** -0.5),
    }
    if c["bias"]:
        w["qb"] = uniform(gen, (E,), 0.5)
        w["kb"] = uniform(gen, (G * d,), 0.5)
        w["vb"] = uniform(gen, (G * d,), 0.5)
        w["ob"] = uniform(gen, (E,), 0.5)
    query = uniform(gen, (B, L, E), 1.0)
    key = query if c["self"] else uniform(gen, (B, S, kdim), 1.0)
    value = query if c["self"] else uniform(gen, (B, S, vdim), 1.0)

    additive = None
    if c["additive"]:
        planes = B * H if c["additive"] == 2 else 1
        additive = uniform(gen, (planes, L, S), 2.0)
        if name == "additive_neg_inf":
            # -inf entries like a boolean attn_mask; key 0 stays finite so no
            # row is fully masked.
            drop = torch.rand((planes, L, S), generator=gen) < 0.3
            drop[:, :, 0] = False
            additive[drop] = float("-inf")
        if c["additive"] == 1:
            additive = additive[0]
    padding = None
    if c["padding"]:
        padding = torch.rand((B, S), generator=gen) < 0.3
        padding[:, 0] = False  # no row fully masked by padding alone...
        if name == "fully_masked_batch":
            padding[1, :] = True  # ...except here: batch 1 sees no key at all

    # PyTorch module in float64 with the (repeated, for GQA) weights.
    group = H // G
    rep = lambda t: t.reshape(G, d, *t.shape[1:]).repeat_interleave(group, 0).reshape(
        E, *t.shape[1:])
    m = torch.nn.MultiheadAttention(E, H, bias=bool(c["bias"]), kdim=kdim, vdim=vdim,
                                    batch_first=True).double().eval()
    with torch.no_grad():
        if m._qkv_same_embed_dim:
            m.in_proj_weight.copy_(torch.cat([w["q"], rep(w["k"]), rep(w["v"])]))
        else:
            m.q_proj_weight.copy_(w["q"])
            m.k_proj_weight.copy_(rep(w["k"]))
            m.v_proj_weight.copy_(rep(w["v"]))
        m.out_proj.weight.copy_(w["o"])
        if c["bias"]:
            m.in_proj_bias.copy_(torch.cat([w["qb"], rep(w["kb"]), rep(w["vb"])]))
            m.out_proj.bias.copy_(w["ob"])

        attn_mask = None
        if additive is not None:
            attn_mask = additive.double().clone()
        if c["causal"]:
            i = torch.arange(L).unsqueeze(1)
            j = torch.arange(S).unsqueeze(0)
            causal = torch.zeros(L, S, dtype=torch.float64)
            causal[j > i + (S - L)] = float("-inf")
            attn_mask = causal if attn_mask is None else attn_mask + causal
        out, weights = m(query.double(), key.double(), value.double(),
                         key_padding_mask=padding, need_weights=bool(c["weights"]),
                         attn_mask=attn_mask, average_attn_weights=c["weights"] == 2)
        # The same module and data in bf16, rounded to nearest even as the library rounds.
        bf = torch.bfloat16
        out16, weights16 = copy.deepcopy(m).to(bf)(
            query.to(bf), key.to(bf), value.to(bf), key_padding_mask=padding,
            need_weights=bool(c["weights"]),
            attn_mask=None if attn_mask is None else attn_mask.to(bf),
            average_attn_weights=c["weights"] == 2)

    arrays = [w["q"], w["k"], w["v"], w["o"]]
    if c["bias"]:
        arrays += [w["qb"], w["kb"], w["vb"], w["ob"]]
    arrays.append(query)
    if not c["self"]:
        arrays += [key, value]
    if additive is not None:
        arrays.append(additive)
    if padding is not None:
        arrays.append(padding.float())
    arrays.append(out.float())
    if c["weights"]:
        arrays.append(weights.float())
    blob = np.concatenate([a.numpy().astype("<f4").ravel() for a in arrays])
    blob.tofile(os.path.join(OUT_DIR, name + ".bin"))
    arrays16 = [out16] + ([weights16] if c["weights"] else [])
    blob16 = np.concatenate([a.float().numpy().astype("<f4").ravel() for a in arrays16])
    blob16.tofile(os.path.join(BF16_DIR, name + ".bin"))
    nan_rows = int(torch.isnan(out).any(-1).sum())
    return " ".join([name] + [str(c[f]) for f in FIELDS]), blob.nbytes, nan_rows


def main():
    os.makedirs(BF16_DIR, exist_ok=True)
    for folder in (OUT_DIR, BF16_DIR):
        for f in os.listdir(folder):
            if f.endswith(".bin"):
                os.remove(os.path.join(folder, f))
    lines = ["# Generated by tests/golden/make_golden.py with torch " + torch.__version__ +
             "; see the script for the format.",
             "# name " + " ".join(FIELDS)]
    total = 0
    for index, (name, p) in enumerate(CASES.items()):
        line, nbytes, nan_rows = make_case(index, name, p)
        lines.append(line)
        total += nbytes
        print(f"{name:20s} {nbytes:7d} bytes{f', {nan_rows} NaN rows' if nan_rows else ''}")
    with open(os.path.join(OUT_DIR, "index.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"{len(CASES)} cases, {total} bytes")


if __name__ == "__main__":
    main()
