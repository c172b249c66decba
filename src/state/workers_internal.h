#pragma once
// Workers<Job>: a fixed set of threads that run one function over queued jobs, with a bounded
// queue and the first error kept. What a save's reading threads (scanner.cc) and sealing
// threads (save.cc) share. Internal to src/state.
//
// Thread-safety: submit() and finish() from any thread; the function runs on the workers.

#include "base/status.h"

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace cb::state::internal {

template <typename Job>
class Workers {
 public:
  // Starts |threads| threads that run |work| on each job; at most |max_queued| wait. After a
  // job failed, the ones still queued are dropped (destroyed) without running.
  Workers(int threads, size_t max_queued, std::function<Status(Job&)> work)
      : work_(std::move(work)), max_queued_(max_queued) {
    for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { loop(); });
  }
  ~Workers() { (void)finish(); }
  Workers(const Workers&) = delete;
  Workers& operator=(const Workers&) = delete;

  // Queues |job|, waiting for room. Errors: the first failed job's, instead (|job| dropped).
  Status submit(Job job) {
    std::unique_lock lock(mu_);
    room_cv_.wait(lock, [&] { return queue_.size() < max_queued_ || !first_error_.ok(); });
    if (!first_error_.ok()) return first_error_;
    queue_.push_back(std::move(job));
    ++pending_;
    work_cv_.notify_one();
    return ok_status();
  }

  // Waits for every job and stops the threads. Errors: the first failed job's.
  Status finish() {
    {
      std::unique_lock lock(mu_);
      idle_cv_.wait(lock, [&] { return pending_ == 0; });
      stopping_ = true;
      work_cv_.notify_all();
    }
    for (std::thread& t : threads_) t.join();
    threads_.clear();
    std::lock_guard lock(mu_);
    return first_error_;
  }

 private:
  void loop() {
    // One waiter woken per event (notify_one): with 8 put threads on 2 cores, waking every
    // thread for every chunk cost more CPU in futex and scheduler work than BLAKE2b (perf,
    // 2026-11-30 18:30).
    std::unique_lock lock(mu_);
    while (true) {
      work_cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, and nothing left
      Job job = std::move(queue_.front());
      queue_.pop_front();
      // A waiting submit() is woken once the queue is half empty, not at every job: it then
      // queues several jobs in a row, and the threads switch places far less often.
      if (queue_.size() <= max_queued_ / 2) room_cv_.notify_one();
      const bool failed = !first_error_.ok();
      lock.unlock();
      Status s = failed ? ok_status() : work_(job);
      {
        [[maybe_unused]] Job dropped = std::move(job);  // destroyed before the lock is taken again
      }
      lock.lock();
      if (!s.ok() && first_error_.ok()) {
        first_error_ = s;
        room_cv_.notify_all();  // submit() returns the error
      }
      if (--pending_ == 0) idle_cv_.notify_all();
    }
  }

  const std::function<Status(Job&)> work_;
  const size_t max_queued_;
  std::mutex mu_;
  std::condition_variable work_cv_;  // a job queued, or stopping
  std::condition_variable room_cv_;  // room in the queue, or a job failed
  std::condition_variable idle_cv_;  // pending_ fell to 0
  // Guarded by mu_:
  std::deque<Job> queue_;
  size_t pending_ = 0;  // queued or running
  bool stopping_ = false;
  Status first_error_;
  std::vector<std::thread> threads_;
};

}  // namespace cb::state::internal
