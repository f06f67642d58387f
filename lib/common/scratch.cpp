#include "common/scratch.hpp"

#include "common/aligned.hpp"

namespace mha::detail {
namespace {

struct Buffer {
  AlignedFloats data;
  std::size_t capacity = 0;
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
    b.data = alloc_floats(want);
    b.capacity = want;
  }
  return b.data.get();
}

}  // namespace mha::detail
