// zipccl stats: the table over ranks, the skipped-file notes, --watch, --svg; and a run of the plugin
// killed with SIGKILL mid-transfer, whose snapshots the command still reads.
#include <gtest/gtest.h>

#include <chrono>
#include <regex>
#include <string>
#include <thread>

#include "temp_dir.h"

#ifndef ZIPCCL_BIN
#error "ZIPCCL_BIN must name the zipccl binary"
#endif

namespace {

// A snapshot as the plugin writes it (plugin/src/layer/live_stats.cpp, docs/notes/plugin.md).
std::string snapshot(int rank, double sent, double wire, double codec_s, double link_gbps, bool final = false) {
  char b[2048];
  std::snprintf(
      b, sizeof b,
      "{\"format\":\"zipccl-stats\",\"version\":1,\"host\":\"n%d\",\"pid\":%d,\"rank\":%d,\"time\":1000.0,"
      "\"started\":990.0,\"interval_s\":1,\"final\":%s,\"comms_open\":2,\"comms_closed\":0,"
      "\"send\":{\"messages\":10,\"bytes_in\":%.0f,\"bytes_wire\":%.0f,\"ratio\":1,\"compressed\":7,\"raw_small\":1,"
      "\"raw_policy\":2,\"raw_incompressible\":0,\"codec_s\":%.3f,\"errors\":0,\"segmented\":0,\"segments\":0,"
      "\"device_messages\":0,\"host_messages\":10,\"device_codec\":0,\"link_gbps\":%.3f},"
      "\"recv\":{\"messages\":10,\"bytes_in\":%.0f,\"bytes_wire\":%.0f,\"ratio\":1,\"compressed\":7,\"raw_small\":0,"
      "\"raw_policy\":0,\"raw_incompressible\":0,\"codec_s\":0.5,\"errors\":0,\"segmented\":0,\"segments\":0,"
      "\"device_messages\":0,\"host_messages\":10,\"device_codec\":0,\"link_gbps\":0},"
      "\"history\":[[0,0,0,0,0,0],[5,%.0f,%.0f,0,0,0],[10,%.0f,%.0f,0,0,0]]}\n",
      rank, 100 + rank, rank, final ? "true" : "false", sent, wire, codec_s, link_gbps, sent, wire, sent / 2, wire / 2,
      sent, wire);
  return b;
}

class StatsCmd : public zipccl_test::TempDirTest {
 protected:
  int zipccl(const std::string& args) {
    return run_keeping_stderr("'" ZIPCCL_BIN "' " + args + " > out.txt");
  }
  std::string out() const { return read_text("out.txt"); }
};

TEST_F(StatsCmd, TableOverRanksWithSpreadSlowestCodecAndSavings) {
  run_here("mkdir s");
  // rank 0: 1 GiB sent as 0.5 GiB at 8 Gbit/s (0.537 s saved); rank 1: 1 GiB as 0.8 GiB, slowest codec.
  write_text("s/zipccl-n0-100.json", snapshot(0, 1 << 30, 1 << 29, 2.0, 8.0, true));
  write_text("s/zipccl-n1-101.json", snapshot(1, 1 << 30, 0.8 * (1 << 30), 3.0, 8.0));
  ASSERT_EQ(zipccl("stats s"), 0) << stderr_;
  const std::string o = out();
  EXPECT_NE(o.find("rank 0"), std::string::npos) << o;
  EXPECT_LT(o.find("rank 0"), o.find("rank 1")) << o;
  EXPECT_NE(o.find("2 process(es): sent 2.0 GiB, 1.3 GiB on the wire (ratio 1.538)"), std::string::npos) << o;
  EXPECT_NE(o.find("ratio over ranks: min 1.250, median 2.000, max 2.000"), std::string::npos) << o;
  EXPECT_NE(o.find("slowest codec: rank 1, 3.500 s (encode 3.000 + decode 0.500)"), std::string::npos) << o;
  // Saved: 0.5 GiB and 0.2 GiB; seconds at 8 Gbit/s: 0.537 and 0.215.
  EXPECT_NE(o.find("the wire saved 716.8 MiB; at each rank's measured link rate 0.54 s"), std::string::npos) << o;
  EXPECT_NE(o.find("0.75 s summed over ranks"), std::string::npos) << o;
  EXPECT_NE(o.find("7/1/2/0"), std::string::npos) << o;
  EXPECT_TRUE(stderr_.empty()) << stderr_;
}

TEST_F(StatsCmd, SkipsCutShortAndForeignSnapshotsWithANote) {
  run_here("mkdir s");
  write_text("s/zipccl-n0-100.json", snapshot(0, 1000, 500, 1, 1));
  const std::string whole = snapshot(1, 1000, 500, 1, 1);
  write_text("s/zipccl-n1-101.json", whole.substr(0, whole.size() / 2));  // a reader racing a writer never
                                                                            // sees this; a disk-full might
  write_text("s/zipccl-n2-102.json", "{\"format\":\"something-else\",\"version\":1}");
  write_text("s/zipccl-n3-103.json", "");
  write_text("s/zipccl-n0-100.prom", "# TYPE x counter\n");
  ASSERT_EQ(zipccl("stats s"), 0) << stderr_;
  EXPECT_NE(out().find("1 process(es) (3 file(s) skipped)"), std::string::npos) << out();
  EXPECT_NE(stderr_.find("skipped s/zipccl-n1-101.json"), std::string::npos) << stderr_;
  EXPECT_NE(stderr_.find("skipped s/zipccl-n2-102.json: not a zipccl snapshot"), std::string::npos) << stderr_;
  EXPECT_NE(stderr_.find("skipped s/zipccl-n3-103.json"), std::string::npos) << stderr_;
  EXPECT_EQ(stderr_.find(".prom"), std::string::npos) << stderr_;
  // Nothing readable: an error.
  run_here("rm s/zipccl-n0-100.json");
  EXPECT_EQ(zipccl("stats s"), 1);
  EXPECT_NE(stderr_.find("no readable snapshot"), std::string::npos) << stderr_;
  EXPECT_EQ(zipccl("stats"), 2);
  EXPECT_EQ(zipccl("stats --bogus s"), 2);
}

TEST_F(StatsCmd, WatchRedrawsAndSvgDrawsOneLinePerRank) {
  run_here("mkdir s");
  for (int r = 0; r < 3; ++r) {
    write_text("s/zipccl-n" + std::to_string(r) + "-" + std::to_string(100 + r) + ".json",
               snapshot(r, 1e9, 5e8 + r * 1e8, 1, 1));
  }
  ASSERT_EQ(zipccl("stats --watch 0.1 --count 3 --svg run.svg s"), 0) << stderr_;
  const std::string o = out();
  size_t tables = 0;
  for (size_t at = 0; (at = o.find("zipccl stats  ", at)) != std::string::npos; ++at) ++tables;
  EXPECT_EQ(tables, 3u) << o;
  const std::string svg = read_text("run.svg");
  ASSERT_EQ(svg.rfind("<svg", 0) == 0 || svg.rfind("<?xml", 0) == 0, true) << svg.substr(0, 200);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
  for (int r = 0; r < 3; ++r) {
    // One group per rank in each panel, holding its segments: 2 intervals -> 1 line per panel.
    const std::string title = "<title>rank " + std::to_string(r) + "</title>";
    size_t n = 0;
    for (size_t at = 0; (at = svg.find(title, at)) != std::string::npos; ++at) ++n;
    EXPECT_EQ(n, 2u) << title;
  }
  // rank 2's ratio in both intervals: 1e9 / 7e8.
  EXPECT_NE(svg.find("goodput"), std::string::npos);
  size_t lines = 0;
  for (size_t at = 0; (at = svg.find("<line", at)) != std::string::npos; ++at) ++lines;
  EXPECT_GE(lines, 6u);  // 3 ranks x 2 panels x 1 segment, besides the grid
}

#ifdef ZIPCCL_PLUGIN
// The point of live snapshots: a job killed mid-transfer (SIGKILL: no finalize, no exit handler) still
// leaves them, and `zipccl stats` reads them.
TEST_F(StatsCmd, AKilledRunLeavesSnapshotsTheCommandReads) {
  run_here("mkdir s");
  ASSERT_EQ(run_here("(ZIPCCL_STATS_DIR=$PWD/s ZIPCCL_STATS_INTERVAL=1 setsid '" ZIPCCL_BIN "' perf --plugin '" ZIPCCL_PLUGIN
                     "' --modes always --seconds 60 --no-baseline > perf.txt 2>&1 & echo $! > perf.pid)"),
            0);
  // Wait for snapshots of both processes with traffic in them.
  const auto t0 = std::chrono::steady_clock::now();
  bool seen = false;
  while (!seen && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(30)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    if (zipccl("stats s") != 0) continue;
    const std::string o = out();
    std::smatch m;
    seen = std::regex_search(o, m, std::regex("2 process\\(es\\): sent ([0-9.]+) ([KMG]iB)"));
  }
  // The whole group (the tool and its two sides). std::system's sh may be dash, whose kill takes no "--".
  std::string pid = read_text("perf.pid");
  pid = pid.substr(0, pid.find('\n'));
  EXPECT_EQ(run_here("kill -KILL -" + pid), 0) << "could not kill process group " << pid;
  // Killed, not left running its 60 s beside the next tests.
  bool gone = false;
  for (int i = 0; i < 50 && !gone; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    gone = run_here("kill -0 -" + pid + " 2>/dev/null") != 0;
  }
  EXPECT_TRUE(gone) << "process group " << pid << " outlived its SIGKILL by 5 s";
  ASSERT_TRUE(seen) << out() << stderr_ << read_text("perf.txt");
  ASSERT_EQ(zipccl("stats s"), 0) << stderr_;
  const std::string o = out();
  EXPECT_NE(o.find("2 process(es): sent"), std::string::npos) << o;
  EXPECT_EQ(o.find("end "), std::string::npos) << "no process finalized: " << o;
  // A kill during a write leaves that write's temporary file (NAME.tmp-PID) beside the whole snapshot:
  // the command does not read it, so says nothing about it.
  EXPECT_TRUE(stderr_.empty()) << stderr_;
}
#endif

}  // namespace
