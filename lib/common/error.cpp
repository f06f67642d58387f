#include "common/error.hpp"

#include <algorithm>
#include <cstring>
#include <string>

namespace mha {

Error::Error(mha_status status, const std::string& message)
    : std::runtime_error(message), status_(status) {}
Error::~Error() = default;

namespace detail {
namespace {
// A plain array, not a std::string: a thread_local with a destructor makes
// glibc register it on the thread's first call, and glibc aborts the process
// when that registration runs out of memory.
constexpr std::size_t kMaxMessage = 1024;
thread_local char last_error[kMaxMessage];
}  // namespace

void set_last_error(const char* message) noexcept {
  const std::size_t n = std::min(std::strlen(message), kMaxMessage - 1);
  std::memcpy(last_error, message, n);
  last_error[n] = '\0';
}

}  // namespace detail
}  // namespace mha

extern "C" MHA_API const char* mha_last_error(void) {
  return mha::detail::last_error;
}
