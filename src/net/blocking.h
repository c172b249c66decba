#pragma once
// run_blocking(): runs blocking work (file trees, fsync, hashing, zstd, sealing) on a thread of
// its own and resumes the awaiting coroutine on its executor with the result (house style H10:
// never block a loop). For jobs that take long and are few (a state save or restore, a store
// commit); db::Worker is the form for short, ordered database work.
//
//   Result<Record> r = co_await net::run_blocking([&]() -> Result<Record> { return commit(); });
//
// The awaiting coroutine is suspended until the function returns, so the function may use the
// caller's locals by reference. Not cancellable: once started, the function runs to its end
// (give it a flag to check if it should stop early). An exception escaping it becomes kInternal.
//
// Affinity: call from a coroutine; the function runs on a new thread.

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

template <typename Fn>
auto run_blocking(Fn fn) -> asio::awaitable<std::invoke_result_t<Fn&>> {
  using R = std::invoke_result_t<Fn&>;
  auto initiate = [](auto handler, Fn f) {
    // The pending result counts as work on the caller's executor, so its io_context does not
    // return from run() while the thread works.
    auto work = asio::prefer(asio::get_associated_executor(handler),
                             asio::execution::outstanding_work.tracked);
    std::thread([h = std::move(handler), f = std::move(f), work = std::move(work)]() mutable {
      std::optional<R> result;
      try {
        result.emplace(f());
      } catch (const std::exception& e) {
        result.emplace(internal_error(std::string("blocking job: exception: ") + e.what()));
      }
      asio::post(work, [h = std::move(h), r = std::move(*result)]() mutable {
        std::move(h)(std::move(r));
      });
    }).detach();
  };
  auto token = asio::experimental::as_tuple(asio::use_awaitable);
  auto [result] = co_await asio::async_initiate<decltype(token), void(R)>(std::move(initiate),
                                                                          token, std::move(fn));
  co_return std::move(result);
}

}  // namespace cb::net
