#include "common/parallel.hpp"

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdlib>
#include <memory>
#include <mha/isa.hpp>

namespace mha::detail {
namespace {

std::size_t initial_limit() noexcept {
  const char* env = std::getenv("MHA_NUM_THREADS");
  if (env == nullptr || *env == '\0') return 0;
  char* end = nullptr;
  unsigned long v = std::strtoul(env, &end, 10);
  return (end != nullptr && *end == '\0') ? static_cast<std::size_t>(v) : 0;
}

std::atomic<std::size_t>& user_limit() noexcept {
  static std::atomic<std::size_t> limit{initial_limit()};
  return limit;
}

// One arena per distinct thread cap, created on first use and kept for the
// life of the process: creating an arena per call costs tens of microseconds,
// more than a whole small attention call.
constexpr std::size_t kMaxArenas = 256;
tbb::task_arena& arena_for(std::size_t threads) {
  static std::array<std::atomic<tbb::task_arena*>, kMaxArenas> arenas{};
  auto& slot = arenas[threads];
  tbb::task_arena* arena = slot.load(std::memory_order_acquire);
  if (arena == nullptr) {
    auto fresh = std::make_unique<tbb::task_arena>(static_cast<int>(threads));
    if (slot.compare_exchange_strong(arena, fresh.get(), std::memory_order_acq_rel)) {
      arena = fresh.release();
    }
  }
  return *arena;
}

// Work below which one more thread does not pay for its wake-up: a TBB
// fork/join costs 0.4 us back to back but 12 us when the worker has slept
// (calls 200 us apart, this VM), so a sporadic call needs about 20 us of work
// to gain from a second thread.
// 2M flops: about 10 us of one core at AVX-512 peak. 4M (as before) kept
// sq128 (4.2M) on one thread, 22.5 -> 13.0 us in a loop with 2M.
constexpr double kFlopsPerThread = 2.0e6;
// 512 KiB: about 20 us reading at 25 GB/s. It counts where the flops do not:
// a GEMV reads B once at two flops per float, so it is bound by memory (or
// L3), not by the FMA rate. Counted by flops alone, m = 1 against a 768 x
// 3072 B (2 threads allowed) ran on one: 306 us, against 150 on two.
constexpr double kBytesPerThread = 512.0 * 1024;

}  // namespace

std::size_t threads_for(Work work) noexcept {
  const double cap = std::max(work.flops / kFlopsPerThread, work.bytes / kBytesPerThread);
  if (cap < 2.0) return 1;
  return std::min(effective_threads(), static_cast<std::size_t>(cap));
}

std::size_t effective_threads() noexcept {
  const std::size_t limit = user_limit().load(std::memory_order_relaxed);
  if (limit == 1) return 1;  // never touch TBB at 1 (see parallel.hpp)
  const auto arena = static_cast<std::size_t>(tbb::this_task_arena::max_concurrency());
  return limit == 0 ? arena : std::min(limit, arena);
}

void parallel_for(std::size_t tasks, std::size_t max_threads, FunctionRef<void(std::size_t)> body) {
  std::size_t threads = tasks <= 1 || max_threads == 1 ? 1 : std::min(effective_threads(), tasks);
  if (max_threads != 0) threads = std::min(threads, max_threads);
  if (threads <= 1) {
    for (std::size_t i = 0; i < tasks; ++i) body(i);
    return;
  }
  // Which tasks have finished, so that whatever TBB or a worker could not do
  // is finished here, serially, and no failure inside TBB (a thread that does
  // not start, a worker out of memory, an exception from a task on a worker)
  // reaches the caller half done or std::terminate. Large task counts, rare,
  // take their flags from the heap before anything is written.
  constexpr std::size_t kInlineTasks = 4096;
  std::atomic<bool> inline_done[kInlineTasks];
  std::unique_ptr<std::atomic<bool>[]> heap_done;
  std::atomic<bool>* done = inline_done;
  if (tasks > kInlineTasks) {
    heap_done = std::make_unique<std::atomic<bool>[]>(tasks);
    done = heap_done.get();
  }
  for (std::size_t i = 0; i < tasks; ++i) done[i].store(false, std::memory_order_relaxed);
  auto run = [&] {
    tbb::this_task_arena::isolate([&] {
      tbb::parallel_for(tbb::blocked_range<std::size_t>(0, tasks, 1),
                        [&](const tbb::blocked_range<std::size_t>& r) {
                          for (std::size_t i = r.begin(); i != r.end(); ++i) {
                            // A task that throws is left to the serial pass below.
                            try {
                              body(i);
                              done[i].store(true, std::memory_order_relaxed);
                            } catch (...) {
                            }
                          }
                        });
    });
  };
  try {
    const auto here = static_cast<std::size_t>(tbb::this_task_arena::max_concurrency());
    if (threads < here && threads < kMaxArenas) {
      arena_for(threads).execute(run);
    } else {
      run();
    }
  } catch (...) {
    // TBB itself failed (arena or thread creation, task allocation): the
    // tasks it did not run are run below.
  }
  // TBB has joined every task it started (also when it threw), so `done` is
  // final; the tasks that did not run, or threw, run on this thread, where an
  // exception reaches the caller's guarded().
  for (std::size_t i = 0; i < tasks; ++i) {
    if (!done[i].load(std::memory_order_relaxed)) body(i);
  }
}

}  // namespace mha::detail

namespace mha {
void set_num_threads(std::size_t n) noexcept {
  detail::user_limit().store(n, std::memory_order_relaxed);
}
std::size_t num_threads() noexcept {
  return detail::effective_threads();
}
}  // namespace mha

extern "C" {
MHA_API void mha_set_num_threads(size_t n) {
  mha::set_num_threads(n);
}
MHA_API size_t mha_get_num_threads(void) {
  return mha::num_threads();
}
}
