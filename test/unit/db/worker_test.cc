#include "db/worker.h"

#include "support/temp_dir.h"

#include <asio/co_spawn.hpp>
#include <asio/io_context.hpp>
#include <asio/steady_timer.hpp>
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <fstream>
#include <future>
#include <thread>
#include <vector>

namespace cb::db {
namespace {

using namespace std::chrono_literals;
using test::TempDir;

constexpr Migration kSchema[] = {
    {1, "CREATE TABLE log (seq INTEGER PRIMARY KEY, caller INTEGER NOT NULL);"},
};

std::unique_ptr<Worker> start_or_fail(const std::filesystem::path& path) {
  auto worker = Worker::start(path, kSchema);
  INFO(worker.status().to_string());
  REQUIRE(worker.ok());
  return std::move(worker).value();
}

// Runs |task| on |io| until it and everything it started have finished; rethrows anything
// that escaped the coroutine so Catch2 reports it.
void run_on(asio::io_context& io, asio::awaitable<void> task) {
  asio::co_spawn(io, std::move(task), [](std::exception_ptr e) {
    if (e) std::rethrow_exception(e);
  });
  io.run();
}

TEST_CASE("Worker: run executes on the worker thread and resumes on the caller's loop",
          "[db][unit]") {
  TempDir dir;
  auto worker = start_or_fail(dir.file("w.db"));
  asio::io_context io;
  const auto loop_thread = std::this_thread::get_id();
  std::thread::id ran_on;
  std::thread::id resumed_on;
  Result<int64_t> id = internal_error("not run");
  Status failed;
  run_on(io, [&]() -> asio::awaitable<void> {
    id = co_await worker->run([&](Database& db) -> Result<int64_t> {
      ran_on = std::this_thread::get_id();
      ASSIGN_OR_RETURN(Statement st, db.prepare("INSERT INTO log (caller) VALUES (?1)"));
      RETURN_IF_ERROR(st.bind_int64(1, 7));
      RETURN_IF_ERROR(st.execute());
      return db.last_insert_rowid();
    });
    resumed_on = std::this_thread::get_id();
    // A Status-returning function, and an error travelling back as a value.
    failed = co_await worker->run(
        [](Database& db) { return db.exec("INSERT INTO log (seq, caller) VALUES (1, 1)"); });
  }());
  REQUIRE(id.ok());
  CHECK(*id == 1);
  CHECK(ran_on == worker->thread_id());
  CHECK(ran_on != loop_thread);
  CHECK(resumed_on == loop_thread);
  CHECK(failed.code() == Code::kAlreadyExists);
}

TEST_CASE("Worker: the loop keeps firing timers while a slow query runs", "[db][unit]") {
  TempDir dir;
  auto worker = start_or_fail(dir.file("w.db"));
  asio::io_context io;
  std::promise<void> fired;
  std::shared_future<void> fired_future = fired.get_future().share();
  Result<int64_t> sum = internal_error("not run");
  run_on(io, [&]() -> asio::awaitable<void> {
    asio::steady_timer timer(io, 5ms);
    timer.async_wait([&](std::error_code) { fired.set_value(); });
    sum = co_await worker->run([&](Database& db) -> Result<int64_t> {
      ASSIGN_OR_RETURN(Statement st,
                       db.prepare("WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 "
                                  "FROM n WHERE x < 1000) SELECT x FROM n"));
      int64_t total = 0;
      while (true) {
        ASSIGN_OR_RETURN(bool row, st.step());
        if (!row) break;
        total += st.column_int64(0);
        // Halfway through the query, wait for the loop's timer. If run() blocked the loop
        // the timer could not fire and this would give up after 2 s instead.
        if (st.column_int64(0) == 500 && fired_future.wait_for(2s) != std::future_status::ready) {
          return deadline_exceeded("the loop's timer did not fire while the query ran");
        }
      }
      return total;
    });
  }());
  INFO(sum.status().to_string());
  REQUIRE(sum.ok());
  CHECK(*sum == 500500);
}

TEST_CASE("Worker: concurrent requests run one at a time in submission order", "[db][unit]") {
  TempDir dir;
  auto worker = start_or_fail(dir.file("w.db"));
  asio::io_context io;
  constexpr int kCallers = 16;
  std::atomic<int> in_flight{0};
  std::atomic<int> max_in_flight{0};
  std::vector<int64_t> seq(kCallers, -1);
  for (int caller = 0; caller < kCallers; ++caller) {
    asio::co_spawn(
        io,
        [&, caller]() -> asio::awaitable<void> {
          auto r = co_await worker->run([&, caller](Database& db) -> Result<int64_t> {
            int now = in_flight.fetch_add(1) + 1;
            int seen = max_in_flight.load();
            while (now > seen && !max_in_flight.compare_exchange_weak(seen, now)) {
            }
            ASSIGN_OR_RETURN(Transaction txn, db.begin());
            ASSIGN_OR_RETURN(Statement st, db.prepare("INSERT INTO log (caller) VALUES (?1)"));
            RETURN_IF_ERROR(st.bind_int64(1, caller));
            RETURN_IF_ERROR(st.execute());
            RETURN_IF_ERROR(txn.commit());
            in_flight.fetch_sub(1);
            return db.last_insert_rowid();
          });
          seq[caller] = r.ok() ? *r : -1;
        },
        [](std::exception_ptr e) {
          if (e) std::rethrow_exception(e);
        });
  }
  io.run();
  CHECK(max_in_flight.load() == 1);
  for (int caller = 0; caller < kCallers; ++caller) {
    CHECK(seq[caller] == caller + 1);
  }
}

TEST_CASE("Worker: start reports open and migration errors", "[db][unit]") {
  TempDir dir;
  SECTION("not a database") {
    {
      std::ofstream out(dir.file("junk"));
      out << "definitely not the SQLite format 3 header, just text\n";
    }
    auto worker = Worker::start(dir.file("junk"), kSchema);
    REQUIRE_FALSE(worker.ok());
    CHECK(worker.status().code() == Code::kDataLoss);
  }
  SECTION("a schema newer than the binary") {
    constexpr Migration kNewer[] = {kSchema[0], {2, "CREATE TABLE extra (x INTEGER);"}};
    REQUIRE(Worker::start(dir.file("w.db"), kNewer).ok());
    auto worker = Worker::start(dir.file("w.db"), kSchema);
    REQUIRE_FALSE(worker.ok());
    CHECK(worker.status().code() == Code::kFailedPrecondition);
  }
}

TEST_CASE("Worker: an exception thrown by the function becomes kInternal", "[db][unit]") {
  TempDir dir;
  auto worker = start_or_fail(dir.file("w.db"));
  asio::io_context io;
  Status s;
  run_on(io, [&]() -> asio::awaitable<void> {
    s = co_await worker->run([](Database&) -> Status { throw std::runtime_error("boom"); });
  }());
  CHECK(s.code() == Code::kInternal);
  CHECK(s.message().find("boom") != std::string_view::npos);
}

}  // namespace
}  // namespace cb::db
