#include "layer/policy.h"

namespace zipccl {
namespace net {
namespace {
constexpr double kAlpha = 0.25;    // EWMA weight of a new codec sample
constexpr double kMargin = 0.85;   // compress only if predicted >= 15% faster: the model ignores
                                   // the receiver's decode and CPU contention, so stay conservative
constexpr int kMaxProbeGap = 256;  // a probe costs < 1% at this spacing
}  // namespace

Policy::Policy(CompressMode mode, uint64_t min_bytes, double link_bps, bool link_measured, int workers,
               int probe_interval)
    : mode_(mode),
      min_bytes_(min_bytes),
      measure_link_(link_measured),
      workers_(workers < 1 ? 1 : workers),
      link_bps_(link_bps),
      probe_base_(probe_interval),
      probe_gap_(probe_interval),
      since_probe_(probe_interval - 1) {}  // the first raw message is sampled

bool Policy::predict_compress() const {
  if (!codec_measured_ || (measure_link_ && link_samples_ < kLinkMinSamples)) return false;
  // Encode and transmission overlap across messages; the slower stage sets the pace. The receiver's
  // decode runs at a similar rate on its own workers.
  double t_raw = 1.0 / link_bps_;
  double t_codec = 1.0 / (codec_bps_ * workers_);
  double t_wire = ratio_ / link_bps_;
  double t_comp = t_codec > t_wire ? t_codec : t_wire;
  return t_comp < t_raw * kMargin;
}

bool Policy::choose(size_t n, bool* sample) {
  *sample = false;
  if (n < min_bytes_ || mode_ == CompressMode::kNever) return false;
  if (mode_ == CompressMode::kAlways) return true;
  bool want = predict_compress() && delivered_raw_ > 0 && hold_left_ == 0 && !refresh_raw_;
  if (want != stretch_compress_) {  // a new stretch; completions of the old one's messages are not its
    stretch_compress_ = want;
    stretch_msgs_ = 0;
    stretch_bytes_ = stretch_seconds_ = 0;
  }
  if (want != last_choice_) {
    probe_gap_ = probe_base_;  // decision changed: sample at the base rate again
    since_probe_ = 0;
  }
  last_choice_ = want;
  if (!want && ++since_probe_ >= probe_gap_) {
    since_probe_ = 0;
    if (probe_gap_ < kMaxProbeGap) probe_gap_ *= 2;
    *sample = true;
  }
  return want;
}

void Policy::on_encoded(size_t n, size_t wire, double seconds) {
  if (n == 0) return;
  double r = static_cast<double>(wire) / static_cast<double>(n);
  double bps = seconds > 0 ? static_cast<double>(n) / seconds : codec_bps_;
  if (!codec_measured_) {  // the first measurement replaces the priors
    ratio_ = r;
    codec_bps_ = bps;
    codec_measured_ = true;
    return;
  }
  ratio_ += kAlpha * (r - ratio_);
  codec_bps_ += kAlpha * (bps - codec_bps_);
}

void Policy::on_delivered(size_t raw_bytes, bool compressed, double busy_seconds) {
  if (mode_ != CompressMode::kAuto || compressed != stretch_compress_) return;
  if (++stretch_msgs_ <= kWarmMessages) return;
  stretch_bytes_ += static_cast<double>(raw_bytes);
  stretch_seconds_ += busy_seconds > 0 ? busy_seconds : 0;
  if (stretch_msgs_ < kWarmMessages + kStretchMessages || stretch_seconds_ < kStretchSeconds) return;
  const double rate = stretch_bytes_ / stretch_seconds_;
  stretch_msgs_ = kWarmMessages;  // the next stretch continues the same decision: nothing to drain
  stretch_bytes_ = stretch_seconds_ = 0;
  if (!stretch_compress_) {
    raw_window_[raw_next_] = rate;
    raw_next_ = (raw_next_ + 1) % kRawWindow;
    delivered_raw_ = 0;
    for (double v : raw_window_) delivered_raw_ = v > delivered_raw_ ? v : delivered_raw_;
    refresh_raw_ = false;
    if (hold_left_ > 0) --hold_left_;
    return;
  }
  delivered_comp_ = rate;
  if (rate < delivered_raw_ * kKeep) {
    hold_left_ = hold_;
    hold_ = hold_ * 2 < kMaxHold ? hold_ * 2 : kMaxHold;
    compressed_stretches_ = 0;
    return;
  }
  hold_ = kFirstHold;
  if (++compressed_stretches_ >= kRawRefresh) {
    refresh_raw_ = true;
    compressed_stretches_ = 0;
  }
}

void Policy::on_link(uint64_t bytes, double seconds) {
  if (!measure_link_ || seconds <= 0 || bytes == 0) return;
  // The first measurement replaces the interface's nominal speed (the window starts empty).
  link_window_[link_next_] = static_cast<double>(bytes) / seconds;
  link_next_ = (link_next_ + 1) % kLinkWindow;
  if (link_samples_ < kLinkWindow) ++link_samples_;
  link_bps_ = 0;
  for (double v : link_window_) link_bps_ = v > link_bps_ ? v : link_bps_;
}

}  // namespace net
}  // namespace zipccl
