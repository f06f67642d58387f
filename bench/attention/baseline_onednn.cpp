// oneDNN attention baseline, composed as strongly as a oneDNN user would:
// the projection weights reordered once into oneDNN's preferred layout (Q, K
// and V in one matmul), Q·Kᵀ and P·V batched over (batch, head) reading the
// heads in place from the projections or the K/V cache (no split copies),
// the scale and the causal mask as attributes of the Q·Kᵀ matmul, oneDNN's
// own softmax primitive, and P·V writing the merged [B, S, E] layout
// directly. Every primitive is created before timing.
//
// In bf16 (`act` = bf16), as a oneDNN user runs bf16: the weights reordered
// once into bf16, the input converted by a reorder, every matmul on bf16
// operands accumulating in fp32, Q, K, V, P and the merged heads stored in
// bf16 (the points where a bf16 mha object rounds), the scores and softmax in
// fp32 (softmax_v2 writes P in bf16) and the output projection writing fp32.
// oneDNN 2.6 has bf16 matmuls only from AVX512_CORE up: elsewhere creating
// the composition throws and the bench reports the row as an error.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <mha/gemm.hpp>
#include <oneapi/dnnl/dnnl.hpp>
#include <stdexcept>
#include <string>
#include <unordered_map>

#include "composed.hpp"

namespace mha::bench {
namespace {

using dt = dnnl::memory::data_type;
using dims = dnnl::memory::dims;
using tag = dnnl::memory::format_tag;

dnnl::memory::dim D(std::size_t x) {
  return static_cast<dnnl::memory::dim>(x);
}

// Bytes of element type t (f32 or bf16).
std::size_t size_of(dt t) {
  return t == dt::bf16 ? 2 : 4;
}

// A buffer of n elements of type t.
class Buffer {
 public:
  void resize(std::size_t n, dt t) { words_.resize((n * size_of(t) + 3) / 4); }
  char* at(std::size_t i, dt t) { return reinterpret_cast<char*>(words_.data()) + i * size_of(t); }

 private:
  std::vector<float> words_;
};

class OnednnAttention final : public AttentionBaseline {
 public:
  OnednnAttention(const AttentionConfig& c, const std::vector<float>& w,
                  const std::vector<float>& b, dt act)
      : c_(c), act_(act), engine_(dnnl::engine::kind::cpu, 0), stream_(engine_) {
    const std::size_t E = c.embed_dim, H = c.heads, d = c.head_dim(), B = c.batch;
    const std::size_t sq = c.q_len, skv = c.kv_len;
    // Decode projects the new token only; its K and V go to the cache.
    const std::size_t proj_rows = B * sq;
    qkv_.resize(proj_rows * 3 * E, act);
    if (c.decode) {
      const std::vector<float> filler(B * skv * E, 0.01f);
      for (Buffer* cache : {&k_cache_, &v_cache_}) {
        cache->resize(filler.size(), act);
        if (act == dt::bf16) {
          mha::fp32_to_bf16(filler.size(), filler.data(),
                            reinterpret_cast<std::uint16_t*>(cache->at(0, act)));
        } else {
          std::memcpy(cache->at(0, act), filler.data(), filler.size() * sizeof(float));
        }
      }
    }
    scores_.resize(B * H * sq * skv);
    probs_.resize(B * H * sq * skv, act);
    merged_.resize(B * sq * E, act);
    bias_qkv_.assign(b.begin(), b.begin() + 3 * E);
    bias_o_.assign(b.begin() + 3 * E, b.end());
    if (act == dt::bf16) {
      x_.resize(proj_rows * E, act);
      x_md_ = dnnl::memory::desc({D(proj_rows), D(E)}, dt::f32, tag::ab);
      to_act_ = dnnl::reorder(dnnl::reorder::primitive_desc(
          engine_, x_md_, engine_, dnnl::memory::desc({D(proj_rows), D(E)}, act, tag::ab)));
    }

    // Projections: op(B) = Wᵀ of PyTorch's [out, in] weights, reordered once.
    qkv_proj_ = make_projection(proj_rows, 3 * E, E, w.data(), act, qkv_w_);
    out_proj_ = make_projection(proj_rows, E, E, w.data() + 3 * E * E, dt::f32, out_w_);

    // K and V heads read in place: from the QKV projection (row stride 3E),
    // or from the caches (row stride E).
    const std::size_t kv_ld = c.decode ? E : 3 * E, kv_batch = skv * kv_ld;
    q_md_ =
        dnnl::memory::desc({D(B), D(H), D(sq), D(d)}, act, dims{D(sq * 3 * E), D(d), D(3 * E), 1});
    kt_md_ =
        dnnl::memory::desc({D(B), D(H), D(d), D(skv)}, act, dims{D(kv_batch), D(d), 1, D(kv_ld)});
    v_md_ =
        dnnl::memory::desc({D(B), D(H), D(skv), D(d)}, act, dims{D(kv_batch), D(d), D(kv_ld), 1});
    scores_md_ = dnnl::memory::desc({D(B), D(H), D(sq), D(skv)}, dt::f32, tag::abcd);
    probs_md_ = dnnl::memory::desc({D(B), D(H), D(sq), D(skv)}, act, tag::abcd);
    merged_md_ = dnnl::memory::desc({D(B), D(H), D(sq), D(d)}, act, dims{D(sq * E), D(d), D(E), 1});
    dnnl::primitive_attr qk_attr;
    qk_attr.set_output_scales(0, {1.0f / std::sqrt(static_cast<float>(d))});
    if (c.causal) {
      mask_md_ = dnnl::memory::desc({1, 1, D(sq), D(skv)}, dt::f32, tag::abcd);
      mask_.resize(sq * skv);
      for (std::size_t i = 0; i < sq; ++i) {
        for (std::size_t j = 0; j < skv; ++j) {
          mask_[i * skv + j] = j <= i + (skv - sq) ? 0.0f : -std::numeric_limits<float>::infinity();
        }
      }
      dnnl::post_ops po;
      po.append_binary(dnnl::algorithm::binary_add, mask_md_);
      qk_attr.set_post_ops(po);
    }
    qk_ = dnnl::matmul(dnnl::matmul::primitive_desc(dnnl::matmul::desc(q_md_, kt_md_, scores_md_),
                                                    qk_attr, engine_));
    // fp32: in place on the scores; bf16: P written in bf16.
    softmax_ = dnnl::softmax_v2_forward(dnnl::softmax_v2_forward::primitive_desc(
        dnnl::softmax_v2_forward::desc(dnnl::prop_kind::forward_inference,
                                       dnnl::algorithm::softmax_accurate, scores_md_,
                                       act == dt::f32 ? scores_md_ : probs_md_, 3),
        engine_));
    pv_ = dnnl::matmul(dnnl::matmul::primitive_desc(
        dnnl::matmul::desc(act == dt::f32 ? scores_md_ : probs_md_, v_md_, merged_md_), engine_));
  }

  void forward(const float* x, float* out) override {
    const std::size_t E = c_.embed_dim, B = c_.batch, skv = c_.kv_len, es = size_of(act_);
    const void* src = x;
    if (act_ == dt::bf16) {
      dnnl::memory xf = mem(x_md_, x), xb = mem(to_act_md(), x_.at(0, act_));
      to_act_.execute(stream_, xf, xb);
      src = x_.at(0, act_);
    }
    run_projection(qkv_proj_, src, qkv_w_, bias_qkv_.data(), qkv_.at(0, act_));
    const void* k = qkv_.at(E, act_);
    const void* v = qkv_.at(2 * E, act_);
    if (c_.decode) {
      // The new token's K and V appended at the cache's last position.
      for (std::size_t bi = 0; bi < B; ++bi) {
        const char* row = qkv_.at(bi * 3 * E, act_);
        std::memcpy(k_cache_.at((bi * skv + skv - 1) * E, act_), row + E * es, E * es);
        std::memcpy(v_cache_.at((bi * skv + skv - 1) * E, act_), row + 2 * E * es, E * es);
      }
      k = k_cache_.at(0, act_);
      v = v_cache_.at(0, act_);
    }
    std::unordered_map<int, dnnl::memory> qk_args{{DNNL_ARG_SRC, mem(q_md_, qkv_.at(0, act_))},
                                                  {DNNL_ARG_WEIGHTS, mem(kt_md_, k)},
                                                  {DNNL_ARG_DST, mem(scores_md_, scores_.data())}};
    if (c_.causal) {
      qk_args.emplace(DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1,
                      mem(mask_md_, mask_.data()));
    }
    qk_.execute(stream_, qk_args);
    const dnnl::memory s = mem(scores_md_, scores_.data());
    const dnnl::memory p = act_ == dt::f32 ? s : mem(probs_md_, probs_.at(0, act_));
    softmax_.execute(stream_, {{DNNL_ARG_SRC, s}, {DNNL_ARG_DST, p}});
    pv_.execute(stream_, {{DNNL_ARG_SRC, p},
                          {DNNL_ARG_WEIGHTS, mem(v_md_, v)},
                          {DNNL_ARG_DST, mem(merged_md_, merged_.at(0, act_))}});
    run_projection(out_proj_, merged_.at(0, act_), out_w_, bias_o_.data(), out);
    stream_.wait();
  }

 private:
  struct Projection {
    dnnl::matmul prim;
    dnnl::memory::desc src, dst, bias;
  };

  dnnl::memory mem(const dnnl::memory::desc& md, const void* p) {
    return dnnl::memory(md, engine_, const_cast<void*>(p));
  }
  dnnl::memory::desc to_act_md() const { return dnnl::memory::desc(x_md_.dims(), act_, tag::ab); }

  // dst[m x n] = src[m x k]·Wᵀ + bias (fp32), src and W in act_, dst in
  // dst_type, W [n, k] fp32 row-major, reordered into the layout the
  // primitive prefers (format_tag::any) once, here.
  Projection make_projection(std::size_t m, std::size_t n, std::size_t k, const float* w,
                             dt dst_type, dnnl::memory& packed) {
    Projection p;
    p.src = dnnl::memory::desc({D(m), D(k)}, act_, tag::ab);
    p.dst = dnnl::memory::desc({D(m), D(n)}, dst_type, tag::ab);
    p.bias = dnnl::memory::desc({1, D(n)}, dt::f32, tag::ab);
    const dnnl::memory::desc any({D(k), D(n)}, act_, tag::any);
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(p.src, any, p.bias, p.dst), engine_);
    dnnl::memory plain(dnnl::memory::desc({D(k), D(n)}, dt::f32, tag::ba), engine_,
                       const_cast<float*>(w));
    packed = dnnl::memory(pd.weights_desc(), engine_);
    dnnl::reorder(plain, packed).execute(stream_, plain, packed);
    stream_.wait();
    p.prim = dnnl::matmul(pd);
    return p;
  }

  void run_projection(Projection& p, const void* src, const dnnl::memory& w, const float* bias,
                      void* dst) {
    p.prim.execute(stream_, {{DNNL_ARG_SRC, mem(p.src, src)},
                             {DNNL_ARG_WEIGHTS, w},
                             {DNNL_ARG_BIAS, mem(p.bias, bias)},
                             {DNNL_ARG_DST, mem(p.dst, dst)}});
  }

  AttentionConfig c_;
  dt act_;
  dnnl::engine engine_;
  dnnl::stream stream_;
  Buffer qkv_, k_cache_, v_cache_, probs_, merged_, x_;
  std::vector<float> scores_, mask_, bias_qkv_, bias_o_;
  dnnl::memory qkv_w_, out_w_;
  Projection qkv_proj_, out_proj_;
  dnnl::memory::desc x_md_, q_md_, kt_md_, v_md_, scores_md_, probs_md_, merged_md_, mask_md_;
  dnnl::reorder to_act_;
  dnnl::matmul qk_, pv_;
  dnnl::softmax_v2_forward softmax_;
};

}  // namespace

std::unique_ptr<AttentionBaseline> make_onednn_attention(const AttentionConfig& c,
                                                         const std::vector<float>& weights,
                                                         const std::vector<float>& biases,
                                                         bool bf16) {
  try {
    return std::make_unique<OnednnAttention>(c, weights, biases, bf16 ? dt::bf16 : dt::f32);
  } catch (const dnnl::error& e) {
    throw std::runtime_error(std::string("oneDNN cannot build this composition here (") + e.what() +
                             ")");
  }
}

}  // namespace mha::bench
