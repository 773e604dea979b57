// The one decision table: what zipccl does on the fabric discover_fabric() found. The README's "Which
// fabric?" table is this function in words; change both together.
#include <dlfcn.h>

#include <cstdio>
#include <mutex>

#include "fabric/fabric.h"

namespace zipccl {
namespace net {
namespace {

std::string gbps(double g) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g Gbit/s", g);
  return buf;
}

// "2 InfiniBand ports (mlx5_0:1 400 Gbit/s, ...)": the active, non-emulated, non-EFA ports.
std::string rdma_summary(const Fabric& f) {
  int n = 0;
  bool ib = false, roce = false;
  std::string list;
  for (const RdmaPort& p : f.rdma) {
    if (!p.active() || p.efa() || p.soft()) continue;
    ++n;
    (p.link_layer == "Ethernet" ? roce : ib) = true;
    if (n <= 4) list += (list.empty() ? "" : ", ") + p.device + ":" + std::to_string(p.port) + " " + gbps(p.rate_gbps);
  }
  if (n > 4) list += ", ...";
  const char* kind = ib && roce ? "InfiniBand/RoCE" : roce ? "RoCE" : "InfiniBand";
  return std::to_string(n) + " active " + kind + " port" + (n == 1 ? "" : "s") + " (" + list + ")";
}

std::string efa_summary(const Fabric& f) {
  std::string list;
  int n = 0;
  for (const RdmaPort& p : f.rdma)
    if (p.efa() && n++ < 4) list += (list.empty() ? "" : ", ") + p.device;
  return std::to_string(n) + " EFA device port" + (n == 1 ? "" : "s") + " (" + list + (n > 4 ? ", ..." : "") + ")";
}

std::string plugin_summary(const PluginLib& p) {
  return p.request + " (" + (p.path.empty() ? p.error : p.path + ", '" + p.net_name + "'") + ")";
}

// The plugins of the replaced chain that opened with a table this zipccl can drive (v7+).
std::vector<const PluginLib*> wrappable(const Fabric& f) {
  std::vector<const PluginLib*> out;
  for (const PluginLib& p : f.replaced)
    if (!p.self && !p.path.empty() && p.abi >= 7 && !p.device_unpack()) out.push_back(&p);
  return out;
}

const PluginLib* unpack_plugin(const Fabric& f) {
  for (const PluginLib& p : f.replaced)
    if (!p.path.empty() && p.device_unpack()) return &p;
  return nullptr;
}

// What NCCL uses after zipccl steps aside: the plugins listed after zipccl, else its own transports.
std::string nccl_next(const Fabric& f) {
  if (f.after_self.empty()) return "NCCL's own IB and socket transports";
  std::string s;
  for (const std::string& n : f.after_self) s += (s.empty() ? "" : ",") + n;
  return "the next plugins of NCCL_NET_PLUGIN (" + s + "), then NCCL's own transports";
}

bool listed_after_self(const Fabric& f, const PluginLib& p) {
  for (const std::string& n : f.after_self)
    if (n == p.request) return true;
  return false;
}

void step_aside(FabricDecision* d, const std::string& rule, const std::string& why, const std::string& to_compress) {
  d->action = FabricAction::kStepAside;
  d->rule = rule;
  d->why = why;
  d->to_compress = to_compress;
}

}  // namespace

const char* fabric_action_name(FabricAction a) {
  switch (a) {
    case FabricAction::kSocket:
      return "socket";
    case FabricAction::kIb:
      return "ib";
    case FabricAction::kWrap:
      return "wrap";
    case FabricAction::kStepAside:
      return "step aside";
  }
  return "?";
}

FabricDecision decide(const Fabric& f, const Settings& s) {
  FabricDecision d;
  const bool ib = f.has_active_rdma();
  const bool efa = f.has_efa();
  const std::vector<const PluginLib*> wrap = wrappable(f);
  const PluginLib* unpack = unpack_plugin(f);
  // What the node has that is faster than TCP, for the forced-socket WARN; "" on a plain TCP node.
  std::string faster;
  if (!wrap.empty()) faster = "the net plugin " + plugin_summary(*wrap.front());
  else if (unpack) faster = "the TCPX-class plugin " + plugin_summary(*unpack);
  else if (ib) faster = rdma_summary(f) + " (NCCL's IB transport with GPUDirect)";
  else if (efa) faster = efa_summary(f);

  // 1. Explicit settings are obeyed.
  const std::vector<std::string> inner = inner_plugin_list(s.net_inner);
  if (!inner.empty()) {
    d.action = FabricAction::kWrap;
    d.inner = s.net_inner;
    d.explicit_choice = true;
    d.rule = "ZIPCCL_NET_INNER";
    d.why = "ZIPCCL_NET_INNER=" + s.net_inner + ": zipccl compresses over that plugin";
    return d;
  }
  if (s.transport == TransportChoice::kIb) {
    d.action = FabricAction::kIb;
    d.explicit_choice = true;
    d.rule = "ZIPCCL_TRANSPORT=ib";
    d.why = "ZIPCCL_TRANSPORT=ib: zipccl's own RDMA verbs transport (opt-in; " +
            (ib ? rdma_summary(f) : std::string("no active RDMA port found: it falls back to TCP with a WARN")) + ")";
    return d;
  }
  if (s.transport == TransportChoice::kSocket) {
    d.action = FabricAction::kSocket;
    d.explicit_choice = true;
    d.rule = "ZIPCCL_TRANSPORT=socket";
    d.why = "ZIPCCL_TRANSPORT=socket: zipccl's TCP transport";
    if (!faster.empty()) {
      d.slower_than_nccl = true;
      d.slower_why = "ZIPCCL_TRANSPORT=socket forces TCP on a node with " + faster +
                     ": NCCL alone would use that. Unset ZIPCCL_TRANSPORT (zipccl then wraps the node's plugin "
                     "or steps aside)";
    }
    return d;
  }
  const bool no_wrap = !s.net_inner.empty();  // ZIPCCL_NET_INNER=none: wrap nothing

  // 2. A net plugin the node already uses: compress over it.
  if (no_wrap && !wrap.empty()) {
    step_aside(&d, "ZIPCCL_NET_INNER=none", "the node uses the net plugin " + plugin_summary(*wrap.front()) +
                   " and ZIPCCL_NET_INNER=none forbids wrapping it", "unset ZIPCCL_NET_INNER (zipccl then wraps it)");
    if (!listed_after_self(f, *wrap.front())) {
      d.slower_than_nccl = true;
      d.slower_why = "NCCL_NET_PLUGIN=" + f.configured + " replaces " + wrap.front()->request +
                     ", and when zipccl steps aside NCCL falls back to its own transports, not to it: unset "
                     "ZIPCCL_NET_INNER, or list it after zipccl (NCCL_NET_PLUGIN=zipccl," + wrap.front()->request + ")";
    }
    return d;
  }
  if (!wrap.empty()) {
    d.action = FabricAction::kWrap;
    for (const PluginLib* p : wrap) d.inner += (d.inner.empty() ? "" : ",") + p->path;
    d.rule = "the node's net plugin";
    d.why = "the node uses the net plugin " + plugin_summary(*wrap.front()) + ": zipccl compresses over it";
    return d;
  }
  // 3. Plugins that receive into device memory with NCCL's unpack kernel (GCP TCPX/TCPXO): zipccl
  // cannot carry their traffic and must not replace them.
  if (unpack) {
    step_aside(&d, "TCPX-class plugin", "the node uses " + plugin_summary(*unpack) +
                   ", which receives into GPU memory with NCCL's device-side unpack: zipccl cannot compress over it",
               "nothing today: compression over TCPX/TCPXO is not supported");
    if (!listed_after_self(f, *unpack)) {
      d.slower_than_nccl = true;
      d.slower_why = "NCCL_NET_PLUGIN=" + f.configured + " replaces " + unpack->request +
                     ", and when zipccl steps aside NCCL falls back to its own transports, not to it: list it "
                     "after zipccl (NCCL_NET_PLUGIN=zipccl," + unpack->request + ") or remove zipccl";
    }
    return d;
  }
  // 4. EFA without aws-ofi-nccl: NCCL alone runs its sockets over ENA; a node that has EFA wants
  // aws-ofi-nccl, which zipccl then wraps.
  if (efa) {
    step_aside(&d, "EFA without aws-ofi-nccl",
               efa_summary(f) + " and no aws-ofi-nccl plugin (libnccl-net-ofi.so) to wrap",
               "install aws-ofi-nccl and set NCCL_NET_PLUGIN=zipccl,ofi (zipccl wraps it) or ZIPCCL_NET_INNER=ofi");
    return d;
  }
  // 5. IB/RoCE with nothing to wrap: NCCL's own IB transport (GPUDirect RDMA) beats any TCP.
  if (ib) {
    step_aside(&d, "IB/RoCE, nothing to wrap",
               rdma_summary(f) + " and no net plugin to wrap: NCCL's own IB transport is faster than TCP",
               "ZIPCCL_NET_INNER=<an IB net plugin, e.g. nccl-rdma-sharp-plugins' libnccl-net.so>, or "
               "ZIPCCL_TRANSPORT=ib (zipccl's own verbs transport, opt-in, not yet proven on hardware)");
    return d;
  }
  // 6. Plain TCP.
  d.action = FabricAction::kSocket;
  d.rule = "plain TCP";
  d.why = "no RDMA port, EFA device or net plugin to wrap: zipccl's TCP transport over the interfaces NCCL's socket "
          "transport would use";
  return d;
}

namespace {

const void* own_base() {
  Dl_info info{};
  if (!dladdr(reinterpret_cast<void*>(&own_base), &info)) return nullptr;
  return info.dli_fbase;
}

}  // namespace

const Fabric& node_fabric() {
  static const Fabric& f = *new Fabric(discover_fabric(settings().fabric_root, own_base()));
  return f;
}

const FabricDecision& node_decision() {
  static const FabricDecision& d = *new FabricDecision(decide(node_fabric(), settings()));
  return d;
}

std::string step_aside_next(const Fabric& f) { return nccl_next(f); }

}  // namespace net
}  // namespace zipccl
