// Multi-head Latent Attention (mha_mla_*): the forward and the absorbed steps
// against a double reference of HF's math on random layers, steps against
// each other (chunking, paging, truncation: bitwise), failures that change
// nothing, and thread invariance. The golden files (tests/golden, "[mla]")
// hold the same math to PyTorch.
//
// Metric: max |ours - ref| / max(1, max |ref|). Limit 1e-5 on fp32
// objects: every value is an fp32 dot product of at most a few hundred
// terms of O(1) values (measured 1e-7 to 1e-6); the absorbed form
// reassociates W_UK and W_UV through fp32, which stays within it.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <mha/mla.hpp>
#include <string>
#include <thread>
#include <vector>

#include "attention/core/core.hpp"
#include "dispatch/dispatch.hpp"
#include "gemm/gemm_bf16.hpp"
#include "support/mla_reference.hpp"

namespace mha::test {
namespace {

// Infinite where got is not ref's size (a failed step_all) or has a NaN.
double rel_error(const std::vector<float>& got, const std::vector<double>& ref) {
  if (got.size() != ref.size()) return INFINITY;
  double scale = 1, err = 0;
  for (double v : ref) scale = std::max(scale, std::abs(v));
  for (std::size_t i = 0; i < ref.size(); ++i) {
    const double e = std::abs(double(got[i]) - ref[i]);
    err = std::isnan(e) ? INFINITY : std::max(err, e);
  }
  return err / scale;
}

mha_mla_config small_config(std::size_t E, std::size_t H, std::size_t ql, std::size_t r,
                            std::size_t dn, std::size_t dr, std::size_t dv) {
  mha_mla_config c{};
  c.struct_size = sizeof c;
  c.hidden_size = E;
  c.num_heads = H;
  c.q_lora_rank = ql;
  c.kv_lora_rank = r;
  c.qk_nope_head_dim = dn;
  c.qk_rope_head_dim = dr;
  c.v_head_dim = dv;
  return c;
}

mha_mla_config yarn(mha_mla_config c, float f, std::size_t orig, float ms, float ms_all) {
  c.yarn_factor = f;
  c.yarn_original_max_position = orig;
  c.yarn_mscale = ms;
  c.yarn_mscale_all_dim = ms_all;
  return c;
}

// Odd sizes (none a multiple of a vector), both q forms, YaRN and plain,
// both RoPE pairings, and the production head dims.
std::vector<mha_mla_config> configs() {
  std::vector<mha_mla_config> v;
  v.push_back(yarn(small_config(40, 3, 24, 512, 128, 64, 128), 40, 4096, 1, 1));
  v.push_back(yarn(small_config(24, 2, 0, 512, 128, 64, 128), 40, 4096, 0.707f, 0.707f));
  mha_mla_config halves = small_config(13, 3, 7, 19, 5, 6, 9);
  halves.rope_halves = 1;
  halves.rope_theta = 50000;
  v.push_back(halves);
  v.push_back(yarn(small_config(9, 1, 0, 3, 1, 2, 1), 8, 64, 0.5f, 0));
  mha_mla_config wide_v = small_config(16, 2, 5, 11, 3, 2, 17);  // dv > dn + dr
  wide_v.rms_norm_eps = 1e-3f;
  v.push_back(wide_v);
  return v;
}

// The rows of `seq` tokens stepped in `chunks` through a fresh cache (empty
// if the cache did not end at seq). No Catch macros: threads call it.
std::vector<float> step_all(const Mla& mla, std::size_t batch, std::size_t seq, const float* x,
                            const std::vector<std::size_t>& chunks, mha_kv_dtype dtype,
                            std::size_t E) {
  MlaKvCache cache(mla, batch, seq, dtype);
  std::vector<float> out(batch * seq * E);
  std::size_t done = 0;
  for (std::size_t n : chunks) {
    std::vector<float> xs(batch * n * E), os(batch * n * E);
    for (std::size_t b = 0; b < batch; ++b)
      std::copy_n(x + (b * seq + done) * E, n * E, xs.data() + b * n * E);
    cache.step(n, xs.data(), os.data());
    for (std::size_t b = 0; b < batch; ++b)
      std::copy_n(os.data() + b * n * E, n * E, out.data() + (b * seq + done) * E);
    done += n;
  }
  if (cache.length() != seq) out.clear();
  return out;
}

TEST_CASE("mla: forward and steps match the double reference", "[mla]") {
  std::uint64_t seed = 100;
  for (const mha_mla_config& c : configs()) {
    const MlaLayer layer(c, seed += 10);
    const Mla mla(layer.cfg, layer.view());
    const std::size_t E = c.hidden_size, batch = 2, seq = 7;
    const auto x = random_vector(batch * seq * E, seed + 9);
    for (std::size_t offset : {std::size_t(0), std::size_t(3001)}) {
      std::vector<float> out(x.size());
      mla.forward(batch, seq, offset, x.data(), out.data());
      const double err = rel_error(out, mla_reference(layer, batch, seq, offset, x.data()));
      INFO("E " << E << " r " << c.kv_lora_rank << " offset " << offset << " err " << err);
      CHECK(err <= 1e-5);
    }
    const auto ref = mla_reference(layer, batch, seq, 0, x.data());
    const auto decoded =
        step_all(mla, batch, seq, x.data(), std::vector<std::size_t>(seq, 1), MHA_KV_DEFAULT, E);
    CHECK(rel_error(decoded, ref) <= 1e-5);
    // Chunked prefill 3 + 1 + 3 and one step of all 7: the decode's bits.
    CHECK(step_all(mla, batch, seq, x.data(), {3, 1, 3}, MHA_KV_DEFAULT, E) == decoded);
    CHECK(step_all(mla, batch, seq, x.data(), {7}, MHA_KV_DEFAULT, E) == decoded);
  }
}

TEST_CASE("mla: a bf16 object stays within bf16 rounding of the reference", "[mla][bf16]") {
  const mha_mla_config c = yarn(small_config(40, 3, 24, 512, 128, 64, 128), 40, 4096, 1, 1);
  const MlaLayer layer(c, 7);
  const mha_attention_options opt{sizeof opt, MHA_BF16, MHA_WEIGHTS_COMPUTE, 0};
  const Mla mla(layer.cfg, layer.view(), &opt);
  const std::size_t E = c.hidden_size, seq = 6;
  const auto x = random_vector(seq * E, 8);
  const auto ref = mla_reference(layer, 1, seq, 0, x.data());
  std::vector<float> out(x.size());
  mla.forward(1, seq, 0, x.data(), out.data());
  // A few bf16 units (2^-8) through four rounded products.
  CHECK(rel_error(out, ref) <= 0.03);
  const auto stepped = step_all(mla, 1, seq, x.data(), {2, 4}, MHA_KV_DEFAULT, E);
  CHECK(rel_error(stepped, ref) <= 0.03);
  // Latent rows stored once: 576 bf16 a token where the CPU has bf16 dot
  // products (a bf16 latent cache), else 576 floats.
  const bool dot = detail::gemm_bf16_kernels(detail::active_isa()) != nullptr;
  CHECK(MlaKvCache(mla, 1, 4096).bytes() == 4096 * 576 * (dot ? 2 : 4));
}

TEST_CASE("mla: quantized latent caches", "[mla]") {
  const mha_mla_config c = yarn(small_config(40, 3, 24, 512, 128, 64, 128), 40, 4096, 1, 1);
  const MlaLayer layer(c, 17);
  const Mla mla(layer.cfg, layer.view());
  const std::size_t E = c.hidden_size, seq = 9;
  const auto x = random_vector(2 * seq * E, 18);
  const auto ref = mla_reference(layer, 2, seq, 0, x.data());
  // The quantized-KV tests' limits: int8 3e-2, E4M3 0.15 of the scale.
  const auto i8 = step_all(mla, 2, seq, x.data(), {4, 1, 4}, MHA_KV_INT8, E);
  CHECK(rel_error(i8, ref) <= 3e-2);
  const auto f8 = step_all(mla, 2, seq, x.data(), {4, 1, 4}, MHA_KV_FP8_E4M3, E);
  CHECK(rel_error(f8, ref) <= 0.15);
  CHECK(step_all(mla, 2, seq, x.data(), std::vector<std::size_t>(seq, 1), MHA_KV_INT8, E) == i8);
  // Latent rows stored once: (r + dr) floats a token in fp32; int8 and fp8
  // keep one row of codes and scales (18 groups of 2 + 32 bytes at 576).
  MlaKvCache fp32(mla, 1, 4096), int8(mla, 1, 4096, MHA_KV_INT8),
      fp8(mla, 1, 4096, MHA_KV_FP8_E4M3);
  CHECK(fp32.bytes() == 4096 * 576 * sizeof(float));
  CHECK(int8.bytes() == 4096 * 612);
  CHECK(fp8.bytes() == 4096 * 612);
}

TEST_CASE("mla: paged steps equal contiguous ones; truncate and re-step", "[mla]") {
  const mha_mla_config c = yarn(small_config(24, 2, 0, 512, 128, 64, 128), 32, 4096, 1, 1);
  const MlaLayer layer(c, 27);
  const Mla mla(layer.cfg, layer.view());
  const mha_attention_options bf16{sizeof bf16, MHA_BF16, MHA_WEIGHTS_COMPUTE, 0};
  const Mla mla16(layer.cfg, layer.view(), &bf16);
  const std::size_t E = c.hidden_size, seq = 10;
  const auto x = random_vector(seq * E, 28);
  // Every block size gives the contiguous cache's bits, on every latent
  // cache type (fp32 and bf16 objects' own, int8, fp8): blocks of a key
  // tile, in place; of 4 and 7 keys, gathered.
  for (const Mla* obj : {&mla, &mla16})
    for (mha_kv_dtype dt : {MHA_KV_DEFAULT, MHA_KV_INT8, MHA_KV_FP8_E4M3})
      for (std::size_t block : {std::size_t(256), std::size_t(4), std::size_t(7)}) {
        const auto contiguous = step_all(*obj, 1, seq, x.data(), {6, 4}, dt, E);
        MlaPagedKvCache paged(*obj, 3, block, 16, dt);
        // Slot 2, beside a busy slot 0: its rows depend on neither.
        const auto other = random_vector(5 * E, 29);
        std::vector<float> out(seq * E), junk(5 * E);
        const std::size_t s0[] = {0}, q0[] = {0, 5};
        paged.step(1, s0, q0, other.data(), junk.data());
        const std::size_t slots[] = {2, 0}, q_start[] = {0, 6, 7};
        std::vector<float> xs(7 * E), os(7 * E);
        std::copy_n(x.data(), 6 * E, xs.data());
        std::copy_n(other.data(), E, xs.data() + 6 * E);
        paged.step(2, slots, q_start, xs.data(), os.data());
        std::copy_n(os.data(), 6 * E, out.data());
        const std::size_t s2[] = {2}, q2[] = {0, 4};
        paged.step(1, s2, q2, x.data() + 6 * E, out.data() + 6 * E);
        INFO("block_tokens " << block << ", dtype " << dt);
        CHECK(std::memcmp(out.data(), contiguous.data(), out.size() * sizeof(float)) == 0);
      }
  // Truncate 10 -> 6 and step the last 4 again: the same bits.
  const auto contiguous = step_all(mla, 1, seq, x.data(), {6, 4}, MHA_KV_DEFAULT, E);
  MlaKvCache cache(mla, 1, seq);
  std::vector<float> out(seq * E);
  cache.step(seq, x.data(), out.data());
  cache.truncate(6);
  std::vector<float> again(4 * E);
  cache.step(4, x.data() + 6 * E, again.data());
  CHECK(std::equal(again.begin(), again.end(), contiguous.begin() + 6 * E));
}

TEST_CASE("mla: failures change nothing", "[mla]") {
  const mha_mla_config c = small_config(16, 2, 0, 8, 4, 2, 4);
  const MlaLayer layer(c, 37);
  const Mla mla(layer.cfg, layer.view());
  const std::size_t E = 16;
  const auto x = random_vector(4 * E, 38);
  MlaKvCache cache(mla, 1, 3);
  std::vector<float> out(4 * E, 7.f);
  cache.step(2, x.data(), out.data());
  std::vector<float> before(4 * E, 5.f), after = before;
  // A full cache: 2 + 2 > 3.
  CHECK(mha_mla_step(mla.handle(), cache.handle(), 2, x.data(), after.data()) ==
        MHA_INVALID_ARGUMENT);
  CHECK(after == before);
  CHECK(cache.length() == 2);
  // The next token still gets the bits it would have had.
  std::vector<float> full(3 * E), one(E);
  MlaKvCache fresh(mla, 1, 3);
  fresh.step(3, x.data(), full.data());
  cache.step(1, x.data() + 2 * E, one.data());
  CHECK(std::equal(one.begin(), one.end(), full.begin() + 2 * E));
  // Another family's cache, another MLA's cache.
  const Mla other(layer.cfg, layer.view());
  CHECK(mha_mla_step(other.handle(), cache.handle(), 1, x.data(), after.data()) ==
        MHA_INVALID_ARGUMENT);
  // An attention object of the same width: the cache is still not its own.
  const std::vector<float> w = random_vector(4 * E * E, 39);
  const mha_config ac{E, 2, 0, 0, 0};
  const mha_weights aw{
      w.data(), w.data() + E * E, w.data() + 2 * E * E, w.data() + 3 * E * E, nullptr, nullptr,
      nullptr,  nullptr};
  mha_attention* attn = nullptr;
  REQUIRE(mha_attention_create(&ac, &aw, &attn) == MHA_OK);
  CHECK(mha_attention_step(attn, cache.handle(), 1, x.data(), x.data(), x.data(), after.data()) ==
        MHA_INVALID_ARGUMENT);
  mha_kv_cache* attn_cache = nullptr;
  REQUIRE(mha_kv_cache_create(attn, 1, 4, &attn_cache) == MHA_OK);
  CHECK(mha_mla_step(mla.handle(), attn_cache, 1, x.data(), after.data()) == MHA_INVALID_ARGUMENT);
  CHECK(mha_kv_cache_length(attn_cache) == 0);
  mha_kv_cache_destroy(attn_cache);
  mha_attention_destroy(attn);
  CHECK(after == before);
  CHECK(cache.length() == 3);
}

TEST_CASE("mla: create rejects bad configs and weights", "[mla]") {
  const mha_mla_config good = small_config(16, 2, 6, 8, 4, 2, 4);
  const MlaLayer layer(good, 47);
  mha_mla* m = reinterpret_cast<mha_mla*>(&m);
  mha_mla* const untouched = m;
  const auto bad = [&](mha_mla_config c, mha_mla_weights w) {
    const mha_status s = mha_mla_create(&c, &w, nullptr, &m);
    INFO(mha_last_error());
    CHECK(s == MHA_INVALID_ARGUMENT);
    CHECK(m == untouched);
    CHECK(std::strlen(mha_last_error()) > 0);
  };
  const mha_mla_weights w = layer.view();
  mha_mla_config c = good;
  c.struct_size = 8;
  bad(c, w);
  c = good;
  c.qk_rope_head_dim = 3;
  bad(c, w);
  c = good;
  c.kv_lora_rank = 0;
  bad(c, w);
  c = good;
  c.rope_halves = 2;
  bad(c, w);
  c = good;
  c.rope_theta = NAN;
  bad(c, w);
  c = good;
  c.yarn_factor = 4;  // no original max position
  bad(c, w);
  c = good;
  c.yarn_mscale = -1;
  bad(c, w);
  c = good;
  c.num_heads = SIZE_MAX / 2;
  bad(c, w);
  mha_mla_weights v = w;
  v.q_proj = v.q_b_proj;  // both forms of q
  bad(good, v);
  v = w;
  v.kv_b_proj = nullptr;
  bad(good, v);
  v = w;
  v.struct_size = 0;
  bad(good, v);
  mha_attention_options opt{sizeof opt, static_cast<mha_dtype>(7), MHA_WEIGHTS_COMPUTE, 0};
  CHECK(mha_mla_create(&good, &w, &opt, &m) == MHA_INVALID_ARGUMENT);
  CHECK(m == untouched);
  // Quantized weights: a NaN weight is refused.
  opt.compute = MHA_FP32;
  opt.weight_format = MHA_WEIGHTS_INT8;
  MlaLayer bad_layer(good, 5);
  bad_layer.o[3] = NAN;
  const mha_mla_weights bw = bad_layer.view();
  CHECK(mha_mla_create(&good, &bw, &opt, &m) == MHA_INVALID_ARGUMENT);
  CHECK(std::string(mha_last_error()).find("MLA weight") != std::string::npos);
  CHECK(m == untouched);
}

TEST_CASE("mla: quantized weights, weight-only and with int8 activations", "[mla][quant]") {
  const mha_mla_config c = yarn(small_config(40, 3, 24, 512, 128, 64, 128), 40, 4096, 1, 1);
  const MlaLayer layer(c, 17);
  const std::size_t E = c.hidden_size, seq = 6;
  const auto x = random_vector(seq * E, 18);
  const auto ref = mla_reference(layer, 1, seq, 0, x.data());
  struct Format {
    mha_dtype compute;
    mha_weight_format f;
    std::size_t group;
    mha_activations act;
    double limit;  // of the error against the fp32 layer (measured: see below)
  };
  // Measured (forward, steps): int8 weight-only 7.6e-3, 7.9e-3; int4 g32
  // 1.01e-1, 1.00e-1; W8A8 1.23e-2, 1.04e-2; W4A8 g128 on the bf16 core
  // 1.17e-1, 1.22e-1; uint4 g64 with int8 activations 1.20e-1; int8 g32
  // weight-only on the bf16 core 5.2e-3 (random weights at PyTorch's scale,
  // where 4-bit codes keep about 3 bits of each): each bound about twice that.
  const Format formats[] = {{MHA_FP32, MHA_WEIGHTS_INT8, 0, MHA_ACTIVATIONS_FLOAT, 1.5e-2},
                            {MHA_FP32, MHA_WEIGHTS_INT4, 32, MHA_ACTIVATIONS_FLOAT, 2e-1},
                            {MHA_FP32, MHA_WEIGHTS_INT8, 0, MHA_ACTIVATIONS_INT8, 2.5e-2},
                            {MHA_BF16, MHA_WEIGHTS_INT4, 128, MHA_ACTIVATIONS_INT8, 2.5e-1},
                            {MHA_BF16, MHA_WEIGHTS_INT8, 32, MHA_ACTIVATIONS_FLOAT, 1.5e-2},
                            {MHA_FP32, MHA_WEIGHTS_UINT4, 64, MHA_ACTIVATIONS_INT8, 2.5e-1}};
  for (const Format& f : formats) {
    mha_attention_options opt{sizeof opt, f.compute, f.f, f.group, f.act};
    const Mla mla(layer.cfg, layer.view(), &opt);
    std::vector<float> out(x.size());
    mla.forward(1, seq, 0, x.data(), out.data());
    const double err = rel_error(out, ref);
    INFO("format " << f.f << " group " << f.group << " act " << f.act << " err " << err);
    CHECK(err <= f.limit);
    CHECK(err > 1e-5);  // really quantized
    // Steps, chunked or not, as the fp32 layer's: within the same bound, and
    // the same bits however they are chunked.
    const auto decoded = step_all(mla, 1, seq, x.data(), {1, 1, 1, 1, 1, 1}, MHA_KV_DEFAULT, E);
    CHECK(rel_error(decoded, ref) <= f.limit);
    CHECK(step_all(mla, 1, seq, x.data(), {2, 4}, MHA_KV_DEFAULT, E) == decoded);
  }
}

TEST_CASE("mla: bits do not depend on the thread count", "[mla]") {
  if (!threads_allowed()) {
    WARN("skipped: threads are not allowed here (qemu-user, MHA_TEST_SINGLE_THREAD=1)");
    return;
  }
  const mha_mla_config c = yarn(small_config(48, 4, 16, 512, 128, 64, 128), 40, 4096, 1, 1);
  const MlaLayer layer(c, 57);
  const Mla mla(layer.cfg, layer.view());
  const std::size_t E = 48, seq = 300;  // keys past one tile: split-KV at 300
  const auto x = random_vector(seq * E, 58);
  std::vector<float> first_fwd, first_step;
  for (std::size_t threads : {1, 2, 3, 8, 32}) {
    mha_set_num_threads(threads);
    std::vector<float> fwd(seq * E), stepped(E);
    mla.forward(1, seq, 0, x.data(), fwd.data());
    MlaKvCache cache(mla, 1, seq);
    std::vector<float> prefix((seq - 1) * E);
    cache.step(seq - 1, x.data(), prefix.data());
    cache.step(1, x.data() + (seq - 1) * E, stepped.data());
    if (first_fwd.empty()) {
      first_fwd = fwd;
      first_step = stepped;
    }
    INFO("threads " << threads);
    CHECK(fwd == first_fwd);
    CHECK(stepped == first_step);
  }
  mha_set_num_threads(0);
}

TEST_CASE("mla: concurrent steps on one object, each on its own cache", "[mla][threads]") {
  if (!threads_allowed()) {
    WARN("skipped: threads are not allowed here (qemu-user, MHA_TEST_SINGLE_THREAD=1)");
    return;
  }
  const mha_mla_config c = small_config(32, 4, 12, 40, 8, 4, 8);
  const MlaLayer layer(c, 67);
  const Mla mla(layer.cfg, layer.view());
  const std::size_t E = 32, seq = 20;
  const auto x = random_vector(seq * E, 68);
  const auto alone = step_all(mla, 1, seq, x.data(), {5, 1, 14}, MHA_KV_DEFAULT, E);
  std::vector<std::vector<float>> got(4);
  std::vector<std::thread> threads;
  for (auto& g : got) {
    threads.emplace_back([&] {
      try {
        g = step_all(mla, 1, seq, x.data(), {5, 1, 14}, MHA_KV_DEFAULT, E);
      } catch (const Error&) {
        g.clear();  // fails the comparison below
      }
    });
  }
  for (auto& t : threads) t.join();
  REQUIRE(alone.size() == seq * E);
  for (const auto& g : got) CHECK(g == alone);
}

TEST_CASE("mla: a forked latent slot gives the bits of an unshared copy", "[mla][paged]") {
  const mha_mla_config c = yarn(small_config(24, 2, 0, 512, 128, 64, 128), 32, 4096, 1, 1);
  const MlaLayer layer(c, 31);
  const Mla mla(layer.cfg, layer.view());
  const std::size_t E = c.hidden_size, prompt = 37;
  const auto x = random_vector((prompt + 2) * E, 32);
  for (mha_kv_dtype dt : {MHA_KV_DEFAULT, MHA_KV_INT8}) {
    INFO("dtype " << dt);
    MlaPagedKvCache shared(mla, 3, 16, 8, dt), twin(mla, 3, 16, 16, dt);
    std::vector<float> out((prompt + 2) * E), got(E), want(E);
    const std::size_t s0[] = {0}, s1[] = {1}, whole[] = {0, prompt}, one[] = {0, 1};
    shared.step(1, s0, whole, x.data(), out.data());
    // Slot 1 shares slot 0's first 2 blocks and copies its partial third.
    REQUIRE(mha_kv_cache_fork_slot(shared.handle(), 0, 1, prompt) == MHA_OK);
    REQUIRE(mha_kv_cache_free_blocks(shared.handle()) == 4);
    twin.step(1, s1, whole, x.data(), out.data());
    // Each continues with its own token: the bits of the unshared twin.
    shared.step(1, s1, one, &x[prompt * E], got.data());
    twin.step(1, s1, one, &x[prompt * E], want.data());
    CHECK(std::memcmp(got.data(), want.data(), E * sizeof(float)) == 0);
    shared.step(1, s0, one, &x[(prompt + 1) * E], got.data());
    twin.step(1, s1, one, &x[(prompt + 1) * E], want.data());
    REQUIRE(mha_kv_cache_truncate_slot(twin.handle(), 1, 0) == MHA_OK);
    twin.step(1, s1, whole, x.data(), out.data());
    twin.step(1, s1, one, &x[(prompt + 1) * E], want.data());
    CHECK(std::memcmp(got.data(), want.data(), E * sizeof(float)) == 0);
  }
}

TEST_CASE("mla: a decode step over forked latent slots computes their shared chunks once",
          "[mla][paged][cascade]") {
  const mha_mla_config c = yarn(small_config(24, 2, 0, 512, 128, 64, 128), 32, 4096, 1, 1);
  const MlaLayer layer(c, 33);
  const Mla mla(layer.cfg, layer.view());
  // Past one chunk of the key grid (512 keys rounded up to the key tile:
  // 720 on AVX2's strips of 24, 756 on NEON's of 12), which the forks share.
  const std::size_t E = c.hidden_size, prompt = 800, slots = 3;
  const auto x = random_vector(prompt * E, 34), next = random_vector(slots * E, 35);
  const std::vector<mha_kv_dtype> dtypes =
      full_scale() ? std::vector<mha_kv_dtype>{MHA_KV_DEFAULT, MHA_KV_INT8, MHA_KV_FP8_E4M3}
                   : std::vector<mha_kv_dtype>{MHA_KV_DEFAULT};
  for (mha_kv_dtype dt : dtypes) {
    INFO("dtype " << dt);
    MlaPagedKvCache cache(mla, slots, 16, 80, dt);
    std::vector<float> out(prompt * E), got(slots * E), want(slots * E);
    const std::size_t first = 0, whole[] = {0, prompt}, all[] = {0, 1, 2}, one[] = {0, 1, 2, 3};
    cache.step(1, &first, whole, x.data(), out.data());
    for (std::size_t s = 1; s < slots; ++s) cache.fork_slot(0, s, prompt - s);
    // The step with the cascade, then again without (forked slots give the
    // bits of unshared copies: "a forked latent slot ...").
    cache.step(slots, all, one, next.data(), got.data());
    CHECK(cache.shared_chunks() > 0);
    for (std::size_t s = 0; s < slots; ++s) cache.truncate_slot(s, prompt - s);
    detail::set_core_cascade(false);
    cache.step(slots, all, one, next.data(), want.data());
    detail::set_core_cascade(true);
    CHECK(cache.shared_chunks() == 0);
    CHECK(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)) == 0);
  }
}

TEST_CASE("mla: a tree step's rows and accepted path give the bits of plain steps",
          "[mla][paged][tree]") {
  const mha_mla_config c = yarn(small_config(24, 2, 0, 512, 128, 64, 128), 32, 4096, 1, 1);
  const MlaLayer layer(c, 36);
  const Mla mla(layer.cfg, layer.view());
  const std::size_t E = c.hidden_size, prompt = 40, n = 6;
  const auto x = random_vector(prompt * E, 37), tree_x = random_vector(n * E, 38);
  const std::int32_t parent[] = {-1, 0, 0, 1, -1, 3};  // paths to 5: 0, 1, 3, 5
  for (mha_kv_dtype dt : {MHA_KV_DEFAULT, MHA_KV_INT8, MHA_KV_FP8_E4M3}) {
    INFO("dtype " << dt);
    MlaPagedKvCache cache(mla, 2, 16, 16, dt);
    std::vector<float> out(prompt * E), tree_out(n * E);
    const std::size_t s0 = 0, s1 = 1, whole[] = {0, prompt}, rows[] = {0, n};
    cache.step(1, &s0, whole, x.data(), out.data());
    cache.step_tree(1, &s0, rows, parent, tree_x.data(), tree_out.data());
    // Row 5 against a plain step of its path on a fork of the history.
    const std::size_t path[] = {0, 1, 3, 5}, four[] = {0, 4};
    std::vector<float> path_x;
    for (std::size_t j : path) {
      path_x.insert(path_x.end(), tree_x.begin() + j * E, tree_x.begin() + (j + 1) * E);
    }
    cache.fork_slot(0, 1, prompt);
    cache.step(1, &s1, four, path_x.data(), out.data());
    CHECK(std::memcmp(&out[3 * E], &tree_out[5 * E], E * sizeof(float)) == 0);
    // Accepted, the path is slot 1's history: the next step agrees.
    cache.accept_path(0, 4, path);
    REQUIRE(cache.slot_length(0) == prompt + 4);
    const std::size_t one[] = {0, 1};
    std::vector<float> got(E), want(E);
    cache.step(1, &s0, one, x.data(), got.data());
    cache.step(1, &s1, one, x.data(), want.data());
    CHECK(std::memcmp(got.data(), want.data(), E * sizeof(float)) == 0);
  }
}

}  // namespace
}  // namespace mha::test
