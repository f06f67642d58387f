// oneDNN attention baseline, composed as strongly as a oneDNN user would:
// the projection weights reordered once into oneDNN's preferred layout (Q, K
// and V in one matmul), Q·Kᵀ and P·V batched over (batch, head) reading the
// heads in place from the projections or the K/V cache (no split copies),
// the scale and the causal mask as attributes of the Q·Kᵀ matmul, oneDNN's
// own softmax primitive, and P·V writing the merged [B, S, E] layout
// directly. Every primitive is created before timing.
#include <cmath>
#include <cstring>
#include <limits>
#include <oneapi/dnnl/dnnl.hpp>
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

class OnednnAttention final : public AttentionBaseline {
 public:
  OnednnAttention(const AttentionConfig& c, const std::vector<float>& w,
                  const std::vector<float>& b)
      : c_(c), engine_(dnnl::engine::kind::cpu, 0), stream_(engine_) {
    const std::size_t E = c.embed_dim, H = c.heads, d = c.head_dim(), B = c.batch;
    const std::size_t sq = c.q_len, skv = c.kv_len;
    // Decode projects the new token only; its K and V go to the cache.
    const std::size_t proj_rows = B * sq;
    qkv_.resize(proj_rows * 3 * E);
    if (c.decode) {
      k_cache_.assign(B * skv * E, 0.01f);
      v_cache_.assign(B * skv * E, 0.01f);
    }
    scores_.resize(B * H * sq * skv);
    merged_.resize(B * sq * E);
    bias_qkv_.assign(b.begin(), b.begin() + 3 * E);
    bias_o_.assign(b.begin() + 3 * E, b.end());

    // Projections: op(B) = Wᵀ of PyTorch's [out, in] weights, reordered once.
    qkv_proj_ = make_projection(proj_rows, 3 * E, E, w.data(), qkv_w_);
    out_proj_ = make_projection(proj_rows, E, E, w.data() + 3 * E * E, out_w_);

    // K and V heads read in place: from the QKV projection (row stride 3E),
    // or from the caches (row stride E).
    const std::size_t kv_ld = c.decode ? E : 3 * E, kv_batch = skv * kv_ld;
    const dnnl::memory::desc q_md({D(B), D(H), D(sq), D(d)}, dt::f32,
                                  dims{D(sq * 3 * E), D(d), D(3 * E), 1});
    const dnnl::memory::desc kt_md({D(B), D(H), D(d), D(skv)}, dt::f32,
                                   dims{D(kv_batch), D(d), 1, D(kv_ld)});
    const dnnl::memory::desc v_md({D(B), D(H), D(skv), D(d)}, dt::f32,
                                  dims{D(kv_batch), D(d), D(kv_ld), 1});
    scores_md_ = dnnl::memory::desc({D(B), D(H), D(sq), D(skv)}, dt::f32, tag::abcd);
    const dnnl::memory::desc merged_md({D(B), D(H), D(sq), D(d)}, dt::f32,
                                       dims{D(sq * E), D(d), D(E), 1});
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
    qk_pd_ =
        dnnl::matmul::primitive_desc(dnnl::matmul::desc(q_md, kt_md, scores_md_), qk_attr, engine_);
    qk_ = dnnl::matmul(qk_pd_);
    q_md_ = q_md;
    kt_md_ = kt_md;
    v_md_ = v_md;
    merged_md_ = merged_md;
    softmax_ = dnnl::softmax_forward(dnnl::softmax_forward::primitive_desc(
        dnnl::softmax_forward::desc(dnnl::prop_kind::forward_inference, scores_md_, 3), engine_));
    pv_ = dnnl::matmul(
        dnnl::matmul::primitive_desc(dnnl::matmul::desc(scores_md_, v_md, merged_md), engine_));
  }

  void forward(const float* x, float* out) override {
    const std::size_t E = c_.embed_dim, B = c_.batch, skv = c_.kv_len;
    run_projection(qkv_proj_, x, qkv_w_, bias_qkv_.data(), qkv_.data());
    const float* k = qkv_.data() + E;
    const float* v = qkv_.data() + 2 * E;
    if (c_.decode) {
      // The new token's K and V appended at the cache's last position.
      for (std::size_t bi = 0; bi < B; ++bi) {
        const float* row = qkv_.data() + bi * 3 * E;
        std::memcpy(&k_cache_[(bi * skv + skv - 1) * E], row + E, E * sizeof(float));
        std::memcpy(&v_cache_[(bi * skv + skv - 1) * E], row + 2 * E, E * sizeof(float));
      }
      k = k_cache_.data();
      v = v_cache_.data();
    }
    std::unordered_map<int, dnnl::memory> qk_args{{DNNL_ARG_SRC, mem(q_md_, qkv_.data())},
                                                  {DNNL_ARG_WEIGHTS, mem(kt_md_, k)},
                                                  {DNNL_ARG_DST, mem(scores_md_, scores_.data())}};
    if (c_.causal) {
      qk_args.emplace(DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1,
                      mem(mask_md_, mask_.data()));
    }
    qk_.execute(stream_, qk_args);
    const dnnl::memory s = mem(scores_md_, scores_.data());
    softmax_.execute(stream_, {{DNNL_ARG_SRC, s}, {DNNL_ARG_DST, s}});
    pv_.execute(stream_, {{DNNL_ARG_SRC, s},
                          {DNNL_ARG_WEIGHTS, mem(v_md_, v)},
                          {DNNL_ARG_DST, mem(merged_md_, merged_.data())}});
    run_projection(out_proj_, merged_.data(), out_w_, bias_o_.data(), out);
    stream_.wait();
  }

 private:
  struct Projection {
    dnnl::matmul prim;
    dnnl::memory::desc src, dst, bias;
  };

  dnnl::memory mem(const dnnl::memory::desc& md, const float* p) {
    return dnnl::memory(md, engine_, const_cast<float*>(p));
  }

  // dst[m x n] = src[m x k]·Wᵀ + bias, W [n, k] row-major, reordered into
  // the layout the primitive prefers (format_tag::any) once, here.
  Projection make_projection(std::size_t m, std::size_t n, std::size_t k, const float* w,
                             dnnl::memory& packed) {
    Projection p;
    p.src = dnnl::memory::desc({D(m), D(k)}, dt::f32, tag::ab);
    p.dst = dnnl::memory::desc({D(m), D(n)}, dt::f32, tag::ab);
    p.bias = dnnl::memory::desc({1, D(n)}, dt::f32, tag::ab);
    const dnnl::memory::desc any({D(k), D(n)}, dt::f32, tag::any);
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(p.src, any, p.bias, p.dst), engine_);
    dnnl::memory plain(dnnl::memory::desc({D(k), D(n)}, dt::f32, tag::ba), engine_,
                       const_cast<float*>(w));
    packed = dnnl::memory(pd.weights_desc(), engine_);
    dnnl::reorder(plain, packed).execute(stream_, plain, packed);
    stream_.wait();
    p.prim = dnnl::matmul(pd);
    return p;
  }

  void run_projection(Projection& p, const float* src, const dnnl::memory& w, const float* bias,
                      float* dst) {
    p.prim.execute(stream_, {{DNNL_ARG_SRC, mem(p.src, src)},
                             {DNNL_ARG_WEIGHTS, w},
                             {DNNL_ARG_BIAS, mem(p.bias, bias)},
                             {DNNL_ARG_DST, mem(p.dst, dst)}});
  }

  AttentionConfig c_;
  dnnl::engine engine_;
  dnnl::stream stream_;
  std::vector<float> qkv_, k_cache_, v_cache_, scores_, merged_, mask_, bias_qkv_, bias_o_;
  dnnl::memory qkv_w_, out_w_;
  Projection qkv_proj_, out_proj_;
  dnnl::memory::desc q_md_, kt_md_, v_md_, scores_md_, merged_md_, mask_md_;
  dnnl::matmul::primitive_desc qk_pd_;
  dnnl::matmul qk_, pv_;
  dnnl::softmax_forward softmax_;
};

}  // namespace

std::unique_ptr<AttentionBaseline> make_onednn_attention(const AttentionConfig& c,
                                                         const std::vector<float>& weights,
                                                         const std::vector<float>& biases) {
  return std::make_unique<OnednnAttention>(c, weights, biases);
}

}  // namespace mha::bench
