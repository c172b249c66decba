#pragma once
// run_blocking(): runs blocking work (file trees, fsync, hashing, zstd, sealing) off the loop
// and resumes the awaiting coroutine on its executor with the result (house style H10: never
// block a loop). Two forms:
//
//   run_blocking(fn)        a new thread per call: for jobs that take long and are few (a state
//                           save or restore, a store commit), which must not wait for others
//   run_blocking(pool, fn)  a thread of |pool|: for short jobs that come many at a time (the
//                           api's state door reads or writes one chunk per request, 24,000 in a
//                           first save), where starting a thread costs more than the job
//
//   Result<Record> r = co_await net::run_blocking([&]() -> Result<Record> { return commit(); });
//
// db::Worker is the form for short, ordered database work.
//
// The awaiting coroutine is suspended until the function returns, so the function may use the
// caller's locals by reference. Not cancellable: once started, the function runs to its end
// (give it a flag to check if it should stop early). An exception escaping it becomes kInternal.
//
// Affinity: call from a coroutine. A BlockingPool is thread-safe; its destructor runs the jobs
// already queued, then joins its threads, so destroy it before what its jobs use.

#include "base/result.h"
#include "base/status.h"
#include "net/asio.h"

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

namespace cb::net {

class BlockingPool {
 public:
  explicit BlockingPool(size_t threads);
  ~BlockingPool();
  BlockingPool(const BlockingPool&) = delete;
  BlockingPool& operator=(const BlockingPool&) = delete;

  // Runs |job| on one of the threads, after the jobs queued before it have started.
  template <typename Job>
  void post(Job job) {
    enqueue(std::make_unique<Model<Job>>(std::move(job)));
  }

 private:
  struct Concept {
    virtual ~Concept() = default;
    virtual void run() = 0;
  };
  template <typename Job>
  struct Model final : Concept {
    explicit Model(Job j) : job(std::move(j)) {}
    void run() override { job(); }
    Job job;
  };
  void enqueue(std::unique_ptr<Concept> job);
  void loop();

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::unique_ptr<Concept>> queue_;  // guarded by mu_
  bool stopping_ = false;                       // guarded by mu_
  std::vector<std::thread> threads_;
};

namespace internal {

// Runs |f|, turning an escaping exception into kInternal, and posts the result to |handler|
// through |work| (which keeps the caller's io_context from returning from run() meanwhile).
template <typename R, typename Handler, typename Fn, typename Work>
void complete_blocking(Handler& handler, Fn& f, Work& work) {
  std::optional<R> result;
  try {
    result.emplace(f());
  } catch (const std::exception& e) {
    result.emplace(internal_error(std::string("blocking job: exception: ") + e.what()));
  }
  asio::post(work, [h = std::move(handler), r = std::move(*result)]() mutable {
    std::move(h)(std::move(r));
  });
}

// Starts |fn| with |start|, which gets a nullary job to run on some other thread.
template <typename Fn, typename Start>
auto start_blocking(Fn fn, Start start) -> asio::awaitable<std::invoke_result_t<Fn&>> {
  using R = std::invoke_result_t<Fn&>;
  auto initiate = [start](auto handler, Fn f) {
    auto work = asio::prefer(asio::get_associated_executor(handler),
                             asio::execution::outstanding_work.tracked);
    start([h = std::move(handler), f = std::move(f), work = std::move(work)]() mutable {
      complete_blocking<R>(h, f, work);
    });
  };
  auto token = asio::experimental::as_tuple(asio::use_awaitable);
  auto [result] = co_await asio::async_initiate<decltype(token), void(R)>(std::move(initiate),
                                                                          token, std::move(fn));
  co_return std::move(result);
}

}  // namespace internal

template <typename Fn>
auto run_blocking(Fn fn) -> asio::awaitable<std::invoke_result_t<Fn&>> {
  auto on_new_thread = [](auto job) { std::thread(std::move(job)).detach(); };
  co_return co_await internal::start_blocking(std::move(fn), on_new_thread);
}

template <typename Fn>
auto run_blocking(BlockingPool& pool, Fn fn) -> asio::awaitable<std::invoke_result_t<Fn&>> {
  auto on_pool = [&pool](auto job) { pool.post(std::move(job)); };
  co_return co_await internal::start_blocking(std::move(fn), on_pool);
}

}  // namespace cb::net
