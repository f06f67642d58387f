// SGEMM benchmarks: the shapes below for mha::sgemm and, when found at
// configure time, OpenBLAS (cblas_sgemm) and oneDNN (dnnl::matmul, primitive
// created once outside the timed loop), all row-major, in one binary.
//
// Names: gemm/<shape>/<impl>/threads:<t>. Shapes:
//   sq<N>                    N x N x N, NN
//   proj_m<M>_n<N>_k768_nt   projections, B = weights [out, in] (transposed);
//                            M 16 is a decode step of 16 sequences
//   qk_s<S>                  Q·K^T per head: M = N = S, K = 64, NT
//   pv_s<S>                  P·V per head: M = S, N = 64, K = S, NN
//   gemv_n<N>                decode step: M = 1, K = 768, B = weights [N, 768] (NT)
// Impls: mha (mha::sgemm, packs B per call), mha_prepacked (projections only:
// mha::PackedB made once, as the attention engine does), openblas, onednn.
// bf16: every shape again as config bf16_<shape>, A and B in bf16 and C in
// fp32: mha (mha::gemm_bf16) and onednn (dnnl::matmul with bf16 source and
// weights, f32 destination, plain layouts as in the fp32 rows); peak_pct is
// against the vdpbf16ps peak where mha_kernel_name(MHA_BF16) is avx512_bf16.
// Threads: 1 and 2, or the list in MHA_BENCH_THREADS ("1,2,16").
// ISA sweep: run again with MHA_ISA=avx2 (the context key mha_isa records it,
// and the peak the percentages use is that ISA's).
#include <cstdint>
#include <initializer_list>
#include <mha/gemm.hpp>
#include <mha/isa.hpp>
#include <string>
#include <vector>

#include "bench_common.hpp"

#if MHA_BENCH_HAVE_OPENBLAS
#include <cblas.h>
#endif
#if MHA_BENCH_HAVE_DNNL
#include <oneapi/dnnl/dnnl.hpp>
#endif

namespace {

struct Shape {
  std::string name;
  std::size_t m, n, k;
  bool tb;  // B stored [n, k] (transposed)
};

std::vector<Shape> shapes() {
  std::vector<Shape> r;
  // Squares 64..2048, plus small ones and 96 (a full tile and an
  // N edge of half a tile on AVX-512), where per-call costs and edge tiles
  // decide.
  for (std::size_t s : {8, 16, 32, 64, 96, 128, 256, 512, 1024, 2048}) {
    r.push_back({"sq" + std::to_string(s), s, s, s, false});
  }
  for (std::size_t m : {16, 128, 512, 4096}) {
    for (std::size_t n : {768, 2304}) {
      r.push_back(
          {"proj_m" + std::to_string(m) + "_n" + std::to_string(n) + "_k768_nt", m, n, 768, true});
    }
  }
  for (std::size_t s : {128, 512, 2048}) r.push_back({"qk_s" + std::to_string(s), s, s, 64, true});
  for (std::size_t s : {128, 512, 2048}) r.push_back({"pv_s" + std::to_string(s), s, 64, s, false});
  for (std::size_t n : {768, 2304, 3072}) {
    r.push_back({"gemv_n" + std::to_string(n), 1, n, 768, true});
  }
  return r;
}

struct Operands {
  std::vector<float> a, b, c;
  std::size_t lda, ldb, ldc;
  explicit Operands(const Shape& s)
      : a(mha::bench::random_floats(s.m * s.k, 1)),
        b(mha::bench::random_floats(s.k * s.n, 2)),
        c(s.m * s.n, 0.f),
        lda(s.k),
        ldb(s.tb ? s.k : s.n),
        ldc(s.n) {}
};

// The same operands rounded to bf16 (mha_fp32_to_bf16).
struct Bf16Operands {
  std::vector<std::uint16_t> a, b;
  std::vector<float> c;
  std::size_t lda, ldb, ldc;
  explicit Bf16Operands(const Shape& s)
      : a(s.m * s.k), b(s.k * s.n), c(s.m * s.n, 0.f), lda(s.k), ldb(s.tb ? s.k : s.n), ldc(s.n) {
    const Operands o(s);
    mha::fp32_to_bf16(a.size(), o.a.data(), a.data());
    mha::fp32_to_bf16(b.size(), o.b.data(), b.data());
  }
};

double flops(const Shape& s) {
  return 2.0 * static_cast<double>(s.m) * static_cast<double>(s.n) * static_cast<double>(s.k);
}

void bench_mha(benchmark::State& state, const Shape& s, int threads) {
  Operands o(s);
  mha::set_num_threads(static_cast<std::size_t>(threads));
  for (auto _ : state) {
    mha::sgemm('N', s.tb ? 'T' : 'N', s.m, s.n, s.k, 1.f, o.a.data(), o.lda, o.b.data(), o.ldb, 0.f,
               o.c.data(), o.ldc);
    benchmark::DoNotOptimize(o.c.data());
    benchmark::ClobberMemory();
  }
  mha::set_num_threads(0);
  mha::bench::set_flop_counters(state, flops(s), threads);
}

// Projection shapes with the weights packed once outside the timed loop, as
// the attention engine uses them (mha_sgemm_pack_b at create): the packing
// of B that "mha" repeats per call is what prepacking saves.
void bench_mha_prepacked(benchmark::State& state, const Shape& s, int threads) {
  Operands o(s);
  const mha::PackedB pb(s.tb ? 'T' : 'N', s.k, s.n, o.b.data(), o.ldb);
  mha::set_num_threads(static_cast<std::size_t>(threads));
  for (auto _ : state) {
    mha::sgemm('N', s.m, 1.f, o.a.data(), o.lda, pb, 0.f, o.c.data(), o.ldc);
    benchmark::DoNotOptimize(o.c.data());
    benchmark::ClobberMemory();
  }
  mha::set_num_threads(0);
  mha::bench::set_flop_counters(state, flops(s), threads);
}

void bench_mha_bf16(benchmark::State& state, const Shape& s, int threads) {
  Bf16Operands o(s);
  mha::set_num_threads(static_cast<std::size_t>(threads));
  for (auto _ : state) {
    mha::gemm_bf16('N', s.tb ? 'T' : 'N', s.m, s.n, s.k, 1.f, o.a.data(), o.lda, o.b.data(), o.ldb,
                   0.f, o.c.data(), o.ldc);
    benchmark::DoNotOptimize(o.c.data());
    benchmark::ClobberMemory();
  }
  mha::set_num_threads(0);
  mha::bench::set_flop_counters(state, flops(s), threads, true);
}

// Projections with the bf16 weights packed once, as bench_mha_prepacked.
void bench_mha_bf16_prepacked(benchmark::State& state, const Shape& s, int threads) {
  Bf16Operands o(s);
  const mha::PackedBf16B pb(s.tb ? 'T' : 'N', s.k, s.n, o.b.data(), o.ldb);
  mha::set_num_threads(static_cast<std::size_t>(threads));
  for (auto _ : state) {
    mha::gemm_bf16('N', s.m, 1.f, o.a.data(), o.lda, pb, 0.f, o.c.data(), o.ldc);
    benchmark::DoNotOptimize(o.c.data());
    benchmark::ClobberMemory();
  }
  mha::set_num_threads(0);
  mha::bench::set_flop_counters(state, flops(s), threads, true);
}

#if MHA_BENCH_HAVE_OPENBLAS
void bench_openblas(benchmark::State& state, const Shape& s, int threads) {
  Operands o(s);
  mha::bench::set_baseline_threads(threads);
  const auto m = static_cast<blasint>(s.m), n = static_cast<blasint>(s.n),
             k = static_cast<blasint>(s.k);
  for (auto _ : state) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, s.tb ? CblasTrans : CblasNoTrans, m, n, k, 1.f,
                o.a.data(), static_cast<blasint>(o.lda), o.b.data(), static_cast<blasint>(o.ldb),
                0.f, o.c.data(), static_cast<blasint>(o.ldc));
    benchmark::DoNotOptimize(o.c.data());
    benchmark::ClobberMemory();
  }
  mha::bench::set_flop_counters(state, flops(s), threads);
}
#endif

#if MHA_BENCH_HAVE_DNNL
// oneDNN's matmul on o's plain layouts: A and B of type `ab`, C fp32.
template <class Ops>
void bench_onednn_matmul(benchmark::State& state, const Shape& s, int threads, Ops& o,
                         dnnl::memory::data_type ab) {
  mha::bench::set_baseline_threads(threads);
  using dnnl::memory;
  using dims = memory::dims;
  const auto m = static_cast<memory::dim>(s.m), n = static_cast<memory::dim>(s.n),
             k = static_cast<memory::dim>(s.k);
  dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  dnnl::stream stream(engine);
  const memory::desc a_md(dims{m, k}, ab, dims{k, 1});
  // B transposed: the logical k x n matrix with strides (1, ldb).
  const memory::desc b_md(dims{k, n}, ab,
                          s.tb ? dims{1, static_cast<memory::dim>(o.ldb)} : dims{n, 1});
  const memory::desc c_md(dims{m, n}, memory::data_type::f32, dims{n, 1});
  dnnl::matmul matmul;
  try {
    matmul =
        dnnl::matmul(dnnl::matmul::primitive_desc(dnnl::matmul::desc(a_md, b_md, c_md), engine));
  } catch (const dnnl::error& e) {
    // oneDNN 2.6 has no bf16 matmul below AVX512_CORE.
    state.SkipWithError((std::string("oneDNN has no such matmul here: ") + e.what()).c_str());
    return;
  }
  memory a_mem(a_md, engine, o.a.data()), b_mem(b_md, engine, o.b.data()),
      c_mem(c_md, engine, o.c.data());
  for (auto _ : state) {
    matmul.execute(stream,
                   {{DNNL_ARG_SRC, a_mem}, {DNNL_ARG_WEIGHTS, b_mem}, {DNNL_ARG_DST, c_mem}});
    stream.wait();
    benchmark::DoNotOptimize(o.c.data());
    benchmark::ClobberMemory();
  }
  mha::bench::set_flop_counters(state, flops(s), threads, ab == memory::data_type::bf16);
}

void bench_onednn(benchmark::State& state, const Shape& s, int threads) {
  Operands o(s);
  bench_onednn_matmul(state, s, threads, o, dnnl::memory::data_type::f32);
}

void bench_onednn_bf16(benchmark::State& state, const Shape& s, int threads) {
  Bf16Operands o(s);
  bench_onednn_matmul(state, s, threads, o, dnnl::memory::data_type::bf16);
}
#endif

// One row per (shape, implementation, threads): the fp32 set, then the same
// shapes in bf16 (named bf16_<shape>). Prepacked rows only on projections
// (gemv_ included: a decode step's).
void register_all() {
  struct Impl {
    const char* name;
    void (*fn)(benchmark::State&, const Shape&, int);
    bool projections_only;
  };
  const auto register_set = [](const std::string& prefix, std::initializer_list<Impl> impls) {
    for (Shape s : shapes()) {
      const bool projection = s.name.rfind("proj_", 0) == 0 || s.name.rfind("gemv_", 0) == 0;
      s.name = prefix + s.name;
      for (int t : mha::bench::bench_threads()) {
        for (const Impl& impl : impls) {
          if (impl.projections_only && !projection) continue;
          mha::bench::register_benchmark(
              "gemm", s.name, impl.name, t,
              [fn = impl.fn, s, t](benchmark::State& st) { fn(st, s, t); },
              benchmark::kMicrosecond);
        }
      }
    }
  };
  register_set("", {
    {"mha", bench_mha, false}, {"mha_prepacked", bench_mha_prepacked, true},
#if MHA_BENCH_HAVE_OPENBLAS
        {"openblas", bench_openblas, false},
#endif
#if MHA_BENCH_HAVE_DNNL
        {"onednn", bench_onednn, false},
#endif
  });
  register_set("bf16_", {
    {"mha", bench_mha_bf16, false}, {"mha_prepacked", bench_mha_bf16_prepacked, true},
#if MHA_BENCH_HAVE_DNNL
        {"onednn", bench_onednn_bf16, false},
#endif
  });
}

// Registered before main() (which bench/common provides) parses the flags.
const bool registered = (register_all(), true);

}  // namespace
