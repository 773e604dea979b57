// zipccl stats: the plugin's live snapshots (ZIPCCL_STATS_DIR, plugin/src/layer/live_stats.h) of every
// process of a job, as one table over ranks; --watch refreshes it, --svg draws ratio and goodput over
// time from the history each snapshot carries (so one look at a folder, even of a killed job, draws the
// whole run). A snapshot that does not parse is skipped with a note.
#include <dirent.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "commands.h"
#include "svg.h"

namespace zipccl {
namespace tools {
namespace {

void usage(FILE* f) {
  std::fprintf(f,
               "usage: zipccl stats [options] DIR|FILE.json...\n"
               "  The plugin's live snapshots (ZIPCCL_STATS_DIR: zipccl-HOST-PID.json, one per process) as a\n"
               "  table over ranks: bytes in and on the wire, ratio, messages by reason, codec time, and what\n"
               "  the wire saved in bytes and in seconds at each rank's link estimate (the auto policy's; a\n"
               "  process that only receives shows its received ratio). Cut-short or foreign files are skipped\n"
               "  with a note. The picture comes from the history each snapshot carries (the whole run, at\n"
               "  most 240 points), so it needs no watcher running beside the job.\n"
               "  --watch [SECONDS]  redraw every SECONDS (default 2) until interrupted\n"
               "  --count N          with --watch: stop after N tables\n"
               "  --svg FILE         draw compression ratio and goodput over time, one line per rank\n");
}

// ---- a small JSON reader (the snapshots are ours, but a truncated or foreign file must be refused) ----
struct Json {
  enum Kind { kNull, kBool, kNumber, kString, kArray, kObject } kind = kNull;
  double num = 0;
  bool b = false;
  std::string str;
  std::vector<Json> arr;
  std::map<std::string, Json> obj;
  const Json* get(const char* k) const {
    auto it = obj.find(k);
    return kind == kObject && it != obj.end() ? &it->second : nullptr;
  }
  double number(const char* k, double def = 0) const {
    const Json* v = get(k);
    return v && v->kind == kNumber ? v->num : def;
  }
};

class Parser {
 public:
  explicit Parser(const std::string& s) : s_(s) {}
  bool parse(Json* out, std::string* why) {
    if (!value(out, 0) || (ws(), p_ != s_.size())) {
      *why = err_.empty() ? "trailing bytes at offset " + std::to_string(p_) : err_;
      return false;
    }
    return true;
  }

 private:
  void ws() {
    while (p_ < s_.size() && std::strchr(" \t\r\n", s_[p_])) ++p_;
  }
  bool fail(const char* what) {
    if (err_.empty()) err_ = std::string(what) + " at offset " + std::to_string(p_);
    return false;
  }
  bool lit(const char* w) {
    const size_t n = std::strlen(w);
    if (s_.compare(p_, n, w) != 0) return fail("bad literal");
    p_ += n;
    return true;
  }
  bool string(std::string* out) {
    if (p_ >= s_.size() || s_[p_] != '"') return fail("expected a string");
    for (++p_; p_ < s_.size(); ++p_) {
      char c = s_[p_];
      if (c == '"') {
        ++p_;
        return true;
      }
      if (c == '\\') {
        if (++p_ >= s_.size()) break;
        c = s_[p_];
        if (c == 'u') {
          if (p_ + 4 >= s_.size()) break;
          out->push_back('?');
          p_ += 4;
          continue;
        }
        static const char* kFrom = "\"\\/bfnrt";
        static const char* kTo = "\"\\/\b\f\n\r\t";
        const char* at = std::strchr(kFrom, c);
        if (!at || !c) return fail("bad escape");
        out->push_back(kTo[at - kFrom]);
      } else {
        out->push_back(c);
      }
    }
    return fail("unterminated string");
  }
  bool value(Json* v, int depth) {
    if (depth > 32) return fail("nested too deep");
    ws();
    if (p_ >= s_.size()) return fail("unexpected end");
    const char c = s_[p_];
    if (c == '{') {
      v->kind = Json::kObject;
      ++p_;
      ws();
      if (p_ < s_.size() && s_[p_] == '}') return ++p_, true;
      for (;;) {
        std::string k;
        ws();
        if (!string(&k)) return false;
        ws();
        if (p_ >= s_.size() || s_[p_++] != ':') return fail("expected ':'");
        if (!value(&v->obj[k], depth + 1)) return false;
        ws();
        if (p_ < s_.size() && s_[p_] == ',') {
          ++p_;
          continue;
        }
        if (p_ < s_.size() && s_[p_] == '}') return ++p_, true;
        return fail("expected ',' or '}'");
      }
    }
    if (c == '[') {
      v->kind = Json::kArray;
      ++p_;
      ws();
      if (p_ < s_.size() && s_[p_] == ']') return ++p_, true;
      for (;;) {
        v->arr.emplace_back();
        if (!value(&v->arr.back(), depth + 1)) return false;
        ws();
        if (p_ < s_.size() && s_[p_] == ',') {
          ++p_;
          continue;
        }
        if (p_ < s_.size() && s_[p_] == ']') return ++p_, true;
        return fail("expected ',' or ']'");
      }
    }
    if (c == '"') {
      v->kind = Json::kString;
      return string(&v->str);
    }
    if (c == 't') return v->kind = Json::kBool, v->b = true, lit("true");
    if (c == 'f') return v->kind = Json::kBool, v->b = false, lit("false");
    if (c == 'n') return v->kind = Json::kNull, lit("null");
    char* end = nullptr;
    v->num = std::strtod(s_.c_str() + p_, &end);
    if (end == s_.c_str() + p_ || !std::isfinite(v->num)) return fail("bad value");
    v->kind = Json::kNumber;
    p_ = end - s_.c_str();
    return true;
  }
  const std::string& s_;
  size_t p_ = 0;
  std::string err_;
};

// ---- snapshots ----
struct Dir {
  double messages = 0, bytes_in = 0, bytes_wire = 0, compressed = 0, small = 0, policy = 0, incompressible = 0,
         codec_s = 0, errors = 0, device = 0, link_gbps = 0;
};
struct Point {
  double t, send_in, send_wire, recv_in, recv_wire;
};
struct Snapshot {
  std::string file, host, label;
  int pid = 0, rank = -1;
  double time = 0, started = 0;
  int interval_s = 0, comms_open = 0;
  bool final = false;
  Dir send, recv;
  std::vector<Point> history;  // t: Unix time
};

bool read_dir(const Json& j, const char* name, Dir* d, std::string* why) {
  const Json* o = j.get(name);
  if (!o || o->kind != Json::kObject || !o->get("bytes_in") || !o->get("bytes_wire") || !o->get("messages")) {
    *why = std::string("no \"") + name + "\" totals";
    return false;
  }
  d->messages = o->number("messages");
  d->bytes_in = o->number("bytes_in");
  d->bytes_wire = o->number("bytes_wire");
  d->compressed = o->number("compressed");
  d->small = o->number("raw_small");
  d->policy = o->number("raw_policy");
  d->incompressible = o->number("raw_incompressible");
  d->codec_s = o->number("codec_s");
  d->errors = o->number("errors");
  d->device = o->number("device_messages");
  d->link_gbps = o->number("link_gbps");
  return true;
}

bool read_snapshot(const std::string& path, Snapshot* s, std::string* why) {
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    *why = "cannot open";
    return false;
  }
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string text = ss.str();
  Json j;
  if (!Parser(text).parse(&j, why)) return false;
  const Json* fmt = j.get("format");
  if (!fmt || fmt->kind != Json::kString || fmt->str != "zipccl-stats") {
    *why = "not a zipccl snapshot (no \"format\":\"zipccl-stats\")";
    return false;
  }
  if (j.number("version") != 1) {
    *why = "snapshot version " + std::to_string(static_cast<int>(j.number("version"))) + " (this tool reads 1)";
    return false;
  }
  if (!read_dir(j, "send", &s->send, why) || !read_dir(j, "recv", &s->recv, why)) return false;
  s->file = path;
  const Json* host = j.get("host");
  s->host = host && host->kind == Json::kString ? host->str : "?";
  s->pid = static_cast<int>(j.number("pid"));
  s->rank = static_cast<int>(j.number("rank", -1));
  s->time = j.number("time");
  s->started = j.number("started");
  s->interval_s = static_cast<int>(j.number("interval_s"));
  s->comms_open = static_cast<int>(j.number("comms_open"));
  const Json* fin = j.get("final");
  s->final = fin && fin->kind == Json::kBool && fin->b;
  s->label = s->rank >= 0 ? "rank " + std::to_string(s->rank) : s->host + ":" + std::to_string(s->pid);
  if (const Json* h = j.get("history"); h && h->kind == Json::kArray) {
    for (const Json& p : h->arr) {
      if (p.kind != Json::kArray || p.arr.size() < 5) continue;
      s->history.push_back({s->started + p.arr[0].num, p.arr[1].num, p.arr[2].num, p.arr[3].num, p.arr[4].num});
    }
  }
  return true;
}

bool ends_with(const std::string& s, const char* suffix) {
  const size_t n = std::strlen(suffix);
  return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}

// Every snapshot named by `args` (folders: their zipccl-*.json), sorted by rank then host/pid; notes
// about skipped files go to stderr.
std::vector<Snapshot> load(const std::vector<std::string>& args, int* skipped) {
  std::vector<std::string> files;
  for (const std::string& a : args) {
    if (DIR* d = opendir(a.c_str())) {
      std::vector<std::string> names;
      while (dirent* e = readdir(d)) {
        const std::string n = e->d_name;
        if (n.rfind("zipccl-", 0) == 0 && ends_with(n, ".json")) names.push_back(a + "/" + n);
      }
      closedir(d);
      std::sort(names.begin(), names.end());
      files.insert(files.end(), names.begin(), names.end());
    } else {
      files.push_back(a);
    }
  }
  std::vector<Snapshot> out;
  for (const std::string& f : files) {
    Snapshot s;
    std::string why;
    if (read_snapshot(f, &s, &why)) {
      out.push_back(std::move(s));
    } else {
      ++*skipped;
      std::fprintf(stderr, "zipccl stats: skipped %s: %s\n", f.c_str(), why.c_str());
    }
  }
  std::sort(out.begin(), out.end(), [](const Snapshot& a, const Snapshot& b) {
    if ((a.rank < 0) != (b.rank < 0)) return a.rank >= 0;
    if (a.rank != b.rank) return a.rank < b.rank;
    return a.label < b.label;
  });
  return out;
}

double unix_now() {
  struct timeval tv;
  gettimeofday(&tv, nullptr);
  return tv.tv_sec + tv.tv_usec * 1e-6;
}

std::string bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  int u = 0;
  while (std::fabs(b) >= 1024 && u < 5) b /= 1024, ++u;
  char buf[32];
  std::snprintf(buf, sizeof buf, u ? "%.1f %s" : "%.0f %s", b, units[u]);
  return buf;
}

double ratio(double in, double wire) { return wire > 0 ? in / wire : 1.0; }

// Seconds the wire saved at the rank's measured link rate (0 when no rate was measured).
double saved_seconds(const Snapshot& s) {
  return s.send.link_gbps > 0 ? (s.send.bytes_in - s.send.bytes_wire) * 8 / (s.send.link_gbps * 1e9) : 0;
}

void print_table(const std::vector<Snapshot>& snaps, int skipped, FILE* f) {
  const double now = unix_now();
  std::fprintf(f, "%-18s %8s %11s %11s %6s %20s %11s %9s %8s %11s %8s\n", "process", "age", "sent", "on wire", "ratio",
               "cmp/small/pol/incmp", "received", "codec s", "link Gb", "saved", "saved s");
  Dir tot_send, tot_recv;
  std::vector<double> ratios;
  const Snapshot* slowest = nullptr;
  double saved_s_max = 0, saved_s_sum = 0;
  for (const Snapshot& s : snaps) {
    char reasons[64], age[16], link[16], ss[16];
    std::snprintf(reasons, sizeof reasons, "%.0f/%.0f/%.0f/%.0f", s.send.compressed, s.send.small, s.send.policy,
                  s.send.incompressible);
    std::snprintf(age, sizeof age, "%s%.0fs", s.final ? "end " : "", std::max(0.0, now - s.time));
    std::snprintf(link, sizeof link, s.send.link_gbps > 0 ? "%.2f" : "-", s.send.link_gbps);
    std::snprintf(ss, sizeof ss, s.send.link_gbps > 0 ? "%.2f" : "-", saved_seconds(s));
    const double codec = s.send.codec_s + s.recv.codec_s;
    std::fprintf(f, "%-18s %8s %11s %11s %6.3f %20s %11s %9.3f %8s %11s %8s\n", s.label.c_str(), age,
                 bytes(s.send.bytes_in).c_str(), bytes(s.send.bytes_wire).c_str(),
                 s.send.bytes_in > 0 ? ratio(s.send.bytes_in, s.send.bytes_wire) : ratio(s.recv.bytes_in, s.recv.bytes_wire),
                 reasons, bytes(s.recv.bytes_in).c_str(), codec, link,
                 bytes(s.send.bytes_in - s.send.bytes_wire).c_str(), ss);
    for (auto [t, d] : {std::pair<Dir*, const Dir*>{&tot_send, &s.send}, {&tot_recv, &s.recv}}) {
      t->messages += d->messages;
      t->bytes_in += d->bytes_in;
      t->bytes_wire += d->bytes_wire;
      t->compressed += d->compressed;
      t->small += d->small;
      t->policy += d->policy;
      t->incompressible += d->incompressible;
      t->codec_s += d->codec_s;
      t->errors += d->errors;
    }
    if (s.send.bytes_wire > 0) ratios.push_back(ratio(s.send.bytes_in, s.send.bytes_wire));
    if (!slowest || codec > slowest->send.codec_s + slowest->recv.codec_s) slowest = &s;
    saved_s_max = std::max(saved_s_max, saved_seconds(s));
    saved_s_sum += saved_seconds(s);
  }
  std::fprintf(f, "\n%zu process(es)%s: sent %s, %s on the wire (ratio %.3f), %.0f messages (compressed %.0f, raw "
               "small %.0f, policy %.0f, incompressible %.0f), received %s, errors %.0f\n",
               snaps.size(), skipped ? (" (" + std::to_string(skipped) + " file(s) skipped)").c_str() : "",
               bytes(tot_send.bytes_in).c_str(), bytes(tot_send.bytes_wire).c_str(),
               ratio(tot_send.bytes_in, tot_send.bytes_wire), tot_send.messages, tot_send.compressed, tot_send.small,
               tot_send.policy, tot_send.incompressible, bytes(tot_recv.bytes_in).c_str(),
               tot_send.errors + tot_recv.errors);
  if (!ratios.empty()) {
    std::sort(ratios.begin(), ratios.end());
    std::fprintf(f, "ratio over ranks: min %.3f, median %.3f, max %.3f\n", ratios.front(), ratios[ratios.size() / 2],
                 ratios.back());
  }
  if (slowest) {
    std::fprintf(f, "slowest codec: %s, %.3f s (encode %.3f + decode %.3f)\n", slowest->label.c_str(),
                 slowest->send.codec_s + slowest->recv.codec_s, slowest->send.codec_s, slowest->recv.codec_s);
  }
  std::fprintf(f, "the wire saved %s; at each rank's measured link rate %.2f s of sending (most on one rank), %.2f "
               "s summed over ranks\n",
               bytes(tot_send.bytes_in - tot_send.bytes_wire).c_str(), saved_s_max, saved_s_sum);
}

// ---- the picture ----
const char* kColors[] = {"#3b6fb6", "#c46a21", "#2e9c6a", "#b63b6f", "#7a5fb0", "#8c6d31", "#2a9db0", "#666666"};

std::string num(double v, const char* f = "%.3g") {
  char b[32];
  std::snprintf(b, sizeof b, f, v);
  return b;
}

// The smallest of 1, 2, 2.5, 5 x 10^k at or above v (> 0): an axis top whose quarters read well.
double nice_ceiling(double v) {
  const double p = std::pow(10, std::floor(std::log10(v)));
  for (double m : {1.0, 2.0, 2.5, 5.0, 10.0}) {
    if (m * p >= v * (1 - 1e-9)) return m * p;
  }
  return 10 * p;
}

// Per rank, per history interval: (time since the job's first snapshot start, value).
struct Series {
  std::string label;
  std::vector<std::pair<double, double>> ratio, goodput_gbps;
};

std::string draw_svg(const std::vector<Snapshot>& snaps) {
  double t0 = 1e300, t1 = -1e300;
  for (const Snapshot& s : snaps) {
    for (const Point& p : s.history) t0 = std::min(t0, p.t), t1 = std::max(t1, p.t);
  }
  std::vector<Series> series;
  double rmax = 1.0, gmax = 0;
  for (const Snapshot& s : snaps) {
    // A process that only receives (a receiver in `zipccl perf`) is drawn from what it received.
    const bool recv = s.send.bytes_in == 0 && s.recv.bytes_in > 0;
    Series se;
    se.label = s.label + (recv ? " (recv)" : "");
    for (size_t i = 1; i < s.history.size(); ++i) {
      const Point &a = s.history[i - 1], &b = s.history[i];
      const double dt = b.t - a.t, din = recv ? b.recv_in - a.recv_in : b.send_in - a.send_in,
                   dw = recv ? b.recv_wire - a.recv_wire : b.send_wire - a.send_wire;
      if (dt <= 0) continue;
      const double tm = b.t - t0;
      if (dw > 0) se.ratio.push_back({tm, din / dw}), rmax = std::max(rmax, din / dw);
      se.goodput_gbps.push_back({tm, din * 8 / dt / 1e9});
      gmax = std::max(gmax, din * 8 / dt / 1e9);
    }
    series.push_back(std::move(se));
  }
  const double W = 900, panel_h = 240, left = 70, right = 170, top = 50, gap = 70;
  const double H = top + 2 * panel_h + gap + 50;
  Svg svg(W, H);
  svg.text(left, 28, "zipccl: compression ratio and goodput over time, one line per rank (from " +
                         std::to_string(snaps.size()) + " snapshot(s))",
           "font-size=\"15\" font-weight=\"bold\"");
  const double span = t1 > t0 ? t1 - t0 : 1;
  auto panel = [&](double y, const char* title, double vmax, auto pick) {
    const double pw = W - left - right;
    svg.rect(left, y, pw, panel_h, "fill=\"#fafafa\" stroke=\"#999\"");
    svg.text(left, y - 8, title, "font-size=\"13\"");
    for (int k = 0; k <= 4; ++k) {
      const double v = vmax * k / 4, yy = y + panel_h - panel_h * k / 4;
      svg.line(left, yy, left + pw, yy, "stroke=\"#ddd\"");
      svg.text(left - 6, yy + 4, num(v), "font-size=\"11\" text-anchor=\"end\"");
    }
    for (int k = 0; k <= 5; ++k) {
      const double xx = left + pw * k / 5;
      svg.text(xx, y + panel_h + 16, num(span * k / 5, "%.0f") + " s", "font-size=\"11\" text-anchor=\"middle\"");
    }
    for (size_t i = 0; i < series.size(); ++i) {
      const auto& pts = pick(series[i]);
      const std::string color = kColors[i % (sizeof kColors / sizeof *kColors)];
      svg.begin_group(series[i].label);
      for (size_t k = 0; k < pts.size(); ++k) {
        const double x = left + pw * pts[k].first / span, yv = y + panel_h - panel_h * std::min(pts[k].second, vmax) / vmax;
        if (k > 0) {
          const double px = left + pw * pts[k - 1].first / span,
                       py = y + panel_h - panel_h * std::min(pts[k - 1].second, vmax) / vmax;
          svg.line(px, py, x, yv, "stroke=\"" + color + "\" stroke-width=\"2\"");
        }
        svg.rect(x - 2, yv - 2, 4, 4, "fill=\"" + color + "\"");
      }
      svg.end_group();
    }
  };
  panel(top + 20, "compression ratio per interval (bytes in / bytes on the wire)", nice_ceiling(rmax),
        [](const Series& s) -> const std::vector<std::pair<double, double>>& { return s.ratio; });
  panel(top + 20 + panel_h + gap, "goodput per interval (uncompressed Gbit/s sent, or received by a process that only receives)", gmax > 0 ? nice_ceiling(gmax * 1.05) : 1,
        [](const Series& s) -> const std::vector<std::pair<double, double>>& { return s.goodput_gbps; });
  for (size_t i = 0; i < series.size(); ++i) {
    const double y = top + 30 + 18 * i;
    const std::string color = kColors[i % (sizeof kColors / sizeof *kColors)];
    svg.rect(W - right + 16, y - 9, 12, 12, "fill=\"" + color + "\"");
    svg.text(W - right + 34, y + 1, series[i].label, "font-size=\"12\"");
  }
  return svg.finish();
}

}  // namespace

int cmd_stats(int argc, char** argv) {
  std::vector<std::string> inputs;
  std::string svg_out;
  double watch = 0;
  long count = -1;
  for (int i = 1; i < argc; ++i) {
    const char* a = argv[i];
    if (!std::strcmp(a, "-h") || !std::strcmp(a, "--help")) {
      usage(stdout);
      return 0;
    } else if (!std::strcmp(a, "--watch")) {
      watch = 2;
      if (i + 1 < argc && std::isdigit(static_cast<unsigned char>(argv[i + 1][0]))) {
        char* end = nullptr;
        watch = std::strtod(argv[++i], &end);
        if (*end || !(watch >= 0.1 && watch <= 86400)) {
          std::fprintf(stderr, "zipccl stats: --watch takes seconds in [0.1, 86400], not '%s'\n", argv[i]);
          return 2;
        }
      }
    } else if (!std::strcmp(a, "--count") && i + 1 < argc) {
      char* end = nullptr;
      count = std::strtol(argv[++i], &end, 10);
      if (*end || count < 1) {
        std::fprintf(stderr, "zipccl stats: --count takes a positive integer, not '%s'\n", argv[i]);
        return 2;
      }
    } else if (!std::strcmp(a, "--svg") && i + 1 < argc) {
      svg_out = argv[++i];
    } else if (a[0] == '-' && a[1]) {
      std::fprintf(stderr, "zipccl stats: unknown option or missing value: '%s'\n\n", a);
      usage(stderr);
      return 2;
    } else {
      inputs.push_back(a);
    }
  }
  if (inputs.empty()) {
    usage(stderr);
    return 2;
  }
  for (long round = 0;; ++round) {
    int skipped = 0;
    const std::vector<Snapshot> snaps = load(inputs, &skipped);
    if (watch > 0 && isatty(STDOUT_FILENO)) std::fputs("\033[H\033[2J", stdout);
    if (snaps.empty()) {
      std::fprintf(stderr, "zipccl stats: no readable snapshot in %s%s\n", inputs[0].c_str(),
                   inputs.size() > 1 ? " ..." : "");
      if (watch <= 0) return 1;
    } else {
      if (watch > 0) {
        const time_t t = time(nullptr);
        char when[64];
        std::strftime(when, sizeof when, "%F %T", localtime(&t));
        std::printf("zipccl stats  %s  (every %g s)\n", when, watch);
      }
      print_table(snaps, skipped, stdout);
      if (!svg_out.empty()) {
        std::ofstream o(svg_out, std::ios::binary);
        o << draw_svg(snaps);
        if (!o) {
          std::fprintf(stderr, "zipccl stats: cannot write %s\n", svg_out.c_str());
          return 1;
        }
      }
    }
    std::fflush(stdout);
    if (watch <= 0 || (count > 0 && round + 1 >= count)) break;
    std::this_thread::sleep_for(std::chrono::duration<double>(watch));
  }
  return 0;
}

}  // namespace tools
}  // namespace zipccl
