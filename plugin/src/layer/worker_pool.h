// Bounded, process-wide pool of codec worker threads. The proxy thread submits jobs and polls their
// `done` flag; it never waits on a worker.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

namespace zipccl {
namespace net {

class Job {
 public:
  virtual ~Job() = default;
  virtual void run() = 0;  // on a worker thread; must not throw
  std::atomic<bool> done{false};
};

class WorkerPool {
 public:
  explicit WorkerPool(int threads);
  ~WorkerPool();
  // Queues a job (never blocks on the workers). The job must outlive its completion.
  void submit(Job* job);
  // Jobs queued or running; the policy uses it to see whether the codec keeps up.
  int backlog() const { return backlog_.load(std::memory_order_relaxed); }
  int threads() const { return static_cast<int>(threads_.size()); }

 private:
  void loop();
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job*> queue_;
  std::atomic<int> backlog_{0};
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

// Tests only: called on the worker thread before each job runs (may block it), nullptr: none.
void set_job_hook_for_tests(void (*hook)(Job*));

// The shared pool, created on first use with ZIPCCL_WORKERS threads.
WorkerPool& worker_pool();

}  // namespace net
}  // namespace zipccl
