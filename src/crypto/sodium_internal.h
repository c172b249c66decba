#pragma once
// Private to src/crypto: the one place that makes sure libsodium is initialised before a
// cb::crypto call uses it. Other folders call crypto::init() (random.h) instead.

namespace cb::crypto::internal {

// Calls crypto::init() once per process; aborts (CB_CHECK) if libsodium cannot start, because
// every caller here would otherwise run without a working random source.
void ensure_initialized();

}  // namespace cb::crypto::internal
