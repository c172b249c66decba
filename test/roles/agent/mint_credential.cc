// Test-only: plays the api's part for agent_e2e.sh, with a deterministic ed25519 key derived
// from a numeric seed (crypto::SeededRandom, never used in the product).
//
//   mint_credential identity   SEED KEY_ID BOX_ID WAKE_ID          -> identity file JSON
//   mint_credential credential SEED KEY_ID BOX_ID WAKE_ID EXP_UNIX -> x-cocoonbox-credential
//
// EXP_UNIX may be "+N" or "-N": N seconds from now. Exit 0, or 2 with a message on bad usage.

#include "crypto/credential.h"
#include "crypto/keys.h"
#include "crypto/random.h"

#include <charconv>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <string_view>

namespace {

int usage() {
  std::fprintf(
      stderr,
      "usage: mint_credential identity SEED KEY_ID BOX_ID WAKE_ID\n"
      "       mint_credential credential SEED KEY_ID BOX_ID WAKE_ID EXP_UNIX|+SECS|-SECS\n");
  return 2;
}

std::optional<int64_t> parse_int(std::string_view text) {
  int64_t v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return v;
}

bool valid_id(std::string_view id) { return !id.empty() && id.find('|') == std::string_view::npos; }

}  // namespace

int main(int argc, char** argv) {
  if (argc < 6) return usage();
  const std::string_view mode = argv[1];
  const auto seed = parse_int(argv[2]);
  const std::string_view key_id = argv[3], box_id = argv[4], wake_id = argv[5];
  if (!seed || !valid_id(key_id) || !valid_id(box_id) || !valid_id(wake_id)) return usage();
  cb::crypto::SeededRandom random(static_cast<uint64_t>(*seed));
  const auto key = cb::crypto::SigningKey::generate(random);

  if (mode == "identity" && argc == 6) {
    cb::crypto::BoxIdentity id;
    id.key_id = std::string(key_id);
    id.box_id = std::string(box_id);
    id.wake_id = std::string(wake_id);
    id.public_key = key.public_key();
    auto text = cb::crypto::serialize_box_identity(id);
    if (!text.ok()) {
      std::fprintf(stderr, "mint_credential: %s\n", text.status().to_string().c_str());
      return 2;
    }
    std::printf("%s\n", text->c_str());
    return 0;
  }
  if (mode == "credential" && argc == 7) {
    std::string_view exp_text = argv[6];
    const bool relative = exp_text.front() == '+' || exp_text.front() == '-';
    if (exp_text.front() == '+') exp_text.remove_prefix(1);
    auto exp = parse_int(exp_text);
    if (!exp) return usage();
    if (relative) {
      *exp += std::chrono::duration_cast<std::chrono::seconds>(
                  std::chrono::system_clock::now().time_since_epoch())
                  .count();
    }
    std::printf("%s\n", cb::crypto::issue_credential(key, key_id, box_id, wake_id, *exp).c_str());
    return 0;
  }
  return usage();
}
