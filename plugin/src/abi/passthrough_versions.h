// Which inner table a pass-through call goes to, per kind. Header-only and free of the plugin's
// state, so `zipccl doctor` (tools/zipccl/doctor_passthrough.cpp) reports exactly what the plugin does.
#pragma once

namespace zipccl {
namespace net {

// The versions zipccl exports (plugin/exports.map).
constexpr int kTunerOldest = 2, kTunerNewest = 6;
constexpr int kProfilerOldest = 1, kProfilerNewest = 6;
constexpr int kCollNetOldest = 6, kCollNetNewest = 12;

// The inner ncclTunerPlugin_v<N> that NCCL's calls on zipccl's ncclTunerPlugin_v<requested> go to, in
// order of preference, given has(N): whether the inner library exports it. 0: none, zipccl's tuner
// then leaves NCCL's choices alone (as if there were no tuner).
//
// Each candidate is reached from the requested version's calls without inventing an argument:
//   same version                  exact.
//   v6 -> v5                      exact: init, getCollInfo, finalize have v6's signatures; v5 has no
//                                 getChunkSize, so NCCL keeps its chunk size (what NCCL does with a v5
//                                 tuner).
//   v5 -> v6                      exact: v6 is v5 plus getChunkSize, which is simply not called.
//   v6, v5 -> v4                  as NCCL's own v4 adapter: init gets nRanks, nNodes and the logger; the
//                                 communicator id, NVLink domains and constants are not passed (a v4
//                                 tuner has no use for them; the constants stay NCCL's). getCollInfo
//                                 exact.
//   v6, v5, v4 -> v3              as NCCL's own v3 adapter: init as for v4; getCollInfo drops regBuff.
// Not done: anything -> v2 from v3+ (v2 picks an algorithm by NCCL's algorithm numbering, which NCCL
// changes between releases) and v2, v3, v4 -> a newer inner (the newer init needs the communicator id
// and NCCL's constants, which an older NCCL does not give).
template <typename Has>
int tuner_forward_version(int requested, Has has) {
  static const int kOrder[kTunerNewest + 1][5] = {
      {0}, {0}, {2, 0}, {3, 0}, {4, 3, 0}, {5, 6, 4, 3, 0}, {6, 5, 4, 3, 0}};
  if (requested < kTunerOldest || requested > kTunerNewest) return 0;
  for (const int* v = kOrder[requested]; *v; ++v)
    if (has(*v)) return *v;
  return 0;
}

// The profiler and CollNet go to the inner table of the requested version only: their event
// descriptors and properties change layout between versions, and a pass-through never translates them.
template <typename Has>
int same_version_only(int requested, Has has) {
  return has(requested) ? requested : 0;
}

}  // namespace net
}  // namespace zipccl
