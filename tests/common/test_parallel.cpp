// The one thread policy (threads_for, lib/common/parallel.hpp): a thread per
// 2M flops or per 512 KiB moved, at most the thread limit, and 1 without
// asking TBB for work that fits one thread.
#include <mha/mha.h>

#include <algorithm>
#include <catch2/catch.hpp>

#include "common/parallel.hpp"
#include "support/reference.hpp"

using mha::detail::threads_for;

TEST_CASE("threads_for gives work that fits one thread one thread", "[threads]") {
  CHECK(threads_for({}) == 1);
  CHECK(threads_for({3.99e6, 0}) == 1);
  CHECK(threads_for({0, 1024.0 * 1024 - 1}) == 1);
  CHECK(threads_for({3.99e6, 1024.0 * 1024 - 1}) == 1);
}

TEST_CASE("threads_for allows a thread per 2M flops or 512 KiB, up to the limit", "[threads]") {
  if (!mha::test::threads_allowed()) {
    WARN("skipped: this run must not start threads (qemu-user)");
    return;
  }
  mha_set_num_threads(0);
  const std::size_t all = mha_get_num_threads();
  CHECK(threads_for({4e6, 0}) == std::min<std::size_t>(2, all));
  CHECK(threads_for({0, 1024.0 * 1024}) == std::min<std::size_t>(2, all));
  CHECK(threads_for({6e6, 2048.0 * 1024}) == std::min<std::size_t>(4, all));
  CHECK(threads_for({1e15, 0}) == all);
  mha_set_num_threads(1);
  CHECK(threads_for({1e15, 1e15}) == 1);
  mha_set_num_threads(0);
}
