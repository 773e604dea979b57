// Per-connection compress-or-raw switch (ZipCCL's "switch", made online). It keeps estimates of the
// link's throughput, the codec's throughput and the recent compression ratio, and compresses a message
// only when that is predicted to deliver it sooner. While raw, it samples the codec on a slice of a
// message now and then (less often while the decision holds) so the estimates follow the traffic.
//
// The link estimate is the highest rate measured over the last kLinkWindow samples, not an average:
// a network link delivers its rate steadily, while a "link" whose pace is set by the receiver's CPU
// (loopback, a starved peer) dips whenever that CPU is taken - and compressing would cost that
// receiver more (decode), not less. A sustained drop still shows within kLinkWindow samples.
// Nothing is compressed before the codec has been measured on this connection's data (the first
// message that reaches the policy is sampled) and, unless the link speed is pinned, before
// kLinkMinSamples link measurements exist: one early sample is too noisy to act on.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/settings.h"

namespace zipccl {
namespace net {

class Policy {
 public:
  Policy(CompressMode mode, uint64_t min_bytes, double link_bytes_per_s, bool link_measured, int workers,
         int probe_interval);

  // Whether to compress an n-byte message that the detector found compressible. While the answer is
  // raw, *sample asks the caller to encode a slice of the message off the critical path now and then
  // (the message still goes raw) so the codec estimates stay fresh. The link is measured all the time.
  bool choose(size_t n, bool* sample);
  // A finished encode: n input bytes became `wire` bytes in `seconds` of worker time.
  void on_encoded(size_t n, size_t wire, double seconds);
  // The link carried `bytes` in `seconds` while busy.
  void on_link(uint64_t bytes, double seconds);
  static constexpr int kLinkWindow = 16;
  static constexpr int kLinkMinSamples = 4;

  double link_bps() const { return link_bps_; }
  double codec_bps() const { return codec_bps_; }
  double ratio() const { return ratio_; }  // wire / original of compressed messages
  bool compressing() const { return last_choice_; }

 private:
  bool predict_compress() const;

  CompressMode mode_;
  uint64_t min_bytes_;
  bool measure_link_;
  int workers_;
  double link_bps_;                       // max of link_window_ once measured
  double link_window_[kLinkWindow] = {};  // the most recent link samples (ring)
  int link_next_ = 0;
  int link_samples_ = 0;  // measurements so far, up to kLinkWindow
  bool codec_measured_ = false;
  double codec_bps_ = 1.0e9;
  double ratio_ = 0.70;
  bool last_choice_ = false;
  int probe_base_;
  int probe_gap_;
  int since_probe_ = 0;
};

}  // namespace net
}  // namespace zipccl
