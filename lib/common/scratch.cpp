#include "common/scratch.hpp"

#include <cstdlib>
#include <new>

namespace mha::detail {
namespace {

struct Buffer {
  float* data = nullptr;
  std::size_t capacity = 0;
  ~Buffer() { std::free(data); }
};

thread_local Buffer buffers[static_cast<unsigned>(ScratchSlot::kCount)];

}  // namespace

float* thread_scratch(ScratchSlot slot, std::size_t floats) {
  Buffer& b = buffers[static_cast<unsigned>(slot)];
  if (floats > b.capacity) {
    // Round up to 64 bytes and keep 1/8 headroom, so sizes that creep up by
    // a little do not reallocate on every call.
    std::size_t want = floats + floats / 8;
    want = (want + 15) & ~std::size_t{15};
    void* p = std::aligned_alloc(64, want * sizeof(float));
    if (p == nullptr) throw std::bad_alloc();
    std::free(b.data);
    b.data = static_cast<float*>(p);
    b.capacity = want;
  }
  return b.data;
}

}  // namespace mha::detail
