// The host emulation of the GPU's device operations (gpu_emulated.cpp), a test double: linked by the
// tests and libnccl-net-zipccl-testing.so, never by the shipped plugin. Its settings are the tests'
// own, read from the environment once, outside the product's registry:
//   ZIPCCL_GPU_EMULATE=1               the process's device operations are the emulation (registered
//                                      with gpu::set_device_ops_factory when the library loads)
//   ZIPCCL_GPU_EMULATE_DELAY_US=N      delay of each emulated stream operation (0..1000000)
//   ZIPCCL_GPU_EMULATE_FAIL_EVERY=N    every Nth emulated encode/decode fails (0: none)
#pragma once

#include <cstdint>

#include "gpu/gpu_path.h"

namespace zipccl {
namespace net {
namespace gpu {

struct EmulationSettings {
  bool enabled = false;
  int delay_us = 0;
  int fail_every = 0;
};
// Reads the three variables on first use (a bad value: a message on stderr and the default).
const EmulationSettings& emulation_settings();

// The emulation (EmulationSettings apply).
DeviceOps* emulated_ops();
// Encodes the emulation has finished (process-wide), and a gate: an encode starts only while fewer
// than `allow` encodes have finished (its stream waits; other streams run on). Lets a test hold a
// message's later segments in "encoding" and watch what the pipeline does meanwhile.
uint64_t emulated_encodes_done();
void emulated_gate_encodes(uint64_t allow);
// Calls made so far of the kind that may synchronise the device or load modules (allocations, frees,
// streams, events, workspaces, prepare): the pipeline tests assert that none happens between regMr
// and close.
uint64_t emulated_setup_calls();
// Of those, the calls that synchronise the device by CUDA's documented rules (cudaMalloc, cudaFree,
// cudaHostAlloc, cudaFreeHost, cudaStreamSynchronize in destroy_stream, the module load of prepare);
// not counted: stream and event creation/destruction, stream-ordered allocation and free.
uint64_t emulated_sync_calls();
// Streams ever created (create_stream), process-wide.
uint64_t emulated_streams_created();
// Stream operations on callers' buffers (encode, decode, copy, land_lines) that have run, process-wide:
// a test sees work still running on the buffers of a comm that has closed.
uint64_t emulated_data_ops_done();
// After `after` more stream operations, the emulated device faults as a kernel with a bad address
// does: the faulting and all later stream work never run (results are never published) and every
// later call fails, like CUDA's sticky errors. As on a device, the fault is reported (calls fail) only
// once no stream operation is still running; a later call (the reset) waits for the same. `sticky` false: after `after` more encode/decode
// launches, the next one fails at launch (not sticky). ~0 disarms.
void emulated_fault(uint64_t after, bool sticky);
// Several devices, as on an 8-GPU node: every thread starts on device 0 and make_current changes it;
// streams, events and allocations belong to a device; a launch into a stream of a device other than
// the current one, an event recorded on another device's stream, and a kernel given another device's
// memory (or a host block from another device's pool) fail with a WARN, as on GPUs without peer access.
// Memory the emulation did not allocate (the tests' own buffers) is device 0's.
int emulated_device_count();
// The devices (bit d for device d) on which a call ran since emulated_forget_touched(): on a GPU, the
// contexts the process created. NCCL's threads make their rank's device current before calling the
// plugin; a call on a thread that did not (the plugin's own, say) initialises device 0's context, which
// takes memory on a GPU the rank does not use, and fails where GPUs are in exclusive-process mode.
uint32_t emulated_devices_touched();
void emulated_forget_touched();

}  // namespace gpu
}  // namespace net
}  // namespace zipccl
