// K/V element types as traits (ggml's type traits, per KV type): each entry
// says how K and V are stored, written and cleared, and multiplies a query
// block by a tile of them. An attention object picks its entry once, when it
// is created; the pipeline, the caches and the tile math then call the entry
// and never name a type. Adding a type is one more entry (docs/design.md,
// "Adding a KV element type").
#pragma once

#include <algorithm>
#include <cstddef>
#include <memory>

#include "common/blocks.hpp"
#include "common/prefetch.hpp"
#include "gemm/gemm.hpp"
#include "gemm/gemm_bf16.hpp"
#include "kvquant/format.hpp"

namespace mha::detail {

// The layout of one head-block: the K and V of one kv head for `capacity`
// keys, as the entry lays them out (its layout()). Sizes in bytes, whole
// cache lines.
struct KvLayout {
  std::size_t capacity = 0;
  std::size_t k_bytes = 0, v_bytes = 0;
  std::size_t ldv = 0;      // entry-defined: fp32 floats between V rows
  std::size_t v_strip = 0;  // entry-defined: bf16 elements between V column strips
  // K strips of k_lanes keys where block_layout() narrowed them to a pool
  // block's keys, else 0 (strips of the entry's strip()). Narrowed K is read
  // in place by an entry that spans_blocks(), else gathered (copy_keys).
  std::size_t k_lanes = 0;
  std::size_t key_lanes(std::size_t strip) const { return k_lanes != 0 ? k_lanes : strip; }
};

// One head-block's keys [j0, j0 + n) as a tile of the products: the block's
// K and V and the layout they have (j0 on a strip of the entry). In a paged
// cache the keys from j0 + i = block_keys on run on in the tile's later
// blocks: head-block b of them is (blocks[b] - blocks[0]) head-blocks of
// k_stride (v_stride) bytes from (k, v). Only an entry that spans_blocks()
// is handed such a tile; the others get keys of one head-block.
struct KvTile {
  const KvLayout* layout;
  const void* k;
  const void* v;
  std::size_t j0, n;
  const std::size_t* blocks = nullptr;
  std::size_t block_keys = 0, k_stride = 0, v_stride = 0;
  // Keys of the sequence after the tile's, in its head-block or (paged)
  // later blocks, where prefetches may read.
  std::size_t ahead = 0;

  // The head-block holding key j0 + i (of K, of V), i < n + ahead.
  const char* k_block(std::size_t i) const {
    return static_cast<const char*>(k) + offset(i, k_stride);
  }
  const char* v_block(std::size_t i) const {
    return static_cast<const char*>(v) + offset(i, v_stride);
  }
  // A paged tile's products read block by block in place (the entries that
  // spans_blocks()): f(i, at, r) for keys [i, i + r) of the tile, at index
  // `at` of their block, in runs of at most nr keys that stay in one block
  // and one K strip of `lanes` keys. Where a block starts (or the tile
  // does), the K of the block kPrefetchKeys on (into the next tile's) and
  // this block's V, which P·V reads after the tile's scores, are
  // prefetched, for head-blocks of at most kPrefetchMaxBytes of K: every
  // such block, or (`jumps_only`) only one that does not follow its
  // predecessor in the pool, whose memory the hardware prefetchers do not
  // reach by streaming. b16 kv4096 decode, 1 thread, Zen 4, ms: bf16 blocks
  // of 16 15.3 without, 11.8-12.5 with (contiguous 10.0-10.5); of 256 (32
  // KiB of K, which the hardware prefetchers follow) 11.5-12.0 with,
  // 9.4-9.6 without. A slot's consecutive blocks of 16: bf16 12.2 every
  // block, 17.5 jumps only; fp32 26.7 every block, 22.4 jumps only (median
  // of 6, interleaved). Distances of 2 to 6 blocks of 16 and a cap of 16
  // KiB measured within the noise.
  template <class F>
  void for_each_strip_run(std::size_t nr, std::size_t lanes, bool jumps_only, const F& f) const {
    constexpr std::size_t kPrefetchKeys = 64, kPrefetchMaxBytes = 8192;
    const bool prefetch = layout->k_bytes <= kPrefetchMaxBytes;
    const std::size_t far = std::max<std::size_t>(kPrefetchKeys / block_keys, 1) * block_keys;
    // Whether block b of the tile's (b >= 1) needs a prefetch.
    const auto fetch = [&](std::size_t b) { return !jumps_only || blocks[b] != blocks[b - 1] + 1; };
    for (std::size_t i = 0; i < n;) {
      const std::size_t at = (j0 + i) % block_keys;
      const std::size_t r = std::min({nr, lanes - at % lanes, block_keys - at, n - i});
      if (prefetch && (at == 0 || i == 0)) {
        const std::size_t b = (j0 + i) / block_keys;
        if (i + far < n + ahead && fetch(b + far / block_keys)) {
          prefetch_bytes(k_block(i + far), layout->k_bytes);
        }
        if (b == 0 || fetch(b)) prefetch_bytes(v_block(i), layout->v_bytes);
      }
      f(i, at, r);
      i += r;
    }
  }
  // f(i, at, r) for each block's keys [i, i + r) of the tile, from index
  // `at` of the block: the runs of a P·V product read in place.
  template <class F>
  void for_each_block_run(const F& f) const {
    for (std::size_t i = 0; i < n;) {
      const std::size_t at = (j0 + i) % block_keys, r = std::min(block_keys - at, n - i);
      f(i, at, r);
      i += r;
    }
  }

 private:
  std::ptrdiff_t offset(std::size_t i, std::size_t stride) const {
    return blocks == nullptr ? 0 : block_offset(blocks, j0 + i, block_keys, stride);
  }
};

// The keys of one sequence, every kv head: key j of kv head g lives in
// head-block (block(j) * block_step + g * head_step) of the K and V
// regions, at index local(j) there. Contiguous (a per-call pack, a KV cache row): one block
// `row` holds every key. Paged: key j in pool block blocks[j / block_tokens
// - block0]; keys before block0 * block_tokens were dropped (a sliding
// window) and are never read.
struct KvView {
  void* k = nullptr;
  void* v = nullptr;
  std::size_t len = 0;
  // Head-blocks [block][kv head] in a contiguous cache (block_step: the kv
  // heads, head_step 1), [kv head][block] in a paged pool (block_step 1,
  // head_step: the pool's blocks), so that a slot's consecutive blocks are
  // one run of memory per kv head, which the hardware prefetchers follow:
  // b16 kv4096 decode in blocks of 16, 1 thread, Zen 4, bf16 13.3 -> 11.2
  // ms, fp32 29.0 -> 26.0 (median of 6, interleaved).
  std::size_t block_step = 0, head_step = 1;
  KvLayout layout;  // of every head-block (capacity: keys per block)
  std::size_t row = 0;
  const std::size_t* blocks = nullptr;
  std::size_t block_tokens = 0, block0 = 0;
  // A tree step's row (mha_attention_step_tree): keys from `tail` on are
  // its path, key j at position path[j - tail] of the slot, which the core
  // gathers key by key (no tail: keys are where they are).
  std::size_t tail = static_cast<std::size_t>(-1);
  const std::size_t* path = nullptr;

  // Where key j is: the position the blocks hold it at.
  std::size_t source(std::size_t j) const { return j < tail ? j : path[j - tail]; }
  std::size_t block(std::size_t j) const {
    return blocks == nullptr ? row : blocks[j / block_tokens - block0];
  }
  std::size_t local(std::size_t j) const { return blocks == nullptr ? j : j % block_tokens; }
  // The index of pool block b's head-block of kv head g.
  std::size_t head_block(std::size_t b, std::size_t g) const {
    return b * block_step + g * head_step;
  }
  void* k_block(std::size_t g, std::size_t j) const {
    return static_cast<char*>(k) + head_block(block(j), g) * layout.k_bytes;
  }
  void* v_block(std::size_t g, std::size_t j) const {
    return static_cast<char*>(v) + head_block(block(j), g) * layout.v_bytes;
  }
  // Whether the products can read keys [k0, k1) in place: any tile off a
  // tree's path where the entry spans_blocks(block_tokens) (`spans`), else
  // from a key on a strip of `strip` keys, in one head-block.
  bool in_place(std::size_t k0, std::size_t k1, std::size_t strip, bool spans) const {
    if (blocks == nullptr) return true;
    if (k1 > tail) return false;
    if (spans) return true;
    return local(k0) % strip == 0 && layout.k_lanes == 0 &&
           k0 / block_tokens == (k1 - 1) / block_tokens;
  }
  // Keys [k0, k1) of kv head g, in place (in_place(k0, k1)).
  KvTile tile(std::size_t g, std::size_t k0, std::size_t k1) const {
    KvTile t{&layout, k_block(g, k0), v_block(g, k0), local(k0), k1 - k0};
    t.ahead = len > k1 ? std::min(len, tail) - std::min(k1, tail) : 0;
    if (blocks != nullptr) {
      t.blocks = blocks + (k0 / block_tokens - block0);
      t.block_keys = block_tokens;
      t.k_stride = block_step * layout.k_bytes;
      t.v_stride = block_step * layout.v_bytes;
    }
    return t;
  }
};

// Keys [j, j + n) to keys [to, to + n) as runs that stay inside one strip
// on both sides (of `from` keys at j, of `strip` keys at to): f(a, b, r)
// copies keys [a, a + r) to [b, b + r), lanes of one strip each (a paged
// tile's gather, copy_keys).
template <class F>
void for_each_lane_run(std::size_t j, std::size_t to, std::size_t n, std::size_t from,
                       std::size_t strip, const F& f) {
  for (std::size_t i = 0; i < n;) {
    const std::size_t a = j + i, b = to + i;
    const std::size_t r = std::min({n - i, from - a % from, strip - b % strip});
    f(a, b, r);
    i += r;
  }
}

// V rows of keys [j, j + n) (head_dim floats, ldv apart) to rows [to, to + n)
// of another head-block: copy_keys of the entries whose V is row-major fp32.
inline void copy_value_rows(const KvLayout& from, const void* v, std::size_t j, std::size_t n,
                            const KvLayout& l, void* v_to, std::size_t to, std::size_t d) {
  const auto* vs = static_cast<const float*>(v);
  for (std::size_t i = 0; i < n; ++i) {
    std::copy_n(vs + (j + i) * from.ldv, d, static_cast<float*>(v_to) + (to + i) * l.ldv);
  }
}

// Keys per online-softmax step, before rounding to the kernels' strips. The
// S tile (q_block x key_tile floats) and the K and V tiles (2 x key_tile x
// head_dim) stay in L2 (64 + 128 KiB at head_dim 64), and the P·V product
// gets k = key_tile, long enough to amortize its C-tile loads and stores.
constexpr std::size_t kKeyTile = 256;
// The key tile of g's strips of nr keys.
inline std::size_t key_tile_for(std::size_t nr) {
  return nr > kKeyTile ? nr : kKeyTile / nr * nr;
}

// One K/V element type. Every member is thread-safe and allocates nothing.
class KvType {
 public:
  virtual ~KvType() = default;
  // For mha_kernel_name-like messages and tests.
  virtual const char* name() const = 0;

  // Keys per strip: sequences, blocks and key tiles start on strips.
  virtual std::size_t strip() const = 0;
  // Keys per online-softmax step on contiguous keys (a multiple of strip()).
  virtual std::size_t key_tile() const = 0;
  // Query rows per register tile of the products, which query blocks are
  // made of whole tiles of; 0: the fp32 kernels' (plan_core).
  virtual std::size_t row_tile() const { return 0; }
  // Whether the products read, in place, any key tile (on the key grid) of
  // a pool of block_tokens-key blocks laid out as block_layout(), its keys
  // running on in later blocks (KvTile::blocks); the other entries' tiles
  // that span blocks are gathered into one head-block first.
  virtual bool spans_blocks(std::size_t /*block_tokens*/) const { return false; }
  // Whether a gathered tile's scores are computed block by block on the
  // blocks in place (only V gathered) where they start on strips, rather
  // than on the gathered K.
  virtual bool scores_blocks_in_place() const { return true; }
  // The layout of a head-block for `capacity` keys; throws if it overflows.
  virtual KvLayout layout(std::size_t head_dim, std::size_t capacity) const = 0;
  // The layout of a paged pool's head-block of block_tokens keys: layout()'s,
  // or, for an entry whose K strips would pad a block that is no multiple of
  // strip(), one with K strips narrowed to the block (KvLayout::k_lanes).
  // Such a pool's tiles span blocks (gathered, or read in place where the
  // entry spans_blocks()), and the padding was a third of a bf16 pool of
  // 16-key blocks, read as often as the keys.
  virtual KvLayout block_layout(std::size_t head_dim, std::size_t block_tokens) const {
    return layout(head_dim, block_tokens);
  }

  // Key j (its index in the head-block): head_dim floats of K and of V. The
  // first key of a strip zeroes the strip, and anything else a position
  // past the length shares with j, so such positions read as zero.
  virtual void put(const KvLayout& l, void* k, void* v, std::size_t j, std::size_t head_dim,
                   const float* key, const float* value) const = 0;
  // Keys [j, j + n) from rows ld floats apart: put() for each, or faster
  // with the same result.
  virtual void put_rows(const KvLayout& l, void* k, void* v, std::size_t j, std::size_t n,
                        std::size_t head_dim, const float* key, const float* value,
                        std::size_t ld) const = 0;
  // Key j reads as zero again (a truncated position).
  virtual void clear(const KvLayout& l, void* k, void* v, std::size_t j,
                     std::size_t head_dim) const = 0;
  // Keys [j, j + n) of head-block (k, v), laid out as `from`, become keys
  // [to, to + n) of (k_to, v_to), laid out as `l`, byte for byte as put()
  // wrote them: a key tile of a paged cache gathered from the blocks it
  // spans, so the products see the contiguous cache's operands. Called in
  // key order from key 0 of a scratch head-block; what the products read
  // past the tile's keys (V's slots of a key group) is zero or a copied
  // source's, finite as put() and clear() leave it. k_to null: V alone.
  // Also back from such a head-block into a cache block, in key order (a
  // tree's accepted path), where what it writes past the keys in a V group
  // is rewritten or cleared next.
  virtual void copy_keys(const KvLayout& from, const void* k, const void* v, std::size_t j,
                         std::size_t n, const KvLayout& l, void* k_to, void* v_to, std::size_t to,
                         std::size_t head_dim) const = 0;

  // The products. A task first prepares its query rows once (packed or
  // rounded into `qbuf`, query_floats of them), then per tile:
  //   s = alpha·Q·Kᵀ            scores()
  //   o = P·V + beta·o          values(), P rounded as the type needs into
  //                             `pbuf` (p_floats(rows, tile keys, head_dim))
  // Both give, per element, bits that depend on neither the tile's rows nor
  // its place in the block (the kernels' contract). qbuf is the task's own:
  // scores() may use what query_floats reserves past the prepared rows.
  virtual std::size_t query_floats(std::size_t rows, std::size_t head_dim) const = 0;
  virtual std::size_t p_floats(std::size_t rows, std::size_t keys, std::size_t head_dim) const = 0;
  virtual void prepare_queries(std::size_t rows, std::size_t head_dim, const float* q,
                               std::size_t ldq, float* qbuf) const = 0;
  virtual void scores(std::size_t rows, std::size_t head_dim, float* qbuf, const KvTile& t,
                      float alpha, float* s, std::size_t lds) const = 0;
  virtual void values(std::size_t rows, std::size_t head_dim, const float* p, std::size_t ldp,
                      const KvTile& t, float beta, float* o, std::size_t ldo,
                      float* pbuf) const = 0;
  // Whether values() rounds P to bf16 values (relative 2^-9): the softmax
  // then computes P by its exp2 pass (scale_exp2_sum, 2^-18), with about
  // 70 % of exp's vector instructions.
  virtual bool rounds_p() const { return false; }
  // Whether values() also takes P as bf16 rows rounded to nearest even,
  // pairs complete (round_up(keys, 2) apart, an odd row ending in a zero),
  // from pbuf when p is null: the softmax's exp pass then writes them
  // itself where its kernels can (online_begin_bf16), rather than fp32
  // rows for values() to round.
  virtual bool bf16_p() const { return false; }
  // Per-thread kernel state (an AMX tile configuration), set up by every
  // task before its first product; a no-op for kernels that have none.
  virtual void prepare_thread() const {}
};

// fp32 K and V (kv_fp32.cpp): K as packed Kᵀ strips of g's nr keys, V
// row-major, on g's kernels.
std::unique_ptr<KvType> make_kv_fp32(const GemmKernels& g);
// bf16 K and V (kv_bf16.cpp): both in g16's K-pair layout, on g16's dot
// kernels; key tiles as fp32's on g, rounded to g16's strips.
std::unique_ptr<KvType> make_kv_bf16(const GemmKernels& g, const GemmBf16Kernels& g16);
// As make_kv_bf16 for rows that are both K and V (MLA's latent rows; put()
// keeps the value alone), stored once as V and transposed per score chunk
// on isa's reshape kernels, with the two-copy entry's bits.
std::unique_ptr<KvType> make_kv_bf16_shared(const GemmKernels& g, const GemmBf16Kernels& g16,
                                            Isa isa);
// fp32 rows that are both K and V (MLA's latent rows; put() keeps the
// value alone), stored once and read in place by both products
// (kv_latent.cpp).
std::unique_ptr<KvType> make_kv_latent_fp32(const GemmKernels& g);
// int8 or fp8 E4M3 K and V with scales (kv_quant.cpp, kvquant/format.hpp),
// on isa's kernels, or on bf16 dot products for a bf16 object (g16, its
// bf16 kernels; null on an fp32 object) where kv_quant_dot_kernels has a
// table: the quantized caches' type on any object; `shared`: rows that are
// both K and V, stored once (put() keeps the value alone).
std::unique_ptr<KvType> make_kv_quant(kvq::Code code, Isa isa, const GemmBf16Kernels* g16,
                                      bool shared);

}  // namespace mha::detail
