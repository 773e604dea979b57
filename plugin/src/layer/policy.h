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
//
// The model ignores the receiver's decode and whatever else runs on either host's CPUs, so its answer
// is checked against what the comm delivered: raw bytes of completed messages per second of busy time
// (time with a message outstanding), over stretches of kStretchMessages messages and at least
// kStretchSeconds, compressing against raw. The first stretch of a connection is raw and measured
// (compression starts only with a raw figure to compare with). The raw figure is the best of the last
// kRawWindow raw stretches, for the reason the link estimate is a maximum: a stretch that another job's
// CPU use slowed says nothing about what raw can do. A compressing stretch that delivered less than
// kKeep of it turns compression off for a hold of raw stretches (kFirstHold,
// doubling up to kMaxHold while it keeps losing); then compression is tried again. While compression
// wins, one raw stretch in kRawRefresh compressing ones keeps the raw figure current (the link or the
// load may have changed).
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
  // A message of `raw_bytes` completed; `compressed` is what choose() said for it, and `busy_seconds`
  // the time since the previous completion (or since the comm became busy, if later).
  void on_delivered(size_t raw_bytes, bool compressed, double busy_seconds);
  static constexpr int kLinkWindow = 16;
  static constexpr int kLinkMinSamples = 4;
  static constexpr int kWarmMessages = 4;  // a new stretch's first completions drain the old one's queue
  static constexpr int kStretchMessages = 8;
  static constexpr double kStretchSeconds = 0.25;
  static constexpr double kKeep = 0.97;
  static constexpr int kFirstHold = 2;
  static constexpr int kMaxHold = 64;
  static constexpr int kRawRefresh = 32;
  static constexpr int kRawWindow = 4;

  double link_bps() const { return link_bps_; }
  double codec_bps() const { return codec_bps_; }
  double ratio() const { return ratio_; }  // wire / original of compressed messages
  bool compressing() const { return last_choice_; }
  // Delivery rates (bytes/s): the last compressing stretch's, and the best of the recent raw ones; 0
  // before one exists.
  double delivered_compressed_bps() const { return delivered_comp_; }
  double delivered_raw_bps() const { return delivered_raw_; }
  // Raw stretches left before compression may be tried again (0: the model decides).
  int held_raw() const { return hold_left_; }

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
  // The end-to-end check (see the top of this file).
  bool stretch_compress_ = false;  // what choose() says for the messages of the current stretch
  int stretch_msgs_ = kWarmMessages;  // the first stretch has no earlier queue to drain
  double stretch_bytes_ = 0;
  double stretch_seconds_ = 0;
  double delivered_comp_ = 0;
  double delivered_raw_ = 0;  // max of raw_window_
  double raw_window_[kRawWindow] = {};
  int raw_next_ = 0;
  int hold_left_ = 0;
  int hold_ = kFirstHold;
  int compressed_stretches_ = 0;  // since the last raw one
  bool refresh_raw_ = false;
};

}  // namespace net
}  // namespace zipccl
