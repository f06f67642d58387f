// mha::Error: the exception the C++ API throws. It carries the same status and
// message the C API returns through mha_status and mha_last_error().
#pragma once

#include <mha/mha.h>

#include <stdexcept>
#include <string>

namespace mha {

class MHA_API Error : public std::runtime_error {
 public:
  Error(mha_status status, const std::string& message);
  ~Error() override;
  mha_status status() const noexcept { return status_; }

 private:
  mha_status status_;
};

}  // namespace mha
