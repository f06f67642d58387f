// Internal error helpers: argument checks that throw mha::Error with a message
// naming the argument and the value expected, and the C-ABI guard that turns
// exceptions into mha_status plus a thread-local message.
#pragma once

#include <cstddef>
#include <mha/error.hpp>
#include <new>
#include <sstream>
#include <string>
#include <utility>

namespace mha::detail {

template <class... Parts>
[[noreturn]] void fail(mha_status status, Parts&&... parts) {
  std::ostringstream message;
  (message << ... << std::forward<Parts>(parts));
  throw Error(status, message.str());
}

template <class... Parts>
[[noreturn]] void invalid_argument(Parts&&... parts) {
  fail(MHA_INVALID_ARGUMENT, std::forward<Parts>(parts)...);
}

template <class... Parts>
void check_arg(bool ok, Parts&&... parts) {
  if (!ok) invalid_argument(std::forward<Parts>(parts)...);
}

void set_last_error(const char* message) noexcept;

// Runs f() for a C entry point: MHA_OK, or the status of the exception caught,
// with its message stored for mha_last_error().
template <class F>
mha_status guarded(F&& f) noexcept {
  try {
    std::forward<F>(f)();
    return MHA_OK;
  } catch (const Error& e) {
    set_last_error(e.what());
    return e.status();
  } catch (const std::bad_alloc&) {
    set_last_error("out of memory");
    return MHA_OUT_OF_MEMORY;
  } catch (const std::exception& e) {
    set_last_error(e.what());
    return MHA_INTERNAL;
  } catch (...) {
    set_last_error("unknown internal error");
    return MHA_INTERNAL;
  }
}

}  // namespace mha::detail
