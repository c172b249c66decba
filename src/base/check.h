#pragma once
// CB_CHECK(cond) is always on and aborts with the file and line: for invariants whose
// violation would corrupt state or weaken security. CB_DCHECK is compiled out in NDEBUG
// builds: for cheap internal invariants. Never use either on conditions a peer, a guest or a
// file can cause; those are Status values (house style H8).

#include <cstdio>
#include <cstdlib>

namespace cb::internal {
[[noreturn]] inline void check_failed(const char* expr, const char* file, int line) {
  std::fprintf(stderr, "CHECK failed: %s at %s:%d\n", expr, file, line);
  std::abort();
}
}  // namespace cb::internal

#define CB_CHECK(cond) \
  ((cond) ? static_cast<void>(0) : ::cb::internal::check_failed(#cond, __FILE__, __LINE__))

#ifdef NDEBUG
#define CB_DCHECK(cond) static_cast<void>(0)
#else
#define CB_DCHECK(cond) CB_CHECK(cond)
#endif
