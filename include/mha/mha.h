/* mha: fast multi-head attention for CPUs. Public C ABI.
 *
 * Stability: the names, values and struct layouts below are a contract.
 * Functions may be added, and fields may be appended to structs only where
 * the zero value means "off". All sizes are element counts, all matrices are
 * row-major float32, and every function is safe to call from many threads.
 *
 * Errors: every function that can fail returns an mha_status; on failure
 * nothing is written to the outputs, and mha_last_error() returns a message
 * (thread-local, valid until the next failing call on the same thread).
 *
 * Failure atomicity: a call either succeeds or changes nothing: no output
 * element, no handle (*out is written only on success), no KV-cache length
 * or content. Memory is reserved before anything is written; when a worker
 * thread of the library cannot start or runs out of memory, the calling
 * thread finishes its share, so such failures end in MHA_OK or in
 * MHA_OUT_OF_MEMORY with nothing changed, never in an abort. (One case is
 * weaker: if the calling thread, finishing a failed worker's share, runs
 * out of memory too, the status is MHA_OUT_OF_MEMORY but the shares other
 * threads finished are written; a KV cache is still left unchanged.)
 *
 * Sizes: every element count, every byte count and every padded or packed
 * layout the library allocates from the arguments (a KV cache's max_len, a
 * packed B's n rounded up to whole strips) must fit size_t, and each array
 * an argument describes (its (rows - 1) * ld + cols elements) must fit one
 * object (PTRDIFF_MAX bytes) in the address space; otherwise the call fails
 * with MHA_INVALID_ARGUMENT and a message naming the argument. A buffer the
 * library would allocate that exceeds this machine's physical memory is
 * MHA_OUT_OF_MEMORY; KV caches are allocated without being touched, so
 * only the positions reached take memory.
 *
 * Results: an attention object's output rows (and their lse) are a fixed
 * function of the object (its weights, its ISA and compute type), the
 * row's own sequence (its tokens, positions and masks). They do not depend
 * on the thread count, on the
 * other sequences of a batched, ragged or paged call, on how the keys are
 * split across tasks, or on how a prefill is cut into steps: a sequence
 * decoded through mha_attention_step or mha_attention_step_ragged in steps
 * of any sizes gives, bit for bit, the rows of one step over all its tokens,
 * and those of mha_attention_forward_ragged / a causal mha_attention_forward
 * over the same tokens, or on where the cache keeps them: a paged cache's
 * rows equal a contiguous cache's, bit for bit, at every block_tokens.
 * Attention weights (a forward's attn_weights) are computed over
 * whole rows, so a forward that returns them gives its own bits.
 *
 * Overlaps: an output must not share a byte with an input or with another
 * output (the bytes an argument spans follow from its sizes and strides),
 * except where a function allows it below: in-place softmax (x == y with
 * ldx == ldy), and attention whose out is the very array passed as query,
 * key or value. Any other overlap is MHA_INVALID_ARGUMENT. Inputs may
 * overlap each other freely. */
#ifndef MHA_MHA_H
#define MHA_MHA_H

#include <stddef.h>
#include <stdint.h>

#if defined(MHA_STATIC_DEFINE)
#define MHA_API
#elif defined(_WIN32)
#ifdef MHA_BUILDING
#define MHA_API __declspec(dllexport)
#else
#define MHA_API __declspec(dllimport)
#endif
#else
#define MHA_API __attribute__((visibility("default")))
#endif

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
  MHA_OK = 0,
  MHA_INVALID_ARGUMENT = 1,
  MHA_UNSUPPORTED = 2,
  MHA_OUT_OF_MEMORY = 3,
  MHA_INTERNAL = 4
} mha_status;

/* Message for the last failed call on this thread ("" if none). */
MHA_API const char* mha_last_error(void);

/* ---- ISA dispatch and threads ---------------------------------------- */

/* The ISA the kernels run on: "avx512", "avx2", "neon" or "scalar". It is
 * chosen once, at first use: the best the CPU and OS support, unless the
 * environment variable MHA_ISA names one. If MHA_ISA names an ISA that is
 * unknown or unsupported here, this returns "invalid" and every computing
 * call fails with MHA_UNSUPPORTED and a message saying why. */
MHA_API const char* mha_isa_name(void);
/* 1 if this build has kernels for `isa` and this CPU/OS can run them. */
MHA_API int mha_isa_supported(const char* isa);
/* Forces an ISA from now on, for every thread; NULL or "" restores the
 * automatic choice (ignoring MHA_ISA). Calls already running finish on the
 * ISA they started with. MHA_UNSUPPORTED if the CPU lacks it. */
MHA_API mha_status mha_set_isa(const char* isa);

/* Upper bound on the threads a call uses: 0 (the default) means "as many
 * as the caller's oneTBB task_arena allows"; MHA_NUM_THREADS sets the initial
 * value. The effective count is never above the caller's arena concurrency.
 * At 1 the library runs on the calling thread and starts no threads. Results
 * are bit-identical for every thread count. */
MHA_API void mha_set_num_threads(size_t n);
/* The thread count a call made now on this thread would use. */
MHA_API size_t mha_get_num_threads(void);

/* ---- SGEMM ----------------------------------------------------------- */

/* C[m x n] = alpha * op(A) * op(B) + beta * C, row-major (like cblas_sgemm
 * with CblasRowMajor). transa/transb: 'N' (op(X) = X) or 'T' (op(X) = X^T),
 * either case. A is stored m x k ('N', lda >= max(1, k)) or k x m ('T',
 * lda >= max(1, m)); B is k x n ('N', ldb >= max(1, n)) or n x k ('T',
 * ldb >= max(1, k)); ldc >= max(1, n). Pointers may be NULL only for a matrix
 * with no elements. BLAS conventions: m or n == 0 is a no-op; k == 0 or
 * alpha == 0 gives C = beta * C without reading A or B; beta == 0 never reads
 * C (NaN in C is overwritten). Threaded; bit-identical at any thread count.
 * C must not overlap A or B. */
MHA_API mha_status mha_sgemm(char transa, char transb, size_t m, size_t n, size_t k, float alpha,
                             const float* a, size_t lda, const float* b, size_t ldb, float beta,
                             float* c, size_t ldc);

/* op(B) packed once for many products with it (weights). The object records
 * the ISA it was packed for and always multiplies with that ISA's kernels, so
 * it stays valid (and its results unchanged) after mha_set_isa switches the
 * ISA for other calls. Immutable after creation: safe to share across
 * threads. */
typedef struct mha_sgemm_packed_b mha_sgemm_packed_b;

/* Packs op(B) [k x n] (transb, ldb as in mha_sgemm; k and n >= 1). */
MHA_API mha_status mha_sgemm_pack_b(char transb, size_t k, size_t n, const float* b, size_t ldb,
                                    mha_sgemm_packed_b** out);
MHA_API void mha_sgemm_packed_b_destroy(mha_sgemm_packed_b* packed);
/* k and n of a packed B (0 for NULL). */
MHA_API size_t mha_sgemm_packed_b_k(const mha_sgemm_packed_b* packed);
MHA_API size_t mha_sgemm_packed_b_n(const mha_sgemm_packed_b* packed);

/* C[m x n] = alpha * op(A) * B + beta * C (+ bias[j] on every row when bias
 * is not NULL; bias has n elements and is added once, after the product).
 * For m >= 2 bit-identical to mha_sgemm with the same arguments on the same
 * ISA (m == 1 takes mha_sgemm's unpacked GEMV path, which rounds differently).
 * C must not overlap A or bias. */
MHA_API mha_status mha_sgemm_packed(char transa, size_t m, float alpha, const float* a, size_t lda,
                                    const mha_sgemm_packed_b* b, float beta, float* c, size_t ldc,
                                    const float* bias);

/* ---- bf16 GEMM ------------------------------------------------------- */

/* Element types. bf16 values are passed as uint16_t bit patterns: the upper
 * half of the fp32 with the same sign, exponent and top 7 mantissa bits. */
typedef enum {
  MHA_FP32 = 0,
  MHA_BF16 = 1,
  MHA_INT8 = 2, /* for mha_kernel_name only: int8 codes, as W8A8 products use */
  /* Not types: together they make every int value, negative ones too, a
   * valid mha_dtype in C++, so that an unknown value from a caller is an
   * error (MHA_INVALID_ARGUMENT), never undefined behaviour. */
  MHA_DTYPE_MIN_ENUM = -0x7fffffff - 1,
  MHA_DTYPE_MAX_ENUM = 0x7fffffff
} mha_dtype;

/* The kernels that serve `dtype` on this CPU now. For MHA_BF16, chosen
 * from the CPU alone (the same CPU always gets the same kernels, and so the
 * same bits):
 *  - "amx_bf16": AMX-BF16's tile instructions, on x86 CPUs with AMX whose
 *    OS grants this process the tile state;
 *  - "avx512_bf16": AVX512_BF16's vdpbf16ps, on AMD CPUs with it (full rate
 *    there; half the fp32 rate on Intel's);
 *  - "avx512_widen", "avx2_widen": kernels that keep B in bf16 and widen it
 *    to fp32 in registers (other AVX-512 CPUs; AVX2 CPUs);
 *  - "neon_bfmmla": Arm FEAT_BF16's BFMMLA, where the CPU has it;
 *  - "neon_bf16": FEAT_BF16's BFDOT (only when forced, below);
 *  - the ISA name ("neon", "scalar") where bf16 operands are converted to
 *    fp32 whole.
 * The environment variable MHA_BF16_KERNEL=<name>, read once, forces any of
 * these sets that the CPU runs, or "amx_emulated": the amx_bf16 kernels on
 * software tiles, any CPU, at scalar speed, for tests. A name this build or
 * CPU cannot run makes every bf16 computation fail with MHA_UNSUPPORTED and
 * a message listing the names it can. For MHA_INT8, the int8 products'
 * set (chosen from the CPU alone): "amx_int8" (AMX's tdpbusd, blocks of one
 * or two rows on vpdpbusd), "avx512_vnni" (vpdpbusd), "avx_vnni"
 * (AVX-VNNI's vpdpbusd on ymm, on AVX2 CPUs without AVX512_VNNI or under
 * MHA_ISA=avx2), "avx2" (vpmaddwd on int16 codes, which cannot saturate),
 * "neon_i8mm" (SMMLA), "neon_dot" (SDOT) or "scalar". MHA_I8_KERNEL=<name>,
 * read when an object with int8 activations is created, forces any of
 * these that the CPU runs, "amx_emulated" (the amx_int8 kernels on software
 * tiles, any CPU, at scalar speed) or "avx_vnni_evex" (the avx_vnni kernels
 * in AVX512_VNNI's encoding, on AVX512_VNNI CPUs), for tests; every set
 * gives the same bits. A name that
 * cannot run fails those creates with MHA_UNSUPPORTED. For MHA_FP32, the
 * ISA name. "invalid" for an unknown dtype, an unusable MHA_ISA (see
 * mha_isa_name), for MHA_BF16 an unusable MHA_BF16_KERNEL, and for
 * MHA_INT8 an unusable MHA_I8_KERNEL. */
MHA_API const char* mha_kernel_name(mha_dtype dtype);

/* C[m x n] = alpha * op(A) * op(B) + beta * C; A and B are bf16 (uint16_t
 * bit patterns), C and alpha, beta fp32. Same conventions as mha_sgemm
 * (transposes, leading dimensions in elements, NULL only for an empty
 * matrix, k == 0 or alpha == 0 reads neither A nor B, beta == 0 never reads
 * C). Threaded; bit-identical at any thread count on the same kernels.
 * Numerics, by mha_kernel_name(MHA_BF16):
 *  - "avx512_bf16": each element of C is alpha * acc + beta * c (alpha *
 *    acc and beta * c rounded, then their sum), where acc is computed per
 *    block of 1024 k (the sum over blocks passes through C, the later blocks
 *    with beta = 1) exactly as the vdpbf16ps instruction does: acc starts at
 *    0, then for each pair (k0, k0 + 1), in order, acc += a[k0+1]*b[k0+1]
 *    and then acc += a[k0]*b[k0]; every product is exact, every sum is
 *    rounded to nearest even, bf16 denormal inputs count as zero and a
 *    sum below 2^-126 in magnitude before rounding is flushed to zero (its
 *    sign kept): one that would round up to 2^-126 from below becomes 0,
 *    as on Zen 4's hardware. NaN and infinities propagate as in IEEE
 *    arithmetic.
 *  - "avx512_widen", "avx2_widen": the same, in the same order, except that
 *    denormal inputs and sums are kept (IEEE): each step is one fused
 *    multiply-add of an exact product.
 *  - "amx_bf16", "amx_emulated": per block of 1024 k and with alpha and beta
 *    as for "avx512_bf16", acc computed as the tdpbf16ps instruction does,
 *    16 pairs at a time from the block's first (the last group shorter):
 *    per group, two sums start at 0, one adding the even elements' products
 *    a[k0]*b[k0] of its pairs in order, the other the odd ones'; then
 *    acc += (even + odd); every product is exact, every addition rounded to
 *    nearest even, bf16 denormal inputs count as zero and every result
 *    below 2^-126 in magnitude before rounding is flushed to zero (its sign
 *    kept), as x86's flush-to-zero mode decides: a sum that would round up
 *    to 2^-126 from below becomes 0. This order differs from vdpbf16ps's,
 *    so the bits differ from "avx512_bf16"'s. Checked against the hardware
 *    bit for bit over 768,000 outputs, denormal inputs and exponents from
 *    2^-27 to 2^23 included, and on that rounding case, not on NaN or
 *    infinity inputs (which propagate, with an unspecified NaN payload).
 *  - "neon_bf16": per block of 1024 k and with alpha and beta as for
 *    "avx512_bf16", but each step adds a whole pair, as the BFDOT
 *    instruction does (FEAT_EBF16's FPCR.EBF = 0): acc += (a[k0]*b[k0] +
 *    a[k0+1]*b[k0+1]), where both products, their sum and the addition to
 *    acc are each rounded to odd (toward zero, then the last bit set if
 *    inexact: within one ulp, not half), a magnitude of 2^128 or more
 *    becomes infinity, bf16 denormal inputs count as zero, a result below
 *    2^-126 is flushed to zero and every NaN result is the default NaN
 *    (0x7fc00000).
 *  - "neon_bfmmla": the bits of "neon_bf16". BFMMLA multiplies a 2 x 4
 *    block of A by a 4 x 2 block of B, and per output adds pair (k0, k0+1)
 *    and then pair (k0+2, k0+3) exactly as two BFDOT steps do (the Arm
 *    ARM's BFMatMulAdd with FPCR.EBF = 0, checked against qemu's BFMMLA bit
 *    for bit); where k ends inside a group of 4, A's missing pair is -0
 *    and B's zero, whose products add -0, which leaves acc as it is.
 *  - an ISA name: A and B are converted to fp32 exactly (denormals kept)
 *    and multiplied as mha_sgemm does on that ISA (its summation order).
 * All of them agree with the exact product within (k + 4) * FLT_EPSILON *
 * (|alpha| * sum |a||b| + |beta * c|) per element, apart from denormal
 * effects. */
MHA_API mha_status mha_gemm_bf16(char transa, char transb, size_t m, size_t n, size_t k,
                                 float alpha, const uint16_t* a, size_t lda, const uint16_t* b,
                                 size_t ldb, float beta, float* c, size_t ldc);

/* bf16 op(B) packed once for many products with it (weights), for the
 * kernels that serve bf16 when it is packed (mha_kernel_name(MHA_BF16)),
 * which it keeps, as mha_sgemm_packed_b keeps its ISA. Immutable after
 * creation: safe to share across threads. */
typedef struct mha_gemm_bf16_packed_b mha_gemm_bf16_packed_b;

/* Packs bf16 op(B) [k x n] (transb, ldb as in mha_gemm_bf16; k, n >= 1). */
MHA_API mha_status mha_gemm_bf16_pack_b(char transb, size_t k, size_t n, const uint16_t* b,
                                        size_t ldb, mha_gemm_bf16_packed_b** out);
MHA_API void mha_gemm_bf16_packed_b_destroy(mha_gemm_bf16_packed_b* packed);
/* k and n of a packed B (0 for NULL). */
MHA_API size_t mha_gemm_bf16_packed_b_k(const mha_gemm_bf16_packed_b* packed);
MHA_API size_t mha_gemm_bf16_packed_b_n(const mha_gemm_bf16_packed_b* packed);

/* C[m x n] = alpha * op(A) * B + beta * C with A of type a_type: MHA_BF16
 * (a points to uint16_t) or MHA_FP32 (a points to float, rounded to bf16
 * first as mha_fp32_to_bf16 does). transa, lda as in mha_gemm_bf16. The
 * bits of mha_gemm_bf16 with that bf16 A on the kernels B was packed for
 * (for m >= 2 where those are an ISA's fp32 kernels: there m == 1 takes
 * mha_sgemm's GEMV path, which rounds differently). */
MHA_API mha_status mha_gemm_bf16_packed(char transa, size_t m, float alpha, mha_dtype a_type,
                                        const void* a, size_t lda, const mha_gemm_bf16_packed_b* b,
                                        float beta, float* c, size_t ldc);

/* y[i] = x[i] rounded to bf16, to nearest even (a NaN stays a NaN, made
 * quiet; values past the largest bf16 round to infinity), for i < n. */
MHA_API mha_status mha_fp32_to_bf16(size_t n, const float* x, uint16_t* y);
/* y[i] = x[i] as fp32 (exact), for i < n. */
MHA_API mha_status mha_bf16_to_fp32(size_t n, const uint16_t* x, float* y);

/* ---- Softmax and head reshape ---------------------------------------- */

/* Options of mha_softmax. A zero-initialised struct switches everything off
 * (plain softmax). */
typedef struct {
  float scale;             /* z = x * scale (+ additive); 0 means 1. Finite. */
  const float* additive;   /* NULL, or an additive mask [rows x cols] added after scaling
                              (-inf masks a column) */
  size_t additive_ld;      /* row stride of additive (>= cols), or 0: row 0 for every row */
  int causal;              /* nonzero: row i keeps only columns j <= i + causal_offset */
  ptrdiff_t causal_offset; /* e.g. kv_len - q_len for a query block at the end */
  const size_t* valid_len; /* NULL, or [rows]: row i keeps only columns j < valid_len[i] */
} mha_softmax_options;

/* Row-wise softmax of row-major x [rows x cols] (row stride ldx >= cols)
 * into y (row stride ldy >= cols); opt may be NULL (all off):
 *   y[i][j] = exp(z[i][j] - max) / sum over kept j of exp(z[i][j] - max),
 *   z = x * scale + additive, for kept columns; y[i][j] = 0 for the others.
 * Kept columns: those allowed by causal and valid_len (both prefix limits).
 * Rules: a row with no kept column, or whose kept z are all -inf, is all 0;
 * a row whose kept z contain NaN or +inf (including x*scale overflowing) is
 * NaN at every kept column and 0 elsewhere (masked x are never read).
 * In place (x == y, ldx == ldy) is allowed; any other overlap of y with x,
 * with additive or with valid_len is an error.
 * Accuracy: exp within 2 ulp; each output within a few ulp plus the rounding
 * of z (|z - max| * 2^-24 relative). Rows run in parallel for large inputs;
 * the result is bit-identical for any thread count. */
MHA_API mha_status mha_softmax(size_t rows, size_t cols, const float* x, size_t ldx, float* y,
                               size_t ldy, const mha_softmax_options* opt);

/* x [batch, seq, heads*head_dim] -> y [batch, heads, seq, head_dim]. y must
 * not overlap x (likewise for mha_merge_heads). */
MHA_API mha_status mha_split_heads(size_t batch, size_t seq, size_t heads, size_t head_dim,
                                   const float* x, float* y);
/* x [batch, heads, seq, head_dim] -> y [batch, seq, heads*head_dim]. */
MHA_API mha_status mha_merge_heads(size_t batch, size_t seq, size_t heads, size_t head_dim,
                                   const float* x, float* y);
/* qkv [batch, seq, 3*heads*head_dim] (per token: q, then k, then v, each
 * heads*head_dim) -> q, k, v each [batch, heads, seq, head_dim], in one pass.
 * Outputs must not overlap the input or each other. */
MHA_API mha_status mha_split_qkv(size_t batch, size_t seq, size_t heads, size_t head_dim,
                                 const float* qkv, float* q, float* k, float* v);

/* ---- Multi-head attention -------------------------------------------- */

typedef struct {
  size_t embed_dim;    /* E; E % num_heads == 0 */
  size_t num_heads;    /* H */
  size_t kdim, vdim;   /* feature sizes of key and value inputs; 0 means E */
  size_t num_kv_heads; /* 0 means H; smaller values (dividing H) give GQA/MQA */
} mha_config;

typedef struct {           /* PyTorch nn.MultiheadAttention layout: [out_features, in_features] */
  const float* q_weight;   /* [E, E] */
  const float* k_weight;   /* [kv_heads*head_dim, kdim] */
  const float* v_weight;   /* [kv_heads*head_dim, vdim] */
  const float* out_weight; /* [E, E] */
  const float *q_bias, *k_bias, *v_bias, *out_bias; /* each may be NULL (no bias) */
} mha_weights;

typedef struct {
  int causal;                       /* query i sees key j iff j <= i + (kv_len - q_len) */
  const unsigned char* key_padding; /* NULL or [batch, kv_len]; nonzero = key ignored */
  const float* additive;            /* NULL, or added to the scaled scores: [q_len, kv_len],
                                       or [batch*H, q_len, kv_len] if additive_per_head */
  int additive_per_head;
} mha_mask;

typedef struct mha_attention mha_attention; /* opaque; packs the weights at create */

MHA_API mha_status mha_attention_create(const mha_config* config, const mha_weights* weights,
                                        mha_attention** out);
MHA_API void mha_attention_destroy(mha_attention* attn);

/* How an object stores its projection weights (mha_attention_options). */
typedef enum {
  MHA_WEIGHTS_COMPUTE = 0, /* in the compute type: fp32, or bf16 (below) */
  MHA_WEIGHTS_INT8 = 1,    /* int8 codes, an fp32 scale per output row and group (below) */
  MHA_WEIGHTS_INT4 = 2,    /* int4 codes (-8..7), an fp32 scale per row and group */
  MHA_WEIGHTS_UINT4 = 3,   /* uint4 codes (0..15), an fp32 scale and zero point per row and group */
  /* Not formats: every int value is a valid mha_weight_format in C++ (see
   * mha_dtype); an unknown one is MHA_INVALID_ARGUMENT. */
  MHA_WEIGHT_FORMAT_MIN_ENUM = -0x7fffffff - 1,
  MHA_WEIGHT_FORMAT_MAX_ENUM = 0x7fffffff
} mha_weight_format;

/* What an object's projections do with their inputs (mha_attention_options). */
typedef enum {
  MHA_ACTIVATIONS_FLOAT = 0, /* weight-only: codes widened to fp32 (below) */
  MHA_ACTIVATIONS_INT8 = 1,  /* each input row quantized to int8 per token (W8A8, below) */
  /* Not modes: every int value is valid in C++ (see mha_dtype); an unknown
   * one is MHA_INVALID_ARGUMENT. */
  MHA_ACTIVATIONS_MIN_ENUM = -0x7fffffff - 1,
  MHA_ACTIVATIONS_MAX_ENUM = 0x7fffffff
} mha_activations;

/* Options of mha_attention_create_ex; later versions append fields.
 * struct_size: sizeof(mha_attention_options) as the caller compiled it.
 * Earlier versions' structs are still accepted, their fields read and the
 * rest taken as zero: the first, { struct_size, compute } (16 bytes on
 * 64-bit targets), and the second, up to weight_group (24 bytes). Any other
 * size is MHA_INVALID_ARGUMENT. */
typedef struct {
  size_t struct_size;
  mha_dtype compute;               /* MHA_FP32 (the default) or MHA_BF16 */
  mha_weight_format weight_format; /* MHA_WEIGHTS_COMPUTE (the default) */
  /* Input features per scale (and zero point) of a quantized format: 0 (one
   * group, the whole row), 32, 64 or 128. Must be 0 for MHA_WEIGHTS_COMPUTE. */
  size_t weight_group;
  /* MHA_ACTIVATIONS_FLOAT (the default), or MHA_ACTIVATIONS_INT8 with
   * weight_format MHA_WEIGHTS_INT8, _INT4 or _UINT4, per row or in groups
   * (MHA_WEIGHTS_COMPUTE: MHA_INVALID_ARGUMENT). */
  mha_activations activations;
} mha_attention_options;

/* mha_attention_create with options (NULL: all defaults, which is
 * mha_attention_create). Every call on the object (forward, step, ragged,
 * paged, mods) works as on an fp32 one, with fp32 inputs and outputs.
 * Quantized weights, weight_format MHA_WEIGHTS_INT8, _INT4 or _UINT4, with
 * compute MHA_FP32 or MHA_BF16:
 *  - each of the four matrices is quantized per output row and group of
 *    weight_group input features (the last group of a row may be shorter),
 *    each group by itself: int8 and int4 symmetric, scale = max|w| / 127
 *    (int8) or / 7 (int4), an fp32 division, code = w / scale rounded to
 *    the nearest integer (ties to even) and clamped to [-127, 127] or
 *    [-7, 7]; uint4 over [lo, hi] = [min(w, 0), max(w, 0)], scale =
 *    (hi - lo) / 15, zero point = -lo / scale rounded (ties to even) and
 *    clamped to [0, 15], code = w / scale rounded, plus the zero point,
 *    clamped to [0, 15]. A group whose scale is 0 (all zero, or a scale
 *    that underflows) gets zero codes and zero point 0. A NaN or infinite
 *    weight is MHA_INVALID_ARGUMENT, naming it;
 *  - the object stores the codes (a byte per weight, or half a byte) and
 *    4 bytes of scale (and 4 of zero point) per row and group: for rows of
 *    2048, 0.25x the fp32 weights' bytes in int8, 0.133x in int4 with
 *    groups of 128, 0.141x in uint4;
 *  - each product widens a weight to fp32 as (code - zero point) * scale
 *    (the difference exact, one rounding) and then multiplies as the fp32
 *    object does: the results are bit-identical to an fp32 object created
 *    with those widened weights, on every path and at any thread count;
 *  - with MHA_BF16, those fp32 products are the projections, and Q, K (after
 *    RoPE, if any) and V are rounded to bf16 where they enter the bf16
 *    attention core (below); the merged heads enter the output projection
 *    unrounded. Bit-identical at any thread count.
 * int8 activations (W8A8, W4A8), activations MHA_ACTIVATIONS_INT8, with
 * compute MHA_FP32 or MHA_BF16:
 *  - the weights are quantized as above, int8, int4 or uint4, per row or in
 *    groups (or their codes given: mha_attention_create_int8, _blocks and
 *    _checkpoint);
 *  - each projection quantizes each of its input rows (the query, key and
 *    value rows, and the merged heads) by itself: s_a = max|x| / 127 (an
 *    fp32 division), q = x / s_a rounded to nearest even and clamped to
 *    [-127, 127]; a row whose s_a is 0 gets zero codes; a row holding NaN
 *    or an infinity gets s_a = NaN, so its outputs are NaN;
 *  - the product sums q * code (uint4: q * (code - zero point)) exactly in
 *    int32 (input widths up to 131072). int8 per row: y = float(sum) *
 *    (s_a * s_w) + bias; in groups, or int4 or uint4: t = 0, then
 *    t = fma(float(sum over group g), s_w[g], t) for each group in order,
 *    and y = t * s_a + bias; each operation rounded to
 *    nearest even in the order written: the same bits on every kernel set
 *    (mha_kernel_name(MHA_INT8)) and at any thread count;
 *  - the attention core is the compute type's, as below: with MHA_BF16,
 *    Q, K and V are rounded to bf16 where they enter it.
 * compute = MHA_BF16, numerics of this version:
 *  - the four weight matrices are stored in bf16, rounded to nearest even
 *    at create (mha_fp32_to_bf16); the biases stay fp32;
 *  - each projection is a bf16 product (mha_gemm_bf16_packed with an fp32
 *    A: its input rows rounded to bf16, fp32 accumulation, as
 *    mha_kernel_name(MHA_BF16) says), then the bias added in fp32;
 *  - Q, K (after RoPE, if any) and V are rounded to bf16 before the
 *    attention core, and the merged heads where they enter the output
 *    projection;
 *  - where mha_kernel_name(MHA_BF16) names bf16 kernels (all but an ISA
 *    name), the core computes Q·Kᵀ and P·V on them, with K and V
 *    stored in bf16 (per call, and in an mha_kv_cache) and each P row
 *    rounded to bf16 (nearest even) as the online softmax produces it,
 *    its weights computed by a base-2 exp within 3e-6 relative (plus
 *    the argument's rounding, (|z| + the row's max |z|) * 1.2e-7) before
 *    that rounding;
 *    the softmax, its running sums and the output accumulate in fp32, and
 *    scores and P·V sum exact products as that kernel's GEMM does (ragged
 *    forwards and mha_paged_kv_cache too, whose blocks then hold bf16);
 *  - elsewhere the core runs in fp32 on the rounded values (each score and
 *    each P·V term an exact product summed in fp32, P not rounded), and the
 *    caches hold the rounded K and V in fp32 storage;
 *  - the kernels are chosen at create (mha_kernel_name(MHA_BF16) then);
 *  - results are bit-identical at any thread count.
 * Against the double-precision result on the bf16-rounded weights, the
 * output's error is a few units of bf16's 2^-8 relative precision. */
MHA_API mha_status mha_attention_create_ex(const mha_config* config, const mha_weights* weights,
                                           const mha_attention_options* options,
                                           mha_attention** out);

/* int8 weights given as codes (a pre-quantized checkpoint: per-channel
 * symmetric int8 as GPTQ, AWQ or OpenVINO store it, with fp16 or bf16
 * scales widened to fp32, which is exact): each matrix's codes in
 * mha_weights' layout and one scale per output row, weight = code * scale.
 * The biases stay fp32. */
typedef struct {
  size_t struct_size;                                       /* sizeof(mha_int8_weights) */
  const int8_t *q_codes, *k_codes, *v_codes, *out_codes;    /* as q_weight ... */
  const float *q_scales, *k_scales, *v_scales, *out_scales; /* [E], [kv], [kv], [E] */
  const float *q_bias, *k_bias, *v_bias, *out_bias;         /* each may be NULL */
} mha_int8_weights;

/* An object on int8 weights given as codes: the object that
 * mha_attention_create_ex with weight_format MHA_WEIGHTS_INT8 makes from
 * weights whose quantization gives these codes and scales, bit for bit.
 * Every code is valid, -128 included; a scale that is NaN or infinite is
 * MHA_INVALID_ARGUMENT, naming it. options: NULL, or compute MHA_FP32 or
 * MHA_BF16 with weight_format MHA_WEIGHTS_INT8 and weight_group 0 (others:
 * MHA_INVALID_ARGUMENT). */
MHA_API mha_status mha_attention_create_int8(const mha_config* config,
                                             const mha_int8_weights* weights,
                                             const mha_attention_options* options,
                                             mha_attention** out);

/* llama.cpp's (GGUF's) quantized block formats, numbered as GGML numbers
 * its types; each block covers 32 consecutive weights of a row. */
typedef enum {
  /* 18 bytes: an fp16 scale d, then 16 bytes whose byte j holds weight j
   * (low nibble) and weight j + 16 (high nibble), weight = (nibble - 8) * d */
  MHA_BLOCKS_Q4_0 = 2,
  /* 34 bytes: an fp16 scale d, then 32 int8 codes, weight = code * d */
  MHA_BLOCKS_Q8_0 = 8,
  /* Not formats: every int value is valid in C++ (see mha_dtype); an
   * unknown one is MHA_INVALID_ARGUMENT. */
  MHA_BLOCK_FORMAT_MIN_ENUM = -0x7fffffff - 1,
  MHA_BLOCK_FORMAT_MAX_ENUM = 0x7fffffff
} mha_block_format;

/* The four matrices in one block format, as a GGUF file stores a tensor
 * [rows, in]: each row's in / 32 blocks, rows back to back (q: [E, E], k
 * and v: [kv_heads*head_dim, kdim or vdim], out: [E, E]); every input width
 * must be a multiple of 32. The biases stay fp32. */
typedef struct {
  size_t struct_size; /* sizeof(mha_block_weights) */
  mha_block_format format;
  const void *q_blocks, *k_blocks, *v_blocks, *out_blocks;
  const float *q_bias, *k_bias, *v_bias, *out_bias; /* each may be NULL */
} mha_block_weights;

/* An object on weights given as llama.cpp's blocks, read as they are: Q8_0
 * is MHA_WEIGHTS_INT8 and Q4_0 MHA_WEIGHTS_INT4 (codes nibble - 8, -8
 * included), each in groups of 32 with the block's scale widened to fp32
 * (exact); the object is the one mha_attention_create_ex makes with that
 * format and weight_group 32 from weights whose quantization gives these
 * codes and scales, bit for bit. options: NULL (fp32 compute, weight-only),
 * or with weight_format naming the blocks' format and weight_group 32, and
 * the compute type and activations of mha_attention_create_ex (others:
 * MHA_INVALID_ARGUMENT). A scale that is NaN or infinite is
 * MHA_INVALID_ARGUMENT, naming the block. */
MHA_API mha_status mha_attention_create_blocks(const mha_config* config,
                                               const mha_block_weights* weights,
                                               const mha_attention_options* options,
                                               mha_attention** out);

/* 4-bit checkpoints with zero points, as GPTQ's and AWQ's safetensors hold
 * a linear layer of `in` input and `out` output features (PyTorch's weight
 * [out, in]) in groups of `group` input features, G = ceil(in / group) (1
 * with group 0). Weight = (code - zero point) * scale, each code 0..15. */
typedef enum {
  /* AutoGPTQ's (quantize_config checkpoint_format "gptq", the default):
   * qweight int32 [in / 8, out], input feature 8i + t of output j in bits
   * 4t .. 4t + 3 of qweight[i][j]; qzeros int32 [G, out / 8], output
   * 8i + t's stored zero in bits 4t .. 4t + 3 of qzeros[g][i], the zero
   * point being the stored value plus 1 (so 1..16) */
  MHA_CHECKPOINT_GPTQ = 0,
  /* GPTQModel's "gptq_v2": GPTQ's layout, the zero point as stored (0..15) */
  MHA_CHECKPOINT_GPTQ_V2 = 1,
  /* AutoAWQ's GEMM layout: qweight int32 [in, out / 8], output 8j + t of
   * input feature i in bits 4u .. 4u + 3 of qweight[i][j], u = {0, 4, 1, 5,
   * 2, 6, 3, 7}[t]; qzeros int32 [G, out / 8] in the same order, the zero
   * point as stored */
  MHA_CHECKPOINT_AWQ = 2,
  /* Not layouts: every int value is valid in C++ (see mha_dtype); an
   * unknown one is MHA_INVALID_ARGUMENT. */
  MHA_CHECKPOINT_MIN_ENUM = -0x7fffffff - 1,
  MHA_CHECKPOINT_MAX_ENUM = 0x7fffffff
} mha_checkpoint_layout;

/* One linear layer's tensors, as the checkpoint names them. */
typedef struct {
  const int32_t* qweight;
  const int32_t* qzeros;
  const uint16_t* scales; /* [G, out], IEEE fp16 bits, as stored */
  /* GPTQ only (AWQ's must be NULL): NULL, or [in], input feature p's
   * group, each group holding `group` features (the last one the rest):
   * g_idx[p] == p / group (desc_act=False), or act order (desc_act=True),
   * where the object takes the features in group order, each group's in
   * ascending order, gathering each input row so before the product */
  const int32_t* g_idx;
  const float* bias; /* [out], or NULL */
} mha_checkpoint_matrix;

/* The four projections (q_proj: in E, out E; k_proj and v_proj: in kdim or
 * vdim, out kv_heads*head_dim; o_proj: in E, out E). Every in and out must
 * be a multiple of 8. */
typedef struct {
  size_t struct_size; /* sizeof(mha_checkpoint_weights) */
  mha_checkpoint_layout layout;
  size_t group; /* 32, 64 or 128, or 0 (GPTQ's group_size -1: whole rows) */
  mha_checkpoint_matrix q, k, v, out;
} mha_checkpoint_weights;

/* An object on a GPTQ or AWQ checkpoint's codes, read as they are: the
 * object that mha_attention_create_ex makes with weight_format
 * MHA_WEIGHTS_UINT4 and weight_group `group` from weights whose
 * quantization gives these codes, zero points and scales (widened from
 * fp16, exactly), bit for bit; a GPTQ zero point of 16, which create never
 * makes, gives the widened weights' bits as well (weight-only: the fp32
 * object's on them). With act order, that object's weights are the layer's
 * in group order, and its results those on input rows gathered alike.
 * options: NULL (fp32 compute, weight-only), or weight_format
 * MHA_WEIGHTS_UINT4 and weight_group `group` with the compute type and
 * activations of mha_attention_create_ex (int8 activations included;
 * others: MHA_INVALID_ARGUMENT). A scale that is NaN or infinite, or a
 * g_idx group of the wrong size, is MHA_INVALID_ARGUMENT, naming it. */
MHA_API mha_status mha_attention_create_checkpoint(const mha_config* config,
                                                   const mha_checkpoint_weights* weights,
                                                   const mha_attention_options* options,
                                                   mha_attention** out);

/* out = MultiheadAttention(query, key, value), PyTorch semantics (eval mode,
 * batch_first=True), except that a query row whose keys are all masked gets
 * zero weights and a zero attention output for that head (PyTorch: NaN).
 *
 * Non-finite values: one rule per (query row i, head h), on every path (with
 * or without weights, however the keys are split, and in mha_attention_step),
 * the rule of mha_softmax. Row i keeps key j unless causal or key_padding
 * masks it; masked keys' scores are never read. A kept score is
 * z = scale * q_i.k_j + additive[i][j] (q, k projected; NaN or inf in the
 * query or key inputs gives NaN or inf scores, inf*0 and inf-inf being NaN; a
 * finite q.k that overflows is +inf). If a kept z is NaN or +inf (a NaN or
 * +inf additive entry included), the row is NaN: that head's attention output,
 * and so, after the output projection, the whole row i of out, are NaN; its
 * weights are NaN at the kept keys and 0 at the masked ones (averaged weights:
 * NaN if any head's are). Otherwise a -inf z (a -inf additive entry, say) gets
 * weight 0, and a row whose kept z are all -inf is zero, as above. As in
 * mha_softmax and PyTorch, z is formed before the -inf of an additive entry
 * can mask it: a NaN or +inf score plus -inf is NaN. Value rows are not
 * screened: NaN or inf in value reaches out through weights*V (0*NaN is NaN)
 * and may make NaN any row of out that reads it, even with weight 0.
 *
 * Denormals: on x86 the attention core runs with denormal results flushed
 * to zero (MXCSR's FTZ, set for its work and restored after it), as each
 * costs Intel cores a microcode assist: a weight times a value that falls
 * below 2^-126 adds zero, on every path alike.
 *
 * Overlaps: out may be the very array passed as query, key or value (it is
 * written after they are read), but must not otherwise overlap them or the
 * mask; attn_weights must not overlap out, query, key, value or the mask. */
MHA_API mha_status mha_attention_forward(const mha_attention* attn, size_t batch, size_t q_len,
                                         size_t kv_len, const float* query, /* [batch, q_len, E] */
                                         const float* key,     /* [batch, kv_len, kdim] */
                                         const float* value,   /* [batch, kv_len, vdim] */
                                         const mha_mask* mask, /* NULL = no mask */
                                         float* out,           /* [batch, q_len, E]     */
                                         float* attn_weights,  /* NULL, or [batch, H, q_len, kv_len]
                                             ([batch, q_len, kv_len] when average_weights) */
                                         int average_weights);

/* ---- Attention modifiers (models beyond BERT/GPT-2) ------------------ */

/* Options of mha_attention_forward_mods and mha_attention_step_mods. Zero
 * (apart from struct_size) switches every modifier off; the result is then
 * bit-identical to mha_attention_forward / mha_attention_step.
 *
 * struct_size: sizeof(mha_mods) as the caller compiled it. Fields may be
 * appended in later versions; a later library reads fields past struct_size
 * as zero (off). This version accepts exactly sizeof(mha_mods): a larger size
 * comes from a newer header whose extra fields it cannot honour, and a
 * smaller one from no version, so both are MHA_INVALID_ARGUMENT.
 *
 * Positions. Query row i of a forward (0 <= i < q_len) has position
 * i' = i + kv_len - q_len (aligned to the end of the keys, as the causal mask;
 * negative when q_len > kv_len), key j has position j. In a step, new token t
 * has position length + t (its position in the cache) for its query and key.
 *
 * Per (batch row, head h, query i, key j), in this order:
 *   1. q, k projected; if rope_dim: their first rope_dim features rotated
 *      (RoPE) at their positions (q at i', k at j; K is cached rotated);
 *   2. z = scale * q.k (scale = 1/sqrt(head_dim));
 *   3. if softcap: z = softcap * tanh(z / softcap) (so +-inf -> +-softcap);
 *   4. z += -alibi_slopes[h] * (i' - j) (if alibi_slopes)
 *         + the mask's additive entry (if any); ALiBi's term is formed in
 *         float against the visible key that the slope favours (i' for a
 *         causal row and a slope >= 0), the row's sink and lse shifted to
 *         match: the same softmax, with small terms where the weight is;
 *   5. masks: key j is dropped if key_padding masks it, if causal (mask or
 *      mods) and j > i', or if window and j <= i' - window;
 *   6. softmax over the kept keys with the sink: with s = sinks[h] (or no
 *      term without sinks), p_j = exp(z_j) / (sum over kept k of exp(z_k) +
 *      exp(s)); out = sum_j p_j v_j. attn_weights are these p_j (a row sums to
 *      less than 1 with a sink), 0 at dropped keys.
 * The non-finite rule of mha_attention_forward applies to the final z of the
 * kept keys; a row with no kept key is zero (weights and output), sink or not.
 *
 *   causal           nonzero: as mha_mask.causal (either one turns it on).
 *   window           0: none; else query i' sees only keys j > i' - window
 *                    (the last `window` positions up to i' when causal). Any
 *                    value. The fused path skips key tiles outside every
 *                    row's window: O(q_len * window) work per head.
 *   alibi_slopes     NULL, or [num_heads] finite slopes (ALiBi).
 *   softcap          0: off; else finite > 0 (Gemma 2: 50).
 *   sinks            NULL, or [num_heads] finite logits (gpt-oss attention sinks).
 *   rope_dim         0: off; else even and <= head_dim.
 *   rope_theta       base of the frequencies, 0 means 10000; else finite > 0.
 *                    Pair t (0 <= t < rope_dim/2) of a row at position p is
 *                    rotated by the angle p * rope_theta^(-2t/rope_dim),
 *                    computed in double (cos and sin rounded once to float).
 *   rope_interleaved 0: pair t is features (t, t + rope_dim/2) (GPT-NeoX,
 *                    LLaMA in the Hugging Face layout); 1: features (2t, 2t+1)
 *                    (GPT-J). Other values are rejected. A pair (x, y)
 *                    becomes (x cos - y sin, y cos + x sin).
 *   lse              NULL, or out [rows, num_heads] with rows = batch*q_len
 *                    (forward) or batch*n_new (step), row-major by (row, h):
 *                    log(sum over kept k of exp(z_k) + exp(s)), the
 *                    log-sum-exp of the row's final scores. -inf for a row
 *                    with no kept key and no sink, s for one with a sink,
 *                    NaN for a NaN row. Two results o1, o2 over disjoint key
 *                    sets (without sinks, or the sink in one part only)
 *                    merge as o = (e^(lse1-M) o1 + e^(lse2-M) o2) /
 *                    (e^(lse1-M) + e^(lse2-M)), M = max(lse1, lse2), per
 *                    head before the output projection; the two weights sum
 *                    to 1 and the projection is affine, so with one head they
 *                    merge mha's `out` rows directly (up to rounding). */
typedef struct mha_mods {
  size_t struct_size;
  int causal;
  size_t window;
  const float* alibi_slopes;
  float softcap;
  const float* sinks;
  size_t rope_dim;
  float rope_theta;
  int rope_interleaved;
  float* lse;
} mha_mods;

/* mha_attention_forward with modifiers (mask may be NULL; mods may be NULL,
 * which is mha_attention_forward). attn_weights and average_weights as there. */
MHA_API mha_status mha_attention_forward_mods(const mha_attention* attn, size_t batch, size_t q_len,
                                              size_t kv_len, const float* query, const float* key,
                                              const float* value, const mha_mask* mask,
                                              const mha_mods* mods, float* out, float* attn_weights,
                                              int average_weights);

/* ---- Ragged batches -------------------------------------------------- */

/* Sequences packed back to back, with no padding between them. */
typedef struct {
  size_t struct_size; /* sizeof(mha_ragged) */
  size_t num_seqs;
  const size_t* q_start;  /* [num_seqs + 1]: sequence s owns query/out rows
                             q_start[s] .. q_start[s+1]-1 */
  const size_t* kv_start; /* [num_seqs + 1] for key/value rows, or NULL: the same as q_start */
} mha_ragged;

/* Attention over sequences packed back to back: each sequence attends only
 * to its own keys, as mha_attention_forward_mods with batch 1 on that
 * sequence (no mask, the same mods), and so as a padded batch with
 * key_padding on each sequence's missing rows. Projections run over all rows at once; no work is
 * spent on padding, because there is none. query/out [q_start[num_seqs], E], key
 * [kv_start[num_seqs], kdim], value [kv_start[num_seqs], vdim]. Empty sequences are allowed and
 * produce nothing (a sequence with queries but no keys gets a zero attention output, so its rows of
 * out are out_bias). Offsets must start at 0 and never decrease (MHA_INVALID_ARGUMENT naming the
 * offending entry); query/key/value/out may be NULL only where they have no
 * rows. mods: NULL, or any modifiers (mha_mods), each sequence on its own:
 * its last query aligned with its last key, positions (RoPE, ALiBi, window)
 * counted from 0 in each sequence, lse [q_start[num_seqs], num_heads] by
 * packed row. Bit-identical at any thread count. */
MHA_API mha_status mha_attention_forward_ragged(const mha_attention* attn, const mha_ragged* seqs,
                                                const float* query, const float* key,
                                                const float* value, const mha_mods* mods,
                                                float* out);

/* ---- KV cache for incremental decoding ------------------------------- */

/* Projected keys and values of every position decoded so far, for `batch`
 * sequences of up to `max_len` positions each, stored in the layout the
 * attention kernels read (a step never repacks the cache). All batch rows
 * advance together. A cache belongs to the attention object it was created
 * for and must not be used after that object is destroyed. Steps on one cache
 * must not run concurrently; different caches may step concurrently on one
 * mha_attention. */
typedef struct mha_kv_cache mha_kv_cache;

/* The cache's memory (its padded layout for max_len positions) is reserved
 * here but not touched, so a generous max_len costs address space, not
 * memory; MHA_OUT_OF_MEMORY if it exceeds physical memory. */
MHA_API mha_status mha_kv_cache_create(const mha_attention* attn, size_t batch, size_t max_len,
                                       mha_kv_cache** out);
MHA_API void mha_kv_cache_destroy(mha_kv_cache* cache);
/* Positions held (the same for every batch row); 0 for NULL. */
MHA_API size_t mha_kv_cache_length(const mha_kv_cache* cache);
/* Drops positions >= len (len <= length), e.g. to reject speculative tokens;
 * len = 0 empties the cache. */
MHA_API mha_status mha_kv_cache_truncate(mha_kv_cache* cache, size_t len);

/* One decoding step: projects n_new tokens per batch row, appends their keys
 * and values to the cache, and attends the new queries causally over the
 * whole cache (new token t sees positions <= length + t). The result equals
 * mha_attention_forward over the whole sequence with a causal mask, for the
 * rows of the new tokens, non-finite rule included: e.g. a NaN in a token's
 * query makes its row of out NaN, and a NaN in its key makes NaN its own row
 * and those of every later token of that batch row, in this step and later
 * ones, until truncated away. n_new > 1 is a chunked prefill.
 *   query [batch, n_new, E], key [batch, n_new, kdim], value [batch, n_new, vdim],
 *   out   [batch, n_new, E].
 * Fails with MHA_INVALID_ARGUMENT, changing nothing, if length + n_new > max_len.
 * out may be the very array passed as query, key or value, but must not
 * otherwise overlap them. A failed step (MHA_OUT_OF_MEMORY included) leaves
 * the cache's length and contents as they were. */
MHA_API mha_status mha_attention_step(const mha_attention* attn, mha_kv_cache* cache, size_t n_new,
                                      const float* query, const float* key, const float* value,
                                      float* out);

/* mha_attention_step with modifiers (mods may be NULL: mha_attention_step).
 * mods->causal is implied. Positions are cache positions (see mha_mods); the
 * cache stores K after RoPE, so every step on one cache must use the same
 * rope_dim, rope_theta and rope_interleaved, and the result then equals
 * mha_attention_forward_mods over the whole sequence with mods->causal set,
 * for the rows of the new tokens (lse included: [batch*n_new, H]). With a
 * window a step reads only the window's keys, but the cache still keeps every
 * position up to max_len (there is no ring buffer). */
MHA_API mha_status mha_attention_step_mods(const mha_attention* attn, mha_kv_cache* cache,
                                           size_t n_new, const float* query, const float* key,
                                           const float* value, const mha_mods* mods, float* out);

/* ---- Quantized KV caches --------------------------------------------- */

/* What a cache stores its keys and values in. */
typedef enum {
  /* What the object's core reads: fp32, or bf16 on a bf16 object whose
   * core runs on bf16 kernels (mha_attention_create_ex). */
  MHA_KV_DEFAULT = 0,
  /* Symmetric int8 codes (-127..127) with scales. */
  MHA_KV_INT8 = 1,
  /* OCP FP8 E4M3FN codes (max 448, no infinities) with scales. */
  MHA_KV_FP8_E4M3 = 2,
  /* Not types; as mha_dtype's: an unknown value is MHA_INVALID_ARGUMENT. */
  MHA_KV_DTYPE_MIN_ENUM = -0x7fffffff - 1,
  MHA_KV_DTYPE_MAX_ENUM = 0x7fffffff
} mha_kv_dtype;

/* Options of mha_kv_cache_create_ex and mha_kv_cache_create_paged_ex; later
 * versions append fields. struct_size: exactly sizeof(mha_kv_cache_options),
 * else MHA_INVALID_ARGUMENT. */
typedef struct {
  size_t struct_size; /* sizeof(mha_kv_cache_options) */
  mha_kv_dtype dtype; /* MHA_KV_DEFAULT */
} mha_kv_cache_options;

/* Quantized caches (MHA_KV_INT8, MHA_KV_FP8_E4M3), on fp32 and bf16 objects
 * alike, numerics of this version:
 *  - a key and a value are quantized once, when their token enters the
 *    cache (K after RoPE), per (token, kv head, group of 32 channels; the
 *    last group of a head_dim that is not a multiple of 32 is shorter),
 *    with a bf16 scale per group and each code x / scale rounded to nearest
 *    even, saturating at +-127 or +-448. E4M3: the scale is max|x| / 448
 *    rounded up (nothing saturates). int8: of max|x| / 127 rounded up and
 *    the six bf16 values from just below max|x| / 128 up, the scale whose
 *    codes have the least squared error of the group (bf16's coarse steps
 *    would otherwise cost 2 % of RMS error against fp16 scales; the search
 *    gains 6 %);
 *  - a group holding a NaN or an infinity stores a NaN scale: its values
 *    read as NaN, and the non-finite rule of mha_attention_forward follows
 *    (a key's NaN makes NaN every row that keeps it; a value's, the rows
 *    that read it);
 *  - on an fp32 object, attention is computed as if K and V were the
 *    dequantized values (code * scale, exact in fp32), each score and each
 *    P·V term an fp32 product summed in fp32 in a fixed order (one fused
 *    multiply-add chain per element over the channels, or over the keys),
 *    the same bits on every ISA, at any thread count, in a paged or a
 *    contiguous cache; Q and P are not rounded. So is it on a bf16 object,
 *    except where its bf16 kernels are vdpbf16ps's (mha_kernel_name
 *    "avx512_bf16", AMD's CPUs by default; on Intel's CPUs vdpbf16ps runs at
 *    half the fp32 FMA's rate) and the CPU has AVX512_VBMI: there the codes
 *    meet bf16 operands in vdpbf16ps, at twice the multiply-adds of fp32
 *    FMAs. Q is rounded to bf16 (nearest even, as for the bf16 cache);
 *    a score is, per group of 32 channels in order, the group's pairs of
 *    q · code summed from 0 in vdpbf16ps's order and rounding (denormals
 *    flushed, channels padded to a multiple of 4 with zeros), times the
 *    group's key scale added to the running total by one fused
 *    multiply-add; P·V multiplies p' = p · the value group's scale, rounded
 *    to bf16 (one more rounding of P, 2^-9 relative; P itself, as for the
 *    bf16 cache, from an exp accurate to 2^-18), by the codes, summed
 *    over pairs of keys in vdpbf16ps's order. The same bits at any thread
 *    count, chunking and block size, those of a scalar emulation;
 *    MHA_BF16_KERNEL=avx512_widen gives the fp32 products instead;
 *  - storage per token and kv head (head_dim d, g = ceil(d / 32) groups),
 *    int8 and E4M3 alike: K d + 2g bytes, V 34g (its channels padded to
 *    whole groups); 136 in all at d = 64 and 272 at d = 128, against 4d
 *    for bf16 and 8d for fp32.
 * Against attention on unquantized K and V, the output's RMS error measured
 * 0.94-1.02x that of llama.cpp's q8_0 cache for int8, and 0.62-0.95x that
 * of an E4M3 cache with one scale per token and head for fp8, on fp32 and
 * bf16 objects, the latter on vdpbf16ps (docs/performance.md, "Quantized KV
 * caches"). */

/* As mha_kv_cache_create and mha_kv_cache_create_paged, with options (NULL:
 * the defaults, which are exactly what the plain creators make). Neither
 * writes *out on failure. */
MHA_API mha_status mha_kv_cache_create_ex(const mha_attention* attn, size_t batch, size_t max_len,
                                          const mha_kv_cache_options* options, mha_kv_cache** out);

/* Bytes of storage the cache reserves (values and scales; 0 for NULL), for
 * sizing pools. */
MHA_API size_t mha_kv_cache_bytes(const mha_kv_cache* cache);

/* ---- Paged KV cache for continuous batching -------------------------- */

/* Projected keys and values of `num_slots` independent sequences (one per
 * request), each with its own length, held in a pool of `num_blocks` blocks
 * of `block_tokens` positions. A slot takes blocks from the pool as it grows
 * and gives them back when reset or truncated, so a short sequence uses only
 * the blocks its length needs (memory: about 2·num_blocks·block_tokens·
 * kv_heads·head_dim floats, half that where a bf16 object's core runs on
 * bf16 kernels, as a contiguous cache per token at any even block_tokens;
 * a block's pages are touched when first used).
 * Any block_tokens works and gives the contiguous
 * cache's bits. The kernels read a key tile (256 keys, rounded down to the
 * kernels' strips) in place, across the blocks it spans, on the int8,
 * fp8 and fp32 caches where block_tokens is a multiple of 16, and on a bf16
 * object's bf16 cache where it is even (a multiple of 4 on BFMMLA) on the
 * vdpbf16ps, widening, BFDOT and BFMMLA kernels; elsewhere (fp32 caches
 * at other block sizes, the AMX tiles, MLA's fp32 and bf16 latent caches)
 * in place only where block_tokens is a multiple of the tile, and a tile
 * that spans blocks is first copied into the task's scratch (whole strips
 * at once where block_tokens is a multiple of the strip, 16 or 32 keys,
 * else by runs of keys: such a block holds its keys in one strip of its
 * own width). Decode reads a slot's blocks fastest where they follow one
 * another in the pool: a fresh pool hands its blocks out in order, and a
 * freed slot's blocks are handed out again in its order, so a step that
 * appends many positions to one slot (a prefill chunk) gets a run of them.
 * Same ownership and threading rules as mha_kv_cache. */
typedef struct mha_paged_kv_cache mha_paged_kv_cache;

MHA_API mha_status mha_kv_cache_create_paged(const mha_attention* attn, size_t num_slots,
                                             size_t block_tokens, size_t num_blocks,
                                             mha_paged_kv_cache** out);
MHA_API void mha_paged_kv_cache_destroy(mha_paged_kv_cache* cache);
/* mha_kv_cache_create_paged with options (see mha_kv_cache_create_ex). */
MHA_API mha_status mha_kv_cache_create_paged_ex(const mha_attention* attn, size_t num_slots,
                                                size_t block_tokens, size_t num_blocks,
                                                const mha_kv_cache_options* options,
                                                mha_paged_kv_cache** out);
/* Bytes of storage the pool reserves (values and scales; 0 for NULL). */
MHA_API size_t mha_paged_kv_cache_bytes(const mha_paged_kv_cache* cache);
/* Positions held by `slot` (0 for NULL or a slot out of range). */
MHA_API size_t mha_kv_cache_slot_length(const mha_paged_kv_cache* cache, size_t slot);
/* Blocks in the pool that no slot holds (0 for NULL); a block forked slots
 * share is held once. */
MHA_API size_t mha_kv_cache_free_blocks(const mha_paged_kv_cache* cache);
/* Empties `slot` and returns its blocks to the pool (a finished request);
 * the other slots are untouched and the slot can take a new request. */
MHA_API mha_status mha_kv_cache_reset_slot(mha_paged_kv_cache* cache, size_t slot);
/* Drops the slot's positions >= len (len <= its length; 0, or >= the first
 * position it holds after a windowed step dropped earlier ones), returning
 * blocks it no longer needs. A block the slot keeps but shares with another
 * slot (mha_kv_cache_fork_slot) is copied first: MHA_OUT_OF_MEMORY, changing
 * nothing, if no block is free for that. */
MHA_API mha_status mha_kv_cache_truncate_slot(mha_paged_kv_cache* cache, size_t slot, size_t len);
/* Slot dst (empty) becomes slot src's first len positions (len <= src's
 * length; 0, or >= the first position src holds), sharing its whole blocks:
 * n samples or beams of one prompt, a system prompt prefilled once, a
 * conversation forked. Shared blocks are counted, never copied, and go back
 * to the pool with their last slot; a partial last block is copied (one
 * block from the pool: MHA_OUT_OF_MEMORY, changing nothing, if none is
 * free). No slot ever writes a block another one holds, so every later step,
 * truncate or reset of either slot gives, bit for bit, what it gives on an
 * unshared copy of the same positions. MHA_INVALID_ARGUMENT, changing
 * nothing, for a slot out of range, dst == src, a non-empty dst, or a len
 * out of range. Allocates dst's block table (MHA_OUT_OF_MEMORY). */
MHA_API mha_status mha_kv_cache_fork_slot(mha_paged_kv_cache* cache, size_t src, size_t dst,
                                          size_t len);
/* Key chunks (per kv head) that the last successful step on this cache
 * computed once for several of its slots (0 for NULL): cascade decode, seen.
 * Keys are reduced in chunks of 512 from position 0 (the key grid of
 * mha_attention_step_ragged), so a chunk that the decode rows (one new
 * token) of several slots read from the same blocks (forked slots) has the
 * same partial softmax for each of them, whichever rows compute it. A step
 * computes each such chunk, before every slot's new token, once for all
 * those rows, their queries stacked: K and V are read once, and the
 * products run on a block of rows rather than one per slot. The result is
 * bit for bit that of unshared slots. Not with a window or ALiBi (each row's
 * own position term); a slot that brings more than one token (a prefill
 * chunk in the same step) reads its keys itself. */
MHA_API size_t mha_kv_cache_shared_chunks(const mha_paged_kv_cache* cache);

/* One step of continuous batching over any `num` distinct slots: sequence i
 * brings q_start[i+1] - q_start[i] new tokens (0 allowed; 1 is a decode
 * step, more a (chunked) prefill), packed back to back:
 *   query/out [q_start[num], E], key [q_start[num], kdim],
 *   value [q_start[num], vdim].
 * Projects all rows at once, appends each sequence's keys and values to its
 * slot, and attends its new tokens causally over the slot's whole history
 * (new token t of a slot holding L positions sees positions <= L + t): the
 * result equals mha_attention_forward with a causal mask over the slot's
 * whole sequence, for the rows of the new tokens.
 * If the pool lacks the blocks the step needs, it fails with
 * MHA_OUT_OF_MEMORY and changes nothing (no slot's length or contents, no
 * output); reset a finished slot and retry. MHA_INVALID_ARGUMENT, changing
 * nothing, for a slot out of range or given twice, offsets that do not start
 * at 0 or decrease, or a slot that would outgrow the whole pool. A step
 * allocates nothing once each slot's block table has reached its largest
 * size. */
MHA_API mha_status mha_attention_step_ragged(const mha_attention* attn, mha_paged_kv_cache* cache,
                                             size_t num, const size_t* slots, const size_t* q_start,
                                             const float* query, const float* key,
                                             const float* value, float* out);

/* mha_attention_step_ragged with modifiers (mods may be NULL:
 * mha_attention_step_ragged). mods->causal is implied; positions are cache
 * positions, so the result equals mha_attention_forward_mods over each
 * slot's whole sequence with mods->causal set, for the rows of its new
 * tokens (lse [q_start[num], num_heads] by packed row). The cache stores K
 * after RoPE: every step on one slot must use the same rope settings.
 * With a window, a step reads only the keys the window reaches (from the
 * key tile holding the first, at most 256 keys before it), and after it
 * succeeds each of its slots returns to the pool the blocks that hold only
 * positions before length + 1 - window - 256: a windowed sequence holds at
 * most window + 256 + block_tokens positions, however long it runs. A later
 * step of that slot whose window (or lack of one) reaches back to a position
 * within 256 of a dropped one fails with MHA_INVALID_ARGUMENT, changing
 * nothing; the same window always passes. mha_kv_cache_truncate_slot then
 * takes only 0 or a length >= the first position held. */
MHA_API mha_status mha_attention_step_ragged_mods(const mha_attention* attn,
                                                  mha_paged_kv_cache* cache, size_t num,
                                                  const size_t* slots, const size_t* q_start,
                                                  const float* query, const float* key,
                                                  const float* value, const mha_mods* mods,
                                                  float* out);

/* Speculative decoding: mha_attention_step_ragged_mods whose new tokens form
 * a tree per slot (a draft's candidates, EAGLE's or Medusa's), verified in
 * one step. parent[r] (r a packed row) is the index, within its slot's new
 * tokens, of row r's parent, or -1 for a child of the slot's last position;
 * a parent comes before its children (else MHA_INVALID_ARGUMENT). Row r
 * attends its slot's cached positions and its path: its ancestors among the
 * new tokens, root first, and itself. Its position, for RoPE and ALiBi, is
 * the slot's length L plus its depth (a root's is L), and nothing is
 * materialized over the cached positions. Bit for bit, row r's output and
 * lse are those of a plain step (mha_attention_step_ragged_mods) whose new
 * tokens are its path, on every kernel set and at any thread count. Every
 * new token's K and V is stored: until mha_kv_cache_accept_path the slot
 * holds L + its new tokens (mha_kv_cache_slot_length counts them), and any
 * other step on it, a truncate to more than L or a fork of more than L is
 * MHA_INVALID_ARGUMENT (a reset, or a truncate to at most L, drops the
 * tree). A window drops blocks only at the next plain step. Decode rows of
 * one slot read its whole cached chunks alike: they are computed once for
 * all of them (mha_kv_cache_shared_chunks). Allocates each slot's tree
 * record once it outgrows its largest (MHA_OUT_OF_MEMORY, changing
 * nothing). */
MHA_API mha_status mha_attention_step_tree(const mha_attention* attn, mha_paged_kv_cache* cache,
                                           size_t num, const size_t* slots, const size_t* q_start,
                                           const int32_t* parent, const float* query,
                                           const float* key, const float* value,
                                           const mha_mods* mods, float* out);
/* After a tree step: its new tokens path[0..n) (indices within the slot's
 * last step, a root-to-node path; n = 0 keeps none) become the slot's next
 * n positions, and the step's other tokens go (their blocks to the pool).
 * The slot then equals, bit for bit, one that was stepped with that path
 * alone, for every later step. Copies at most n positions. A slot whose
 * last step was not a tree step, n past the tree, or a path that is not
 * root-to-node: MHA_INVALID_ARGUMENT, changing nothing. */
MHA_API mha_status mha_kv_cache_accept_path(mha_paged_kv_cache* cache, size_t slot, size_t n,
                                            const size_t* path);

/* ---- Multi-head Latent Attention (DeepSeek-V2/V3/R1, Kimi K2) -------- */

/* One MLA layer as Hugging Face transformers' DeepseekV3Attention computes
 * it in eval mode (causal, no biases):
 *   q      = q_b_proj(RMSNorm(q_a_proj(x))), or q_proj(x) when q_lora_rank
 *            is 0; per head [q_nope (qk_nope_head_dim) | q_pe (qk_rope_head_dim)]
 *   [c | k_pe] = kv_a_proj_with_mqa(x); c = RMSNorm(c) (kv_lora_rank values;
 *            one k_pe per token, shared by every head)
 *   [k_nope | v] per head = kv_b_proj(c)
 *   RoPE on q_pe and k_pe at the token's position; scores = scale *
 *   (q_nope.k_nope + q_pe.k_pe), causal softmax, times v, heads merged,
 *   o_proj.
 * RMSNorm(x) = weight * x / sqrt(mean(x^2) + rms_norm_eps) for both norms.
 * RoPE: pair t of q_pe and k_pe, (x[2t], x[2t+1]) (every released DeepSeek
 * and Kimi checkpoint) or (x[t], x[t + rope/2]) with rope_halves = 1, is
 * rotated by position * inv_freq[t] and multiplied by an amplitude A:
 * inv_freq[t] = rope_theta^(-2t/rope) and A = 1, or with yarn_factor f > 0,
 * HF's YaRN: inv_freq ramps from the original frequency to it / f between
 * the dimensions that make yarn_beta_fast and yarn_beta_slow rotations over
 * yarn_original_max_position positions (floor and ceil, clamped), and
 * A = m(f, yarn_mscale) / m(f, yarn_mscale_all_dim) where both are given,
 * else m(f, 1), with m(f, s) = 0.1 * s * ln(f) + 1 (1 for f <= 1). Angles,
 * cos and sin are computed in double and rounded once.
 * scale = (qk_nope_head_dim + qk_rope_head_dim)^-0.5, times
 * m(f, yarn_mscale_all_dim)^2 with YaRN and yarn_mscale_all_dim given
 * (DeepSeek-V3 0.135234, DeepSeek-V2-Lite 0.114721, Kimi K2 0.130861). */
typedef struct {
  size_t struct_size; /* sizeof(mha_mla_config) */
  size_t hidden_size, num_heads;
  size_t q_lora_rank; /* 0: q_proj */
  size_t kv_lora_rank;
  size_t qk_nope_head_dim, qk_rope_head_dim, v_head_dim; /* rope dim even, >= 2 */
  float rms_norm_eps;                                    /* both latent norms; 0 means 1e-6 */
  float rope_theta;                                      /* 0 means 10000 */
  int rope_halves;   /* 0: interleaved pairs (every DeepSeek/Kimi checkpoint); 1: halves */
  float yarn_factor; /* 0: plain RoPE */
  size_t yarn_original_max_position;      /* required with yarn_factor > 0 */
  float yarn_beta_fast, yarn_beta_slow;   /* 0 means 32, 1 */
  float yarn_mscale, yarn_mscale_all_dim; /* 0 means absent */
} mha_mla_config;

/* Weights by HF name, PyTorch [out, in] layout, float32 (copied at create;
 * with H = num_heads, E = hidden_size, r = kv_lora_rank, dn, dr, dv the
 * head dims). */
typedef struct {
  size_t struct_size;              /* sizeof(mha_mla_weights) */
  const float* q_proj;             /* [H*(dn+dr), E], iff q_lora_rank == 0 */
  const float* q_a_proj;           /* [q_lora_rank, E] */
  const float* q_a_layernorm;      /* [q_lora_rank] */
  const float* q_b_proj;           /* [H*(dn+dr), q_lora_rank] */
  const float* kv_a_proj_with_mqa; /* [r+dr, E] */
  const float* kv_a_layernorm;     /* [r] */
  const float* kv_b_proj;          /* [H*(dn+dv), r] */
  const float* o_proj;             /* [E, H*dv] */
} mha_mla_weights;

typedef struct mha_mla mha_mla;

/* An MLA layer. options: NULL for fp32, or an mha_attention_options with
 * compute MHA_BF16: the weights stored in bf16 and every product a bf16
 * one (its input rounded to bf16, fp32 accumulation), Q, K and V rounded to
 * bf16 where they enter attention, RMSNorm and softmax in fp32.
 * Quantized weights (weight_format, weight_group, activations: as
 * mha_attention_create_ex states them) quantize each product's weight as
 * the layer packs it (after the query and latent reorderings, W_UK and W_UV
 * per head), per output column and group of input rows; a NaN or infinite
 * weight is then MHA_INVALID_ARGUMENT.
 * MHA_INVALID_ARGUMENT for a wrong struct_size, a size of 0 (q_lora_rank
 * aside), an odd qk_rope_head_dim, a negative or non-finite float, YaRN
 * without yarn_original_max_position, rope_theta 1 (no frequencies), q_proj
 * given with q_lora_rank != 0 or
 * missing without it, any other weight missing, or sizes that overflow. */
MHA_API mha_status mha_mla_create(const mha_mla_config* config, const mha_mla_weights* weights,
                                  const mha_attention_options* options, mha_mla** out);
MHA_API void mha_mla_destroy(mha_mla* mla);

/* Prefill: x, out [batch, seq, hidden]; token i of each batch row at
 * position position_offset + i, causal within the call. Computed in the
 * model's own form (K and V decompressed per head). out may be x.
 * position_offset + seq must not exceed PTRDIFF_MAX. */
MHA_API mha_status mha_mla_forward(const mha_mla* mla, size_t batch, size_t seq,
                                   size_t position_offset, const float* x, float* out);

/* Latent caches: per token, [k_pe after RoPE | c after its norm] (dr + r
 * values, shared by every head), in the layout and element type of
 * mha_kv_cache_create_ex's options (MHA_KV_DEFAULT: fp32, or bf16 on a bf16
 * object where the CPU has bf16 dot products; MHA_KV_INT8, MHA_KV_FP8_E4M3
 * as for attention caches). Every latent cache stores each row once:
 * (r + dr) * 4 bytes a token in fp32, * 2 in bf16 (1152 at r + dr = 576),
 * and 34 bytes per 32 values in int8 and fp8 (612 at 576);
 * mha_kv_cache_bytes says what a cache holds.
 * mha_kv_cache_destroy, _length, _truncate, _bytes and the paged slot
 * functions apply. A cache belongs to its mha_mla: a cache of an
 * mha_attention or of another mha_mla is MHA_INVALID_ARGUMENT in these
 * steps, and so is an MLA cache in mha_attention_step. */
MHA_API mha_status mha_mla_kv_cache_create(const mha_mla* mla, size_t batch, size_t max_len,
                                           const mha_kv_cache_options* options, mha_kv_cache** out);
MHA_API mha_status mha_mla_kv_cache_create_paged(const mha_mla* mla, size_t num_slots,
                                                 size_t block_tokens, size_t num_blocks,
                                                 const mha_kv_cache_options* options,
                                                 mha_paged_kv_cache** out);

/* Decode (n_new == 1) or a chunked prefill: x, out [batch, n_new, hidden];
 * new token t of each batch row at cache position length + t. Computed in
 * the absorbed form (q_lat[h] = W_UK[h]^T q_nope[h], scores over the latent
 * rows, o[h] = W_UV[h] sum_j p_j c_j), which agrees with mha_mla_forward at
 * positions from 0 within rounding (not bit for bit); bit-identical however
 * the tokens are cut into steps, at any thread count, and in a paged cache
 * of any block_tokens. Fails, changing nothing, as
 * mha_attention_step does. out may be x. */
MHA_API mha_status mha_mla_step(const mha_mla* mla, mha_kv_cache* cache, size_t n_new,
                                const float* x, float* out);
/* Continuous batching over a paged latent cache, as
 * mha_attention_step_ragged: x, out [q_start[num], hidden]. */
MHA_API mha_status mha_mla_step_ragged(const mha_mla* mla, mha_paged_kv_cache* cache, size_t num,
                                       const size_t* slots, const size_t* q_start, const float* x,
                                       float* out);
/* A tree step over a paged latent cache, as mha_attention_step_tree. */
MHA_API mha_status mha_mla_step_tree(const mha_mla* mla, mha_paged_kv_cache* cache, size_t num,
                                     const size_t* slots, const size_t* q_start,
                                     const int32_t* parent, const float* x, float* out);

#ifdef __cplusplus
}
#endif
#endif /* MHA_MHA_H */
