// oneDNN GEMM backend for the composed-attention baseline: one dnnl::matmul
// primitive per shape, created before timing; memory objects wrap the caller's
// pointers at run time (cheap: no allocation, no reorder).
#include <oneapi/dnnl/dnnl.hpp>
#include <unordered_map>

#include "composed.hpp"

namespace mha::bench {
namespace {

using dt = dnnl::memory::data_type;
using dims = dnnl::memory::dims;

dnnl::memory::dim D(std::size_t x) {
  return static_cast<dnnl::memory::dim>(x);
}

class OnednnBackend final : public GemmBackend {
 public:
  OnednnBackend() : engine_(dnnl::engine::kind::cpu, 0), stream_(engine_) {}

  std::size_t add(const GemmDesc& desc) override {
    // Dense batch strides even for batch 1: a zero stride makes oneDNN see an
    // unusual layout and fall back to its reference (loop) implementation.
    GemmDesc g = desc;
    if (g.stride_a == 0) g.stride_a = g.m * g.lda;
    if (g.stride_b == 0) g.stride_b = (g.trans_b ? g.n : g.k) * g.ldb;
    if (g.stride_c == 0) g.stride_c = g.m * g.ldc;
    Entry e;
    const dnnl::memory::desc src({D(g.batch), D(g.m), D(g.k)}, dt::f32,
                                 dims{D(g.stride_a), D(g.lda), 1});
    // op(B) is [k x n]; B stored [n x k] (trans_b) or [k x n], row stride ldb.
    const dnnl::memory::desc wei(
        {D(g.batch), D(g.k), D(g.n)}, dt::f32,
        g.trans_b ? dims{D(g.stride_b), 1, D(g.ldb)} : dims{D(g.stride_b), D(g.ldb), 1});
    const dnnl::memory::desc dst({D(g.batch), D(g.m), D(g.n)}, dt::f32,
                                 dims{D(g.stride_c), D(g.ldc), 1});
    if (g.bias) {
      const dnnl::memory::desc bias({1, 1, D(g.n)}, dt::f32, dims{D(g.n), D(g.n), 1});
      e.pd = dnnl::matmul::primitive_desc(dnnl::matmul::desc(src, wei, bias, dst), engine_);
      e.bias = bias;
    } else {
      e.pd = dnnl::matmul::primitive_desc(dnnl::matmul::desc(src, wei, dst), engine_);
    }
    e.prim = dnnl::matmul(e.pd);
    e.src = src;
    e.wei = wei;
    e.dst = dst;
    e.has_bias = g.bias;
    entries_.push_back(std::move(e));
    return entries_.size() - 1;
  }

  void run(std::size_t id, const float* a, const float* b, float* c, const float* bias) override {
    Entry& e = entries_[id];
    std::unordered_map<int, dnnl::memory> args{
        {DNNL_ARG_SRC, dnnl::memory(e.src, engine_, const_cast<float*>(a))},
        {DNNL_ARG_WEIGHTS, dnnl::memory(e.wei, engine_, const_cast<float*>(b))},
        {DNNL_ARG_DST, dnnl::memory(e.dst, engine_, c)}};
    if (e.has_bias)
      args.emplace(DNNL_ARG_BIAS, dnnl::memory(e.bias, engine_, const_cast<float*>(bias)));
    e.prim.execute(stream_, args);
    stream_.wait();
  }

 private:
  struct Entry {
    dnnl::matmul::primitive_desc pd;
    dnnl::matmul prim;
    dnnl::memory::desc src, wei, dst, bias;
    bool has_bias = false;
  };
  dnnl::engine engine_;
  dnnl::stream stream_;
  std::vector<Entry> entries_;
};

}  // namespace

std::unique_ptr<GemmBackend> make_onednn_backend() {
  return std::make_unique<OnednnBackend>();
}

}  // namespace mha::bench
