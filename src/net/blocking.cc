#include "net/blocking.h"

#include "base/check.h"

namespace cb::net {

BlockingPool::BlockingPool(size_t threads) {
  CB_CHECK(threads > 0);
  threads_.reserve(threads);
  for (size_t i = 0; i < threads; ++i) threads_.emplace_back([this] { loop(); });
}

BlockingPool::~BlockingPool() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (std::thread& t : threads_) t.join();
}

void BlockingPool::enqueue(std::unique_ptr<Concept> job) {
  {
    std::lock_guard lock(mu_);
    CB_CHECK(!stopping_);
    queue_.push_back(std::move(job));
  }
  cv_.notify_one();
}

void BlockingPool::loop() {
  for (;;) {
    std::unique_ptr<Concept> job;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, and nothing left to run
      job = std::move(queue_.front());
      queue_.pop_front();
    }
    job->run();
  }
}

}  // namespace cb::net
