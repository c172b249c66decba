#include "db/worker.h"

#include "base/log.h"

#include <future>
#include <pthread.h>
#include <system_error>

namespace cb::db {

Result<std::unique_ptr<Worker>> Worker::start(const std::filesystem::path& path,
                                              std::span<const Migration> migrations,
                                              const OpenOptions& options) {
  std::unique_ptr<Worker> worker(new Worker());
  std::promise<Status> opened;
  std::future<Status> opened_future = opened.get_future();
  try {
    worker->thread_ = std::thread([w = worker.get(), path, migrations, options, &opened] {
      w->loop(path, migrations, options, &opened);
    });
  } catch (const std::system_error& e) {  // std::thread reports EAGAIN this way
    return resource_exhausted(std::string("db worker: cannot start thread: ") + e.what());
  }
  // |migrations| and |opened| are only used until the promise is fulfilled, which happens
  // before this wait returns.
  Status s = opened_future.get();
  if (!s.ok()) {
    worker->thread_.join();
    worker->thread_ = std::thread();
    return s;
  }
  return worker;
}

Worker::~Worker() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_one();
  if (thread_.joinable()) thread_.join();
}

void Worker::enqueue(std::unique_ptr<Task> task) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(task));
  }
  cv_.notify_one();
}

void Worker::loop(const std::filesystem::path& path, std::span<const Migration> migrations,
                  const OpenOptions& options, std::promise<Status>* opened) {
  pthread_setname_np(pthread_self(), "cb-db");
  auto db = Database::open(path, options);
  if (!db.ok()) {
    opened->set_value(db.status());
    return;
  }
  Status migrated = migrate(*db, migrations);
  if (!migrated.ok()) {
    opened->set_value(migrated);
    return;
  }
  opened->set_value(ok_status());

  while (true) {
    std::unique_ptr<Task> task;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      // Drain before stopping: each queued task carries a caller waiting for its result.
      if (queue_.empty()) break;
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    task->run(*db);
  }
  log::debug("db worker stopped", {{"path", path.string()}});
}

}  // namespace cb::db
