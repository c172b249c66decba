#pragma once
// run_sync(task) runs |task| on a fresh io_context until the io_context has no work left and
// returns its value (rethrowing anything it threw). Tests use it to drive coroutines.

#include <asio.hpp>

#include <future>
#include <utility>

namespace cb::test {

template <typename T>
T run_sync(asio::io_context& io, asio::awaitable<T> task) {
  auto f = asio::co_spawn(io, std::move(task), asio::use_future);
  io.run();
  io.restart();
  return f.get();
}

template <typename T>
T run_sync(asio::awaitable<T> task) {
  asio::io_context io;
  return run_sync(io, std::move(task));
}

}  // namespace cb::test
