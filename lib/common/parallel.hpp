// Threading for the drivers. Kernels never thread; drivers split work into a
// task list that is a fixed function of the problem shape, and run it here.
// Because the split never depends on the thread count, every output element
// is computed by the same operations at 1, 2 or 64 threads (bit-identical).
#pragma once

#include <cstddef>
#include <memory>
#include <type_traits>
#include <utility>

namespace mha::detail {

// A non-owning reference to a callable, for the task bodies below: unlike
// std::function it never allocates. A lambda capturing more than two
// pointers does not fit std::function's inline buffer, so each sgemm call
// that ran its blocks through a std::function made a heap allocation. The
// callable must outlive the call it is passed to (a lambda argument does).
template <class Sig>
class FunctionRef;
template <class R, class... Args>
class FunctionRef<R(Args...)> {
 public:
  template <class F, class = std::enable_if_t<!std::is_same_v<std::decay_t<F>, FunctionRef>>>
  FunctionRef(F&& f) noexcept  // NOLINT(google-explicit-constructor): as std::function
      : obj_(const_cast<void*>(static_cast<const void*>(std::addressof(f)))),
        call_([](void* obj, Args... args) -> R {
          return (*static_cast<std::remove_reference_t<F>*>(obj))(std::forward<Args>(args)...);
        }) {}
  R operator()(Args... args) const { return call_(obj_, std::forward<Args>(args)...); }

 private:
  void* obj_;
  R (*call_)(void*, Args...);
};

// Threads a call made now would use: min(mha_set_num_threads/MHA_NUM_THREADS
// if set, the caller's task_arena concurrency).
std::size_t effective_threads() noexcept;

// What a call does, for threads_for: its floating-point operations, and the
// bytes it moves through memory, read and written (what a memory-bound call
// waits on).
struct Work {
  double flops = 0;
  double bytes = 0;
};

// The one thread policy: a thread per kFlopsPerThread flops or per
// kBytesPerThread bytes moved (parallel.cpp), whichever allows more, at most
// effective_threads(). Returns 1 without asking TBB when the work fits one
// thread, so small calls (tens of ns) never touch it and MHA_NUM_THREADS=1
// creates no worker. Callers whose work is in other units convert at the
// call site and say why.
std::size_t threads_for(Work work) noexcept;

// Runs body(i) for i in [0, tasks), on at most `max_threads` threads (0 = no
// extra cap). With one thread it is a plain loop on the calling thread and
// touches no TBB machinery at all, so no worker thread is ever created (this
// is what lets the aarch64 suite run under qemu-user, where a second guest
// thread hangs). Otherwise it runs inside tbb::this_task_arena::isolate, so a
// thread waiting here never picks up an unrelated outer task that could reuse
// its thread-local scratch.
void parallel_for(std::size_t tasks, std::size_t max_threads, FunctionRef<void(std::size_t)> body);

}  // namespace mha::detail
