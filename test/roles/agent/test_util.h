#pragma once
// Helpers shared by the agent tests: a temporary directory, identity files, and a signing key
// playing the api's part.

#include "base/status.h"
#include "crypto/credential.h"
#include "crypto/keys.h"
#include "crypto/random.h"

#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

namespace Catch {
template <>
struct StringMaker<cb::Status> {
  static std::string convert(const cb::Status& s) { return s.to_string(); }
};
}  // namespace Catch

namespace cb::agent::test {

// A fresh directory under /tmp (short, so unix socket paths inside it fit), removed with
// everything in it on destruction.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = "/tmp/cb-agent-XXXXXX";
    CB_CHECK(::mkdtemp(tmpl.data()) != nullptr);
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }
  std::string operator/(std::string_view name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

// Writes |text| to |path| in place (truncate and write, same inode), the way a shell
// redirection would: the hardest case for a watcher that looks at stat().
inline void write_file(const std::string& path, std::string_view text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  REQUIRE(out.good());
}

inline std::string identity_json(const crypto::SigningKey& key, std::string_view key_id,
                                 std::string_view box_id, std::string_view wake_id) {
  crypto::BoxIdentity id;
  id.box_id = std::string(box_id);
  id.wake_id = std::string(wake_id);
  id.key_id = std::string(key_id);
  id.public_key = key.public_key();
  auto text = crypto::serialize_box_identity(id);
  REQUIRE(text.ok());
  return *text;
}

inline int64_t now_unix() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// A credential as the api issues it: valid for 10 minutes from now.
inline std::string fresh_credential(const crypto::SigningKey& key, std::string_view key_id,
                                    std::string_view box_id, std::string_view wake_id) {
  return crypto::issue_credential(key, key_id, box_id, wake_id,
                                  now_unix() + crypto::kCredentialLifetimeSeconds);
}

}  // namespace cb::agent::test
