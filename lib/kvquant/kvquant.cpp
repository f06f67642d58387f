// The quantized-KV kernel tables by ISA; the scalar ISA's is the emulation.
#include <cstring>

#include "dispatch/cpu_features.hpp"
#include "dispatch/dispatch.hpp"
#include "gemm/gemm_bf16.hpp"
#include "kvquant/kernels.hpp"

namespace mha::detail {

namespace {

template <kvq::Code C>
void scores_scalar(std::size_t rows, std::size_t d, const float* q, std::size_t ldq,
                   const kvq::KeyRuns& k, std::size_t n, float alpha, float* s, std::size_t lds) {
  kvq::scores_emulated(C, rows, d, q, ldq, k, n, alpha, s, lds);
}
template <kvq::Code C>
void values_scalar(std::size_t rows, std::size_t d, const float* p, std::size_t ldp,
                   const kvq::KeyRuns& v, std::size_t n, float beta, float* o, std::size_t ldo) {
  kvq::values_emulated(C, rows, d, p, ldp, v, n, beta, o, ldo);
}

}  // namespace

constinit const KvQuantKernels kv_quant_kernels_scalar = {
    {&scores_scalar<kvq::Code::int8>, &scores_scalar<kvq::Code::e4m3>},
    {&values_scalar<kvq::Code::int8>, &values_scalar<kvq::Code::e4m3>},
    &kvq::quantize_group,
    &kvq::strips_from_rows};

const KvQuantKernels& kv_quant_kernels(Isa isa) noexcept {
  static const IsaTables<KvQuantKernels> tables{
      &kv_quant_kernels_scalar, MHA_IF_BUILT_AVX2(kv_quant_kernels_avx2),
      MHA_IF_BUILT_AVX512(kv_quant_kernels_avx512), MHA_IF_BUILT_NEON(kv_quant_kernels_neon)};
  return tables(isa);
}

const KvQuantDotKernels* kv_quant_dot_kernels(const GemmBf16Kernels& g16) noexcept {
#if MHA_BUILD_AVX512_VBMI_BF16
  const CpuFeatures& f = cpu_features();
  // Only where vdpbf16ps serves the bf16 GEMM: on Intel it runs at half
  // the fp32 FMA's rate (gemm_bf16.cpp), and an AMX Xeon's fp32 products
  // already decoded 1.6x faster than its bf16 cache (docs/performance.md).
  if (std::strcmp(g16.name, "avx512_bf16") == 0 && f.avx512_bf16 && f.avx512_vbmi) {
    return &kv_quant_dot_kernels_avx512_vbmi_bf16;
  }
#else
  (void)g16;
#endif
  return nullptr;
}

}  // namespace mha::detail
