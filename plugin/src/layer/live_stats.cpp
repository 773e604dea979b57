#include "layer/live_stats.h"

#include <fcntl.h>
#include <pthread.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdarg>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "common/log.h"
#include "common/settings.h"

namespace zipccl {
namespace net {

void DirTotals::add(const ConnStats& s) {
  messages += s.messages.get();
  bytes_in += s.bytes_in.get();
  bytes_wire += s.bytes_wire.get();
  compressed += s.compressed.get();
  raw_small += s.raw_small.get();
  raw_policy += s.raw_policy.get();
  raw_incompressible += s.raw_incompressible.get();
  codec_ns += s.codec_ns.get();
  errors += s.errors.get();
  segmented += s.segmented.get();
  segments += s.segments.get();
  device_messages += s.device_messages.get();
  device_codec += s.device_codec.get();
  link_gbps = std::max(link_gbps, s.link_gbps.load(std::memory_order_relaxed));
}

void DirTotals::add(const DirTotals& t) {
  messages += t.messages;
  bytes_in += t.bytes_in;
  bytes_wire += t.bytes_wire;
  compressed += t.compressed;
  raw_small += t.raw_small;
  raw_policy += t.raw_policy;
  raw_incompressible += t.raw_incompressible;
  codec_ns += t.codec_ns;
  errors += t.errors;
  segmented += t.segmented;
  segments += t.segments;
  device_messages += t.device_messages;
  device_codec += t.device_codec;
  link_gbps = std::max(link_gbps, t.link_gbps);
}

namespace {

double unix_now() {
  struct timeval tv;
  gettimeofday(&tv, nullptr);
  return tv.tv_sec + tv.tv_usec * 1e-6;
}

double ratio(uint64_t in, uint64_t wire) { return wire ? static_cast<double>(in) / static_cast<double>(wire) : 1.0; }

// JSON string contents (host names and peers are plain, but a reader must never be handed bad JSON).
std::string json_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char b[8];
      std::snprintf(b, sizeof b, "\\u%04x", c);
      out += b;
    } else {
      out += c;
    }
  }
  return out;
}

// Prometheus label values escape backslash, quote and newline.
std::string prom_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '\\' || c == '"') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

void append(std::string* out, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
void append(std::string* out, const char* fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  const int n = std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  if (n > 0) out->append(buf, std::min(static_cast<size_t>(n), sizeof buf - 1));
}

void dir_json(std::string* out, const char* name, const DirTotals& d) {
  append(out,
         "\"%s\":{\"messages\":%llu,\"bytes_in\":%llu,\"bytes_wire\":%llu,\"ratio\":%.4f,\"compressed\":%llu,"
         "\"raw_small\":%llu,\"raw_policy\":%llu,\"raw_incompressible\":%llu,",
         name, (unsigned long long)d.messages, (unsigned long long)d.bytes_in, (unsigned long long)d.bytes_wire,
         ratio(d.bytes_in, d.bytes_wire), (unsigned long long)d.compressed, (unsigned long long)d.raw_small,
         (unsigned long long)d.raw_policy, (unsigned long long)d.raw_incompressible);
  append(out,
         "\"codec_s\":%.6f,\"errors\":%llu,\"segmented\":%llu,\"segments\":%llu,\"device_messages\":%llu,"
         "\"host_messages\":%llu,\"device_codec\":%llu,\"link_gbps\":%.3f}",
         d.codec_ns * 1e-9, (unsigned long long)d.errors, (unsigned long long)d.segmented,
         (unsigned long long)d.segments, (unsigned long long)d.device_messages,
         (unsigned long long)(d.messages - std::min(d.messages, d.device_messages)), (unsigned long long)d.device_codec,
         d.link_gbps);
}

}  // namespace

StatsIdentity this_process_identity() {
  StatsIdentity id;
  char host[256] = {0};
  if (gethostname(host, sizeof host - 1) != 0 || !host[0]) std::strcpy(host, "unknown");
  id.host = host;
  id.pid = static_cast<int>(getpid());
  for (const char* v : {"RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"}) {
    const char* s = std::getenv(v);
    char* end = nullptr;
    if (!s || !*s) continue;
    const long r = std::strtol(s, &end, 10);
    if (*end == 0 && r >= 0 && r < (1L << 30)) {
      id.rank = static_cast<int>(r);
      break;
    }
  }
  id.started_unix = unix_now();
  return id;
}

void history_add(std::vector<StatsSample>* h, const StatsSample& s, size_t cap) {
  cap = std::max<size_t>(cap, 4);
  if (h->size() >= cap) {
    std::vector<StatsSample> kept;
    for (size_t i = 0; i < h->size(); i += 2) kept.push_back((*h)[i]);
    *h = std::move(kept);
  }
  h->push_back(s);
}

std::string snapshot_json(const StatsIdentity& id, const ProcessTotals& t, const std::vector<StatsSample>& history,
                          double now_unix, int interval_s, bool final) {
  std::string out;
  append(&out,
         "{\"format\":\"zipccl-stats\",\"version\":1,\"host\":\"%s\",\"pid\":%d,\"rank\":%d,\"time\":%.3f,"
         "\"started\":%.3f,\"interval_s\":%d,\"final\":%s,\"comms_open\":%d,\"comms_closed\":%d,",
         json_escape(id.host).c_str(), id.pid, id.rank, now_unix, id.started_unix, interval_s, final ? "true" : "false",
         t.comms_open, t.comms_closed);
  dir_json(&out, "send", t.send);
  out += ',';
  dir_json(&out, "recv", t.recv);
  out += ",\"history\":[";
  for (size_t i = 0; i < history.size(); ++i) {
    const StatsSample& s = history[i];
    append(&out, "%s[%.3f,%llu,%llu,%llu,%llu,%.6f]", i ? "," : "", s.t, (unsigned long long)s.send_in,
           (unsigned long long)s.send_wire, (unsigned long long)s.recv_in, (unsigned long long)s.recv_wire,
           s.codec_ns * 1e-9);
  }
  out += "]}\n";
  return out;
}

std::string snapshot_prom(const StatsIdentity& id, const ProcessTotals& t, double now_unix) {
  const std::string base = "host=\"" + prom_escape(id.host) + "\",pid=\"" + std::to_string(id.pid) + "\",rank=\"" +
                           std::to_string(id.rank) + "\"";
  std::string out;
  auto metric = [&](const char* name, const char* type, const char* help) {
    append(&out, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
  };
  auto per_dir = [&](const char* name, const char* type, const char* help, auto get) {
    metric(name, type, help);
    for (const auto* d : {&t.send, &t.recv}) {
      append(&out, "%s{%s,direction=\"%s\"} %s\n", name, base.c_str(), d == &t.send ? "send" : "recv",
             get(*d).c_str());
    }
  };
  auto u = [](uint64_t v) { return std::to_string(v); };
  auto f = [](double v) {
    char b[64];
    std::snprintf(b, sizeof b, "%.9g", v);
    return std::string(b);
  };
  per_dir("zipccl_bytes_in_total", "counter", "Uncompressed bytes of the messages zipccl carried.",
          [&](const DirTotals& d) { return u(d.bytes_in); });
  per_dir("zipccl_bytes_wire_total", "counter", "Payload bytes those messages took on the wire.",
          [&](const DirTotals& d) { return u(d.bytes_wire); });
  per_dir("zipccl_compression_ratio", "gauge", "bytes_in over bytes_wire since the process started.",
          [&](const DirTotals& d) { return f(ratio(d.bytes_in, d.bytes_wire)); });
  metric("zipccl_messages_total", "counter",
         "Messages by how they travelled: compressed, or raw because small, the policy or incompressible.");
  for (const auto* d : {&t.send, &t.recv}) {
    const char* dir = d == &t.send ? "send" : "recv";
    const std::pair<const char*, uint64_t> reasons[] = {{"compressed", d->compressed},
                                                        {"small", d->raw_small},
                                                        {"policy", d->raw_policy},
                                                        {"incompressible", d->raw_incompressible}};
    for (const auto& r : reasons) {
      append(&out, "zipccl_messages_total{%s,direction=\"%s\",reason=\"%s\"} %llu\n", base.c_str(), dir, r.first,
             (unsigned long long)r.second);
    }
  }
  per_dir("zipccl_messages_completed_total", "counter", "Messages completed.",
          [&](const DirTotals& d) { return u(d.messages); });
  per_dir("zipccl_device_messages_total", "counter", "Completed messages from or to device buffers.",
          [&](const DirTotals& d) { return u(d.device_messages); });
  per_dir("zipccl_codec_seconds_total", "counter", "Time spent encoding (send) or decoding (recv).",
          [&](const DirTotals& d) { return f(d.codec_ns * 1e-9); });
  per_dir("zipccl_errors_total", "counter", "Failed requests.", [&](const DirTotals& d) { return u(d.errors); });
  metric("zipccl_link_estimate_gbps", "gauge", "The auto policy's link estimate in Gbit/s (0: not measured yet).");
  append(&out, "zipccl_link_estimate_gbps{%s} %s\n", base.c_str(), f(t.send.link_gbps).c_str());
  metric("zipccl_comms_open", "gauge", "Connections open now.");
  append(&out, "zipccl_comms_open{%s} %d\n", base.c_str(), t.comms_open);
  metric("zipccl_snapshot_timestamp_seconds", "gauge", "When this snapshot was taken (Unix time).");
  append(&out, "zipccl_snapshot_timestamp_seconds{%s} %.3f\n", base.c_str(), now_unix);
  return out;
}

std::string summary_line(const ProcessTotals& t) {
  std::string out;
  append(&out, "process totals over %d comm(s):", t.comms_open + t.comms_closed);
  for (const auto* d : {&t.send, &t.recv}) {
    append(&out,
           " %s %llu msgs, %llu B in, %llu B on wire (ratio %.3f), compressed/small/policy/incompressible "
           "%llu/%llu/%llu/%llu, codec %.3f s, errors %llu, device/host %llu/%llu",
           d == &t.send ? "send" : "; recv", (unsigned long long)d->messages, (unsigned long long)d->bytes_in,
           (unsigned long long)d->bytes_wire, ratio(d->bytes_in, d->bytes_wire), (unsigned long long)d->compressed,
           (unsigned long long)d->raw_small, (unsigned long long)d->raw_policy,
           (unsigned long long)d->raw_incompressible, d->codec_ns * 1e-9, (unsigned long long)d->errors,
           (unsigned long long)d->device_messages,
           (unsigned long long)(d->messages - std::min(d->messages, d->device_messages)));
    if (d == &t.send) append(&out, ", link est %.2f Gbit/s", d->link_gbps);
  }
  return out;
}

bool write_file_atomically(const std::string& path, const std::string& data, std::string* why) {
  const std::string tmp = path + ".tmp-" + std::to_string(getpid());
  const int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    *why = std::string("cannot create ") + tmp + ": " + std::strerror(errno);
    return false;
  }
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      *why = std::string("cannot write ") + tmp + ": " + std::strerror(errno);
      close(fd);
      unlink(tmp.c_str());
      return false;
    }
    done += static_cast<size_t>(n);
  }
  close(fd);
  if (rename(tmp.c_str(), path.c_str()) != 0) {
    *why = std::string("cannot rename ") + tmp + " to " + path + ": " + std::strerror(errno);
    unlink(tmp.c_str());
    return false;
  }
  return true;
}

std::string stats_snapshot_dir() {
  const Settings& s = settings();
  if (!s.stats_dir.empty()) return s.stats_dir;
  // Whoever asked for the per-connection records asked for statistics: the snapshots go beside them.
  if (s.stats_file.empty()) return "";
  const size_t slash = s.stats_file.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : s.stats_file.substr(0, slash);
}

namespace {

constexpr size_t kHistoryCap = 240;

// The process's one snapshot writer. mu_ guards what NCCL's threads touch (the comms handed over at
// connect/accept, the thread's life); snap_mu_ the snapshot state, touched only by the snapshot thread,
// finalize and exit.
class Reporter {
 public:
  // Never destroyed: NCCL's threads may still open a comm while the process exits. The final snapshot of
  // a process that never finalized is written by an exit handler.
  static Reporter& self() {
    static Reporter* r = new Reporter;
    return *r;
  }

  void add(const std::shared_ptr<ConnStats>& s) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!started_) {
      started_ = true;
      id_ = this_process_identity();
      t0_ = std::chrono::steady_clock::now();
    }
    incoming_.push_back(s);
    unreported_ = true;
    if (!running_ && settings().stats_interval_s > 0) {
      stop_ = false;
      if (pthread_create(&thread_, nullptr, &Reporter::main, this) == 0) {
        pthread_setname_np(thread_, "zipccl-stats");  // for top -H, perf, gdb
        running_ = true;
      } else {
        ZIPCCL_WARN("live statistics: cannot start the snapshot thread (%s); snapshots only at finalize",
                    std::strerror(errno));
      }
    }
  }

  void finalize() {
    bool log = false;
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (!started_) return;
      stop_ = true;
      if (running_) {
        cv_.notify_all();
        lock.unlock();
        pthread_join(thread_, nullptr);
        lock.lock();
        running_ = false;
      }
      log = unreported_;
      unreported_ = false;
    }
    if (!log) return;
    ProcessTotals t = write(true);
    ZIPCCL_INFO(NCCL_INIT | NCCL_NET, "%s", summary_line(t).c_str());
  }

  ProcessTotals write(bool final) {
    std::lock_guard<std::mutex> snap(snap_mu_);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!started_) return ProcessTotals{};
      for (auto& s : incoming_) live_.push_back(std::move(s));
      incoming_.clear();
    }
    ProcessTotals t = closed_;
    std::vector<std::shared_ptr<ConnStats>> still;
    for (auto& s : live_) {
      const bool closed = s->closed.load(std::memory_order_acquire);
      DirTotals& d = std::strcmp(s->direction, "send") == 0 ? t.send : t.recv;
      d.add(*s);
      if (closed) {
        (std::strcmp(s->direction, "send") == 0 ? closed_.send : closed_.recv).add(*s);
        ++closed_.comms_closed;
        ++t.comms_closed;
      } else {
        ++t.comms_open;
        still.push_back(std::move(s));
      }
    }
    live_ = std::move(still);
    const std::string dir = stats_snapshot_dir();
    if (dir.empty()) return t;
    StatsSample sample;
    sample.t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
    sample.send_in = t.send.bytes_in;
    sample.send_wire = t.send.bytes_wire;
    sample.recv_in = t.recv.bytes_in;
    sample.recv_wire = t.recv.bytes_wire;
    sample.codec_ns = t.send.codec_ns + t.recv.codec_ns;
    if (history_.empty()) history_.push_back(StatsSample{});  // the first comm's start: rates from there
    history_add(&history_, sample, kHistoryCap);
    const double now = unix_now();
    const std::string stem = dir + "/zipccl-" + id_.host + "-" + std::to_string(id_.pid);
    std::string why;
    if (!write_file_atomically(stem + ".json",
                               snapshot_json(id_, t, history_, now, settings().stats_interval_s, final), &why) ||
        !write_file_atomically(stem + ".prom", snapshot_prom(id_, t, now), &why)) {
      if (!warned_) {
        warned_ = true;
        ZIPCCL_WARN("live statistics: %s; no snapshots from this process (set ZIPCCL_STATS_DIR to a writable "
                    "folder). Training goes on.",
                    why.c_str());
      }
    }
    return t;
  }

 private:
  static void* main(void* arg) {
    // Normal priority, on purpose: the thread wakes once per interval, sums counters and writes two
    // small files, holding the lock NCCL's threads take (at connect) only to move pointers. At nice 19
    // beside busy-polling threads (4 zipccl perf processes at load 30) it was starved for up to 22 s
    // between 1 s snapshots, which is what a killed job would lose (BENCHMARKS.md, "Live statistics").
    static_cast<Reporter*>(arg)->loop();
    return nullptr;
  }

  void loop() {
    std::unique_lock<std::mutex> lock(mu_);
    const auto period = std::chrono::seconds(std::max(1, settings().stats_interval_s));
    auto next = std::chrono::steady_clock::now() + period;
    while (!stop_) {
      // A system_clock deadline: the steady_clock wait needs pthread_cond_clockwait, newer than the
      // glibc 2.28 the plugin links against; the period is re-checked on the steady clock.
      const auto left = next - std::chrono::steady_clock::now();
      if (left > std::chrono::steady_clock::duration::zero()) {
        cv_.wait_until(lock, std::chrono::system_clock::now() +
                                 std::chrono::duration_cast<std::chrono::system_clock::duration>(left));
        continue;
      }
      if (stop_) break;
      next += period;
      if (next < std::chrono::steady_clock::now()) next = std::chrono::steady_clock::now() + period;  // fell behind
      lock.unlock();
      write(false);
      lock.lock();
    }
  }

  Reporter() {
    pthread_atfork(&Reporter::before_fork, &Reporter::after_fork_parent, &Reporter::after_fork_child);
    std::atexit([] { self().finalize(); });
  }

  static void before_fork() {
    self().snap_mu_.lock();
    self().mu_.lock();
  }
  static void after_fork_parent() {
    self().mu_.unlock();
    self().snap_mu_.unlock();
  }
  // The child has no snapshot thread and none of the parent's comms: it starts afresh.
  static void after_fork_child() {
    Reporter& r = self();
    r.running_ = false;
    r.started_ = false;
    r.unreported_ = false;
    r.warned_ = false;
    r.incoming_.clear();
    r.live_.clear();
    r.closed_ = ProcessTotals{};
    r.history_.clear();
    r.mu_.unlock();
    r.snap_mu_.unlock();
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::shared_ptr<ConnStats>> incoming_;  // added since the last snapshot
  pthread_t thread_{};
  bool running_ = false, stop_ = false, started_ = false;
  bool unreported_ = false;  // comms added since the last finalize
  StatsIdentity id_;
  std::chrono::steady_clock::time_point t0_;

  std::mutex snap_mu_;
  std::vector<std::shared_ptr<ConnStats>> live_;
  ProcessTotals closed_;  // comms seen closed, folded in and let go of
  std::vector<StatsSample> history_;
  bool warned_ = false;
};

}  // namespace

void live_stats_add(const std::shared_ptr<ConnStats>& s) {
  if (stats_snapshot_dir().empty()) return;
  Reporter::self().add(s);
}

void live_stats_finalize() {
  if (stats_snapshot_dir().empty()) return;
  Reporter::self().finalize();
}

void live_stats_write_now() {
  if (stats_snapshot_dir().empty()) return;
  Reporter::self().write(false);
}

}  // namespace net
}  // namespace zipccl
