#pragma once
// StateLocks: the api's locks of the state layer, in one place (seed §25.3):
//
//   box(box_id)          exclusive per box: saves and restores of one box never overlap
//   box_for_prune(id)    the same lock, taken by the GC pass (state_gc.h) while it prunes
//                        the box; box_held() does not count it, so a save before hibernating
//                        waits for the prune instead of being skipped as covered
//   user_shared(user)    held by every save, restore and browse of the user's boxes, from its
//                        start (the head or index read) to its commit
//   user_exclusive(user) the per-user chunk sweep (src/state retention/prune/sweep): waits for
//                        every shared holder to finish, and keeps new ones out until released
//
// A waiting exclusive locker blocks new shared lockers (so a steady stream of saves cannot
// starve the sweep). Locks are in-process; several api replicas would need them in a shared
// database first (seed §25.3).
//
// Guards release on destruction. Affinity: one executor (the api's); not thread-safe.

#include "base/result.h"
#include "base/status.h"
#include "net/asio.h"
#include "net/signal.h"

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>

namespace cb::api {

class StateLocks {
 public:
  explicit StateLocks(net::Executor executor) : executor_(std::move(executor)) {}
  StateLocks(const StateLocks&) = delete;
  StateLocks& operator=(const StateLocks&) = delete;

  class Guard {
   public:
    Guard() = default;
    Guard(Guard&& o) noexcept : release_(std::move(o.release_)) { o.release_ = nullptr; }
    Guard& operator=(Guard&& o) noexcept {
      reset();
      release_ = std::move(o.release_);
      o.release_ = nullptr;
      return *this;
    }
    Guard(const Guard&) = delete;
    Guard& operator=(const Guard&) = delete;
    ~Guard() { reset(); }
    void reset() {
      if (release_) release_();
      release_ = nullptr;
    }
    bool held() const { return static_cast<bool>(release_); }

   private:
    friend class StateLocks;
    explicit Guard(std::function<void()> release) : release_(std::move(release)) {}
    std::function<void()> release_;
  };

  // Errors: kCancelled when the waiting coroutine is cancelled.
  asio::awaitable<Result<Guard>> box(std::string box_id) {
    auto e = entry(boxes_, box_id);
    while (e->writer) {
      Status st = co_await e->changed.wait();
      if (!st.ok()) co_return st;
    }
    e->writer = true;
    co_return Guard([e] {
      e->writer = false;
      e->changed.notify();
    });
  }

  // box(), for the GC pass's prune of the box. Errors: as box().
  asio::awaitable<Result<Guard>> box_for_prune(std::string box_id) {
    auto e = entry(boxes_, box_id);
    while (e->writer) {
      Status st = co_await e->changed.wait();
      if (!st.ok()) co_return st;
    }
    e->writer = true;
    e->pruning = true;
    co_return Guard([e] {
      e->writer = false;
      e->pruning = false;
      e->changed.notify();
    });
  }

  asio::awaitable<Result<Guard>> user_shared(std::string user) {
    auto e = entry(users_, user);
    while (e->writer || e->writers_waiting > 0) {
      Status st = co_await e->changed.wait();
      if (!st.ok()) co_return st;
    }
    ++e->readers;
    co_return Guard([e] {
      --e->readers;
      e->changed.notify();
    });
  }

  asio::awaitable<Result<Guard>> user_exclusive(std::string user) {
    auto e = entry(users_, user);
    ++e->writers_waiting;
    while (e->writer || e->readers > 0) {
      Status st = co_await e->changed.wait();
      if (!st.ok()) {
        --e->writers_waiting;
        e->changed.notify();
        co_return st;
      }
    }
    --e->writers_waiting;
    e->writer = true;
    co_return Guard([e] {
      e->writer = false;
      e->changed.notify();
    });
  }

  // True while box(|box_id|) is held by a save or restore (not by box_for_prune()).
  bool box_held(const std::string& box_id) const {
    auto it = boxes_.find(box_id);
    return it != boxes_.end() && it->second->writer && !it->second->pruning;
  }

  // True while box_for_prune(|box_id|) is held.
  bool box_pruning(const std::string& box_id) const {
    auto it = boxes_.find(box_id);
    return it != boxes_.end() && it->second->pruning;
  }

  // For tests: exclusive lockers of |user| waiting now.
  int user_exclusive_waiting(const std::string& user) const {
    auto it = users_.find(user);
    return it == users_.end() ? 0 : it->second->writers_waiting;
  }

  // For tests and /metrics: shared holders of |user| now.
  int user_readers(const std::string& user) const {
    auto it = users_.find(user);
    return it == users_.end() ? 0 : it->second->readers;
  }

 private:
  struct Entry {
    explicit Entry(const net::Executor& ex) : changed(ex) {}
    int readers = 0;
    bool writer = false;
    bool pruning = false;  // boxes: the writer is the GC pass's prune
    int writers_waiting = 0;
    net::Signal changed;
  };
  // Entries are shared with the guards (co-owners: the map and every live guard), so a guard
  // may outlive the map's entry.
  std::shared_ptr<Entry> entry(std::map<std::string, std::shared_ptr<Entry>>& m,
                               const std::string& key) {
    auto& slot = m[key];
    if (!slot) slot = std::make_shared<Entry>(executor_);
    return slot;
  }

  net::Executor executor_;
  std::map<std::string, std::shared_ptr<Entry>> boxes_;
  std::map<std::string, std::shared_ptr<Entry>> users_;
};

}  // namespace cb::api
