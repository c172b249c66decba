#include "state/workers_internal.h"

#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

namespace cb::state::internal {
namespace {

// Several producers against a few workers and a short queue: every job runs once, however the
// queue's low-water wake-ups (a waiting submit() wakes only once the queue is half empty) fall.
// A lost wake-up hangs here, until ctest's timeout fails the test.
TEST_CASE("Workers: every job of several producers runs once, at any queue bound",
          "[state][unit]") {
  for (size_t max_queued : {size_t(1), size_t(2), size_t(3), size_t(8)}) {
    for (int threads : {1, 3}) {
      CAPTURE(max_queued, threads);
      constexpr int kProducers = 3;
      constexpr int kJobsEach = 2000;
      std::vector<std::atomic<int>> runs(kProducers * kJobsEach);
      Workers<int> workers(threads, max_queued, [&](int& job) {
        ++runs[size_t(job)];
        return ok_status();
      });
      std::atomic<int> failed_submits{0};  // Catch's macros are not for other threads
      std::vector<std::thread> producers;
      for (int p = 0; p < kProducers; ++p) {
        producers.emplace_back([&, p] {
          for (int i = 0; i < kJobsEach; ++i) {
            if (!workers.submit(p * kJobsEach + i).ok()) ++failed_submits;
          }
        });
      }
      for (auto& t : producers) t.join();
      CHECK(failed_submits.load() == 0);
      REQUIRE(workers.finish().ok());
      for (size_t i = 0; i < runs.size(); ++i) {
        if (runs[i].load() != 1) FAIL("job " << i << " ran " << runs[i].load() << " times");
      }
    }
  }
}

// Producers that wait for room on a full queue are woken by a failure, every one of them: the
// low-water wake-up alone would leave all but one asleep once the workers stop taking jobs.
TEST_CASE("Workers: a failed job fails every producer waiting for room, and the finish",
          "[state][unit]") {
  std::atomic<bool> release{false};
  Workers<int> workers(1, 2, [&](int& job) {
    if (job != 0) return ok_status();
    // The first job holds the only worker until every producer waits on the full queue.
    while (!release.load()) std::this_thread::yield();
    return internal_error("job 0 failed");
  });
  REQUIRE(workers.submit(0).ok());
  constexpr int kProducers = 3;
  std::vector<Status> results(kProducers);
  std::vector<std::thread> producers;
  for (int p = 0; p < kProducers; ++p) {
    producers.emplace_back([&, p] {
      Status last;
      for (int i = 1; i <= 100 && last.ok(); ++i) last = workers.submit(p * 1000 + i);
      results[size_t(p)] = last;
    });
  }
  // Two jobs fill the queue; the producers then wait for room.
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  release = true;
  for (auto& t : producers) t.join();
  for (const Status& s : results) {
    CHECK(s.code() == Code::kInternal);
    CHECK(s.message() == "job 0 failed");
  }
  CHECK(workers.finish().code() == Code::kInternal);
}

// A job's shared parts run on the workers that have no job: the first part, on the job's own
// thread, returns only once another thread has run a part, so without the helpers this hangs
// until the deadline and fails.
TEST_CASE("Workers: share() runs each part once, on idle workers too", "[state][unit]") {
  constexpr size_t kParts = 200;
  std::vector<std::atomic<int>> runs(kParts);
  std::atomic<int> helped{0};
  std::atomic<bool> timed_out{false};
  Status shared;
  Workers<int>* self = nullptr;
  Workers<int> workers(3, 4, [&](int&) {
    const std::thread::id owner = std::this_thread::get_id();
    shared = self->share(kParts, [&](size_t i) {
      ++runs[i];
      if (std::this_thread::get_id() != owner) {
        ++helped;
      } else if (i == 0) {
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
        while (helped.load() == 0 && !timed_out) {
          if (std::chrono::steady_clock::now() > deadline) timed_out = true;
          std::this_thread::yield();
        }
      }
      return ok_status();
    });
    return ok_status();
  });
  self = &workers;
  REQUIRE(workers.submit(1).ok());
  REQUIRE(workers.finish().ok());
  CHECK(shared.ok());
  CHECK_FALSE(timed_out.load());
  CHECK(helped.load() > 0);
  for (size_t i = 0; i < kParts; ++i) {
    if (runs[i].load() != 1) FAIL("part " << i << " ran " << runs[i].load() << " times");
  }
}

// A failed part fails the share() with its error, the parts not started yet are skipped, and
// share() still waits for the parts that helpers are running: part 0, the caller's, fails
// only once a helper is inside a part that lasts 20 ms.
TEST_CASE("Workers: a failed part fails share() and skips the rest", "[state][unit]") {
  constexpr size_t kParts = 1000;
  std::atomic<int> ran{0};
  std::atomic<int> helpers_running{0};
  std::atomic<int> running_at_return{-1};
  std::atomic<bool> timed_out{false};
  Status shared;
  Workers<int>* self = nullptr;
  Workers<int> workers(2, 2, [&](int&) {
    shared = self->share(kParts, [&](size_t i) {
      ++ran;
      if (i == 0) {
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
        while (helpers_running.load() == 0 && !timed_out) {
          if (std::chrono::steady_clock::now() > deadline) timed_out = true;
          std::this_thread::yield();
        }
        return internal_error("part 0 failed");
      }
      ++helpers_running;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      --helpers_running;
      return ok_status();
    });
    running_at_return = helpers_running.load();
    return ok_status();
  });
  self = &workers;
  REQUIRE(workers.submit(1).ok());
  REQUIRE(workers.finish().ok());
  CHECK_FALSE(timed_out.load());
  CHECK(shared.code() == Code::kInternal);
  CHECK(shared.message() == "part 0 failed");
  CHECK(ran.load() >= 2);
  CHECK(ran.load() < int(kParts));
  CHECK(running_at_return.load() == 0);
}

// Without workers idle (one thread, busy with the job), share() runs every part itself.
TEST_CASE("Workers: share() on a lone worker runs every part on its thread", "[state][unit]") {
  std::vector<int> order;
  Workers<int>* self = nullptr;
  Workers<int> workers(1, 1, [&](int&) {
    return self->share(5, [&](size_t i) {
      order.push_back(int(i));
      return ok_status();
    });
  });
  self = &workers;
  REQUIRE(workers.submit(1).ok());
  REQUIRE(workers.finish().ok());
  CHECK(order == std::vector<int>{0, 1, 2, 3, 4});
}

}  // namespace
}  // namespace cb::state::internal
