#include "layer/worker_pool.h"

#include "common/settings.h"

namespace zipccl {
namespace net {
namespace {
std::atomic<void (*)(Job*)> g_job_hook{nullptr};
}

void set_job_hook_for_tests(void (*hook)(Job*)) {
  g_job_hook.store(hook, std::memory_order_release);
}

WorkerPool::WorkerPool(int threads) {
  for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { loop(); });
}

WorkerPool::~WorkerPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (std::thread& t : threads_) t.join();
}

void WorkerPool::submit(Job* job) {
  backlog_.fetch_add(1, std::memory_order_relaxed);
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(job);
  }
  cv_.notify_one();
}

void WorkerPool::loop() {
  for (;;) {
    Job* job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;
      job = queue_.front();
      queue_.pop_front();
    }
    if (auto hook = g_job_hook.load(std::memory_order_acquire)) hook(job);
    job->run();
    backlog_.fetch_sub(1, std::memory_order_relaxed);
    job->done.store(true, std::memory_order_release);
  }
}

WorkerPool& worker_pool() {
  // Intentionally leaked: joining threads from a static destructor at exit (possibly after NCCL
  // unloaded us or from a forked child) is a hang risk; the OS reclaims the threads.
  static WorkerPool* pool = new WorkerPool(settings().workers);
  return *pool;
}

}  // namespace net
}  // namespace zipccl
