#include "crypto/bytes.h"

#include <sodium.h>

namespace cb::crypto {

void wipe(std::span<uint8_t> bytes) { sodium_memzero(bytes.data(), bytes.size()); }

void wipe(std::string& text) {
  sodium_memzero(text.data(), text.size());
  text.clear();
}

}  // namespace cb::crypto
