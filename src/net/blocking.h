#pragma once
// run_blocking(): runs blocking work (file trees, fsync, hashing, zstd, sealing) off the loop
// and resumes the awaiting coroutine on its executor with the result (house style H10: never
// block a loop). Two forms:
//
//   run_blocking(fn)        a new thread per call: for jobs that take long and are few (a state
//                           save or restore, a store commit), which must not wait for others
//   run_blocking(pool, fn)  a thread of |pool| (an asio::thread_pool): for short jobs that come
//   many at a time (the
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
// Affinity: call from a coroutine. An owner of a pool calls its join() before destroying what
// its jobs use: join() runs the jobs already queued (the destructor would drop them).

#include "base/result.h"
#include "base/status.h"
#include "net/asio.h"

#include <exception>
#include <optional>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>

namespace cb::net {

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
auto run_blocking(asio::thread_pool& pool, Fn fn) -> asio::awaitable<std::invoke_result_t<Fn&>> {
  auto on_pool = [&pool](auto job) { asio::post(pool, std::move(job)); };
  co_return co_await internal::start_blocking(std::move(fn), on_pool);
}

}  // namespace cb::net
