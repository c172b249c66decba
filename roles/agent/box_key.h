#pragma once
// The box's long-lived X25519 key, whose public half Session.Hello returns (seed §4.2(a)).
// Generated on the agent's first start and kept as <data dir>/box.key: the raw 32-byte secret
// scalar (keys.h), mode 0600. Every later start loads the same key, so clients may pin it.
//
// Creation is atomic and race-free: the secret is written and fsynced to a temporary file,
// which is then hard-linked to box.key (link(2) fails if box.key appeared meanwhile, and then
// that key is loaded instead) and the directory is fsynced. A box.key that exists but is not
// 32 bytes is refused rather than replaced: replacing it would silently change the box's
// public key.
//
// Blocking file I/O: call at start-up, before the loop serves.

#include "base/result.h"
#include "crypto/keys.h"
#include "crypto/random.h"

#include <filesystem>
#include <string_view>

namespace cb::agent {

inline constexpr std::string_view kBoxKeyFile = "box.key";

// Loads <data_dir>/box.key, or creates it from |random| if it does not exist. Tightens the
// file to 0600 (with a warning) if it was looser.
// Errors: kDataLoss (box.key is not a 32-byte key); kInternal (I/O, with the path and errno).
Result<crypto::X25519KeyPair> load_or_create_box_key(const std::filesystem::path& data_dir,
                                                     crypto::Random& random);

}  // namespace cb::agent
