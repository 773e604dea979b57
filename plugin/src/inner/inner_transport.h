// The inner-plugin transport (ZIPCCL_NET_INNER): zipccl's compressing layer over another NCCL net
// plugin (aws-ofi-nccl, NCCL-IB-like vendor plugins, or a second zipccl). Design: docs/notes/inner.md.
#pragma once

#include <string>
#include <vector>

#include "fabric/fabric.h"  // inner_plugin_list
#include "nccl/net_common.h"
#include "nccl/net_v12.h"
#include "transport.h"

namespace zipccl {
namespace net {

// Opens and initialises the first plugin of `value`'s list (inner_plugin_list; each resolved as NCCL
// resolves NCCL_NET_PLUGIN) that loads, initialises and has a device, once per process, with NCCL's
// logger, so its own messages reach NCCL's log. A plugin that fails is closed again, with an INFO, and
// the next is tried. When none is left: one WARN naming each library and its reason, *out == nullptr
// and the last plugin's error (ncclInvalidUsage: not found / no usable table; else its init's own
// result). *self: the plugin chosen is the library this code runs in (zipccl loaded as the inner plugin
// of another zipccl): nothing is opened, the caller uses its built-in transports.
// `origin` opens the WARN: what asked for this list ("ZIPCCL_NET_INNER=ofi", "the node's net plugin ...").
ncclResult_t open_inner_transport(const std::string& value, const std::string& origin, ncclDebugLogger_t logger,
                                  Transport** out, bool* self);
// Calls the inner plugin's finalize (once) and forgets the transport; a later open starts afresh.
// Only after every connection of it has closed.
void finalize_inner_transport();

// NCCL's setNetAttr (v11+) over the inner plugin: forwarded to the inner's one context when an inner
// plugin is open and its table has setNetAttr (its result returned as it is); otherwise nothing is
// called and it succeeds (the attributes are hints, as NCCL treats a table without the entry).
ncclResult_t inner_set_net_attr(ncclNetAttr_v12_t* attr);

// What NCCL would have over the open inner plugin alone that it loses through zipccl: "" when nothing,
// else the capability in words. `gpu_path`: zipccl's GPU path is on (device buffers stay on the GPU).
std::string inner_capability_lost(bool gpu_path);

// Whether the open inner plugin's table has makeVDevice.
bool inner_has_make_vdevice();
// The inner's makeVDevice (its result unchanged, with a WARN naming the call on failure); then the
// transport's devices include what the inner added (device_info of the new indices).
ncclResult_t inner_make_vdevice(int* d, ncclNetVDeviceProps_v12_t* props);

// What `zipccl doctor` shows: the inner plugin's library, name and ABI version; false when none is
// open.
bool inner_transport_info(std::string* library, std::string* name, int* abi_version);

}  // namespace net
}  // namespace zipccl
