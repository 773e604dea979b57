// What this node's network is, and what zipccl does on it (README "Which fabric?").
//
// NCCL (2.19+, src/plugin/net.cc) uses the first external net plugin that initialises with a device,
// ahead of its own IB and socket transports. A zipccl that always came up with TCP would therefore
// replace IB with GPUDirect, EFA or TCPX by TCP. So at init zipccl looks at the node (sysfs) and at the
// plugin chain NCCL was configured with, and picks one action from one table (decide()): wrap the
// plugin the node already uses, run its own transport, or step aside (init fails with one WARN; NCCL
// goes on to the next plugin of its list, then to its own transports).
//
// discover_fabric() only reads files and dlopens candidate libraries to read their table name (as NCCL
// itself would open them); it never initialises a plugin. decide() is pure, so every fabric can be laid
// out in a test (ZIPCCL_FABRIC_ROOT: a folder standing for / with sys/class/... and etc/nccl.conf).
#pragma once

#include <string>
#include <vector>

#include "common/settings.h"

namespace zipccl {
namespace net {

// One port of an RDMA device (/sys/class/infiniband/<dev>/ports/<n>).
struct RdmaPort {
  std::string device;      // mlx5_0, rdmap16s27, rxe0
  int port = 0;
  std::string state;       // "4: ACTIVE" as sysfs writes it
  std::string link_layer;  // InfiniBand, Ethernet (RoCE), Unspecified (EFA)
  double rate_gbps = 0;    // "400 Gb/sec (4X NDR)" -> 400
  std::string driver;      // basename of device/driver: mlx5_core, efa, rdma_rxe, siw, ...
  bool active() const;     // state "4: ACTIVE"
  bool efa() const;        // an AWS Elastic Fabric Adapter
  bool soft() const;       // rxe / siw: RDMA emulated over an Ethernet NIC, no faster than its TCP
};

// One network interface (/sys/class/net/<name>).
struct NetIface {
  std::string name;
  int speed_mbps = -1;  // -1: unknown (virtual interfaces, a link down)
  std::string vendor;   // PCI vendor of device/vendor ("0x1d0f" AWS, "0x1ae0" GCP), empty if virtual
  bool up = false;      // operstate "up" (or "unknown", as loopback and some virtual links say)
};

// A net plugin library NCCL would load, read without initialising it.
struct PluginLib {
  std::string request;  // the name as configured ("ofi", "libnccl-net.so", a path)
  std::string path;     // the file dlopen found, empty when not found
  std::string net_name; // its table's name ("AWS Libfabric", "IBext", "GPUDirectTCPX"), empty if none
  int abi = 0;          // newest ncclNet_vN table it exports (7..12), 0 if none
  bool self = false;    // it is this zipccl library (by file, through symlinks)
  std::string error;    // why it could not be opened or has no table
  bool device_unpack() const;  // a TCPX/TCPXO-class plugin: receives into device memory, NCCL unpacks
};

struct Fabric {
  std::vector<RdmaPort> rdma;
  std::vector<NetIface> net;
  // The plugin chain. `configured`: NCCL_NET_PLUGIN's effective value (environment, else NCCL's config
  // files: NCCL_CONF_FILE or ~/.nccl.conf, then /etc/nccl.conf) and where it came from. `replaced`:
  // what the node would load without zipccl, in NCCL's order: the entries of the configured list that
  // are not zipccl, a config file's value that the environment overrode, else NCCL's default
  // libnccl-net.so when it exists and is not zipccl.
  std::string configured, configured_from;
  std::vector<PluginLib> replaced;
  // Entries of the configured list after zipccl: what NCCL tries when zipccl steps aside.
  std::vector<std::string> after_self;
  std::vector<std::string> problems;  // unreadable sysfs, malformed config lines: said, never guessed past
  bool has_active_rdma(bool include_soft = false) const;
  bool has_efa() const;
  double fastest_rdma_gbps() const;  // among active non-soft, non-EFA ports
};

// Reads the node under `root` ("" = /). `self_base`: the load address (dladdr's dli_fbase) of the
// zipccl library whose chain this is, so that zipccl is never counted as a plugin to wrap, whatever
// name or symlink reaches it; nullptr: none is loaded. Never fails: what it cannot read is a
// `problems` line.
Fabric discover_fabric(const std::string& root, const void* self_base);

enum class FabricAction {
  kSocket,     // zipccl's TCP transport
  kIb,         // zipccl's RDMA transport (ZIPCCL_TRANSPORT=ib, opt-in)
  kWrap,       // the compressing layer over another net plugin (`inner`)
  kStepAside,  // init fails: NCCL goes on without zipccl
};
const char* fabric_action_name(FabricAction a);

struct FabricDecision {
  FabricAction action = FabricAction::kSocket;
  std::string inner;     // kWrap: ZIPCCL_NET_INNER-style list of what to open
  bool explicit_choice = false;  // ZIPCCL_TRANSPORT or ZIPCCL_NET_INNER decided, not the table
  std::string rule;      // the table row that decided, one short phrase
  std::string why;       // one sentence: the fabric found and the reason
  std::string to_compress;  // kStepAside: the settings that would compress here
  // The configuration makes NCCL slower than without zipccl (socket forced on an IB node; zipccl
  // stepping aside where NCCL would then miss the plugin it replaced). WARN at init, FAIL in doctor.
  bool slower_than_nccl = false;
  std::string slower_why;
};

// The decision table (README "Which fabric?"). Reads s.transport (auto: the table; socket or ib:
// forced) and s.net_inner (set: wrap exactly that; "none": wrap nothing).
FabricDecision decide(const Fabric& f, const Settings& s);

// NCCL_NET_PLUGIN's effective value: the environment's, else the first of NCCL's config files that sets
// it (NCCL_CONF_FILE or ~/.nccl.conf, then /etc/nccl.conf, under `root`); *from names where ("environment"
// or the file); "" when unset. Malformed config lines are appended to *problems (may be null).
std::string nccl_net_plugin_setting(const std::string& root, std::string* from, std::vector<std::string>* problems);

// Where zipccl steps aside, what NCCL uses instead: the plugins listed after zipccl, else its own.
std::string step_aside_next(const Fabric& f);

// NCCL_NET_PLUGIN's (and ZIPCCL_NET_INNER's) list: comma-separated names or paths, blanks around them
// dropped; "none" (any case) alone names nothing.
std::vector<std::string> inner_plugin_list(const std::string& value);

// This library's fabric and decision: discovered once (ZIPCCL_FABRIC_ROOT or /), thread-safe.
const Fabric& node_fabric();
const FabricDecision& node_decision();

}  // namespace net
}  // namespace zipccl
