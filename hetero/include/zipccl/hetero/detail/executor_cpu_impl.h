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

struct Posted {
  std::vector<unsigned char> bytes;
  Direction plan;  // which plan of the step posted it: NCCL has no such tag, the check is ours
};

struct Mailbox {
  std::mutex mutex;
  std::map<int, std::deque<Posted>> from;  // by sender
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

inline void check_buffer_count(std::size_t buffers, int world) {
  if (buffers != static_cast<std::size_t>(world)) {
    throw ExecutionError("execute_cpu: " + std::to_string(buffers) + " buffer sets for a world of " +
                         std::to_string(world) + " ranks");
  }
}

// Runs the schedules of every rank (all[r] for world rank r), wave by wave. one_plan: a lone plan,
// whose buffer messages say "the plan" rather than naming its direction.
inline void run_step_schedules_cpu(const std::vector<RankStepSchedule>& all,
                                   const std::vector<StepBuffers>& buffers, int threads, bool one_plan) {
  const int world = static_cast<int>(all.size());
  check_buffer_count(buffers.size(), world);
  std::vector<int> active;
  std::size_t waves = 0;
  for (int r = 0; r < world; ++r) {
    for (const StepPart& part : all[r].parts) {
      check_plan_buffers(part.schedule, buffers[r].of(part.direction),
                         one_plan ? "the plan" : step_part_name(part.direction));
    }
    if (!all[r].empty()) active.push_back(r);
    waves = std::max(waves, all[r].waves());
  }
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  threads = std::max(1, std::min<int>(threads, static_cast<int>(active.size())));

  auto bytes_of = [&](int r, Direction plan, BufferKind kind) -> unsigned char* {
    const PlanBuffers& b = buffers[r].of(plan);
    return kind == BufferKind::source ? static_cast<unsigned char*>(const_cast<void*>(b.source))
                                      : static_cast<unsigned char*>(b.destination);
  };
  std::vector<Mailbox> mail(world);
  for (std::size_t wave = 0; wave < waves; ++wave) {
    const std::string where = "phase " + std::to_string(wave) + ": rank ";
    parallel_for(static_cast<int>(active.size()), threads, [&](int i) {
      const int r = active[i];
      for (const StepPart& part : all[r].parts) {
        if (wave >= part.schedule.phases.size()) continue;
        const PhaseOps& ops = part.schedule.phases[wave];
        unsigned char* dst = bytes_of(r, part.direction, BufferKind::destination);
        for (const LocalCopy& c : ops.copies)
          std::memmove(dst + c.to_offset, bytes_of(r, part.direction, c.from) + c.from_offset, c.bytes);
        for (const Message& m : ops.sends) {
          const unsigned char* from = bytes_of(r, part.direction, m.buffer) + m.offset;
          Posted posted{std::vector<unsigned char>(from, from + m.bytes), part.direction};
          std::lock_guard<std::mutex> lock(mail[m.peer].mutex);
          mail[m.peer].from[r].push_back(std::move(posted));
        }
      }
    });
    parallel_for(static_cast<int>(active.size()), threads, [&](int i) {
      const int r = active[i];
      std::lock_guard<std::mutex> lock(mail[r].mutex);
      for (const StepPart& part : all[r].parts) {
        if (wave >= part.schedule.phases.size()) continue;
        unsigned char* dst = bytes_of(r, part.direction, BufferKind::destination);
        for (const Message& m : part.schedule.phases[wave].recvs) {
          auto& queue = mail[r].from[m.peer];
          if (queue.empty()) {
            throw ExecutionError(where + std::to_string(r) + " expects a message from rank " +
                                 std::to_string(m.peer) + " that was never sent");
          }
          const Posted& next = queue.front();
          if (next.plan != part.direction) {
            throw ExecutionError(where + std::to_string(r) + " expects a message of the " +
                                 direction_name(part.direction) + " plan from rank " +
                                 std::to_string(m.peer) + ", the next one sent belongs to the " +
                                 direction_name(next.plan) +
                                 " plan: the two ranks post the plans of the step in different orders "
                                 "(pipeline.h's order contract)");
          }
          if (static_cast<std::int64_t>(next.bytes.size()) != m.bytes) {
            throw ExecutionError(where + std::to_string(r) + " expects " + std::to_string(m.bytes) +
                                 " bytes from rank " + std::to_string(m.peer) + ", got " +
                                 std::to_string(next.bytes.size()));
          }
          std::memcpy(dst + m.offset, next.bytes.data(), next.bytes.size());
          queue.pop_front();
        }
      }
    });
    for (int r = 0; r < world; ++r) {
      for (auto& [peer, queue] : mail[r].from) {
        if (!queue.empty()) {
          throw ExecutionError("phase " + std::to_string(wave) + ": rank " + std::to_string(peer) + " sent " +
                               std::to_string(queue.size()) + " message(s) to rank " + std::to_string(r) +
                               " that it never receives");
        }
      }
    }
  }
}

}  // namespace detail

inline void execute_cpu(const BoundaryPlan& plan, const std::vector<HostBuffers>& buffers, int threads) {
  detail::check_buffer_count(buffers.size(), plan.world_size);
  std::vector<RankSchedule> each = make_all_schedules(plan);
  std::vector<RankStepSchedule> all(each.size());
  std::vector<StepBuffers> step_buffers(each.size());
  for (std::size_t r = 0; r < each.size(); ++r) {
    all[r].rank = static_cast<int>(r);
    all[r].parts.push_back(StepPart{plan.direction, std::move(each[r])});
    (plan.direction == Direction::forward ? step_buffers[r].forward : step_buffers[r].backward) = buffers[r];
  }
  detail::run_step_schedules_cpu(all, step_buffers, threads, true);
}

inline void execute_step_cpu(const BoundaryPlan* forward, const BoundaryPlan* backward,
                             const std::vector<StepBuffers>& buffers, int threads) {
  if (forward == nullptr && backward == nullptr) return;  // an empty step moves nothing
  detail::run_step_schedules_cpu(make_all_step_schedules(forward, backward), buffers, threads, false);
}

inline void execute_step_cpu(const std::vector<RankStepSchedule>& schedules,
                             const std::vector<StepBuffers>& buffers, int threads) {
  detail::run_step_schedules_cpu(schedules, buffers, threads, false);
}

}  // namespace zipccl::hetero
