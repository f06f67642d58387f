/* mha: fast multi-head attention for CPUs. Public C ABI.
 *
 * Stability: the names, values and struct layouts below are a contract.
 * Functions may be added, and fields may be appended to structs only where
 * the zero value means "off". All sizes are element counts, all matrices are
 * row-major float32, and every function is safe to call from many threads.
 *
 * Errors: every function that can fail returns an mha_status; on failure
 * nothing is written to the outputs, and mha_last_error() returns a message
 * (thread-local, valid until the next failing call on the same thread). */
#ifndef MHA_MHA_H
#define MHA_MHA_H

#include <stddef.h>

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

/* ---- Softmax and head reshape ---------------------------------------- */

/* Options of mha_softmax. A zero-initialised struct switches everything off
 * (plain softmax). */
typedef struct {
  float scale;              /* z = x * scale (+ additive); 0 means 1. Finite. */
  const float* additive;    /* NULL, or an additive mask [rows x cols] added after scaling
                               (-inf masks a column) */
  size_t additive_ld;       /* row stride of additive (>= cols), or 0: row 0 for every row */
  int causal;               /* nonzero: row i keeps only columns j <= i + causal_offset */
  ptrdiff_t causal_offset;  /* e.g. kv_len - q_len for a query block at the end */
  const size_t* valid_len;  /* NULL, or [rows]: row i keeps only columns j < valid_len[i] */
} mha_softmax_options;

/* Row-wise softmax of row-major x [rows x cols] (row stride ldx >= cols)
 * into y (row stride ldy >= cols); opt may be NULL (all off):
 *   y[i][j] = exp(z[i][j] - max) / sum over kept j of exp(z[i][j] - max),
 *   z = x * scale + additive, for kept columns; y[i][j] = 0 for the others.
 * Kept columns: those allowed by causal and valid_len (both prefix limits).
 * Rules: a row with no kept column, or whose kept z are all -inf, is all 0;
 * a row whose kept z contain NaN or +inf (including x*scale overflowing) is
 * NaN at every kept column and 0 elsewhere (masked x are never read).
 * In place (x == y, ldx == ldy) is allowed; other overlaps are an error.
 * Accuracy: exp within 2 ulp; each output within a few ulp plus the rounding
 * of z (|z - max| * 2^-24 relative). Rows run in parallel for large inputs;
 * the result is bit-identical for any thread count. */
MHA_API mha_status mha_softmax(size_t rows, size_t cols, const float* x, size_t ldx, float* y,
                               size_t ldy, const mha_softmax_options* opt);

/* x [batch, seq, heads*head_dim] -> y [batch, heads, seq, head_dim]. */
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

/* out = MultiheadAttention(query, key, value), PyTorch semantics (eval mode,
 * batch_first=True), except that a query row whose keys are all masked gets
 * zero weights and a zero attention output for that head (PyTorch: NaN). */
MHA_API mha_status mha_attention_forward(const mha_attention* attn, size_t batch, size_t q_len,
                                         size_t kv_len, const float* query, /* [batch, q_len, E] */
                                         const float* key,     /* [batch, kv_len, kdim] */
                                         const float* value,   /* [batch, kv_len, vdim] */
                                         const mha_mask* mask, /* NULL = no mask */
                                         float* out,           /* [batch, q_len, E]     */
                                         float* attn_weights,  /* NULL, or [batch, H, q_len, kv_len]
                                             ([batch, q_len, kv_len] when average_weights) */
                                         int average_weights);

#ifdef __cplusplus
}
#endif
#endif /* MHA_MHA_H */
