#pragma once
// The box's identity as the api last delivered it, and the credential check every call goes
// through (seed §12.1 option A; README.md §Credentials).
//
// The api rewrites the identity file ({"box_id","wake_id","key_id","public_key"}, see
// crypto/credential.h) at every boot and wake with a new wake_id, and with a new key after a
// key rotation. IdentityStore therefore re-checks the file on every call: one stat(2), and a
// re-read only when its device, inode, size, mtime or ctime changed, or when its mtime is so
// recent that a rewrite within the same timestamp tick could hide behind an unchanged stat
// (the "racy git" rule: within kRacyWindow of its mtime the file is re-read and compared).
// A stat of a small tmpfs file on the network loop is the documented exception to "no
// blocking work on the loop" (house style H10): it costs less than queuing to a pool.
//
// Affinity: the agent's io_context (not thread-safe).

#include "base/clock.h"
#include "base/result.h"
#include "crypto/credential.h"
#include "http/headers.h"

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace cb::agent {

// The header the api's edge adds to every relayed call.
inline constexpr std::string_view kCredentialHeader = "x-cocoonbox-credential";
// An identity file is a few hundred bytes; anything past this is not one.
inline constexpr size_t kMaxIdentityFileSize = 64 * 1024;
// Coarse file timestamps advance once per kernel tick (1-10 ms); 2 s covers that with room
// for filesystems with coarser clocks.
inline constexpr std::chrono::seconds kRacyWindow{2};

class IdentityStore {
 public:
  // |clock| (for credential expiry) is not owned and must outlive the store.
  IdentityStore(std::string path, const Clock& clock);
  IdentityStore(const IdentityStore&) = delete;
  IdentityStore& operator=(const IdentityStore&) = delete;

  // The verifier for the identity file as it is now, reloading it first if it changed. The
  // pointer is owned by the store and stays valid until the next call to current().
  // Logs each load and reload (box_id, wake_id, key_id; nothing secret), and each change into
  // or out of an error state.
  // Errors: kUnavailable: "identity not delivered yet" when the file does not exist, or the
  //   file is unreadable, not a regular file, too large or not a valid identity.
  Result<const crypto::CredentialVerifier*> current();

  // The check of one call: exactly one x-cocoonbox-credential header among |headers|, and
  // current()->verify() accepting it.
  // Errors: kUnauthenticated (no header, several headers, or any verify() rejection, whose
  //   message names the failed check and never the credential); kUnavailable from current().
  Status check(const http::Headers& headers);

  const std::string& path() const { return path_; }

 private:
  // What stat(2) says about the file; a change in any member means "re-read".
  struct FileKey {
    uint64_t dev = 0;
    uint64_t ino = 0;
    int64_t size = 0;
    int64_t mtime_ns = 0;
    int64_t ctime_ns = 0;
    uint32_t mode = 0;  // permission bits
    bool operator==(const FileKey&) const = default;
  };

  // Reads and parses the file after a stat change; updates verifier_/error_.
  void reload(const FileKey& key);
  // Records |status| as the current error, logging it when it differs from the last one.
  Status fail(Status status);

  std::string path_;
  const Clock& clock_;
  std::optional<FileKey> key_;          // the stat of the file as last read; nullopt: not read
  std::optional<std::string> content_;  // the bytes last read; nullopt: none
  std::unique_ptr<crypto::CredentialVerifier> verifier_;  // null while error_ is set
  Status error_ = unavailable("identity not loaded");
  bool loaded_once_ = false;  // for "identity loaded" vs "identity reloaded" in the log
};

}  // namespace cb::agent
