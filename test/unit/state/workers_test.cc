#include "state/workers_internal.h"

#include <catch2/catch.hpp>

#include <atomic>
#include <mutex>
#include <thread>
#include <vector>

namespace cb::state::internal {
namespace {

// Several producers against a few workers and a short queue: every job runs once, however the
// queue's low-water wake-ups (a waiting submit() wakes only once the queue is half empty) fall.
TEST_CASE("workers: every job of several producers runs once, at any queue bound",
          "[state][unit]") {
  for (size_t max_queued : {size_t(1), size_t(2), size_t(3), size_t(8)}) {
    for (int threads : {1, 3}) {
      CAPTURE(max_queued, threads);
      constexpr int kProducers = 3;
      constexpr int kJobsEach = 2000;
      std::vector<std::atomic<int>> runs(kProducers * kJobsEach);
      std::atomic<size_t> most_running{0};
      std::atomic<int> running{0};
      Workers<int> workers(threads, max_queued, [&](int& job) {
        const int now = ++running;
        size_t seen = most_running.load();
        while (size_t(now) > seen && !most_running.compare_exchange_weak(seen, size_t(now))) {
        }
        ++runs[size_t(job)];
        --running;
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
      CHECK(most_running.load() <= size_t(threads));
    }
  }
}

TEST_CASE("workers: a failed job fails the submits that wait and the finish", "[state][unit]") {
  std::atomic<int> ran{0};
  Workers<int> workers(2, 2, [&](int& job) {
    ++ran;
    return job == 10 ? internal_error("job 10 failed") : ok_status();
  });
  Status last;
  for (int i = 0; i < 10'000 && last.ok(); ++i) last = workers.submit(i);
  // A producer stuck on a full queue is woken by the failure, not only by room.
  CHECK(last.code() == Code::kInternal);
  CHECK(last.message() == "job 10 failed");
  Status end = workers.finish();
  CHECK(end.code() == Code::kInternal);
  CHECK(ran.load() < 10'000);
}

}  // namespace
}  // namespace cb::state::internal
