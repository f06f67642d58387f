// Public head split/merge: argument checks and the task split; the copies
// are the per-ISA copy_rows kernel, one call per (batch, head) slice.
#include <algorithm>
#include <cstdint>
#include <functional>
#include <mha/reshape.hpp>

#include "common/aligned.hpp"
#include "common/error.hpp"
#include "common/parallel.hpp"
#include "dispatch/dispatch.hpp"
#include "reshape/kernels.hpp"

namespace mha::detail {
namespace {

// Below this many floats moved a call stays on the calling thread. Measured
// (Zen5, quiet, split_heads + merge_heads at H12 d64, best of 3000, 2 threads
// / 1 thread, the threshold forced to 0): 25K floats 1.20, 49K 1.19, 98K
// 1.08, 197K 0.86, 393K 0.63.
constexpr std::size_t kParallelMinElements = 1 << 17;
// merge_heads writes with non-temporal stores from this many floats on: its
// output no longer fits the cache, and skipping the read-for-ownership of each
// destination line helps. Measured (B4 S2048 H12 d64, 25 MB, 1 thread, Zen5,
// loaded machine, best of 8): merge 16.5-18.2 ms streamed vs 22-35 ms plain,
// memcpy 16.5 ms. split_heads and split_qkv stay on plain stores: streamed
// they took 33-41 ms vs 16.6-21.5 ms (split) and 142 vs 66-75 ms (qkv).
constexpr std::size_t kStreamMinElements = std::size_t{4} << 20;  // 16 MiB

using CopyRows = void (*)(const float*, std::size_t, float*, std::size_t, std::size_t, std::size_t);

struct Shape {
  std::size_t batch, seq, heads, head_dim;
  std::size_t elements;  // batch*seq*heads*head_dim
};

Shape check_shape(const char* fn, std::size_t batch, std::size_t seq, std::size_t heads,
                  std::size_t head_dim, std::size_t parts) {
  const std::size_t e = checked_mul(
      checked_mul(checked_mul(checked_mul(batch, seq, fn), heads, fn), head_dim, fn), parts, fn);
  checked_mul(e, sizeof(float), fn);
  return {batch, seq, heads, head_dim, e / parts};
}

// Whether [a, a + na) and [b, b + nb) (in floats) do not intersect.
bool disjoint(const float* a, std::size_t na, const float* b, std::size_t nb) {
  const auto pa = reinterpret_cast<std::uintptr_t>(a), pb = reinterpret_cast<std::uintptr_t>(b);
  return pa + na * sizeof(float) <= pb || pb + nb * sizeof(float) <= pa;
}

// Runs body(b, h) for every (batch, head) slice, in parallel: the order for
// sizes past kStreamMinElements (out of cache), as measured there.
void for_each_head(const Shape& s, std::size_t moved,
                   const std::function<void(std::size_t, std::size_t)>& body) {
  const std::size_t tasks = s.batch * s.heads;
  parallel_for(tasks, moved < kParallelMinElements ? 1 : 0,
               [&](std::size_t t) { body(t / s.heads, t % s.heads); });
}

// Tokens per block: the token-major side of a block (tokens x row floats,
// row = heads*head_dim, or 3x that for split_qkv) stays in L2 while every
// head's piece of it is moved, and each head's side is one contiguous run of
// tokens*head_dim floats. Used below kStreamMinElements; it replaced a
// per-token order there, in which every store of a token landed
// seq*head_dim floats from the last (64 KiB at d = 32: one L1 set,
// 4K-aliased against the loads). Measured on Zen5 (B1 S512, 1 thread,
// memcpy time / ours, per-token -> blocked): split_qkv d = 32 0.18 -> 0.74,
// d = 64 0.47 -> 0.79; merge d = 32 0.66 -> 0.82; split d = 64 0.88 ->
// 0.96. 32K-float blocks: within noise of 64K in cache.
constexpr std::size_t kBlockFloats = 64 * 1024;

// Blocks a parallel call is cut into at least (copies give the same result
// however they are split): 7 blocks of 85 tokens (B1 S512 H48 d16) left two
// threads slower than one, 34 -> 40 us.
constexpr std::size_t kMinParallelBlocks = 16;

// Runs body(b, t0, t1) for every batch row and block of tokens [t0, t1),
// in parallel for large sizes.
void for_each_block(const Shape& s, std::size_t row, std::size_t moved,
                    const std::function<void(std::size_t, std::size_t, std::size_t)>& body) {
  const bool parallel = moved >= kParallelMinElements && effective_threads() > 1;
  std::size_t tokens = std::max<std::size_t>(8, kBlockFloats / row);
  if (parallel) {
    const std::size_t per_row = ceil_div(kMinParallelBlocks, s.batch);
    tokens = std::max<std::size_t>(1, std::min(tokens, ceil_div(s.seq, per_row)));
  }
  const std::size_t blocks = ceil_div(s.seq, tokens);
  parallel_for(s.batch * blocks, parallel ? 0 : 1, [&](std::size_t t) {
    const std::size_t b = t / blocks, t0 = (t % blocks) * tokens;
    body(b, t0, std::min(s.seq, t0 + tokens));
  });
}

// The in-cache split of [B, S, H·d] rows read at stride src_ld (H·d for
// split_heads, 3·H·d for one part of split_qkv) into [B, H, S, d]; `moved`
// is what the whole call moves, for the parallel threshold.
void split_blocks(const Shape& s, const float* x, std::size_t src_ld, float* y, std::size_t moved) {
  const CopyRows copy = kernels().reshape->copy_rows;
  const std::size_t seq = s.seq, heads = s.heads, d = s.head_dim;
  for_each_block(s, heads * d, moved, [&](std::size_t b, std::size_t t0, std::size_t t1) {
    for (std::size_t h = 0; h < heads; ++h) {
      copy(x + (b * seq + t0) * src_ld + h * d, src_ld, y + ((b * heads + h) * seq + t0) * d, d,
           t1 - t0, d);
    }
  });
}

}  // namespace
}  // namespace mha::detail

namespace mha {

void split_heads(std::size_t batch, std::size_t seq, std::size_t heads, std::size_t head_dim,
                 const float* x, float* y) {
  using namespace detail;
  const Shape s =
      check_shape("split_heads: batch x seq x heads x head_dim", batch, seq, heads, head_dim, 1);
  if (s.elements == 0) return;
  check_arg(x != nullptr && y != nullptr, "split_heads: x and y must not be null");
  check_arg(disjoint(x, s.elements, y, s.elements),
            "split_heads: y overlaps x (expected disjoint)");
  const CopyRows copy = kernels().reshape->copy_rows;
  const std::size_t row = heads * head_dim;
  if (s.elements >= kStreamMinElements) {
    for_each_head(s, s.elements, [&](std::size_t b, std::size_t h) {
      copy(x + b * seq * row + h * head_dim, row, y + (b * heads + h) * seq * head_dim, head_dim,
           seq, head_dim);
    });
    return;
  }
  split_blocks(s, x, row, y, s.elements);
}

void merge_heads(std::size_t batch, std::size_t seq, std::size_t heads, std::size_t head_dim,
                 const float* x, float* y) {
  using namespace detail;
  const Shape s =
      check_shape("merge_heads: batch x seq x heads x head_dim", batch, seq, heads, head_dim, 1);
  if (s.elements == 0) return;
  check_arg(x != nullptr && y != nullptr, "merge_heads: x and y must not be null");
  check_arg(disjoint(x, s.elements, y, s.elements),
            "merge_heads: y overlaps x (expected disjoint)");
  const ReshapeKernels& k = *kernels().reshape;
  const std::size_t row = heads * head_dim;
  if (s.elements >= kStreamMinElements) {
    for_each_head(s, s.elements, [&](std::size_t b, std::size_t h) {
      k.copy_rows_stream(x + (b * heads + h) * seq * head_dim, head_dim,
                         y + b * seq * row + h * head_dim, row, seq, head_dim);
    });
    return;
  }
  for_each_block(s, row, s.elements, [&](std::size_t b, std::size_t t0, std::size_t t1) {
    for (std::size_t h = 0; h < heads; ++h) {
      k.copy_rows(x + ((b * heads + h) * seq + t0) * head_dim, head_dim,
                  y + (b * seq + t0) * row + h * head_dim, row, t1 - t0, head_dim);
    }
  });
}

void split_qkv(std::size_t batch, std::size_t seq, std::size_t heads, std::size_t head_dim,
               const float* qkv, float* q, float* k, float* v) {
  using namespace detail;
  const Shape s =
      check_shape("split_qkv: 3 x batch x seq x heads x head_dim", batch, seq, heads, head_dim, 3);
  if (s.elements == 0) return;
  check_arg(qkv != nullptr && q != nullptr && k != nullptr && v != nullptr,
            "split_qkv: qkv, q, k and v must not be null");
  check_arg(disjoint(qkv, 3 * s.elements, q, s.elements) &&
                disjoint(qkv, 3 * s.elements, k, s.elements) &&
                disjoint(qkv, 3 * s.elements, v, s.elements),
            "split_qkv: an output overlaps qkv (expected disjoint)");
  check_arg(disjoint(q, s.elements, k, s.elements) && disjoint(q, s.elements, v, s.elements) &&
                disjoint(k, s.elements, v, s.elements),
            "split_qkv: q, k and v overlap each other (expected disjoint)");
  const CopyRows copy = kernels().reshape->copy_rows;
  const std::size_t part = heads * head_dim, row = 3 * part;
  float* const out[3] = {q, k, v};
  if (3 * s.elements >= kStreamMinElements) {
    for_each_head(s, 3 * s.elements, [&](std::size_t b, std::size_t h) {
      const float* src = qkv + b * seq * row + h * head_dim;
      const std::size_t dst = (b * heads + h) * seq * head_dim;
      for (std::size_t p = 0; p < 3; ++p) {
        copy(src + p * part, row, out[p] + dst, head_dim, seq, head_dim);
      }
    });
    return;
  }
  // Each of q, k and v as split_heads of its third of the rows (blocks sized
  // by that third): a third as many blocks, each copy call three times as
  // long as with blocks of whole rows.
  for (std::size_t p = 0; p < 3; ++p) split_blocks(s, qkv + p * part, row, out[p], 3 * s.elements);
}

}  // namespace mha

extern "C" {

MHA_API mha_status mha_split_heads(size_t batch, size_t seq, size_t heads, size_t head_dim,
                                   const float* x, float* y) {
  return mha::detail::guarded([&] { mha::split_heads(batch, seq, heads, head_dim, x, y); });
}

MHA_API mha_status mha_merge_heads(size_t batch, size_t seq, size_t heads, size_t head_dim,
                                   const float* x, float* y) {
  return mha::detail::guarded([&] { mha::merge_heads(batch, seq, heads, head_dim, x, y); });
}

MHA_API mha_status mha_split_qkv(size_t batch, size_t seq, size_t heads, size_t head_dim,
                                 const float* qkv, float* q, float* k, float* v) {
  return mha::detail::guarded([&] { mha::split_qkv(batch, seq, heads, head_dim, qkv, q, k, v); });
}

}  // extern "C"
