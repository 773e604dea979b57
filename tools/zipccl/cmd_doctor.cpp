// `zipccl doctor`: checks a node the way NCCL would use zipccl there, and says in one line whether it
// would work. It loads the plugin as NCCL does (NCCL_NET_PLUGIN=NAME -> libnccl-net-NAME.so through
// the loader path, or a path), finds the NCCL version the job would run under (libnccl.so.2's
// ncclGetVersion) and the ABI table that version picks, calls init/devices/getProperties through
// that table, and lists every ZIPCCL_ setting with its effective value. Exit status: 0 when NCCL
// would load and initialise the plugin with these settings, 1 with the reasons when not, 2 for bad
// usage.
//
// The settings come from the plugin's own registry (plugin/src/common/settings.cpp, compiled into the
// tool): the same parser the plugin runs, so a value the plugin would reject is reported here. The
// registry also generates the README's settings table (--settings-markdown, --check-readme,
// --update-readme) so that the documentation cannot drift from the code.
#include <dlfcn.h>
#include <link.h>

#include <cctype>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include "commands.h"
#include "doctor_passthrough.h"
#include "abi/net.h"
#include "common/settings.h"
#include "common/version.h"
#include "fabric/fabric.h"
#include "zipccl/net_client.h"

namespace zipccl {
namespace tools {
namespace {

constexpr char kReadmeBegin[] =
    "<!-- zipccl-settings:begin (generated: zipccl doctor --update-readme README.md) -->";
constexpr char kReadmeEnd[] = "<!-- zipccl-settings:end -->";
constexpr int kOldestAbi = net_client::kOldestVersion;
constexpr int kNewestAbi = net_client::kNewestVersion;

struct Options {
  std::string plugin;        // NAME or PATH; empty: NCCL_NET_PLUGIN, else "zipccl"
  std::string nccl_version;  // "2.27" / "2.27.3"; empty: ask libnccl.so.2
  bool verbose = false;
};

void usage(FILE* f) {
  std::fprintf(f,
               "usage: zipccl doctor [--plugin NAME|PATH] [--nccl-version X.Y[.Z]] [-v]\n"
               "       zipccl doctor --settings-markdown | --check-readme FILE | --update-readme FILE\n\n"
               "Loads the NCCL net plugin the way NCCL would on this node and says whether it would work:\n"
               "the NCCL version and the plugin ABI table it would use, the network devices the plugin\n"
               "finds, every ZIPCCL_ setting with its effective value, and a one-line verdict.\n"
               "Exit status 0: it would work; 1: it would not (the reasons are printed); 2: bad usage.\n\n"
               "  --plugin NAME|PATH     NAME loads libnccl-net-NAME.so from the loader path, as\n"
               "                         NCCL_NET_PLUGIN=NAME does; a PATH loads that file\n"
               "                         (default: $NCCL_NET_PLUGIN, else zipccl)\n"
               "  --nccl-version X.Y     the NCCL the job uses, when libnccl.so.2 is not on the loader\n"
               "                         path (frameworks often bundle their own)\n"
               "  -v, --verbose          also print the plugin's INFO log lines\n"
               "  --settings-markdown    print the settings table (README.md) from the registry\n"
               "  --check-readme FILE    exit 1 if FILE's generated settings table is out of date\n"
               "  --update-readme FILE   rewrite FILE's generated settings table\n");
}

// ---- what the plugin logs during the check ----
struct LogLine {
  ncclDebugLogLevel level;
  std::string text;
};
std::mutex g_log_mu;
std::vector<LogLine> g_log;

void capture_log(ncclDebugLogLevel level, unsigned long, const char*, int, const char* fmt, ...) {
  if (level != NCCL_LOG_WARN && level != NCCL_LOG_INFO) return;
  char buf[2048];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  std::lock_guard<std::mutex> lock(g_log_mu);
  g_log.push_back({level, buf});
}

std::vector<std::string> warnings_since(size_t first) {
  std::lock_guard<std::mutex> lock(g_log_mu);
  std::vector<std::string> out;
  for (size_t i = first; i < g_log.size(); ++i)
    if (g_log[i].level == NCCL_LOG_WARN) out.push_back(g_log[i].text);
  return out;
}

size_t log_size() {
  std::lock_guard<std::mutex> lock(g_log_mu);
  return g_log.size();
}

// Prints what follows `lead` in the first (all: every) plugin log line holding it, after `label`.
void print_logged(const std::string& lead, const char* label, bool all) {
  std::lock_guard<std::mutex> lock(g_log_mu);
  for (const LogLine& l : g_log) {
    const size_t at = l.text.find(lead);
    if (at == std::string::npos) continue;
    std::printf("  %s%s\n", label, l.text.c_str() + at + lead.size());
    if (!all) break;
  }
}

// The plugin's version, from the INFO line its init logs first ("NET/zipccl : zipccl 0.1.0 (git
// ...)"): the plugin exports nothing but its ncclNetPlugin tables. Empty when no such line came.
std::string plugin_version() {
  static const char kPrefix[] = "NET/zipccl : zipccl ";
  std::lock_guard<std::mutex> lock(g_log_mu);
  const size_t n = sizeof kPrefix - 1;
  for (const LogLine& l : g_log) {
    if (l.level == NCCL_LOG_INFO && l.text.compare(0, n, kPrefix) == 0 &&
        std::isdigit(static_cast<unsigned char>(l.text[n])))  // not "zipccl socket transport, ..."
      return l.text.substr(n);
  }
  return "";
}

// ---- NCCL version -> ABI ----
struct NcclVersion {
  int major = 0, minor = 0, patch = 0;
  bool known = false;
};

bool parse_version(const std::string& s, NcclVersion* v) {
  int n = std::sscanf(s.c_str(), "%d.%d.%d", &v->major, &v->minor, &v->patch);
  if (n < 2 || v->major < 1 || v->minor < 0) return false;
  if (n == 2) v->patch = 0;
  v->known = true;
  return true;
}

// The ncclNet_vN NCCL of this version looks for first (then it falls back to older tables).
int native_abi(const NcclVersion& v) {
  if (v.major > 2) return kNewestAbi;
  if (v.major < 2 || v.minor < 17) return 6;  // older than any table zipccl exports
  if (v.minor >= 30) return 12;
  if (v.minor >= 28) return 11;
  if (v.minor >= 24) return 10;
  if (v.minor >= 22) return 9;
  if (v.minor >= 19) return 8;
  return 7;
}

// libnccl.so.2 from the loader path; its ncclGetVersion code is major*10000 + minor*100 + patch since
// 2.9 (major*1000 + minor*100 + patch before).
NcclVersion installed_nccl(std::string* where) {
  NcclVersion v;
  void* lib = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
  if (!lib) return v;
  link_map* lm = nullptr;
  if (dlinfo(lib, RTLD_DI_LINKMAP, &lm) == 0 && lm && lm->l_name) *where = lm->l_name;
  using GetVersion = int (*)(int*);
  auto get = reinterpret_cast<GetVersion>(dlsym(lib, "ncclGetVersion"));
  int code = 0;
  if (get && get(&code) == 0 && code > 0) {
    bool new_scheme = code >= 10000;
    v.major = new_scheme ? code / 10000 : code / 1000;
    v.minor = new_scheme ? (code % 10000) / 100 : (code % 1000) / 100;
    v.patch = code % 100;
    v.known = true;
  }
  return v;  // left loaded: unloading NCCL in a process that may have used it gains nothing
}

// ---- the plugin ----
struct Device {
  std::string name, pci_path;
  int speed = 0, ptr_support = 0, max_comms = 0, max_recvs = 0;
};

// init, devices and getProperties through the client (the table's own signatures underneath), then
// finalize: the probe leaves no context behind.
ncclResult_t probe(net_client::Net& net, std::vector<Device>* out, std::string* failed) {
  void* ctx = nullptr;
  net_client::CommConfig config{NCCL_NET_TRAFFIC_CLASS_UNDEF};
  ncclResult_t r = net.init(&ctx, 0, &config, capture_log, nullptr);
  if (r != ncclSuccess) {
    *failed = "init()";
    return r;
  }
  int n = 0;
  r = net.devices(&n);
  if (r != ncclSuccess) *failed = "devices()";
  for (int i = 0; r == ncclSuccess && i < n; ++i) {
    net_client::Properties p{};
    r = net.get_properties(i, &p);
    if (r != ncclSuccess) {
      *failed = "getProperties(" + std::to_string(i) + ")";
      break;
    }
    Device d;
    d.name = p.name ? p.name : "";
    d.pci_path = p.pciPath ? p.pciPath : "";
    d.speed = p.speed;
    d.ptr_support = p.ptrSupport;
    d.max_comms = p.maxComms;
    d.max_recvs = p.maxRecvs;
    out->push_back(d);
  }
  ncclResult_t f = net.finalize(ctx);
  if (r == ncclSuccess && f != ncclSuccess) {
    *failed = "finalize()";
    r = f;
  }
  return r;
}

const char* result_name(ncclResult_t r) {
  switch (r) {
    case ncclSuccess:
      return "ncclSuccess";
    case ncclSystemError:
      return "ncclSystemError";
    case ncclInternalError:
      return "ncclInternalError";
    case ncclInvalidArgument:
      return "ncclInvalidArgument";
    case ncclInvalidUsage:
      return "ncclInvalidUsage";
    default:
      return "error";
  }
}

// The plugin name NCCL would be told, and where it was told (fabric/fabric.h: the environment, then
// NCCL's config files).
std::string configured_plugin(std::string* source) {
  std::vector<std::string> problems;  // said in the fabric section
  return net::nccl_net_plugin_setting(net::settings().fabric_root, source, &problems);
}

std::string md_cell(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '|') out += '\\';
    out += c;
  }
  return out;
}

std::string settings_markdown() {
  std::ostringstream o;
  o << "| Setting | Accepts | Default | What it does |\n|---|---|---|---|\n";
  for (const net::SettingInfo& s : net::describe_settings()) {
    std::string def = s.default_value.empty() ? "unset" : s.default_value;
    std::string doc = s.doc;  // "auto|always|never: ..." says again what the Accepts column says
    if (doc.compare(0, s.values.size() + 2, s.values + ": ") == 0) doc = doc.substr(s.values.size() + 2);
    o << "| `" << s.name << "` | " << md_cell(s.values) << " | " << md_cell(def) << " | " << md_cell(doc)
      << " |\n";
  }
  return o.str();
}

// Splits `text` around the generated block: [0, begin) + table + [end, size).
bool find_block(const std::string& text, size_t* begin, size_t* end) {
  size_t b = text.find(kReadmeBegin);
  if (b == std::string::npos) return false;
  b = text.find('\n', b);
  if (b == std::string::npos) return false;
  size_t e = text.find(kReadmeEnd, b);
  if (e == std::string::npos) return false;
  *begin = b + 1;
  *end = e;
  return true;
}

int readme(const std::string& path, bool update) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "zipccl doctor: cannot read %s\n", path.c_str());
    return 1;
  }
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  size_t b = 0, e = 0;
  if (!find_block(text, &b, &e)) {
    std::fprintf(stderr,
                 "zipccl doctor: %s has no generated settings table: put the lines\n%s\n%s\nwhere it goes\n",
                 path.c_str(), kReadmeBegin, kReadmeEnd);
    return 1;
  }
  const std::string table = settings_markdown();
  if (text.compare(b, e - b, table) == 0) return 0;
  if (!update) {
    std::fprintf(stderr,
                 "zipccl doctor: the ZIPCCL_ settings table in %s differs from the settings registry "
                 "(plugin/src/common/settings.cpp).\nRegenerate it with:\n  zipccl doctor --update-readme %s\n"
                 "(from the repository root, with the built tool: build/tools/zipccl doctor --update-readme "
                 "README.md)\n",
                 path.c_str(), path.c_str());
    return 1;
  }
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text.substr(0, b) << table << text.substr(e);
  if (!out.good()) {
    std::fprintf(stderr, "zipccl doctor: cannot write %s\n", path.c_str());
    return 1;
  }
  std::printf("updated the settings table in %s\n", path.c_str());
  return 0;
}

// ---- the check ----
struct Check {
  std::vector<std::string> failures;
  std::vector<std::string> notes;
  std::string to_compress;  // where zipccl steps aside at init though the table said wrap: what would help
};

// Loads the plugin as NCCL does (net_load.h: the name as given, then libnccl-net-NAME.so; a path or a
// lib*.so file name as it is).
void* load_plugin(const std::string& plugin, std::string* error) {
  char why[ZIPCCL_NET_ERROR_MAX];
  void* lib = zipccl_net_dlopen(plugin.c_str(), nullptr, 0, why, sizeof why);
  if (!lib) *error = why;
  return lib;
}

// What NCCL would do: its version (the table it looks for first) and the plugin it is configured to load.
struct Target {
  std::string configured, source;  // NCCL_NET_PLUGIN and where it was set
  std::string plugin;              // what this check loads
  NcclVersion ver;
  int native = kNewestAbi;  // the newest table that NCCL asks for
};

Target check_nccl(const Options& opt, Check& c) {
  Target t;
  t.configured = configured_plugin(&t.source);
  t.plugin = opt.plugin.empty() ? t.configured : opt.plugin;
  if (t.plugin.empty()) t.plugin = "zipccl";
  NcclVersion& ver = t.ver;
  const std::string& configured = t.configured;
  const std::string& source = t.source;
  std::string nccl_where;
  if (!opt.nccl_version.empty()) {
    parse_version(opt.nccl_version, &ver);  // validated by the caller
    std::printf("NCCL        %d.%d.%d (given with --nccl-version)\n", ver.major, ver.minor, ver.patch);
  } else {
    ver = installed_nccl(&nccl_where);
    if (ver.known) {
      std::printf("NCCL        %d.%d.%d (%s)\n", ver.major, ver.minor, ver.patch, nccl_where.c_str());
    } else {
      std::printf(
          "NCCL        libnccl.so.2 is not on the loader path; assuming 2.30+ (if the job's framework "
          "bundles NCCL, pass --nccl-version)\n");
    }
  }
  t.native = ver.known ? native_abi(ver) : kNewestAbi;
  if (configured.empty()) {
    c.notes.push_back(
        "NCCL_NET_PLUGIN is set neither in the environment nor in /etc/nccl.conf or ~/.nccl.conf: NCCL "
        "would not load zipccl (add NCCL_NET_PLUGIN=zipccl to /etc/nccl.conf)");
  } else {
    std::printf("configured  NCCL_NET_PLUGIN=%s (%s)\n", configured.c_str(), source.c_str());
  }
  if (!configured.empty() && !opt.plugin.empty() && configured != opt.plugin) {
    c.notes.push_back("NCCL_NET_PLUGIN=" + configured + " (" + source +
                      "): NCCL would load that, not the --plugin " + opt.plugin + " checked here");
  }
  if (const char* n = std::getenv("NCCL_NET"); n && *n && std::strcmp(n, net::kPluginName) != 0) {
    c.notes.push_back(std::string("NCCL_NET=") + n + ": NCCL will use the network named '" + n +
                      "', not zipccl");
  }

  return t;
}

// The plugin's library and the table NCCL would take from it.
struct Loaded {
  void* lib = nullptr;
  const void* table = nullptr;
  int abi = 0;
};

Loaded check_tables(const Target& t, Check& c) {
  Loaded l;
  const std::string& plugin = t.plugin;
  const NcclVersion& ver = t.ver;
  const int native = t.native;
  std::string error;
  void* lib = l.lib = load_plugin(plugin, &error);
  if (!lib) {
    c.failures.push_back("cannot load the plugin " + plugin + ": " + error +
                         "; install it into the library path (cmake --install, or the .deb) or set "
                         "LD_LIBRARY_PATH");
  } else {
    link_map* lm = nullptr;
    std::string where = plugin;
    if (dlinfo(lib, RTLD_DI_LINKMAP, &lm) == 0 && lm && lm->l_name && *lm->l_name) where = lm->l_name;
    std::printf("plugin      %s\n", where.c_str());
    std::string exported;
    for (int v : net_client::exported_versions(lib))
      exported += (exported.empty() ? "v" : " v") + std::to_string(v);
    l.table = zipccl_net_table(lib, native, &l.abi);
    std::printf("tables      %s\n", exported.empty() ? "none" : exported.c_str());
    if (exported.empty()) {
      c.failures.push_back(where + " exports no ncclNetPlugin_v" + std::to_string(kOldestAbi) + "..v" +
                           std::to_string(kNewestAbi) +
                           " table: it is not an NCCL net plugin that NCCL 2.17+ can use");
    } else if (!l.table) {
      c.failures.push_back("NCCL " + std::to_string(ver.major) + "." + std::to_string(ver.minor) +
                           " uses plugin ABI v" + std::to_string(native) + " or older; the plugin exports " +
                           exported);
    } else {
      std::printf(
          "ABI         ncclNetPlugin_v%d (NCCL %s looks for v%d first, then older tables); name '%s'\n", l.abi,
          ver.known ? (std::to_string(ver.major) + "." + std::to_string(ver.minor)).c_str() : "2.30+", native,
          zipccl_net_table_name(l.table));
    }
  }

  return l;
}

// The codec's kernel set and the settings, as the plugin reads them.
void check_settings(Check& c) {
  // The CPU codec's kernel set, chosen as the plugin chooses it (ZIPCCL_CODEC_ISA, then cpuid).
  const codec::Isa want = net::settings().codec_isa;
  const std::string cpu = codec::cpu_features();
  std::printf("codec       CPU kernels %s (ZIPCCL_CODEC_ISA=%s; cpu: %s)\n",
              codec::isa_name(net::codec_isa()), codec::isa_name(want),
              cpu.empty() ? "none of the SIMD features" : cpu.c_str());
  if (!codec::isa_supported(want))
    c.notes.push_back(std::string("ZIPCCL_CODEC_ISA=") + codec::isa_name(want) +
                      ": this CPU or build lacks it (" + codec::isa_missing(want) +
                      "); the plugin warns and uses " + codec::isa_name(net::codec_isa()));

  // Settings, as the plugin reads them.
  std::printf("\nsettings\n");
  for (const net::SettingInfo& s : net::describe_settings()) {
    std::printf("  %-26s = %-10s %s\n", s.name.c_str(), s.value.empty() ? "(unset)" : s.value.c_str(),
                s.from_env ? "(environment)" : "(default)");
    if (!s.problem.empty())
      c.failures.push_back("bad setting: " + s.problem +
                           " (the plugin only warns and runs with the default: fix or unset it)");
  }
  const char* ifname = std::getenv("NCCL_SOCKET_IFNAME");
  const char* family = std::getenv("NCCL_SOCKET_FAMILY");
  std::printf("  %-26s = %s\n", "NCCL_SOCKET_IFNAME", ifname && *ifname ? ifname : "(unset: automatic)");
  if (family && *family) std::printf("  %-26s = %s\n", "NCCL_SOCKET_FAMILY", family);
  if (net::settings().compress == net::CompressMode::kNever)
    c.notes.push_back("ZIPCCL_COMPRESS=never: the plugin moves every message uncompressed");

}

// The node's network and the plugin chain, as the loaded plugin discovers them, and the decision its
// init takes (fabric/fabric.h): the same code, so doctor and plugin cannot disagree.
net::FabricDecision check_fabric(const Loaded& l, net::Fabric* fabric, Check& c) {
  Dl_info info{};
  const void* self = l.table && dladdr(l.table, &info) ? info.dli_fbase : nullptr;
  net::Fabric& f = *fabric = net::discover_fabric(net::settings().fabric_root, self);
  const net::FabricDecision d = net::decide(f, net::settings());
  std::printf("\nfabric%s\n", net::settings().fabric_root.empty()
                                   ? ""
                                   : (" (under ZIPCCL_FABRIC_ROOT=" + net::settings().fabric_root + ")").c_str());
  if (f.rdma.empty()) std::printf("  rdma      none\n");
  for (const net::RdmaPort& p : f.rdma) {
    std::printf("  rdma      %s:%d %-12s %-11s %g Gbit/s  driver %s%s\n", p.device.c_str(), p.port,
                p.link_layer.empty() ? "?" : p.link_layer.c_str(), p.state.c_str(), p.rate_gbps,
                p.driver.empty() ? "?" : p.driver.c_str(),
                p.efa() ? "  (EFA)" : p.soft() ? "  (emulated RDMA: not counted)" : "");
  }
  for (const net::NetIface& i : f.net) {
    if (i.name == "lo") continue;
    std::printf("  net       %-12s %s  %s%s\n", i.name.c_str(),
                i.speed_mbps > 0 ? (std::to_string(i.speed_mbps) + " Mbit/s").c_str() : "speed ?",
                i.up ? "up" : "down", i.vendor.empty() ? "" : ("  vendor " + i.vendor).c_str());
  }
  std::printf("  chain     NCCL_NET_PLUGIN=%s%s\n", f.configured.empty() ? "(unset)" : f.configured.c_str(),
              f.configured_from.empty() ? "" : (" (" + f.configured_from + ")").c_str());
  if (f.replaced.empty()) std::printf("  without   NCCL alone would load no net plugin: its own IB and socket transports\n");
  for (const net::PluginLib& p : f.replaced) {
    std::printf("  without   NCCL alone would load %s: %s\n", p.request.c_str(),
                p.path.empty() ? p.error.c_str()
                               : (p.path + " ('" + p.net_name + "', ncclNetPlugin_v" + std::to_string(p.abi) + ")" +
                                  (p.device_unpack() ? ", device-side unpack (TCPX class)" : ""))
                                     .c_str());
  }
  for (const std::string& p : f.problems) c.notes.push_back("fabric: " + p);
  std::printf("decision    %s (%s%s)\n", net::fabric_action_name(d.action), d.rule.c_str(),
              d.explicit_choice ? ", set explicitly" : "");
  std::printf("  why       %s\n", d.why.c_str());
  if (d.action == net::FabricAction::kWrap) {
    std::printf("  inner     %s\n", d.inner.c_str());
    print_passthrough(d.inner, &c.notes);
  }
  if (d.action == net::FabricAction::kStepAside) {
    std::printf("  then      NCCL goes on with %s\n", net::step_aside_next(f).c_str());
    std::printf("  compress  %s\n", d.to_compress.c_str());
  }
  if (d.slower_than_nccl) c.failures.push_back("slower than NCCL alone: " + d.slower_why);
  return d;
}

// init / devices / getProperties through the table NCCL would use, and what the plugin logged.
std::vector<Device> check_devices(const Options& opt, const Loaded& l, const net::Fabric& f,
                                  const net::FabricDecision& d, Check& c) {
  const bool steps_aside = d.action == net::FabricAction::kStepAside;
  // A plugin the node already uses that has no device or fails its init here would fail NCCL alone just
  // the same: zipccl stepping aside then changes nothing. Named explicitly, it is a broken setting.
  const bool auto_wrap = d.action == net::FabricAction::kWrap && !d.explicit_choice;
  std::vector<Device> devices;
  void* lib = l.lib;
  const void* table = l.table;
  const int abi = l.abi;
  if (table) {
    const size_t first = log_size();
    std::string failed;
    ncclResult_t r = probe(*net_client::wrap(lib, table, abi), &devices, &failed);
    std::vector<std::string> warns = warnings_since(first);
    std::printf("\ndevices (%s init/devices/getProperties)\n", ("v" + std::to_string(abi)).c_str());
    for (size_t i = 0; i < devices.size(); ++i) {
      const Device& d = devices[i];
      std::printf("  [%zu] %-12s %6d Mbit/s  pci %s  ptrSupport %s  maxComms %d\n", i, d.name.c_str(),
                  d.speed, d.pci_path.empty() ? "(none: virtual)" : d.pci_path.c_str(),
                  d.ptr_support == NCCL_PTR_HOST ? "host" : std::to_string(d.ptr_support).c_str(),
                  d.max_comms);
    }
    const std::string pv = plugin_version();
    std::printf("  version   %s\n", pv.empty() ? "unknown (its init logged no version: an older build)"
                                               : ("zipccl " + pv).c_str());
    if (!pv.empty() && pv != version_string())
      c.notes.push_back("the plugin is zipccl " + pv + ", this tool zipccl " + version_string() +
                        ": install both from one build");
    // The plugin's own word on device buffers (the INFO line that opens with "GPU path: ", logged once
    // at getProperties): on, or off and why. Other lines only mention the GPU path (settings' docs).
    print_logged(" : GPU path: ", "GPU path  ", false);
    // ZIPCCL_NET_INNER: the inner plugin's library, name, ABI version, then each of its devices with its
    // properties, as the plugin logged them when it opened it.
    print_logged(" : inner plugin ", "inner     ", false);
    print_logged(" : inner device ", "  device  ", true);
    if (opt.verbose) {
      std::lock_guard<std::mutex> lock(g_log_mu);
      std::printf("\nplugin log\n");
      for (const LogLine& l : g_log)
        std::printf("  %s %s\n", l.level == NCCL_LOG_WARN ? "WARN" : "INFO", l.text.c_str());
    } else {
      for (const std::string& w : warns) std::printf("  WARN %s\n", w.c_str());
    }
    if (r != ncclSuccess && steps_aside && failed == "init()") {
      std::printf("  init      fails, as it should: zipccl steps aside\n");
    } else if (r != ncclSuccess && auto_wrap && failed == "init()" && !warns.empty() &&
               warns.back().find("would take away") != std::string::npos) {
      std::printf("  init      fails: zipccl steps aside rather than take a capability away from the node's plugin\n");
      c.to_compress = warns.back().find("GPUDirect") != std::string::npos
                          ? "ZIPCCL_GPU=on (zipccl's GPU path keeps device buffers on the GPU; opt-in until proven on one)"
                          : "nothing today: zipccl cannot carry a device-side transport";
      if (f.after_self.empty())
        c.failures.push_back("slower than NCCL alone: " + warns.back().substr(warns.back().find("zipccl steps aside")) +
                             "; NCCL_NET_PLUGIN=" + f.configured + " does not list it after zipccl");
    } else if (r != ncclSuccess && auto_wrap && failed == "init()") {
      std::printf("  init      fails: the node's plugin did not come up here (its WARN says why), so zipccl steps aside; "
                  "NCCL alone would not use it either\n");
      c.to_compress = "bring up " + d.inner + " on this node (its WARN says why)";
    } else if (steps_aside) {
      c.failures.push_back("the decision is to step aside, but the plugin's init did not fail");
    } else if (r != ncclSuccess) {
      std::string why = "the plugin's " + failed + " returned " + result_name(r);
      if (!warns.empty()) why += ": " + warns.back();
      c.failures.push_back(why);
    } else if (devices.empty()) {
      c.failures.push_back("the plugin found no network device");
    }
  }

  return devices;
}

int run_check(const Options& opt) {
  Check c;
  std::printf("zipccl doctor\n\n");
  std::printf("version     zipccl %s (this tool)\n", version_string());
  const Target t = check_nccl(opt, c);
  const Loaded l = check_tables(t, c);
  check_settings(c);
  net::Fabric f;
  const net::FabricDecision d = check_fabric(l, &f, c);
  const std::vector<Device> devices = check_devices(opt, l, f, d, c);
  const bool aside = d.action == net::FabricAction::kStepAside ||
                     (d.action == net::FabricAction::kWrap && !d.explicit_choice && devices.empty());
  std::printf("\n");
  for (const std::string& n : c.notes) std::printf("note: %s\n", n.c_str());
  if (!c.failures.empty()) {
    for (size_t i = 1; i < c.failures.size(); ++i) std::printf("also: %s\n", c.failures[i].c_str());
    std::printf("verdict: FAIL: %s\n", c.failures[0].c_str());
    return 1;
  }
  if (aside) {
    std::printf("verdict: OK: zipccl steps aside (%s): NCCL runs exactly as without it; to compress here: %s\n",
                d.rule.c_str(), d.to_compress.empty() ? c.to_compress.c_str() : d.to_compress.c_str());
    return 0;
  }
  std::string devs;
  for (const Device& dev : devices) devs += (devs.empty() ? "" : ",") + dev.name;
  const std::string over = d.action == net::FabricAction::kWrap ? "over the inner plugin " + d.inner
                           : d.action == net::FabricAction::kIb ? std::string("over zipccl's RDMA transport")
                                                                : std::string("over TCP");
  std::printf(
      "verdict: OK: NCCL %s would load %s through ncclNetPlugin_v%d with %zu device(s) (%s), compression "
      "%s %s%s\n",
      t.ver.known ? (std::to_string(t.ver.major) + "." + std::to_string(t.ver.minor)).c_str() : "2.30+",
      zipccl_net_table_name(l.table), l.abi, devices.size(), devs.c_str(),
      net::compress_mode_name(net::settings().compress), over.c_str(),
      t.configured.empty() ? ", once NCCL_NET_PLUGIN=zipccl is set (see the note)" : "");
  return 0;
}

}  // namespace

int cmd_doctor(int argc, char** argv) {
  Options opt;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&](std::string* out) {
      if (i + 1 >= argc) return false;
      *out = argv[++i];
      return true;
    };
    if (a == "-h" || a == "--help") {
      usage(stdout);
      return 0;
    } else if (a == "-v" || a == "--verbose") {
      opt.verbose = true;
    } else if (a == "--plugin") {
      if (!value(&opt.plugin) || opt.plugin.empty()) {
        std::fprintf(stderr, "zipccl doctor: --plugin needs a name or a path\n");
        return 2;
      }
    } else if (a == "--nccl-version") {
      NcclVersion v;
      if (!value(&opt.nccl_version) || !parse_version(opt.nccl_version, &v)) {
        std::fprintf(stderr, "zipccl doctor: --nccl-version needs a version such as 2.27 or 2.21.5\n");
        return 2;
      }
    } else if (a == "--settings-markdown") {
      std::fputs(settings_markdown().c_str(), stdout);
      return 0;
    } else if (a == "--check-readme" || a == "--update-readme") {
      std::string path;
      if (!value(&path)) {
        std::fprintf(stderr, "zipccl doctor: %s needs a file\n", a.c_str());
        return 2;
      }
      return readme(path, a == "--update-readme");
    } else {
      std::fprintf(stderr, "zipccl doctor: unknown option '%s'\n\n", a.c_str());
      usage(stderr);
      return 2;
    }
  }
  return run_check(opt);
}

}  // namespace tools
}  // namespace zipccl
