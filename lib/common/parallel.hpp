// Threading for the drivers. Kernels never thread; drivers split work into a
// task list that is a fixed function of the problem shape, and run it here.
// Because the split never depends on the thread count, every output element
// is computed by the same operations at 1, 2 or 64 threads (bit-identical).
#pragma once

#include <cstddef>
#include <functional>

namespace mha::detail {

// Threads a call made now would use: min(mha_set_num_threads/MHA_NUM_THREADS
// if set, the caller's task_arena concurrency).
std::size_t effective_threads() noexcept;

// Runs body(i) for i in [0, tasks), on at most `max_threads` threads (0 = no
// extra cap). With one thread it is a plain loop on the calling thread and
// touches no TBB machinery at all, so no worker thread is ever created (this
// is what lets the aarch64 suite run under qemu-user, where a second guest
// thread hangs). Otherwise it runs inside tbb::this_task_arena::isolate, so a
// thread waiting here never picks up an unrelated outer task that could reuse
// its thread-local scratch.
void parallel_for(std::size_t tasks, std::size_t max_threads,
                  const std::function<void(std::size_t)>& body);

}  // namespace mha::detail
