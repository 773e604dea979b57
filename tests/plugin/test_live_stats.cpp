// Live statistics (plugin/src/layer/live_stats.h): the snapshot formats, the atomic write, and the
// built plugin writing snapshots while messages flow (run by CTest twice: a writable folder, and one
// that cannot exist, which must cost one WARN and nothing else).
#include <dirent.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include "layer/live_stats.h"
#include "plugin_data.h"
#include "plugin_driver.h"

using namespace zipccl_test;
namespace net = zipccl::net;

namespace {

std::string slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// The value of "key":<number> in the object that follows "section": (or anywhere when section is empty).
double json_number(const std::string& json, const std::string& section, const std::string& key) {
  size_t from = 0;
  if (!section.empty()) {
    from = json.find("\"" + section + "\":{");
    if (from == std::string::npos) return -1;
  }
  const size_t at = json.find("\"" + key + "\":", from);
  if (at == std::string::npos) return -1;
  return std::strtod(json.c_str() + at + key.size() + 3, nullptr);
}

std::vector<std::string> files_in(const std::string& dir) {
  std::vector<std::string> out;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      if (e->d_name[0] != '.') out.push_back(e->d_name);
    }
    closedir(d);
  }
  return out;
}

net::ProcessTotals some_totals() {
  net::ProcessTotals t;
  t.send.messages = 10;
  t.send.bytes_in = 10 << 20;
  t.send.bytes_wire = 7 << 20;
  t.send.compressed = 8;
  t.send.raw_small = 2;
  t.send.codec_ns = 1500000000;
  t.send.link_gbps = 2.5;
  t.recv.messages = 3;
  t.recv.bytes_in = 3 << 20;
  t.recv.bytes_wire = 2 << 20;
  t.comms_open = 2;
  return t;
}

}  // namespace

TEST(LiveStatsFormat, HistoryThinsByHalvesKeepingTheEnds) {
  std::vector<net::StatsSample> h;
  for (int i = 0; i < 1000; ++i) {
    net::StatsSample s;
    s.t = i;
    net::history_add(&h, s, 16);
    ASSERT_LE(h.size(), 16u);
    EXPECT_EQ(h.front().t, 0);
    EXPECT_EQ(h.back().t, i);
    for (size_t j = 1; j < h.size(); ++j) ASSERT_LT(h[j - 1].t, h[j].t);
  }
  EXPECT_GE(h.size(), 8u);  // never thinner than half
}

// node_exporter's textfile collector rejects a file whose samples lack their # TYPE, or whose lines are
// not `name{labels} value`: every line here is checked against the exposition format.
TEST(LiveStatsFormat, PrometheusTextFollowsTheExpositionFormat) {
  net::StatsIdentity id;
  id.host = "node\"7";
  id.pid = 42;
  id.rank = 3;
  const std::string prom = net::snapshot_prom(id, some_totals(), 1700000000.5);
  std::istringstream in(prom);
  std::string line;
  std::set<std::string> typed;
  const std::regex help(R"(# HELP (zipccl_[a-z_]+) .+)"), type(R"(# TYPE (zipccl_[a-z_]+) (counter|gauge))");
  const std::regex sample(R"((zipccl_[a-z_]+)\{((?:[a-z_]+="(?:[^"\\]|\\.)*",?)+)\} (-?[0-9.e+]+))");
  int samples = 0;
  std::map<std::string, double> seen;
  while (std::getline(in, line)) {
    std::smatch m;
    if (std::regex_match(line, m, help)) continue;
    if (std::regex_match(line, m, type)) {
      EXPECT_TRUE(typed.insert(m[1]).second) << "TYPE twice: " << line;
      if (m[2] == "counter") {
        EXPECT_NE(m[1].str().find("_total"), std::string::npos) << line;
      }
      continue;
    }
    ASSERT_TRUE(std::regex_match(line, m, sample)) << "not a sample line: " << line;
    EXPECT_TRUE(typed.count(m[1])) << "sample before its TYPE: " << line;
    EXPECT_NE(m[2].str().find("host=\"node\\\"7\""), std::string::npos) << line;
    EXPECT_NE(m[2].str().find("rank=\"3\""), std::string::npos) << line;
    seen[m[1].str() + "{" + m[2].str() + "}"] = std::stod(m[3]);
    ++samples;
  }
  EXPECT_GT(samples, 20);
  const std::string base = "{host=\"node\\\"7\",pid=\"42\",rank=\"3\",";
  EXPECT_EQ(seen["zipccl_bytes_in_total" + base + "direction=\"send\"}"], 10 << 20);
  EXPECT_EQ(seen["zipccl_bytes_wire_total" + base + "direction=\"send\"}"], 7 << 20);
  EXPECT_EQ(seen["zipccl_messages_total" + base + "direction=\"send\",reason=\"small\"}"], 2);
  EXPECT_DOUBLE_EQ(seen["zipccl_codec_seconds_total" + base + "direction=\"send\"}"], 1.5);
  EXPECT_DOUBLE_EQ(seen["zipccl_link_estimate_gbps{host=\"node\\\"7\",pid=\"42\",rank=\"3\"}"], 2.5);
}

TEST(LiveStatsFormat, JsonCarriesTotalsReasonsAndHistory) {
  net::StatsIdentity id;
  id.host = "n1";
  id.pid = 7;
  std::vector<net::StatsSample> h(2);
  h[1].t = 1.5;
  h[1].send_in = 100;
  const std::string j = net::snapshot_json(id, some_totals(), h, 1700000000.0, 30, true);
  EXPECT_EQ(json_number(j, "send", "bytes_in"), 10 << 20);
  EXPECT_EQ(json_number(j, "send", "host_messages"), 10);
  EXPECT_NEAR(json_number(j, "send", "ratio"), 10.0 / 7, 1e-4);
  EXPECT_EQ(json_number(j, "recv", "messages"), 3);
  EXPECT_NE(j.find("\"final\":true"), std::string::npos);
  EXPECT_NE(j.find("\"history\":[[0.000,0,0,0,0,0.000000],[1.500,100,0,0,0,0.000000]]"), std::string::npos) << j;
  EXPECT_EQ(j.back(), '\n');
}

TEST(LiveStatsFormat, AtomicWriteReplacesAndLeavesNoTemporary) {
  char tmpl[] = "/tmp/zipccl-live-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl, path = dir + "/s.json";
  std::string why;
  ASSERT_TRUE(net::write_file_atomically(path, "first", &why)) << why;
  ASSERT_TRUE(net::write_file_atomically(path, "second", &why)) << why;
  EXPECT_EQ(slurp(path), "second");
  EXPECT_EQ(files_in(dir), std::vector<std::string>{"s.json"});
  EXPECT_FALSE(net::write_file_atomically("/nonexistent-zipccl-dir/s.json", "x", &why));
  EXPECT_NE(why.find("No such file"), std::string::npos) << why;
  unlink(path.c_str());
  rmdir(tmpl);
}

namespace {

// Sends `count` bf16 messages of `bytes` through a fresh pair of comms, one at a time.
void send_messages(NetApi* api, void* sc, void* rc, int count, size_t bytes) {
  std::vector<uint8_t> src = make_data(DataKind::kBf16Gauss, bytes, 1), dst(bytes);
  for (int i = 0; i < count; ++i) {
    void *sreq = nullptr, *rreq = nullptr;
    const auto t0 = Clock::now();
    while (!rreq) ASSERT_EQ(api->irecv(rc, dst.data(), bytes, 0, nullptr, &rreq), ncclSuccess);
    while (!sreq) ASSERT_EQ(api->isend(sc, src.data(), bytes, 0, nullptr, &sreq), ncclSuccess);
    int sd = 0, rd = 0, n = 0;
    while (!sd || !rd) {
      if (!sd) {
        ASSERT_EQ(api->test(sreq, &sd, &n), ncclSuccess);
      }
      if (!rd) {
        ASSERT_EQ(api->test(rreq, &rd, &n), ncclSuccess);
      }
      ASSERT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 20) << "message " << i << " stuck";
    }
    ASSERT_EQ(dst, src);
  }
}

std::string snapshot_path(const char* ext) {
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  return std::string(std::getenv("ZIPCCL_STATS_DIR")) + "/zipccl-" + host + "-" + std::to_string(getpid()) + ext;
}

}  // namespace

// CTest: ZIPCCL_STATS_DIR=<fresh folder>, ZIPCCL_STATS_INTERVAL=1, compression always.
TEST(LiveStats, SnapshotsFollowTheTrafficAndFinalizeWritesTheSummary) {
  const char* dir = std::getenv("ZIPCCL_STATS_DIR");
  ASSERT_TRUE(dir && *dir);
  mkdir(dir, 0755);
  for (const std::string& f : files_in(dir)) unlink((std::string(dir) + "/" + f).c_str());  // earlier runs
  auto api = load_api(11);
  ASSERT_TRUE(api);
  ASSERT_EQ(api->init(), ncclSuccess);
  void *sc, *rc, *lc;
  ASSERT_TRUE(make_pair(api.get(), &sc, &rc, &lc));
  constexpr int kMessages = 12;
  constexpr size_t kBytes = 1 << 20;
  send_messages(api.get(), sc, rc, kMessages, kBytes);
  // The thread writes every second: within a few the snapshot shows every message, no lock involved.
  const std::string json_path = snapshot_path(".json");
  std::string j;
  const auto t0 = Clock::now();
  while (json_number(j = slurp(json_path), "send", "messages") != kMessages) {
    ASSERT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 10) << "no snapshot with the traffic: " << j;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_EQ(json_number(j, "send", "bytes_in"), double(kMessages * kBytes));
  EXPECT_EQ(json_number(j, "recv", "bytes_in"), double(kMessages * kBytes));
  EXPECT_EQ(json_number(j, "send", "compressed"), kMessages);
  EXPECT_GT(json_number(j, "send", "ratio"), 1.2);
  EXPECT_EQ(json_number(j, "send", "bytes_wire"), json_number(j, "recv", "bytes_wire"));
  EXPECT_EQ(json_number(j, "", "comms_open"), 2);
  EXPECT_NE(j.find("\"final\":false"), std::string::npos);
  const std::string prom = slurp(snapshot_path(".prom"));
  EXPECT_NE(prom.find("direction=\"send\"} " + std::to_string(kMessages * kBytes)), std::string::npos) << prom;
  for (const std::string& f : files_in(dir)) EXPECT_EQ(f.find(".tmp"), std::string::npos) << f;

  // More traffic, then close and finalize: the final snapshot has it all and says so.
  send_messages(api.get(), sc, rc, 3, kBytes);
  ASSERT_EQ(api->close_send(sc), ncclSuccess);
  ASSERT_EQ(api->close_recv(rc), ncclSuccess);
  ASSERT_EQ(api->close_listen(lc), ncclSuccess);
  ASSERT_EQ(api->finalize(), ncclSuccess);
  j = slurp(json_path);
  EXPECT_NE(j.find("\"final\":true"), std::string::npos) << j;
  EXPECT_EQ(json_number(j, "send", "messages"), kMessages + 3);
  EXPECT_EQ(json_number(j, "", "comms_open"), 0);
  EXPECT_EQ(json_number(j, "", "comms_closed"), 2);
  // The start (all zeros), at least one periodic point and the final one.
  EXPECT_GE(std::count(j.begin(), j.end(), '[') - 1, 3) << "history: " << j;
  EXPECT_NE(j.find("\"history\":[[0.000,0,0,0,0,0.000000],"), std::string::npos) << j;
  EXPECT_TRUE(log_contains("process totals over 2 comm(s): send 15 msgs, 15728640 B in"));
}

// CTest: ZIPCCL_STATS_FILE=<fresh folder>/records.jsonl and no ZIPCCL_STATS_DIR: the snapshots go beside
// the per-connection records.
TEST(LiveStatsBesideRecords, SnapshotsGoToTheStatsFilesFolder) {
  ASSERT_EQ(std::getenv("ZIPCCL_STATS_DIR"), nullptr);
  const char* file = std::getenv("ZIPCCL_STATS_FILE");
  ASSERT_TRUE(file && *file);
  const std::string dir = std::string(file).substr(0, std::string(file).rfind('/'));
  mkdir(dir.c_str(), 0755);
  for (const std::string& f : files_in(dir)) unlink((dir + "/" + f).c_str());
  auto api = load_api(11);
  ASSERT_TRUE(api);
  ASSERT_EQ(api->init(), ncclSuccess);
  void *sc, *rc, *lc;
  ASSERT_TRUE(make_pair(api.get(), &sc, &rc, &lc));
  send_messages(api.get(), sc, rc, 2, 1 << 20);
  ASSERT_EQ(api->close_send(sc), ncclSuccess);
  ASSERT_EQ(api->close_recv(rc), ncclSuccess);
  ASSERT_EQ(api->close_listen(lc), ncclSuccess);
  ASSERT_EQ(api->finalize(), ncclSuccess);
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  const std::string snap = dir + "/zipccl-" + host + "-" + std::to_string(getpid());
  const std::string j = slurp(snap + ".json");
  EXPECT_NE(j.find("\"final\":true"), std::string::npos) << j;
  EXPECT_EQ(json_number(j, "send", "messages"), 2);
  EXPECT_FALSE(slurp(snap + ".prom").empty());
  EXPECT_FALSE(slurp(file).empty()) << "the per-connection records are written as before";
}

// CTest: ZIPCCL_STATS_DIR under a folder that does not exist: one WARN, every message still delivered.
TEST(LiveStatsUnwritable, OneWarnAndTrafficGoesOn) {
  auto api = load_api(11);
  ASSERT_TRUE(api);
  ASSERT_EQ(api->init(), ncclSuccess);
  void *sc, *rc, *lc;
  ASSERT_TRUE(make_pair(api.get(), &sc, &rc, &lc));
  const auto t0 = Clock::now();
  while (std::chrono::duration<double>(Clock::now() - t0).count() < 2.5) {
    send_messages(api.get(), sc, rc, 2, 256 << 10);
  }
  EXPECT_EQ(log_sink().warns.load(), 1);
  EXPECT_TRUE(log_contains("live statistics: cannot create"));
  ASSERT_EQ(api->close_send(sc), ncclSuccess);
  ASSERT_EQ(api->close_recv(rc), ncclSuccess);
  ASSERT_EQ(api->close_listen(lc), ncclSuccess);
  ASSERT_EQ(api->finalize(), ncclSuccess);
  EXPECT_EQ(log_sink().warns.load(), 1);
}
