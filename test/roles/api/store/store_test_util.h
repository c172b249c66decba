#pragma once
// Helpers for the api store tests: a per-test data dir, a settable clock and a way to open a
// store or fail the test.

#include "base/clock.h"
#include "crypto/random.h"
#include "roles/api/store/store.h"

#include <asio/co_spawn.hpp>
#include <asio/io_context.hpp>
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <stdlib.h>
#include <string>
#include <system_error>

namespace cb::api::testing {

// A fresh directory under $TMPDIR (or /tmp), removed with its contents on destruction.
class TempDir {
 public:
  TempDir() {
    std::string pattern =
        (std::filesystem::temp_directory_path() / "cb-api-store-test-XXXXXX").string();
    path_ = ::mkdtemp(pattern.data()) != nullptr ? pattern : std::string();
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  // The data dir the stores use: a child that does not exist yet, so open() creates it.
  std::filesystem::path data_dir() const { return path_ / "data"; }

 private:
  std::filesystem::path path_;
};

// A clock that reads what the test set. Safe to read from the db worker thread.
class FakeClock final : public Clock {
 public:
  explicit FakeClock(int64_t ms = 1'790'000'000'000) : ms_(ms) {}
  std::chrono::system_clock::time_point now() const override {
    return std::chrono::system_clock::time_point(std::chrono::milliseconds(ms_.load()));
  }
  std::chrono::steady_clock::time_point steady_now() const override {
    return std::chrono::steady_clock::time_point(std::chrono::milliseconds(ms_.load()));
  }
  void advance_ms(int64_t ms) { ms_ += ms; }
  int64_t ms() const { return ms_.load(); }

 private:
  std::atomic<int64_t> ms_;
};

// Clock and randomness for one store; give a second store its own (another seed).
struct TestEnv {
  explicit TestEnv(uint64_t seed = 1) : random(seed) {}
  StoreOptions options() {
    StoreOptions o;
    o.clock = &clock;
    o.random = &random;
    return o;
  }
  FakeClock clock;
  crypto::SeededRandom random;
};

inline SyncStore open_sync(const std::filesystem::path& data_dir, const StoreOptions& options) {
  auto store = SyncStore::open(data_dir, options);
  INFO(store.status().to_string());
  REQUIRE(store.ok());
  return std::move(store).value();
}

inline std::unique_ptr<Store> open_async(const std::filesystem::path& data_dir,
                                         const StoreOptions& options) {
  auto store = Store::open(data_dir, options);
  INFO(store.status().to_string());
  REQUIRE(store.ok());
  return std::move(store).value();
}

// |r|'s value, or the test fails with its status.
template <typename T>
T value_or_fail(Result<T> r) {
  INFO(r.status().to_string());
  REQUIRE(r.ok());
  return std::move(r).value();
}

inline void require_ok(const Status& s) {
  INFO(s.to_string());
  REQUIRE(s.ok());
}

template <typename T>
asio::awaitable<void> store_into(asio::awaitable<T> task, std::optional<T>* out) {
  out->emplace(co_await std::move(task));
}

// Runs |task| on a fresh io_context until it finishes and returns its value. Unlike
// test/support/run_sync.h it needs no default-constructible T (Result<T> has no default).
template <typename T>
T await_sync(asio::awaitable<T> task) {
  std::optional<T> out;
  asio::io_context io;
  asio::co_spawn(io, store_into(std::move(task), &out), [](std::exception_ptr e) {
    if (e) std::rethrow_exception(e);
  });
  io.run();
  REQUIRE(out.has_value());
  return std::move(*out);
}

// The whole file at |path| ("" when it does not exist).
inline std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

}  // namespace cb::api::testing
