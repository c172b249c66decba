#pragma once
// A Worker is the db thread: one std::thread that owns one Database and runs, one at a time
// and in submission order, the functions that coroutines on Asio loops hand it.
//
//   ASSIGN_OR_RETURN(auto worker, db::Worker::start(path, kMigrations));
//   ...
//   // in a coroutine on the io_context:
//   Result<int64_t> id = co_await worker->run([&](db::Database& d) -> Result<int64_t> {
//     ASSIGN_OR_RETURN(db::Statement st, d.prepare("INSERT INTO boxes(name) VALUES (?1)"));
//     RETURN_IF_ERROR(st.bind_text(1, name));
//     RETURN_IF_ERROR(st.execute());
//     return d.last_insert_rowid();
//   });
//
// The awaiting coroutine is suspended, not blocked: its loop keeps serving other work while
// SQLite runs, and the coroutine resumes on its own executor with the function's result.
// Because the caller stays suspended until then, the function may capture the caller's
// locals by reference; it must not touch any other loop-owned state.
//
// Affinity: run() may be called from any thread or executor. The Database is touched only
// on the worker thread. Neither copyable nor movable (the thread points at it).

#include "base/result.h"
#include "base/status.h"
#include "db/database.h"
#include "db/migrate.h"

#include <asio/associated_executor.hpp>
#include <asio/async_result.hpp>
#include <asio/awaitable.hpp>
#include <asio/execution/outstanding_work.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <asio/post.hpp>
#include <asio/prefer.hpp>
#include <asio/use_awaitable.hpp>

#include <condition_variable>
#include <deque>
#include <exception>
#include <filesystem>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <thread>
#include <type_traits>
#include <utility>

namespace cb::db {

namespace internal {
template <typename R>
struct IsResultOrStatus : std::false_type {};
template <>
struct IsResultOrStatus<Status> : std::true_type {};
template <typename T>
struct IsResultOrStatus<Result<T>> : std::true_type {};
}  // namespace internal

class Worker {
 public:
  // Starts the thread, opens |path| on it with |options| and applies |migrations| (which
  // need only live for this call). Blocks the calling thread until that is done, so call it
  // at startup, before the loop runs.
  // Errors: those of Database::open() and migrate().
  static Result<std::unique_ptr<Worker>> start(const std::filesystem::path& path,
                                               std::span<const Migration> migrations = {},
                                               const OpenOptions& options = {});

  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;
  // Runs every function already submitted, then stops and joins the thread and closes the
  // database. REQUIRES: the executors of callers still awaiting run() outlive this call
  // (their results are posted to them).
  ~Worker();

  // Runs |fn| (signature Result<T>(Database&) or Status(Database&)) on the worker thread
  // and returns its result on the caller's executor. Functions run one at a time in the
  // order run() was called. An exception escaping |fn| becomes kInternal.
  // Not cancellable: once submitted, |fn| runs and its result is delivered.
  template <typename Fn>
  auto run(Fn fn) -> asio::awaitable<std::invoke_result_t<Fn&, Database&>> {
    using R = std::invoke_result_t<Fn&, Database&>;
    static_assert(internal::IsResultOrStatus<R>::value, "fn must return Status or Result<T>");
    auto [result] =
        co_await async_run<R>(std::move(fn), asio::experimental::as_tuple(asio::use_awaitable));
    co_return std::move(result);
  }

  // The completion-token form of run(): completes with signature void(R).
  template <typename R, typename Fn, typename CompletionToken>
  auto async_run(Fn fn, CompletionToken&& token) {
    return asio::async_initiate<CompletionToken, void(R)>(
        [this](auto handler, Fn fn) { submit<R>(std::move(handler), std::move(fn)); }, token,
        std::move(fn));
  }

  // The id of the worker thread (for tests and CB_DCHECKs).
  std::thread::id thread_id() const { return thread_.get_id(); }

 private:
  class Task {
   public:
    virtual ~Task() = default;
    virtual void run(Database& db) = 0;
  };

  Worker() = default;
  void enqueue(std::unique_ptr<Task> task);
  void loop(const std::filesystem::path& path, std::span<const Migration> migrations,
            const OpenOptions& options, std::promise<Status>* opened);

  template <typename R, typename Handler, typename Fn>
  void submit(Handler handler, Fn fn) {
    // Count the pending result as work on the caller's executor, so its io_context does not
    // run out of work (and return from run()) while the caller waits for us.
    auto tracked = asio::prefer(asio::get_associated_executor(handler),
                                asio::execution::outstanding_work.tracked);
    using WorkExecutor = decltype(tracked);
    struct Impl final : Task {
      Impl(Handler h, Fn f, WorkExecutor w)
          : handler(std::move(h)), fn(std::move(f)), work(std::move(w)) {}
      void run(Database& db) override {
        std::optional<R> result;
        try {
          result.emplace(fn(db));
        } catch (const std::exception& e) {
          result.emplace(internal_error(std::string("db worker: exception: ") + e.what()));
        }
        // Hand the result back to the caller's executor; the handler must never run on this
        // thread, since it resumes a coroutine that belongs to the caller's loop.
        asio::post(work, [h = std::move(handler), r = std::move(*result)]() mutable {
          std::move(h)(std::move(r));
        });
      }
      Handler handler;
      Fn fn;
      WorkExecutor work;
    };
    enqueue(std::make_unique<Impl>(std::move(handler), std::move(fn), std::move(tracked)));
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::unique_ptr<Task>> queue_;  // guarded by mu_
  bool stopping_ = false;                    // guarded by mu_
  std::thread thread_;
};

}  // namespace cb::db
