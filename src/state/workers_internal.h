#pragma once
// Workers<Job>: a fixed set of threads that run one function over queued jobs, with a bounded
// queue and the first error kept; a job may hand parts of its work to the threads that wait
// for a job meanwhile (share()). What a save's reading threads (scanner.cc) and put threads
// (save.cc) share. Internal to src/state.
//
// Thread-safety: submit(), share() and finish() from any thread; the function runs on the
// workers.

#include "base/status.h"

#include <algorithm>
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

  // Runs part(0) ... part(n - 1), each once, on the calling thread and on the workers that
  // have no job to take meanwhile (a queued job goes first); returns once every part that
  // started has returned. After a part failed, the parts not started yet are skipped.
  // |part| must not throw. Errors: the first failed part's.
  //
  // So that a job much longer than the others, such as the last large file of a save, does
  // not leave the other cores idle while it runs alone.
  Status share(size_t n, const std::function<Status(size_t)>& part) {
    Shared s;
    s.part = &part;
    s.n = n;
    std::unique_lock lock(mu_);
    shared_.push_back(&s);
    // The caller takes part 0 before it lets go of the lock: at most n - 1 helpers get one.
    for (size_t woken = 0; woken < std::min(size_t(waiting_), n > 0 ? n - 1 : 0); ++woken)
      work_cv_.notify_one();
    while (s.next < s.n && s.first_error.ok()) run_part(s, lock);
    std::erase(shared_, &s);
    helped_cv_.wait(lock, [&] { return s.running == 0; });
    return s.first_error;
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
    // One waiter woken per job (notify_one), and at most one per part a share() offers: with 8
    // put threads on 2 cores, waking every thread for every chunk cost more CPU in futex and
    // scheduler work than BLAKE2b (perf, 2026-11-30 18:30).
    std::unique_lock lock(mu_);
    while (true) {
      ++waiting_;
      work_cv_.wait(lock, [&] { return stopping_ || !queue_.empty() || open_share() != nullptr; });
      --waiting_;
      if (queue_.empty()) {
        Shared* s = open_share();
        if (s == nullptr) return;  // stopping, and nothing left
        help(*s, lock);
        continue;
      }
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

  // A share() call's parts: the caller and the helpers take them in order.
  struct Shared {
    const std::function<Status(size_t)>* part = nullptr;
    size_t n = 0;
    size_t next = 0;     // the first part not taken
    size_t running = 0;  // parts helpers took and have not finished
    Status first_error;
  };

  // The oldest share() with a part left to take, or nullptr. REQUIRES: mu_ held.
  Shared* open_share() {
    for (Shared* s : shared_) {
      if (s->next < s->n && s->first_error.ok()) return s;
    }
    return nullptr;
  }

  // Takes the next part of |s| and runs it without the lock, keeping the first error.
  // REQUIRES: |lock| holds mu_, and a part is left; holds it again on return.
  void run_part(Shared& s, std::unique_lock<std::mutex>& lock) {
    const size_t i = s.next++;
    lock.unlock();
    Status st = (*s.part)(i);
    lock.lock();
    if (!st.ok() && s.first_error.ok()) s.first_error = std::move(st);
  }

  // Runs one part of |s| on a worker. REQUIRES: |lock| holds mu_.
  void help(Shared& s, std::unique_lock<std::mutex>& lock) {
    ++s.running;
    run_part(s, lock);
    if (--s.running == 0) helped_cv_.notify_all();
  }

  const std::function<Status(Job&)> work_;
  const size_t max_queued_;
  std::mutex mu_;
  std::condition_variable work_cv_;    // a job queued, a share() begun, or stopping
  std::condition_variable room_cv_;    // room in the queue, or a job failed
  std::condition_variable idle_cv_;    // pending_ fell to 0
  std::condition_variable helped_cv_;  // a Shared's running fell to 0
  // Guarded by mu_:
  std::deque<Job> queue_;
  std::vector<Shared*> shared_;  // the share() calls running, oldest first
  int waiting_ = 0;              // threads waiting in loop() for work
  size_t pending_ = 0;           // queued or running
  bool stopping_ = false;
  Status first_error_;
  std::vector<std::thread> threads_;
};

}  // namespace cb::state::internal
