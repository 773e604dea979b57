// Definitions for executor_cpu.h.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstring>
#include <deque>
#include <exception>
#include <map>
#include <mutex>
#include <string>
#include <thread>

namespace zipccl::hetero {
namespace detail {

struct Mailbox {
  std::mutex mutex;
  std::map<int, std::deque<std::vector<unsigned char>>> from;  // by sender
};

// Runs body(i) for i in [0, n) on `threads` threads; rethrows the first exception.
template <class Body>
void parallel_for(int n, int threads, Body&& body) {
  std::atomic<int> next{0};
  std::exception_ptr error;
  std::mutex error_mutex;
  auto work = [&] {
    for (int i; (i = next.fetch_add(1)) < n;) {
      try {
        body(i);
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mutex);
        if (!error) error = std::current_exception();
      }
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();
  if (error) std::rethrow_exception(error);
}

}  // namespace detail

inline void execute_cpu(const BoundaryPlan& plan, const std::vector<HostBuffers>& buffers, int threads) {
  const int world = plan.world_size;
  if (static_cast<int>(buffers.size()) != world) {
    throw ExecutionError("execute_cpu: " + std::to_string(buffers.size()) + " buffer sets for a world of " +
                         std::to_string(world) + " ranks");
  }
  for (int r = 0; r < world; ++r) {
    const HostBuffers& b = buffers[r];
    if (static_cast<std::int64_t>(b.source_size) < plan.source_bytes[r] ||
        (plan.source_bytes[r] > 0 && b.source == nullptr)) {
      throw ExecutionError("rank " + std::to_string(r) + ": source buffer of " +
                           std::to_string(b.source_size) + " bytes, the plan needs " +
                           std::to_string(plan.source_bytes[r]));
    }
    if (static_cast<std::int64_t>(b.destination_size) < plan.destination_bytes[r] ||
        (plan.destination_bytes[r] > 0 && b.destination == nullptr)) {
      throw ExecutionError("rank " + std::to_string(r) + ": destination buffer of " +
                           std::to_string(b.destination_size) + " bytes, the plan needs " +
                           std::to_string(plan.destination_bytes[r]));
    }
  }
  std::vector<RankSchedule> all = make_all_schedules(plan);
  std::vector<int> active;
  for (int r = 0; r < world; ++r) {
    if (!all[r].empty()) active.push_back(r);
  }
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  threads = std::max(1, std::min<int>(threads, static_cast<int>(active.size())));

  auto bytes_of = [&](int r, BufferKind kind) -> unsigned char* {
    return kind == BufferKind::source ? static_cast<unsigned char*>(const_cast<void*>(buffers[r].source))
                                      : static_cast<unsigned char*>(buffers[r].destination);
  };
  std::vector<detail::Mailbox> mail(world);
  for (std::size_t phase = 0; phase < plan.phases.size(); ++phase) {
    detail::parallel_for(static_cast<int>(active.size()), threads, [&](int i) {
      const int r = active[i];
      const PhaseOps& ops = all[r].phases[phase];
      unsigned char* dst = bytes_of(r, BufferKind::destination);
      for (const LocalCopy& c : ops.copies)
        std::memmove(dst + c.to_offset, bytes_of(r, c.from) + c.from_offset, c.bytes);
      for (const Message& m : ops.sends) {
        const unsigned char* from = bytes_of(r, m.buffer) + m.offset;
        std::vector<unsigned char> payload(from, from + m.bytes);
        std::lock_guard<std::mutex> lock(mail[m.peer].mutex);
        mail[m.peer].from[r].push_back(std::move(payload));
      }
    });
    detail::parallel_for(static_cast<int>(active.size()), threads, [&](int i) {
      const int r = active[i];
      unsigned char* dst = bytes_of(r, BufferKind::destination);
      std::lock_guard<std::mutex> lock(mail[r].mutex);
      for (const Message& m : all[r].phases[phase].recvs) {
        auto& queue = mail[r].from[m.peer];
        if (queue.empty()) {
          throw ExecutionError("phase " + std::to_string(phase) + ": rank " + std::to_string(r) +
                               " expects a message from rank " + std::to_string(m.peer) +
                               " that was never sent");
        }
        if (static_cast<std::int64_t>(queue.front().size()) != m.bytes) {
          throw ExecutionError("phase " + std::to_string(phase) + ": rank " + std::to_string(r) +
                               " expects " + std::to_string(m.bytes) + " bytes from rank " +
                               std::to_string(m.peer) + ", got " + std::to_string(queue.front().size()));
        }
        std::memcpy(dst + m.offset, queue.front().data(), queue.front().size());
        queue.pop_front();
      }
    });
    for (int r = 0; r < world; ++r) {
      for (auto& [peer, queue] : mail[r].from) {
        if (!queue.empty()) {
          throw ExecutionError("phase " + std::to_string(phase) + ": rank " + std::to_string(peer) +
                               " sent " + std::to_string(queue.size()) + " message(s) to rank " +
                               std::to_string(r) + " that it never receives");
        }
      }
    }
  }
}

}  // namespace zipccl::hetero
