// OpenBLAS GEMM backend for the composed-attention baseline (reference only):
// batched shapes run as a loop of cblas_sgemm calls.
#include <cblas.h>

#include <vector>

#include "composed.hpp"

namespace mha::bench {
namespace {

class OpenblasBackend final : public GemmBackend {
 public:
  std::size_t add(const GemmDesc& g) override {
    descs_.push_back(g);
    return descs_.size() - 1;
  }

  void run(std::size_t id, const float* a, const float* b, float* c, const float* bias) override {
    const GemmDesc& g = descs_[id];
    const auto I = [](std::size_t x) { return static_cast<blasint>(x); };
    for (std::size_t i = 0; i < g.batch; ++i) {
      float* ci = c + i * g.stride_c;
      float beta = 0.0f;
      if (g.bias) {  // BLAS has no bias: C = bias, then beta = 1
        for (std::size_t r = 0; r < g.m; ++r) {
          for (std::size_t j = 0; j < g.n; ++j) ci[r * g.ldc + j] = bias[j];
        }
        beta = 1.0f;
      }
      cblas_sgemm(CblasRowMajor, CblasNoTrans, g.trans_b ? CblasTrans : CblasNoTrans, I(g.m),
                  I(g.n), I(g.k), 1.0f, a + i * g.stride_a, I(g.lda), b + i * g.stride_b, I(g.ldb),
                  beta, ci, I(g.ldc));
    }
  }

 private:
  std::vector<GemmDesc> descs_;
};

}  // namespace

std::unique_ptr<GemmBackend> make_openblas_backend() {
  return std::make_unique<OpenblasBackend>();
}

}  // namespace mha::bench
