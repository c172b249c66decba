#pragma once
// S3Store: a Store in an S3 bucket (README.md §S3 store), over HTTP/1.1 or HTTPS to any
// endpoint that speaks the S3 REST API with Signature Version 4 (AWS, Ceph radosgw, MinIO...).
// Path-style URLs (http://host:port/<bucket>/<prefix>/<key>), so a bucket name needs no DNS.
//
//   put     PutObject     PUT  /<bucket>/<object>            x-amz-content-sha256 = sha256(body)
//   get     GetObject     GET  /<bucket>/<object>
//   stat    HeadObject    HEAD /<bucket>/<object>            the size from content-length
//   list    ListObjectsV2 GET  /<bucket>?list-type=2&prefix=..&start-after=..&max-keys=N
//   delete  DeleteObjects POST /<bucket>?delete              XML body with Content-MD5
//
// where <object> = <prefix>/<key> (just <key> without a prefix). Every request is signed in
// its Authorization header (sigv4::sign); presign_get()/presign_put() hand out URLs that let
// someone without the secret (the agent, §25.4 step 3) fetch or store one object.
//
// Failures. Every call is idempotent, so each is retried (max_attempts in all) after a
// connection error, a timeout, a 5xx, a 429 or S3's SlowDown/RequestTimeout, waiting
// backoff_base, then twice as long each time (capped at 5 s). Errors:
//   kPermissionDenied  403, naming S3's code: SignatureDoesNotMatch (wrong secret),
//                      InvalidAccessKeyId, AccessDenied, RequestTimeTooSkewed (clock)
//   kNotFound          404 NoSuchKey (and any 404 of HEAD, which has no body)
//   kFailedPrecondition 404 NoSuchBucket: the bucket is missing; never reported as "no object"
//   kResourceExhausted 507, EntityTooLarge, QuotaExceeded
//   kUnavailable       connection failures and 5xx/429 still failing after the last attempt
//   kDeadlineExceeded  request_timeout passed on the last attempt
//   kInternal          any other status, or a response that does not parse
// Messages start "s3 <METHOD> <object>: " and never contain the secret.
//
// Execution: synchronous, like FsStore, for blocking-pool threads (house style H10). Each call
// runs the project's Asio HTTP/1.1 client (http/http1_client.h) on a private io_context owned
// by a pooled connection: a thread takes an idle connection (or makes one), runs its exchange
// to the end on its own thread, and puts it back if the server kept it alive. Nothing runs on
// any other loop, so a call never blocks a network thread and no loop is shared.
//
// Thread-safety: all methods may be called from several threads at once.

#include "base/result.h"
#include "state/store.h"

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace cb::net {
class TlsContext;
}

namespace cb::state {

namespace s3_internal {
struct Connection;  // s3_store.cc: an HTTP/1.1 client on its own io_context
struct Exchange;    // s3_store.cc: one request and the response it got
}  // namespace s3_internal

class S3Store final : public Store {
 public:
  struct Options {
    // "http://host[:port]" or "https://host[:port]", nothing after the authority but an
    // optional "/". Default ports 80 / 443.
    std::string endpoint;
    std::string region = "us-east-1";
    std::string bucket;  // 3..63 of [a-z0-9.-]
    std::string access_key_id;
    // The secret itself, read from a file by the caller (read_secret_file()); never put it on a
    // command line or in a URL.
    std::string secret_access_key;
    // Objects live under "<prefix>/"; "" for the bucket's root. Same grammar as a key.
    std::string prefix;
    // https only: PEM roots ("" = the system's) and whether to verify the server.
    std::string ca_file;
    bool verify_peer = true;
    // One attempt's limit (connect, send, receive); and the retry policy above.
    std::chrono::milliseconds request_timeout{30'000};
    int max_attempts = 4;
    std::chrono::milliseconds backoff_base{200};
    // Idle keep-alive connections kept for reuse.
    size_t max_idle_connections = 8;
  };

  // Checks the options; does no I/O (see check_bucket()).
  // Errors: kInvalidArgument naming the bad option (endpoint, bucket, prefix, region, access
  //   key, secret, max_attempts).
  static Result<std::unique_ptr<S3Store>> open(Options options);
  ~S3Store() override;

  Status put(std::string_view key, std::string_view data) override;
  Result<std::string> get(std::string_view key) override;
  Result<uint64_t> stat(std::string_view key) override;
  Result<ListPage> list(std::string_view prefix, std::string_view start_after,
                        size_t limit = kDefaultListLimit) override;
  Status delete_batch(std::span<const std::string> keys) override;

  // HeadBucket: ok when the bucket exists and the credentials may use it. For a start-up
  // check. Errors: kFailedPrecondition (no such bucket), kPermissionDenied, as above.
  Status check_bucket();

  // Presigned URLs for one object, valid |expires| (1 s .. 7 days) from |at|. GET fetches the
  // object; PUT stores the request's body (any content type; send no other signed header).
  // Both work with a plain HTTP client (curl) and nothing else: the URL is the credential, so
  // hand it only to whoever may read or write that object.
  // Errors: kInvalidArgument for a bad key or expiry.
  Result<std::string> presign_get(std::string_view key, std::chrono::seconds expires,
                                  std::chrono::system_clock::time_point at) const;
  Result<std::string> presign_get(std::string_view key, std::chrono::seconds expires) const {
    return presign_get(key, expires, std::chrono::system_clock::now());
  }
  Result<std::string> presign_put(std::string_view key, std::chrono::seconds expires,
                                  std::chrono::system_clock::time_point at) const;
  Result<std::string> presign_put(std::string_view key, std::chrono::seconds expires) const {
    return presign_put(key, expires, std::chrono::system_clock::now());
  }

  // "s3://<bucket>/<prefix> at <endpoint>", for logs.
  std::string describe() const;
  // Options::ca_file: the PEM roots whoever follows this store's https URLs must trust.
  const std::string& ca_file() const { return options_.ca_file; }
  bool verify_peer() const { return options_.verify_peer; }

 private:
  using Connection = s3_internal::Connection;
  using Exchange = s3_internal::Exchange;
  struct Endpoint {
    bool tls = false;
    std::string host;  // without brackets
    uint16_t port = 0;
    std::string authority;  // the Host header: host, or host:port unless the default
  };
  S3Store(Options options, Endpoint endpoint, std::shared_ptr<net::TlsContext> tls);

  std::string object_name(std::string_view key) const;
  Result<std::string> presign(std::string_view method, std::string_view key,
                              std::chrono::seconds expires,
                              std::chrono::system_clock::time_point at) const;
  // Signs and sends one request, retrying as the header says; |what| names it in errors.
  Status send(Exchange& exchange, std::string_view what);
  Status attempt(Exchange& exchange);
  std::unique_ptr<Connection> take_connection();
  void return_connection(std::unique_ptr<Connection> connection);

  const Options options_;
  const Endpoint endpoint_;
  // https endpoints: the client context. Co-owned by every connection dialed with it.
  std::shared_ptr<net::TlsContext> tls_;

  std::mutex mu_;
  std::vector<std::unique_ptr<Connection>> idle_;  // guarded by mu_
};

// Reads a secret from |path|: the file's bytes without trailing CR/LF/space.
// Errors: kNotFound / kPermissionDenied / kInternal from the file system; kInvalidArgument if
//   it is empty.
Result<std::string> read_secret_file(const std::string& path);

}  // namespace cb::state
