#include "policy.h"

namespace zipccl {
namespace net {
namespace {
constexpr double kAlpha = 0.25;     // EWMA weight of a new codec sample
constexpr double kLinkAlpha = 0.5;  // links change (and the prior is a guess): follow faster
constexpr double kMargin = 0.85;    // compress only if predicted >= 15% faster: the model ignores
                                    // the receiver's decode and CPU contention, so stay conservative
constexpr int kMaxProbeGap = 256;   // a probe costs < 1% at this spacing
}  // namespace

Policy::Policy(CompressMode mode, uint64_t min_bytes, double link_bps, bool link_measured, int workers,
               int probe_interval)
    : mode_(mode),
      min_bytes_(min_bytes),
      measure_link_(link_measured),
      workers_(workers < 1 ? 1 : workers),
      link_bps_(link_bps),
      probe_base_(probe_interval),
      probe_gap_(probe_interval) {}

bool Policy::predict_compress() const {
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
  bool want = predict_compress();
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
  ratio_ += kAlpha * (r - ratio_);
  if (seconds > 0) codec_bps_ += kAlpha * (static_cast<double>(n) / seconds - codec_bps_);
}

void Policy::on_link(uint64_t bytes, double seconds) {
  if (!measure_link_ || seconds <= 0 || bytes == 0) return;
  double sample = static_cast<double>(bytes) / seconds;
  if (!link_measured_) {
    link_bps_ = sample;  // the first measurement replaces the interface's nominal speed
    link_measured_ = true;
  } else {
    link_bps_ += kLinkAlpha * (sample - link_bps_);
  }
}

}  // namespace net
}  // namespace zipccl
