// The node as NCCL would see it: RDMA ports and interfaces from sysfs, and the net plugin chain NCCL was
// configured with (its environment and config files, its default libnccl-net.so).
#include <dirent.h>
#include <dlfcn.h>
#include <link.h>
#include <strings.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include "fabric/fabric.h"
#include "zipccl/net_load.h"

namespace zipccl {
namespace net {
namespace {

std::string trim(const std::string& s) {
  size_t a = 0, b = s.size();
  while (a < b && std::isspace(static_cast<unsigned char>(s[a]))) ++a;
  while (b > a && std::isspace(static_cast<unsigned char>(s[b - 1]))) --b;
  return s.substr(a, b - a);
}

bool read_line(const std::string& path, std::string* out) {
  std::ifstream in(path);
  if (!in) return false;
  std::getline(in, *out);
  *out = trim(*out);
  return !in.bad();
}

// The entries of a folder, sorted (readdir's order is the file system's); false if it cannot be read.
bool list_dir(const std::string& path, std::vector<std::string>* out) {
  DIR* d = opendir(path.c_str());
  if (!d) return false;
  while (dirent* e = readdir(d)) {
    if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) out->push_back(e->d_name);
  }
  closedir(d);
  std::sort(out->begin(), out->end());
  return true;
}

std::string link_basename(const std::string& path) {
  char buf[4096];
  ssize_t n = readlink(path.c_str(), buf, sizeof buf - 1);
  if (n <= 0) return "";
  buf[n] = '\0';
  const char* slash = std::strrchr(buf, '/');
  return slash ? slash + 1 : buf;
}

void discover_rdma(const std::string& root, Fabric* f) {
  const std::string dir = root + "/sys/class/infiniband";
  std::vector<std::string> devs;
  if (!list_dir(dir, &devs)) {
    if (access(dir.c_str(), F_OK) == 0) f->problems.push_back("cannot read " + dir + ": " + std::strerror(errno));
    return;  // absent: no RDMA device, the common case
  }
  for (const std::string& dev : devs) {
    const std::string base = dir + "/" + dev;
    std::vector<std::string> ports;
    if (!list_dir(base + "/ports", &ports)) {
      f->problems.push_back("cannot read " + base + "/ports: " + std::strerror(errno));
      continue;
    }
    const std::string driver = link_basename(base + "/device/driver");
    for (const std::string& p : ports) {
      RdmaPort port;
      port.device = dev;
      port.port = std::atoi(p.c_str());
      port.driver = driver;
      const std::string pb = base + "/ports/" + p;
      if (!read_line(pb + "/state", &port.state)) {
        f->problems.push_back("cannot read " + pb + "/state");
        continue;
      }
      read_line(pb + "/link_layer", &port.link_layer);
      std::string rate;
      if (read_line(pb + "/rate", &rate)) port.rate_gbps = std::strtod(rate.c_str(), nullptr);
      f->rdma.push_back(port);
    }
  }
}

void discover_net(const std::string& root, Fabric* f) {
  const std::string dir = root + "/sys/class/net";
  std::vector<std::string> ifs;
  if (!list_dir(dir, &ifs)) {
    f->problems.push_back("cannot read " + dir + ": " + std::strerror(errno));
    return;
  }
  for (const std::string& name : ifs) {
    NetIface i;
    i.name = name;
    std::string v;
    // speed: EINVAL on a link that is down or virtual; -1 for "unknown" as well.
    if (read_line(dir + "/" + name + "/speed", &v) && !v.empty()) i.speed_mbps = std::atoi(v.c_str());
    if (i.speed_mbps <= 0) i.speed_mbps = -1;
    read_line(dir + "/" + name + "/device/vendor", &i.vendor);
    if (read_line(dir + "/" + name + "/operstate", &v)) i.up = v == "up" || v == "unknown";
    f->net.push_back(i);
  }
}

// NCCL's config files in NCCL's order (src/misc/param.cc): NCCL_CONF_FILE, else ~/.nccl.conf; then
// /etc/nccl.conf. The first file that sets a variable wins; the environment wins over every file.
std::vector<std::string> conf_files(const std::string& root) {
  std::vector<std::string> files;
  if (const char* c = std::getenv("NCCL_CONF_FILE"); c && *c) {
    files.push_back(c);
  } else if (const char* h = std::getenv("HOME"); h && *h) {
    files.push_back(root + h + "/.nccl.conf");
  }
  files.push_back(root + "/etc/nccl.conf");
  return files;
}

// NCCL_NET_PLUGIN from the config files, with the file it came from; "" when none sets it. A line that
// is neither blank, a comment nor NAME=VALUE is a problem (NCCL skips it too).
std::string conf_net_plugin(const std::string& root, std::string* from, std::vector<std::string>* problems) {
  std::string found;
  for (const std::string& file : conf_files(root)) {
    std::ifstream in(file);
    if (!in) continue;
    std::string line;
    int n = 0;
    while (std::getline(in, line)) {
      ++n;
      const std::string t = trim(line);
      if (t.empty() || t[0] == '#') continue;
      const size_t eq = t.find('=');
      if (eq == std::string::npos || eq == 0) {
        problems->push_back(file + ":" + std::to_string(n) + ": '" + t + "' is not NAME=VALUE (NCCL ignores it)");
        continue;
      }
      if (found.empty() && trim(t.substr(0, eq)) == "NCCL_NET_PLUGIN") {
        found = trim(t.substr(eq + 1));
        *from = file;
      }
    }
    if (!found.empty()) break;
  }
  return found;
}

// The split NCCL makes of NCCL_NET_PLUGIN (strtok on ','; "none" alone: no plugin).
std::vector<std::string> nccl_plugin_list(const std::string& value) { return inner_plugin_list(value); }

const char* const kUnpackNames[] = {"GPUDirectTCPX", "GPUDirectTCPXO", "FasTrak"};

}  // namespace

std::string nccl_net_plugin_setting(const std::string& root, std::string* from, std::vector<std::string>* problems) {
  std::vector<std::string> ignored;
  std::string file;
  const std::string conf = conf_net_plugin(root, &file, problems ? problems : &ignored);
  const char* env = std::getenv("NCCL_NET_PLUGIN");
  // NCCL copies its config files into the environment without overwriting: an environment value equal
  // to the file's may have come from the file.
  if (env) {
    *from = conf == env ? file : "environment";
    return env;
  }
  *from = conf.empty() ? "" : file;
  return conf;
}

std::vector<std::string> inner_plugin_list(const std::string& value) {
  std::vector<std::string> names;
  size_t begin = 0;
  while (begin <= value.size()) {
    size_t end = value.find(',', begin);
    if (end == std::string::npos) end = value.size();
    const std::string name = trim(value.substr(begin, end - begin));
    if (!name.empty()) names.push_back(name);
    begin = end + 1;
  }
  if (names.size() == 1 && strcasecmp(names[0].c_str(), "none") == 0) names.clear();
  return names;
}

bool RdmaPort::active() const { return state.find("ACTIVE") != std::string::npos; }
bool RdmaPort::efa() const { return driver == "efa" || device.compare(0, 3, "efa") == 0; }
bool RdmaPort::soft() const {
  return driver == "rdma_rxe" || driver == "siw" || device.compare(0, 3, "rxe") == 0 ||
         device.compare(0, 3, "siw") == 0;
}

bool PluginLib::device_unpack() const {
  for (const char* n : kUnpackNames)
    if (strcasecmp(net_name.c_str(), n) == 0) return true;
  std::string lower = path;
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  return lower.find("tcpx") != std::string::npos || lower.find("fastrak") != std::string::npos;
}

bool Fabric::has_active_rdma(bool include_soft) const {
  for (const RdmaPort& p : rdma)
    if (p.active() && !p.efa() && (include_soft || !p.soft())) return true;
  return false;
}

bool Fabric::has_efa() const {
  for (const RdmaPort& p : rdma)
    if (p.efa()) return true;
  return false;
}

double Fabric::fastest_rdma_gbps() const {
  double best = 0;
  for (const RdmaPort& p : rdma)
    if (p.active() && !p.efa() && !p.soft()) best = std::max(best, p.rate_gbps);
  return best;
}

namespace {

// Opens `request` as NCCL would and reads its table's name; never initialises it. The library stays
// loaded (NCCL itself would have loaded it; unloading a plugin whose constructor started threads is
// not safe).
PluginLib probe_plugin(const std::string& request, const void* self_base) {
  PluginLib p;
  p.request = request;
  char opened[ZIPCCL_NET_PATH_MAX];
  char error[ZIPCCL_NET_ERROR_MAX];
  void* lib = zipccl_net_dlopen(request.c_str(), opened, sizeof opened, error, sizeof error);
  if (!lib) {
    p.error = error;
    return p;
  }
  link_map* lm = nullptr;
  p.path = dlinfo(lib, RTLD_DI_LINKMAP, &lm) == 0 && lm && lm->l_name && *lm->l_name ? lm->l_name : opened;
  const void* table = zipccl_net_table(lib, ZIPCCL_NET_ABI_NEWEST, &p.abi);
  Dl_info info{};
  // dlopen of the same file (by any name or symlink) returns the loaded object: same base address.
  if (self_base && table && dladdr(table, &info) && info.dli_fbase == self_base) p.self = true;
  if (self_base && lm && reinterpret_cast<const void*>(lm->l_addr) == self_base) p.self = true;
  if (!table) {
    // v6 (NCCL 2.19-2.20 era plugins, e.g. nccl-rdma-sharp-plugins' oldest): named, not drivable here.
    if (const void* v6 = dlsym(lib, "ncclNetPlugin_v6")) {
      p.net_name = zipccl_net_table_name(v6);
      p.abi = 6;
    } else {
      p.error = "no ncclNetPlugin_v6..v" + std::to_string(ZIPCCL_NET_ABI_NEWEST) + " table";
    }
    return p;
  }
  p.net_name = zipccl_net_table_name(table);
  return p;
}

bool names_self(const std::string& request) {
  return request == "zipccl" || request == "libnccl-net-zipccl.so";
}

}  // namespace

Fabric discover_fabric(const std::string& root, const void* self_base) {
  Fabric f;
  discover_rdma(root, &f);
  discover_net(root, &f);

  std::string from;
  const std::string conf = conf_net_plugin(root, &from, &f.problems);
  const char* env = std::getenv("NCCL_NET_PLUGIN");
  f.configured = nccl_net_plugin_setting(root, &f.configured_from, nullptr);

  // NCCL's list, each entry opened. Where zipccl is on it, the entries after its first one are what
  // NCCL would use without it (the ones before it failed, or zipccl would not be initialising); where
  // it is not (doctor checking a node), the whole list is.
  std::vector<PluginLib> all, listed;
  bool seen_self = false;
  for (const std::string& name : nccl_plugin_list(f.configured)) {
    PluginLib p = probe_plugin(name, self_base);
    if (names_self(name) && p.path.empty()) p.self = true;  // zipccl by name, even where not on the path
    if (p.self) {
      seen_self = true;
      continue;
    }
    if (seen_self) {
      f.after_self.push_back(name);
      listed.push_back(p);
    }
    all.push_back(p);
  }
  if (!seen_self) listed = all;
  // What the node loads without zipccl: the rest of the list; else a config file's value the
  // environment overrode; else NCCL's default.
  if (listed.empty() && env && !conf.empty() && conf != env) {
    for (const std::string& name : nccl_plugin_list(conf)) {
      PluginLib p = probe_plugin(name, self_base);
      if (!p.self && !names_self(name)) listed.push_back(p);
    }
  }
  if (listed.empty() && strcasecmp(trim(f.configured).c_str(), "none") != 0) {
    PluginLib p = probe_plugin("libnccl-net.so", self_base);
    if (!p.self && !p.path.empty()) listed.push_back(p);
  }
  f.replaced = std::move(listed);
  return f;
}

}  // namespace net
}  // namespace zipccl
