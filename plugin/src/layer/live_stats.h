// Live statistics of the process: what zipccl has sent and received so far, written while the job runs
// so that a job that is killed, or never closes its communicators, still reports.
//
// With ZIPCCL_STATS_DIR (or, without it, ZIPCCL_STATS_FILE: then in that file's folder), each process keeps
// two files,
// zipccl-HOST-PID.json and zipccl-HOST-PID.prom (Prometheus text format, for node_exporter's textfile
// collector), rewritten every ZIPCCL_STATS_INTERVAL seconds and at finalize/exit, each through a
// temporary file renamed over it, so a reader never sees half a snapshot. The data path never waits
// for them: each comm's counters are single-writer relaxed atomics (stats.h), summed by one background
// thread; the only lock it shares with NCCL's threads is taken at connect/accept, to hand it the new
// comm's counters, and the thread holds it only to move pointers, never across a file write. The JSON snapshot carries a bounded history of
// cumulative totals (thinned by halves when full), so `zipccl stats --svg` draws the whole run from
// the last snapshot alone. Layout: docs/notes/plugin.md ("Live statistics").
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "layer/stats.h"

namespace zipccl {
namespace net {

// One direction's totals over comms.
struct DirTotals {
  uint64_t messages = 0, bytes_in = 0, bytes_wire = 0, compressed = 0, raw_small = 0, raw_policy = 0,
           raw_incompressible = 0, codec_ns = 0, errors = 0, segmented = 0, segments = 0, device_messages = 0,
           device_codec = 0;
  double link_gbps = 0;  // the largest estimate of the comms summed (send side; 0: none yet)
  void add(const ConnStats& s);
  void add(const DirTotals& t);
};

struct ProcessTotals {
  DirTotals send, recv;
  int comms_open = 0;
  int comms_closed = 0;
};

// One point of the history: seconds since the process's first comm, cumulative totals.
struct StatsSample {
  double t = 0;
  uint64_t send_in = 0, send_wire = 0, recv_in = 0, recv_wire = 0, codec_ns = 0;
};

// Who wrote a snapshot. rank: from RANK, OMPI_COMM_WORLD_RANK, PMI_RANK or SLURM_PROCID (launchers'
// variables, read only), -1 when none is set.
struct StatsIdentity {
  std::string host;
  int pid = 0;
  int rank = -1;
  double started_unix = 0;
};
StatsIdentity this_process_identity();

// Appends `s`, keeping at most `cap` (>= 4) points: when full, every other point is dropped (the first
// and the newest stay), so the history spans the whole run at falling resolution.
void history_add(std::vector<StatsSample>* h, const StatsSample& s, size_t cap);

// The snapshot files' contents (format: docs/notes/plugin.md). `final`: written at finalize or exit.
std::string snapshot_json(const StatsIdentity& id, const ProcessTotals& t, const std::vector<StatsSample>& history,
                          double now_unix, int interval_s, bool final);
std::string snapshot_prom(const StatsIdentity& id, const ProcessTotals& t, double now_unix);
// The one-line process summary logged at finalize.
std::string summary_line(const ProcessTotals& t);

// Writes `data` to `path` through `path`.tmp-PID and rename(2). False, with the reason, when it cannot.
bool write_file_atomically(const std::string& path, const std::string& data, std::string* why);

// The folder the snapshots go to: ZIPCCL_STATS_DIR, else the folder of ZIPCCL_STATS_FILE ("" when both
// are unset: off).
std::string stats_snapshot_dir();

// Hands a new comm's counters to the snapshot thread (started here when snapshots are on and
// ZIPCCL_STATS_INTERVAL > 0). Does nothing when snapshots are off.
void live_stats_add(const std::shared_ptr<ConnStats>& s);
// Stops the thread, writes the final snapshot and logs the process summary at INFO (once per run of
// comms: nothing when no comm was added since the last call). Called by the last finalize; also at exit.
void live_stats_finalize();
// Tests: writes a snapshot now, on the calling thread.
void live_stats_write_now();

}  // namespace net
}  // namespace zipccl
