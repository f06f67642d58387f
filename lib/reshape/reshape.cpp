// Public head split/merge: argument checks and the task split; the copies
// are the per-ISA copy_rows kernels, one call per (token block, head), or
// per token for a split streamed out of cache.
#include <algorithm>
#include <cstdint>
#include <mha/reshape.hpp>

#include "common/aligned.hpp"
#include "common/checked.hpp"
#include "common/error.hpp"
#include "common/parallel.hpp"
#include "dispatch/dispatch.hpp"
#include "reshape/kernels.hpp"

namespace mha::detail {

const ReshapeKernels& reshape_kernels(Isa isa) noexcept {
  static const IsaTables<ReshapeKernels> tables{
      &reshape_kernels_scalar, MHA_IF_BUILT_AVX2(reshape_kernels_avx2),
      MHA_IF_BUILT_AVX512(reshape_kernels_avx512), MHA_IF_BUILT_NEON(reshape_kernels_neon)};
  return tables(isa);
}
namespace {

// From this many floats moved on, the output no longer fits the cache and
// the copies write it with non-temporal stores, which skip the
// read-for-ownership of each destination line (2 instead of 3 bytes of
// memory traffic per byte copied), in the order that keeps every written
// line whole (see streams). Measured (Zen5, B4 S2048 H12 d64,
// 25 MB per tensor, 1 thread, 64-byte-aligned buffers, best of 30, memcpy
// 799 us): split token by token, streamed 613 us, against 1155 us for the
// in-cache blocked order with plain stores and 922 streamed; merge in that
// blocked order, streamed 859 us, against 1104 head by head streamed, 968
// token by token streamed and 1228 blocked with plain stores.
constexpr std::size_t kStreamMinElements = std::size_t{4} << 20;  // 16 MiB

// Whether a call that moves `moved` floats into head rows of dst streams its
// stores: out of cache (kStreamMinElements), and only where the head rows
// (head_dim floats each, at 64-byte-aligned offsets from dst when this
// holds) are whole cache lines. A line that a streamed row shares with a
// plain-stored neighbour leaves the write-combining buffer partial and costs
// a read-modify-write in memory: merge_heads out of cache into a
// 16-byte-aligned std::vector ran at 0.42x memcpy streamed head by head, so
// such calls use plain stores.
bool streams(std::size_t moved, const float* dst, std::size_t head_dim) {
  constexpr std::size_t kLine = 64;
  return moved >= kStreamMinElements && reinterpret_cast<std::uintptr_t>(dst) % kLine == 0 &&
         head_dim * sizeof(float) % kLine == 0;
}

using CopyRows = void (*)(const float*, std::size_t, float*, std::size_t, std::size_t, std::size_t);

struct Shape {
  std::size_t batch, seq, heads, head_dim;
  std::size_t elements;  // batch*seq*heads*head_dim
};

Shape check_shape(const char* fn, std::size_t batch, std::size_t seq, std::size_t heads,
                  std::size_t head_dim, std::size_t parts) {
  const std::size_t e = checked_mul(
      checked_mul(checked_mul(checked_mul(batch, seq, fn), heads, fn), head_dim, fn), parts, fn);
  float_bytes(e, fn);
  return {batch, seq, heads, head_dim, e / parts};
}

// Whether [a, a + na) and [b, b + nb) (in floats) do not intersect, the
// ranges checked as addressable first.
bool disjoint(const float* a, std::size_t na, const float* b, std::size_t nb) {
  const Extent ea{a, addressable(a, na * sizeof(float), "reshape: input or output")};
  const Extent eb{b, addressable(b, nb * sizeof(float), "reshape: input or output")};
  return !overlaps(ea, eb);
}

// Tokens per block: the token-major side of a block (tokens x row floats,
// row = heads*head_dim, or 3x that for split_qkv) stays in L2 while every
// head's piece of it is moved, and each head's side is one contiguous run of
// tokens*head_dim floats. In cache it beats a per-token order, in which
// every store of a token lands seq*head_dim floats from the last (64 KiB
// at d = 32: one L1 set, 4K-aliased against the loads). Measured on Zen5
// (B1 S512, 1 thread, memcpy time / ours, per-token vs blocked): split_qkv
// d = 32 0.18 vs 0.74, d = 64 0.47 vs 0.79; merge d = 32 0.66 vs 0.82;
// split d = 64 0.88 vs 0.96. 3K to 32K-float blocks: within noise of 64K
// (split, merge and split_qkv at d = 64, 1 and 2 threads).
constexpr std::size_t kBlockFloats = 64 * 1024;

// Runs body(b, t0, t1) for every batch row and block of tokens [t0, t1).
// A parallel call gives each thread one contiguous share of the blocks
// (copies give the same result however they are split), so a thread keeps
// touching the same rows call after call, as a split memcpy does: with 16
// blocks dealt out dynamically, 2 threads were no faster than 1 on an
// in-cache merge (B1 S512 H12 d64: 35.9 vs 42.3 us; 28.7 us in two shares).
// `fence`, when the body streams its stores (copy_rows_stream), is the same
// table's stream_fence: each share ends with it, on the thread that made the
// stores.
void for_each_block(const Shape& s, std::size_t row, std::size_t moved, void (*fence)(),
                    FunctionRef<void(std::size_t, std::size_t, std::size_t)> body) {
  const std::size_t tokens = std::max<std::size_t>(8, kBlockFloats / row);
  const std::size_t blocks = ceil_div(s.seq, tokens), total = s.batch * blocks;
  // Threads by the bytes copied, read and written (threads_for), which puts
  // the second thread at 128K floats. Measured (Zen5, quiet, split_heads +
  // merge_heads at H12 d64, best of 3000, 2 threads / 1 thread, always
  // threaded): 25K floats 1.20, 49K 1.19, 98K 1.08, 197K 0.86, 393K 0.63.
  const std::size_t shares =
      std::min(threads_for({0, 2.0 * static_cast<double>(moved * sizeof(float))}), total);
  parallel_for(shares, shares, [&](std::size_t share) {
    for (std::size_t t = total * share / shares; t < total * (share + 1) / shares; ++t) {
      const std::size_t b = t / blocks, t0 = (t % blocks) * tokens;
      body(b, t0, std::min(s.seq, t0 + tokens));
    }
    if (fence != nullptr) fence();
  });
}

// The split of [B, S, H·d] rows read at stride src_ld (H·d for split_heads,
// 3·H·d for one part of split_qkv) into [B, H, S, d]; `moved` is what the
// whole call moves, for the thresholds. In cache: per block, head by head.
// Streamed: token by token, each source row read once front to back and its
// H pieces written to the H outputs with non-temporal stores.
void split_blocks(const Shape& s, const float* x, std::size_t src_ld, float* y, std::size_t moved) {
  const ReshapeKernels& k = reshape_kernels(active_isa());
  const std::size_t seq = s.seq, heads = s.heads, d = s.head_dim;
  if (streams(moved, y, d)) {
    for_each_block(s, heads * d, moved, k.stream_fence,
                   [&](std::size_t b, std::size_t t0, std::size_t t1) {
                     for (std::size_t t = t0; t < t1; ++t) {
                       k.copy_rows_stream(x + (b * seq + t) * src_ld, d,
                                          y + (b * heads * seq + t) * d, seq * d, heads, d);
                     }
                   });
    return;
  }
  for_each_block(s, heads * d, moved, nullptr, [&](std::size_t b, std::size_t t0, std::size_t t1) {
    for (std::size_t h = 0; h < heads; ++h) {
      k.copy_rows(x + (b * seq + t0) * src_ld + h * d, src_ld, y + ((b * heads + h) * seq + t0) * d,
                  d, t1 - t0, d);
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
  split_blocks(s, x, heads * head_dim, y, s.elements);
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
  // Block by block in both cases: each token row of y is written whole
  // within a block, so streamed stores complete their lines.
  const ReshapeKernels& k = reshape_kernels(active_isa());
  const bool streamed = streams(s.elements, y, head_dim);
  const CopyRows copy = streamed ? k.copy_rows_stream : k.copy_rows;
  const std::size_t row = heads * head_dim;
  for_each_block(s, row, s.elements, streamed ? k.stream_fence : nullptr,
                 [&](std::size_t b, std::size_t t0, std::size_t t1) {
                   for (std::size_t h = 0; h < heads; ++h) {
                     copy(x + ((b * heads + h) * seq + t0) * head_dim, head_dim,
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
  const std::size_t part = heads * head_dim, row = 3 * part;
  float* const out[3] = {q, k, v};
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
