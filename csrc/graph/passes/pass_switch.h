// Passes that can be switched off for side-by-side measurements and tests:
// NAME=0 in the environment turns one off. Read each time it is asked (a
// plan is built), so one process can compare both settings.
#pragma once
#include <cstdlib>
#include <cstring>

namespace twinfer::passes {

inline bool pass_enabled(const char* env_var) {
  const char* e = std::getenv(env_var);
  return !(e && std::strcmp(e, "0") == 0);
}

}  // namespace twinfer::passes
