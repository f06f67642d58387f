#include "common/error.hpp"

#include <string>

namespace mha {

Error::Error(mha_status status, const std::string& message)
    : std::runtime_error(message), status_(status) {}
Error::~Error() = default;

namespace detail {
namespace {
thread_local std::string last_error;
}

void set_last_error(const char* message) noexcept {
  try {
    last_error = message;
  } catch (...) {
    last_error.clear();  // keep mha_last_error() valid even without memory
  }
}

}  // namespace detail
}  // namespace mha

extern "C" MHA_API const char* mha_last_error(void) {
  return mha::detail::last_error.c_str();
}
