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

// Runs body(i) for i in [0, tasks), on at most `max_threads` threads (0 = no
// extra cap). With one thread it is a plain loop on the calling thread and
// touches no TBB machinery at all, so no worker thread is ever created (this
// is what lets the aarch64 suite run under qemu-user, where a second guest
// thread hangs). Otherwise it runs inside tbb::this_task_arena::isolate, so a
// thread waiting here never picks up an unrelated outer task that could reuse
// its thread-local scratch.
void parallel_for(std::size_t tasks, std::size_t max_threads, FunctionRef<void(std::size_t)> body);

}  // namespace mha::detail
