#include "common/scratch.hpp"

#include <pthread.h>

#include <new>

#include "common/aligned.hpp"
#include "common/checked.hpp"

namespace mha::detail {
namespace {

constexpr auto kSlots = static_cast<unsigned>(ScratchSlot::kCount);

struct Buffer {
  AlignedFloats data;
  std::size_t capacity = 0;
};

// This thread's buffers, allocated on its first use.
struct Buffers {
  Buffer slot[kSlots];
};

// Trivially destructible, so it needs no registration; the key owns the memory.
thread_local Buffers* buffers = nullptr;

// Runs on the exiting thread; clearing the pointer lets a later destructor
// of that thread that still calls into the library start afresh.
void free_buffers(void* p) noexcept {
  delete static_cast<Buffers*>(p);
  buffers = nullptr;
}

// Frees a thread's buffers when it exits. A pthread key, not a thread_local
// with a destructor: glibc aborts the process when it cannot register a TLS
// destructor, whereas pthread_setspecific reports ENOMEM, which becomes
// MHA_OUT_OF_MEMORY.
pthread_key_t exit_key() {
  static const pthread_key_t key = [] {
    pthread_key_t k;
    if (pthread_key_create(&k, free_buffers) != 0) throw std::bad_alloc();
    return k;
  }();
  return key;
}

Buffers& this_thread_buffers() {
  if (buffers == nullptr) {
    const pthread_key_t key = exit_key();
    auto* fresh = new Buffers{};
    if (pthread_setspecific(key, fresh) != 0) {
      delete fresh;
      throw std::bad_alloc();
    }
    buffers = fresh;
  }
  return *buffers;
}

}  // namespace

float* thread_scratch(ScratchSlot slot, std::size_t floats) {
  Buffer& b = this_thread_buffers().slot[static_cast<unsigned>(slot)];
  if (floats > b.capacity) {
    // Round up to 64 bytes and keep 1/8 headroom, so sizes that creep up by
    // a little do not reallocate on every call. A size that cannot be
    // allocated at all, or only backed by overcommit that fails when the
    // pages are touched, is out of memory (never a wrapped small buffer).
    std::size_t want;
    if (!add_ok(floats, floats / 8, want) || !round_up_ok(want, 16, want)) throw std::bad_alloc();
    b.data = alloc_floats(want);
    b.capacity = want;
  }
  return b.data.get();
}

}  // namespace mha::detail
