// oneTBB cannot start a worker thread: this binary's pthread_create always
// fails with EAGAIN (as under a process thread limit), so every thread TBB
// tries to launch fails (TBB reports it by throwing std::runtime_error on the
// thread that asked for workers). Threaded calls must still succeed, on the
// calling thread, with the single-threaded result, never MHA_INTERNAL or an
// abort.
#include <mha/mha.h>
#include <pthread.h>
#include <tbb/task_arena.h>

#include <catch2/catch.hpp>
#include <cerrno>
#include <vector>

#include "support/reference.hpp"

// Default visibility, so that the export below can take it.
extern "C" __attribute__((visibility("default"))) int pthread_create(pthread_t*,
                                                                     const pthread_attr_t*,
                                                                     void* (*)(void*), void*) {
  return EAGAIN;
}

TEST_CASE("no worker thread can start: threaded calls succeed on the caller (regression)",
          "[hardening]") {
  if (!mha::test::threads_allowed()) {
    WARN("skipped: TBB must not be asked for threads here");
    return;
  }
  using mha::test::random_vector;
  constexpr std::size_t n = 256, rows = 256, cols = 1024;
  const std::vector<float> a = random_vector(n * n, 1), b = random_vector(n * n, 2);
  const std::vector<float> x = random_vector(rows * cols, 3);
  std::vector<float> c1(n * n), y1(rows * cols), c4(n * n), y4(rows * cols);
  mha_set_num_threads(1);
  REQUIRE(mha_sgemm('N', 'N', n, n, n, 1.f, a.data(), n, b.data(), n, 0.f, c1.data(), n) == MHA_OK);
  REQUIRE(mha_softmax(rows, cols, x.data(), cols, y1.data(), cols, nullptr) == MHA_OK);
  mha_set_num_threads(0);
  tbb::task_arena arena(4);
  mha_status gemm = MHA_INTERNAL, softmax = MHA_INTERNAL;
  arena.execute([&] {
    gemm = mha_sgemm('N', 'N', n, n, n, 1.f, a.data(), n, b.data(), n, 0.f, c4.data(), n);
    // In place: a row finished twice would be wrong.
    y4 = x;
    softmax = mha_softmax(rows, cols, y4.data(), cols, y4.data(), cols, nullptr);
  });
  INFO("mha_last_error: " << mha_last_error());
  CHECK(gemm == MHA_OK);
  CHECK(softmax == MHA_OK);
  CHECK(c4 == c1);
  CHECK(y4 == y1);
}
