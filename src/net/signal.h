#pragma once
// Signal is a single-threaded async condition variable for coroutines on one executor.
//
//   while (!ready()) CO_RETURN_IF_ERROR(co_await signal.wait());
//   ... elsewhere: make_ready(); signal.notify();
//
// notify() wakes every current waiter; a notify with no waiter is not remembered, so waiters
// always re-check their condition in a loop (no suspension happens between the check and the
// wait, so no wakeup is lost on a single thread). wait() returns kCancelled when the waiting
// coroutine's own cancellation slot fired (e.g. it lost an awaitable_operators race), so a
// cancelled waiter does not loop forever.
//
// Affinity: use from the executor it was built with. Not copyable or movable.

#include "base/status.h"
#include "net/asio.h"

namespace cb::net {

class Signal {
 public:
  explicit Signal(const Executor& ex) : timer_(ex, Deadline::max()) {}
  Signal(const Signal&) = delete;
  Signal& operator=(const Signal&) = delete;

  asio::awaitable<Status> wait() {
    // A cancellation emitted while this coroutine was not suspended is only recorded in its
    // state; check it first or the wait would never end.
    if ((co_await asio::this_coro::cancellation_state).cancelled() != asio::cancellation_type::none)
      co_return cancelled("wait cancelled");
    co_await timer_.async_wait();
    auto state = co_await asio::this_coro::cancellation_state;
    if (state.cancelled() != asio::cancellation_type::none) co_return cancelled("wait cancelled");
    co_return ok_status();
  }

  // Waits until notified or |deadline|. kDeadlineExceeded when the deadline passed first.
  asio::awaitable<Status> wait_until(Deadline deadline) {
    if (deadline == Deadline::max()) co_return co_await wait();
    if ((co_await asio::this_coro::cancellation_state).cancelled() != asio::cancellation_type::none)
      co_return cancelled("wait cancelled");
    using namespace asio::experimental::awaitable_operators;
    Timer deadline_timer(timer_.get_executor(), deadline);
    auto winner = co_await (timer_.async_wait() || deadline_timer.async_wait());
    auto state = co_await asio::this_coro::cancellation_state;
    if (state.cancelled() != asio::cancellation_type::none) co_return cancelled("wait cancelled");
    if (winner.index() == 1 && !std::get<0>(std::get<1>(winner)))
      co_return deadline_exceeded("deadline passed");
    co_return ok_status();
  }

  void notify() { timer_.cancel(); }

 private:
  Timer timer_;  // expires never; notify() cancels every pending wait, leaving it armed
};

}  // namespace cb::net
