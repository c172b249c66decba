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

}  // namespace
}  // namespace cb::state::internal
