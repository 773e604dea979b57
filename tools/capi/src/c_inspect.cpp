// `zipccl inspect`'s figures of one buffer behind the C API: the tool's own code (tools/zipccl/inspect.cpp),
// so that Python's zipccl.inspect and the tool agree.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>

#include "c_status.h"
#include "inspect.h"
#include "tensor_file.h"
#include "zipccl/zipccl_c.h"

using namespace zipccl;
using capi::fail;

static_assert(sizeof(zipccl_inspect_report) == 2408, "zipccl_inspect_report is 2,408 bytes");

extern "C" int zipccl_inspect(const void* src, size_t n, int elem_type, int threads,
                              zipccl_inspect_report* report) {
  return capi::guarded("inspect", [&]() -> int {
    if (!report) return fail(ZIPCCL_ERR_INVALID_ARGUMENT, "inspect: report is NULL");
    if (!src && n != 0) return fail(ZIPCCL_ERR_INVALID_ARGUMENT, "inspect: src is NULL with n = %zu", n);
    codec::ElemType type;
    int rc = capi::check_threads("inspect", threads);
    if (rc == ZIPCCL_OK) rc = capi::elem_type_of("inspect", elem_type, &type);
    if (rc != ZIPCCL_OK) return rc;
    tools::TensorView view;
    view.name = "tensor";
    view.dtype = "raw";
    view.data = static_cast<const uint8_t*>(src);
    view.size = n;
    tools::TensorReport r;
    std::string error;
    if (!tools::inspect_tensor(view, type, threads, &r, &error))
      return fail(ZIPCCL_ERR_INTERNAL, "inspect: %s", error.c_str());
    zipccl_inspect_report o;
    std::memset(&o, 0, sizeof o);
    o.elem_type = static_cast<int32_t>(r.type);
    o.type_detected = r.type_detected ? 1 : 0;
    o.frame_kind = static_cast<int32_t>(r.kind);
    o.exponent_bits = r.exponents.bits;
    o.exponent_bias = r.exponents.bias;
    int lo = 0, hi = 0;
    if (r.exponents.normal_range(&lo, &hi)) {
      o.has_exponent_range = 1;
      o.exponent_min = lo - r.exponents.bias;
      o.exponent_max = hi - r.exponents.bias;
    }
    o.distinct_exponents = r.exponents.distinct();
    o.bytes = r.bytes;
    o.compressed_bytes = r.actual;
    o.predicted_bytes = r.predicted;
    o.ratio = r.ratio();
    o.bound_ratio = r.bound_ratio();
    o.entropy_bits = r.entropy_bits;
    o.zero_or_subnormal = r.exponents.zero_or_subnormal();
    o.inf_or_nan = r.exponents.inf_or_nan();
    const size_t fields = std::min<size_t>(r.exponents.counts.size(), 256);
    std::copy(r.exponents.counts.begin(), r.exponents.counts.begin() + fields, o.exponent_counts);
    const std::string summary = tools::exponent_summary(r.exponents);
    if (summary.size() >= sizeof o.exponent_summary)
      return fail(ZIPCCL_ERR_INTERNAL,
                  "inspect: the exponent summary has %zu bytes, more than the report holds", summary.size());
    std::memcpy(o.exponent_summary, summary.c_str(), summary.size() + 1);
    *report = o;
    return ZIPCCL_OK;
  });
}
