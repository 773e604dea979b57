// Plugin internals that need no connection: interface selection syntax, size parsing, frame-header
// validation, the auto policy's decisions.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "common/settings.h"
#include "common/units.h"
#include "layer/frame.h"
#include "layer/policy.h"
#include "socket/socket_iface.h"
#include "socket/socket_plan.h"
#include "socket/socket_streams.h"

using namespace zipccl::net;
namespace units = zipccl::units;

namespace {
bool choose(Policy& p, size_t n) {
  bool sample = false;
  return p.choose(n, &sample);
}
// The connection's first stretch, raw and measured (compression waits for it): `seconds` per message.
void deliver_raw(Policy& p, double seconds = 0.05) {
  for (int i = 0; i < Policy::kStretchMessages; ++i) p.on_delivered(4 << 20, false, seconds);
}
}  // namespace

TEST(SocketIfname, PrefixExcludeExact) {
  EXPECT_TRUE(iface_matches("eth", "eth0"));
  EXPECT_TRUE(iface_matches("ib,eth", "eth1"));
  EXPECT_FALSE(iface_matches("ib", "eth0"));
  EXPECT_FALSE(iface_matches("^docker,lo", "lo"));
  EXPECT_FALSE(iface_matches("^docker,lo", "docker0"));
  EXPECT_TRUE(iface_matches("^docker,lo", "eth0"));
  EXPECT_TRUE(iface_matches("=eth0", "eth0"));
  EXPECT_FALSE(iface_matches("=eth0", "eth01"));
  EXPECT_FALSE(iface_matches("^=eth0", "eth0"));
  EXPECT_TRUE(iface_matches("^=eth0", "eth01"));
  EXPECT_TRUE(iface_matches("eth0:1234", "eth0"));
}

TEST(SocketIfname, FindsLoopbackInBothFamilies) {
  auto v4 = find_interfaces("=lo", AF_INET);
  ASSERT_EQ(v4.size(), 1u);
  EXPECT_EQ(v4[0].addr.sa.sa_family, AF_INET);
  auto v6 = find_interfaces("=lo", AF_INET6);
  if (!v6.empty()) {
    EXPECT_EQ(v6[0].addr.sa.sa_family, AF_INET6);
  }
  EXPECT_TRUE(find_interfaces("=no-such-if", AF_UNSPEC).empty());
  bool ok = true;
  EXPECT_EQ(parse_family("AF_INET6", &ok), AF_INET6);
  EXPECT_TRUE(ok);
  parse_family("inet", &ok);
  EXPECT_FALSE(ok);
}

// A connection to 127.0.0.1, or to the address of any local interface, has its peer on this host.
TEST(SocketIfname, PeerIsLocal) {
  std::vector<SocketIface> targets = find_interfaces("=lo", AF_INET);
  for (const SocketIface& i : find_interfaces("^lo", AF_INET)) targets.push_back(i);
  ASSERT_FALSE(targets.empty());
  for (const SocketIface& target : targets) {
    SocketAddr a = target.addr;
    int l = socket(AF_INET, SOCK_STREAM, 0);
    socklen_t len = sizeof a.in;
    ASSERT_EQ(bind(l, &a.sa, sizeof a.in), 0) << target.name;
    ASSERT_EQ(listen(l, 1), 0);
    ASSERT_EQ(getsockname(l, &a.sa, &len), 0);
    int c = socket(AF_INET, SOCK_STREAM, 0);
    EXPECT_FALSE(peer_is_local(c));  // not connected: no peer
    ASSERT_EQ(connect(c, &a.sa, sizeof a.in), 0) << target.name;
    EXPECT_TRUE(peer_is_local(c)) << target.name;
    close(c);
    close(l);
  }
}

TEST(Settings, ParseBytes) {
  uint64_t v = 0;
  EXPECT_TRUE(parse_bytes("4096", &v));
  EXPECT_EQ(v, 4096u);
  EXPECT_TRUE(parse_bytes("64K", &v));
  EXPECT_EQ(v, 65536u);
  EXPECT_TRUE(parse_bytes("4MiB", &v));
  EXPECT_EQ(v, 4u << 20);
  EXPECT_FALSE(parse_bytes("abc", &v));
  EXPECT_FALSE(parse_bytes("-1", &v));
  EXPECT_FALSE(parse_bytes("12Q", &v));
  EXPECT_FALSE(parse_bytes("99999999999999999999G", &v));
  EXPECT_EQ(format_bytes(256 << 10), "256KiB");
  EXPECT_EQ(format_bytes(1000), "1000B");
}

// The one grammar of sizes and durations (common/units.h), shared by the registry and the tool.
TEST(Settings, UnitsGrammar) {
  uint64_t v = 0;
  std::string why;
  struct Case {
    const char* text;
    uint64_t bytes;
  } ok[] = {{"64K", 64 << 10},         {"64KiB", 64 << 10}, {"1.5M", 3 << 19},          {"2G", 2ull << 30},
            {"0", 0},                  {"7B", 7},           {".5K", 512},               {"1TiB", 1ull << 40},
            {"18446744073709551615", ~0ull}};
  for (const Case& c : ok) {
    EXPECT_TRUE(units::parse_size(c.text, &v, &why)) << c.text << ": " << why;
    EXPECT_EQ(v, c.bytes) << c.text;
  }
  const char* bad[] = {"", "K", "-1", "1e3", "64KB", "1.3K", "0.5", "1..5K", "18446744073709551616", "16777216T"};
  for (const char* b : bad) {
    v = 42;
    EXPECT_FALSE(units::parse_size(b, &v, &why)) << b;
    EXPECT_EQ(v, 42u) << b << ": a rejected size leaves the output alone";
    EXPECT_FALSE(why.empty()) << b;
  }
  EXPECT_FALSE(units::parse_size("16777216T", &v, &why));
  EXPECT_EQ(why, "too large for 64 bits");
  EXPECT_TRUE(units::parse_duration("30000", units::kMilliseconds, &v));
  EXPECT_EQ(v, 30000u);
  EXPECT_TRUE(units::parse_duration("1.5s", units::kMilliseconds, &v));
  EXPECT_EQ(v, 1500u);
  EXPECT_TRUE(units::parse_duration("2m", units::kMilliseconds, &v));
  EXPECT_EQ(v, 120000u);
  EXPECT_TRUE(units::parse_duration("250us", units::kMicroseconds, &v));
  EXPECT_EQ(v, 250u);
  EXPECT_FALSE(units::parse_duration("500us", units::kMilliseconds, &v, &why));  // half a millisecond
  EXPECT_FALSE(units::parse_duration("5 s", units::kMilliseconds, &v, &why));
  EXPECT_FALSE(units::parse_duration("99999999999999h", units::kMilliseconds, &v, &why));
}

TEST(Frame, ValidationRejectsEveryLie) {
  FrameMeta ok = make_frame(FrameKind::kRaw, 0, 100, 100);
  EXPECT_EQ(validate_frame(ok, 100, 100, 200), nullptr);
  FrameMeta m = ok;
  m.magic ^= 1;
  EXPECT_NE(validate_frame(m, 100, 100, 200), nullptr);
  EXPECT_NE(validate_frame(ok, 101, 100, 200), nullptr);  // transport disagrees
  EXPECT_NE(validate_frame(ok, 100, 99, 200), nullptr);   // larger than posted
  m = make_frame(FrameKind::kRaw, 0, 100, 50);
  EXPECT_NE(validate_frame(m, 50, 100, 200), nullptr);  // raw but wire != size
  m = make_frame(FrameKind::kCodec, 0, 100, 300);
  EXPECT_NE(validate_frame(m, 300, 100, 200), nullptr);  // above the codec bound
  m = make_frame(FrameKind::kCodec, 0, 100, 60);
  EXPECT_EQ(validate_frame(m, 60, 100, 200), nullptr);
  m.kind = 7;
  EXPECT_NE(validate_frame(m, 60, 100, 200), nullptr);
  m = ok;
  m.version = 9;
  EXPECT_NE(validate_frame(m, 100, 100, 200), nullptr);
}

TEST(Frame, SegmentPlanCoversTheMessage) {
  EXPECT_EQ(segment_count(0, 0), 1u);
  EXPECT_EQ(segment_count(10 << 20, 0), 1u);  // off
  EXPECT_EQ(segment_count(0, 4096), 1u);
  EXPECT_EQ(segment_count(4096, 4096), 1u);  // not larger than a segment: whole
  EXPECT_EQ(segment_count(4097, 4096), 2u);
  EXPECT_EQ(segment_count(3 << 20, 1 << 20), 3u);
  for (uint64_t size : {uint64_t{1}, uint64_t{4095}, uint64_t{4096}, uint64_t{4097}, uint64_t{65536 * 7 + 5},
                        uint64_t{64} << 20, (uint64_t{17} << 20) + 5}) {
    for (uint64_t seg : {uint64_t{0}, uint64_t{4096}, uint64_t{65536}, uint64_t{1} << 20}) {
      uint64_t n = segment_count(size, seg), sum = 0;
      for (uint64_t j = 0; j < n; ++j) {
        uint64_t len = segment_len(size, seg, j);
        EXPECT_GT(len, 0u) << size << " " << seg << " " << j;
        if (j + 1 < n) {
          EXPECT_EQ(len, seg);  // all but the last are full
        }
        sum += len;
      }
      EXPECT_EQ(sum, size) << size << " " << seg;
    }
  }
  EXPECT_EQ(effective_segment_bytes(0), 0u);
  EXPECT_EQ(effective_segment_bytes(1), 4096u);
  EXPECT_EQ(effective_segment_bytes(65536 + 100), 65536u);
  EXPECT_EQ(effective_segment_bytes(1 << 20), 1u << 20);
}

// Feeds headers to an Assembly of a `posted`-byte receive; returns the index of the first rejected one
// (-1: all accepted) and the assembly.
int feed(Assembly* a, uint64_t posted, const std::vector<FrameMeta>& ms) {
  a->reset(posted);
  for (size_t i = 0; i < ms.size(); ++i) {
    if (a->accept(ms[i], ms[i].wire_len)) return static_cast<int>(i);
  }
  return -1;
}

TEST(Frame, AssemblyAcceptsSegmentsInOrder) {
  Assembly a;
  EXPECT_EQ(feed(&a, 10000,
                 {make_segment(FrameKind::kRaw, 0, 0, false, 4096, 4096),
                  make_segment(FrameKind::kCodec, 0, 1, false, 4096, 1000),
                  make_segment(FrameKind::kRaw, 0, 2, true, 100, 100)}),
            -1);
  EXPECT_TRUE(a.complete);
  EXPECT_TRUE(a.segmented);
  EXPECT_EQ(a.offset, 8292u);
  EXPECT_EQ(a.next, 3u);
  // A whole message (version 1) completes at once; so does a lone last segment.
  EXPECT_EQ(feed(&a, 100, {make_frame(FrameKind::kRaw, 0, 100, 100)}), -1);
  EXPECT_TRUE(a.complete);
  EXPECT_FALSE(a.segmented);
  EXPECT_EQ(feed(&a, 100, {make_segment(FrameKind::kRaw, 0, 0, true, 0, 0)}), -1);
  EXPECT_TRUE(a.complete);
  // Exactly filling the receive is fine.
  EXPECT_EQ(feed(&a, 200,
                 {make_segment(FrameKind::kRaw, 0, 0, false, 100, 100),
                  make_segment(FrameKind::kRaw, 0, 1, true, 100, 100)}),
            -1);
}

TEST(Frame, AssemblyRejectsGarbledShortAndOverlongSequences) {
  Assembly a;
  auto raw = [](uint32_t i, bool last, uint64_t n) {
    return make_segment(FrameKind::kRaw, 0, i, last, n, n);
  };
  EXPECT_EQ(feed(&a, 10000, {raw(0, false, 100), raw(2, true, 100)}), 1);  // skipped index
  EXPECT_EQ(feed(&a, 10000, {raw(1, true, 100)}), 0);                      // does not start at 0
  EXPECT_EQ(feed(&a, 10000, {raw(0, false, 100), raw(0, true, 100)}), 1);  // missing last, new message
  EXPECT_EQ(feed(&a, 10000, {raw(0, true, 100), raw(1, true, 100)}), 1);   // extra after the last
  EXPECT_EQ(feed(&a, 150, {raw(0, false, 100), raw(1, true, 100)}), 1);    // cumulative overrun
  EXPECT_EQ(feed(&a, 10000, {raw(0, false, 0), raw(1, true, 10)}), 0);     // empty, not last
  EXPECT_EQ(feed(&a, 10000, {raw(0, false, 100), make_frame(FrameKind::kRaw, 0, 100, 100)}), 1);  // v1 inside
  FrameMeta m = raw(0, true, 100);
  m.wire_len = 99;
  EXPECT_EQ(feed(&a, 10000, {m}), 0);  // raw with wire != size
  EXPECT_EQ(feed(&a, 10000, {make_segment(FrameKind::kCodec, 0, 0, true, 100, 100)}), 0);  // not smaller
  m = raw(0, true, 100);
  m.flags = 6;
  EXPECT_EQ(feed(&a, 10000, {m}), 0);  // unknown flags
  m = raw(0, true, 100);
  m.version = 3;
  EXPECT_EQ(feed(&a, 10000, {m}), 0);
  m = raw(0, true, 100);
  m.kind = 5;
  EXPECT_EQ(feed(&a, 10000, {m}), 0);
  // The transport's length must agree with the header.
  a.reset(10000);
  EXPECT_NE(a.accept(raw(0, true, 100), 101), nullptr);
  // A version 1 frame with segment fields set is not a whole message.
  m = make_frame(FrameKind::kRaw, 0, 100, 100);
  m.segment = 1;
  EXPECT_EQ(feed(&a, 10000, {m}), 0);
}

TEST(Frame, PreviousBuildsRejectSegmentHeaders) {
  // The check a receiver of the previous build applies (frame.h before segments: version must be 1,
  // the rest of its validation never looks at the fields segments use): every segment header fails it,
  // so an old receiver errors out ("unsupported frame version") instead of taking segment 0 for the
  // whole message. Whole-message headers stay version 1 and byte-identical (no segment fields set).
  auto old_receiver_accepts = [](const FrameMeta& m) { return m.magic == kFrameMagic && m.version == 1; };
  for (uint32_t i : {0u, 1u, 7u}) {
    EXPECT_FALSE(old_receiver_accepts(make_segment(FrameKind::kRaw, 0, i, false, 10, 10)));
    EXPECT_FALSE(old_receiver_accepts(make_segment(FrameKind::kCodec, 0, i, true, 10, 5)));
  }
  FrameMeta whole = make_frame(FrameKind::kCodec, 3, 100, 60);
  EXPECT_TRUE(old_receiver_accepts(whole));
  unsigned char bytes[sizeof whole];
  std::memcpy(bytes, &whole, sizeof whole);
  EXPECT_EQ(bytes[6], 0);  // the former "reserved" fields stay zero in a whole-message header
  EXPECT_EQ(bytes[7], 0);
  EXPECT_EQ(bytes[12] | bytes[13] | bytes[14] | bytes[15], 0);
}

TEST(Policy, CompressesOnSlowLinksOnly) {
  // 1 Gbit/s link (pinned), codec at 1 GB/s, ratio 0.69: compression wins.
  Policy slow(CompressMode::kAuto, 0, 125e6, false, 1, 1 << 20);
  slow.on_encoded(1 << 20, (1 << 20) * 69 / 100, (1 << 20) / 1e9);
  deliver_raw(slow);
  EXPECT_TRUE(choose(slow, 4 << 20));
  // 40 GB/s link: the codec is the bottleneck, raw wins.
  Policy fast(CompressMode::kAuto, 0, 40e9, false, 1, 1 << 20);
  fast.on_encoded(1 << 20, (1 << 20) * 69 / 100, (1 << 20) / 1e9);
  deliver_raw(fast);
  EXPECT_FALSE(choose(fast, 4 << 20));
  // Incompressible data on a slow link: raw.
  Policy noise(CompressMode::kAuto, 0, 125e6, false, 1, 1 << 20);
  deliver_raw(noise);
  for (int i = 0; i < 20; ++i) noise.on_encoded(1 << 20, 1 << 20, 1e-3);
  EXPECT_FALSE(choose(noise, 4 << 20));
}

TEST(Policy, FollowsTheMeasuredLink) {
  Policy p(CompressMode::kAuto, 0, 40e9, true, 1, 1 << 20);
  p.on_encoded(1 << 20, (1 << 20) * 69 / 100, (1 << 20) / 1e9);
  deliver_raw(p);
  EXPECT_FALSE(choose(p, 4 << 20));
  for (int i = 0; i < 40; ++i) p.on_link(125000000, 1.0);  // the link turns out to be 1 Gbit/s
  EXPECT_TRUE(choose(p, 4 << 20));
}

TEST(Policy, NothingCompressedBeforeCodecAndLinkAreMeasured) {
  // The interface claims 1 Gbit/s, but nothing has been measured yet.
  Policy p(CompressMode::kAuto, 0, 125e6, true, 1, 16);
  deliver_raw(p);
  bool sample = false;
  EXPECT_FALSE(p.choose(4 << 20, &sample));
  EXPECT_TRUE(sample);  // the first message measures the codec
  p.on_encoded(1 << 20, (1 << 20) * 69 / 100, (1 << 20) / 1e9);
  for (int i = 0; i < Policy::kLinkMinSamples - 1; ++i) {
    p.on_link(125000000, 1.0);
    EXPECT_FALSE(choose(p, 4 << 20)) << i;
  }
  p.on_link(125000000, 1.0);
  EXPECT_TRUE(choose(p, 4 << 20));
  // A pinned link needs only the codec measurement.
  Policy pinned(CompressMode::kAuto, 0, 125e6, false, 1, 16);
  deliver_raw(pinned);
  EXPECT_FALSE(choose(pinned, 4 << 20));
  pinned.on_encoded(1 << 20, (1 << 20) * 69 / 100, (1 << 20) / 1e9);
  EXPECT_TRUE(choose(pinned, 4 << 20));
}

TEST(Policy, BriefLinkDipsDoNotSwitchToCompression) {
  // A 12 Gbit/s "link" whose pace is really the receiver's CPU: it dips when that CPU is taken.
  Policy p(CompressMode::kAuto, 0, 1.25e9, true, 1, 1 << 20);
  p.on_encoded(1 << 20, (1 << 20) * 69 / 100, (1 << 20) / 1e9);
  deliver_raw(p);
  for (int i = 0; i < 20; ++i) p.on_link(1500000000, 1.0);
  EXPECT_FALSE(choose(p, 4 << 20));
  for (int i = 0; i < Policy::kLinkWindow - 1; ++i) {
    p.on_link(250000000, 1.0);  // 2 Gbit/s for a while: still the same link
    EXPECT_FALSE(choose(p, 4 << 20)) << i;
  }
  EXPECT_NEAR(p.link_bps(), 1.5e9, 1);
  // A drop that lasts a whole window is the link itself.
  p.on_link(250000000, 1.0);
  EXPECT_NEAR(p.link_bps(), 2.5e8, 1);
  EXPECT_TRUE(choose(p, 4 << 20));
  // And a faster link shows at once.
  p.on_link(1500000000, 1.0);
  EXPECT_FALSE(choose(p, 4 << 20));
}

TEST(Policy, SamplesTheCodecWhileRawWithBackoff) {
  Policy p(CompressMode::kAuto, 0, 40e9, true, 1, 4);
  p.on_encoded(1 << 20, (1 << 20) * 69 / 100, (1 << 20) / 1e9);
  int samples = 0, compressed = 0;
  for (int i = 0; i < 400; ++i) {
    bool sample = false;
    compressed += p.choose(4 << 20, &sample) ? 1 : 0;
    samples += sample ? 1 : 0;
  }
  EXPECT_EQ(compressed, 0);  // a fast link: raw throughout, never a compressed "probe"
  EXPECT_GE(samples, 3);     // 4, 8, 16, 32, ...
  EXPECT_LE(samples, 10);    // backed off
  // While compressing there is nothing to sample: every compressed message measures the codec.
  Policy slow(CompressMode::kAuto, 0, 125e6, false, 1, 4);
  slow.on_encoded(1 << 20, (1 << 20) * 69 / 100, (1 << 20) / 1e9);
  deliver_raw(slow);
  for (int i = 0; i < 100; ++i) {
    bool sample = true;
    EXPECT_TRUE(slow.choose(4 << 20, &sample));
    EXPECT_FALSE(sample);
  }
}

TEST(Policy, FirstStretchIsRawAndMeasured) {
  // The model wants compression at once (1 Gbit/s pinned, fast codec), but there is no raw figure to
  // check it against yet: the connection's first kStretchMessages messages go raw.
  Policy p(CompressMode::kAuto, 0, 125e6, false, 1, 1 << 20);
  p.on_encoded(1 << 20, (1 << 20) * 69 / 100, (1 << 20) / 1e9);
  for (int i = 0; i < Policy::kStretchMessages; ++i) {
    bool sample = false;
    EXPECT_FALSE(p.choose(4 << 20, &sample)) << i;
    p.on_delivered(4 << 20, false, 0.05);
  }
  EXPECT_NEAR(p.delivered_raw_bps(), (4 << 20) / 0.05, 1);
  EXPECT_TRUE(choose(p, 4 << 20));
}

namespace {
// One stretch of messages through the policy: each is chosen, then completes after `seconds`; returns how
// many the policy compressed.
int stretch(Policy& p, double seconds, int messages = Policy::kWarmMessages + Policy::kStretchMessages) {
  int compressed = 0;
  for (int i = 0; i < messages; ++i) {
    bool sample = false;
    bool c = p.choose(4 << 20, &sample);
    compressed += c ? 1 : 0;
    p.on_delivered(4 << 20, c, seconds);
  }
  return compressed;
}
constexpr int kStretch = Policy::kWarmMessages + Policy::kStretchMessages;
}  // namespace

TEST(Policy, CompressionThatDeliversLessIsHeldOff) {
  // The model says compress (1 Gbit/s pinned, fast codec), but compressed messages take 60 ms each
  // against 50 ms raw: the receiver's decode or the CPUs, which the model does not see.
  Policy p(CompressMode::kAuto, 0, 125e6, false, 1, 1 << 20);
  p.on_encoded(1 << 20, (1 << 20) * 69 / 100, (1 << 20) / 1e9);
  deliver_raw(p, 0.05);
  EXPECT_EQ(stretch(p, 0.06), kStretch);  // compressing, and losing
  EXPECT_EQ(p.held_raw(), Policy::kFirstHold);
  EXPECT_EQ(stretch(p, 0.05, Policy::kWarmMessages + Policy::kFirstHold * Policy::kStretchMessages), 0);
  EXPECT_EQ(p.held_raw(), 0);
  EXPECT_EQ(stretch(p, 0.06), kStretch);  // tried again, loses again: the hold doubles
  EXPECT_EQ(p.held_raw(), 2 * Policy::kFirstHold);
  EXPECT_EQ(stretch(p, 0.05, Policy::kWarmMessages + 2 * Policy::kFirstHold * Policy::kStretchMessages), 0);
  EXPECT_EQ(p.held_raw(), 0);
  // Then it wins (the load went away): compression stays on.
  EXPECT_EQ(stretch(p, 0.03), kStretch);
  EXPECT_EQ(p.held_raw(), 0);
  EXPECT_EQ(stretch(p, 0.03), kStretch);
  EXPECT_NEAR(p.delivered_compressed_bps(), (4 << 20) / 0.03, 1);
}

TEST(Policy, RawStretchesSlowedByOtherWorkDoNotMakeCompressionLookGood) {
  Policy p(CompressMode::kAuto, 0, 125e6, false, 1, 1 << 20);
  p.on_encoded(1 << 20, (1 << 20) * 69 / 100, (1 << 20) / 1e9);
  deliver_raw(p, 0.05);
  EXPECT_EQ(stretch(p, 0.06), kStretch);  // loses
  // The held raw stretches run while another job takes the CPUs: 100 ms per message.
  EXPECT_EQ(stretch(p, 0.10, Policy::kWarmMessages + Policy::kFirstHold * Policy::kStretchMessages), 0);
  EXPECT_NEAR(p.delivered_raw_bps(), (4 << 20) / 0.05, 1);  // the best recent raw stretch
  EXPECT_EQ(stretch(p, 0.06), kStretch);
  EXPECT_EQ(p.held_raw(), 2 * Policy::kFirstHold);  // still losing against what raw can do
}

TEST(Policy, CompressionThatWinsKeepsTheRawFigureCurrent) {
  Policy p(CompressMode::kAuto, 0, 125e6, false, 1, 1 << 20);
  p.on_encoded(1 << 20, (1 << 20) * 69 / 100, (1 << 20) / 1e9);
  deliver_raw(p, 0.05);
  int compressed = 0;
  for (int i = 0; i < 10000; ++i) {
    bool sample = false;
    if (!p.choose(4 << 20, &sample)) break;
    ++compressed;
    p.on_delivered(4 << 20, true, 0.04);
  }
  // kRawRefresh compressing stretches (after the new stretch's warm-up), then one raw stretch.
  EXPECT_EQ(compressed, Policy::kWarmMessages + Policy::kRawRefresh * Policy::kStretchMessages);
  EXPECT_EQ(stretch(p, 0.05), 0);
  EXPECT_EQ(stretch(p, 0.04), kStretch);
  // Completions of the other kind (the previous stretch's messages still in flight) do not count.
  Policy q(CompressMode::kAuto, 0, 125e6, false, 1, 1 << 20);
  q.on_encoded(1 << 20, (1 << 20) * 69 / 100, (1 << 20) / 1e9);
  deliver_raw(q, 0.05);
  bool sample = false;
  ASSERT_TRUE(q.choose(4 << 20, &sample));
  for (int i = 0; i < 100; ++i) q.on_delivered(4 << 20, false, 1.0);
  EXPECT_NEAR(q.delivered_raw_bps(), (4 << 20) / 0.05, 1);
  EXPECT_EQ(q.delivered_compressed_bps(), 0);
}

TEST(Policy, ModesAndMinBytes) {
  Policy always(CompressMode::kAlways, 1000, 40e9, true, 1, 16);
  EXPECT_TRUE(choose(always, 4096));
  EXPECT_FALSE(choose(always, 999));
  Policy never(CompressMode::kNever, 0, 1e6, true, 1, 16);
  EXPECT_FALSE(choose(never, 4 << 20));
}

TEST(SocketPieces, EvenBacklogsGetTheRoundRobin) {
  const uint64_t zero[4] = {};
  const double unmeasured[4] = {};
  uint8_t map[8];
  assign_pieces(zero, unmeasured, 4, 8, 100, 800, 1, map);
  const uint8_t want[8] = {1, 2, 3, 0, 1, 2, 3, 0};
  for (int i = 0; i < 8; ++i) EXPECT_EQ(map[i], want[i]) << i;
}

TEST(SocketPieces, AStreamThatFellBehindGetsLess) {
  // Stream 2 still holds 300 bytes (a slower flow): the other streams take its share of the message.
  const uint64_t backlog[4] = {0, 0, 300, 0};
  const double unmeasured[4] = {};
  uint8_t map[8];
  assign_pieces(backlog, unmeasured, 4, 8, 100, 750, 0, map);
  int per[4] = {};
  for (int i = 0; i < 8; ++i) ++per[map[i]];
  EXPECT_EQ(per[2], 0);
  EXPECT_EQ(per[0] + per[1] + per[3], 8);
  EXPECT_LE(per[0], 3);
  // The short last piece (50 bytes) counts as 50.
  const uint64_t even[2] = {0, 0};
  uint8_t m2[3];
  assign_pieces(even, unmeasured, 2, 3, 100, 250, 0, m2);
  EXPECT_EQ(m2[0], 0);
  EXPECT_EQ(m2[1], 1);
  EXPECT_EQ(m2[2], 0);
  // One stream: every piece on it.
  const uint64_t one[1] = {12345};
  uint8_t m3[1] = {9};
  assign_pieces(one, unmeasured, 1, 1, 100, 100, 7, m3);
  EXPECT_EQ(m3[0], 0);
}

TEST(SocketPieces, AFasterStreamCarriesMore) {
  // Stream 0 moves 4x what stream 1 does: of 10 equal pieces it takes 8, so both finish together.
  const uint64_t zero[2] = {};
  const double rate[2] = {4e6, 1e6};
  uint8_t map[10];
  assign_pieces(zero, rate, 2, 10, 100, 1000, 0, map);
  int per[2] = {};
  for (int i = 0; i < 10; ++i) ++per[map[i]];
  EXPECT_EQ(per[0], 8);
  EXPECT_EQ(per[1], 2);
  // A stream not measured yet counts as the fastest.
  const double partly[2] = {0, 1e6};
  assign_pieces(zero, partly, 2, 10, 100, 1000, 0, map);
  per[0] = per[1] = 0;
  for (int i = 0; i < 10; ++i) ++per[map[i]];
  EXPECT_EQ(per[0], 5);
}

TEST(SocketPieces, RatesCountOnlyWhileAStreamIsBusy) {
  StreamRates r;
  uint64_t moved[2] = {0, 0}, backlog[2] = {1000, 0};
  r.update(moved, backlog, 2, 0.0);
  moved[0] = 4000;
  moved[1] = 50;  // stream 1 was idle: whatever it moved says nothing of its pace
  backlog[1] = 10;
  r.update(moved, backlog, 2, 0.001);
  EXPECT_NEAR(r.rates()[0], 4e6, 1);
  EXPECT_EQ(r.rates()[1], 0);
  moved[0] = 8000;
  moved[1] = 1050;
  r.update(moved, backlog, 2, 0.002);
  EXPECT_NEAR(r.rates()[0], 4e6, 1);
  EXPECT_NEAR(r.rates()[1], 1e6, 1);
  r.update(moved, backlog, 2, 0.0025);  // under a millisecond later: ignored
  EXPECT_NEAR(r.rates()[0], 4e6, 1);
  // Stream 1 goes idle for two looks: its rate is forgotten (it counts as the fastest again), so a
  // stream once measured slow is not left without pieces; stream 0, still busy, keeps its rate.
  backlog[1] = 0;
  moved[0] = 12000;
  r.update(moved, backlog, 2, 0.003);
  EXPECT_NEAR(r.rates()[1], 1e6, 1);  // idle at one look only
  moved[0] = 16000;
  r.update(moved, backlog, 2, 0.004);
  EXPECT_EQ(r.rates()[1], 0);
  EXPECT_NEAR(r.rates()[0], 4e6, 1);
}

// NCCL_SOCKET_NTHREADS x NCCL_NSOCKS_PERTHREAD with NCCL's semantics (net_socket.cc,
// ncclNetSocketGetNsockNthread): auto from the interface's PCI vendor, NCCL's caps, and zipccl's one
// data stream where NCCL would send on its control socket.
namespace {
struct FakeRoot {
  std::string dir;
  FakeRoot() {
    char tmpl[] = "/tmp/zipccl_fabric_XXXXXX";
    dir = mkdtemp(tmpl);
  }
  ~FakeRoot() { EXPECT_EQ(std::system(("rm -rf '" + dir + "'").c_str()), 0); }
  void vendor(const std::string& ifname, const std::string& text) {
    const std::string d = dir + "/sys/class/net/" + ifname + "/device";
    ASSERT_EQ(std::system(("mkdir -p '" + d + "'").c_str()), 0);
    FILE* f = std::fopen((d + "/vendor").c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fputs(text.c_str(), f);
    std::fclose(f);
  }
};
}  // namespace

TEST(SocketPlan, VendorReadUnderTheFabricRoot) {
  FakeRoot root;
  root.vendor("eth0", "0x1d0f\n");
  root.vendor("ens4", "0x1ae0\n");
  EXPECT_EQ(interface_vendor(root.dir, "eth0"), "0x1d0f");
  EXPECT_EQ(interface_vendor(root.dir, "ens4"), "0x1ae0");
  EXPECT_EQ(interface_vendor(root.dir, "veth7"), "");  // no device: a virtual link
}

TEST(SocketPlan, AwsVendorFileGivesSixteenStreams) {
  FakeRoot root;
  root.vendor("eth0", "0x1d0f\n");
  StreamPlan p = plan_streams(kSocketAuto, kSocketAuto, interface_vendor(root.dir, "eth0"));
  EXPECT_EQ(p.streams, 16);
  EXPECT_EQ(p.nthreads, 2);
  EXPECT_EQ(p.per_thread, 8);
  EXPECT_EQ(p.nccl_sockets, 16);
  EXPECT_NE(p.source.find("AWS"), std::string::npos) << p.source;
  EXPECT_TRUE(p.warning.empty());
}

TEST(SocketPlan, AutoDefaultsByVendor) {
  StreamPlan gcp = plan_streams(kSocketAuto, kSocketAuto, "0x1ae0");
  EXPECT_EQ(gcp.nthreads, 4);
  EXPECT_EQ(gcp.per_thread, 1);
  EXPECT_EQ(gcp.streams, 4);
  // Anything else: NCCL 0 threads x 1 socket, its data on the control socket; zipccl one data stream.
  for (const char* v : {"", "0x15b3", "0x8086", "0x1d0"}) {
    StreamPlan p = plan_streams(kSocketAuto, kSocketAuto, v);
    EXPECT_EQ(p.nccl_sockets, 0) << v;
    EXPECT_EQ(p.streams, 1) << v;
    EXPECT_EQ(p.nthreads, 1) << v;
    EXPECT_EQ(p.per_thread, 1) << v;
  }
}

TEST(SocketPlan, ExplicitValuesOverrideTheVendor) {
  // Both given: the vendor does not matter.
  for (const char* v : {"", "0x1d0f", "0x1ae0"}) {
    StreamPlan p = plan_streams(3, 2, v);
    EXPECT_EQ(p.streams, 6) << v;
    EXPECT_EQ(p.nthreads, 3) << v;
    EXPECT_EQ(p.per_thread, 2) << v;
  }
  // One given: the other stays auto, as in NCCL.
  EXPECT_EQ(plan_streams(4, kSocketAuto, "0x1d0f").streams, 32);  // 4 x AWS's 8
  EXPECT_EQ(plan_streams(kSocketAuto, 2, "0x1d0f").streams, 4);   // AWS's 2 x 2
  EXPECT_EQ(plan_streams(kSocketAuto, 4, "0x1ae0").streams, 16);  // GCP's 4 x 4
  EXPECT_EQ(plan_streams(kSocketAuto, 8, "").nccl_sockets, 0);    // 0 threads: control socket only
  EXPECT_EQ(plan_streams(kSocketAuto, 8, "").streams, 1);
  EXPECT_EQ(plan_streams(5, kSocketAuto, "").streams, 5);         // 5 x 1
  // An explicit 0 on an AWS node turns the streams off as in NCCL: one stream for zipccl.
  EXPECT_EQ(plan_streams(0, kSocketAuto, "0x1d0f").streams, 1);
  EXPECT_EQ(plan_streams(2, 0, "0x1d0f").streams, 1);
}

TEST(SocketPlan, NcclCaps) {
  StreamPlan t = plan_streams(20, 1, "");
  EXPECT_EQ(t.nthreads, kNcclMaxSocketThreads);
  EXPECT_EQ(t.streams, 16);
  EXPECT_NE(t.warning.find("NCCL_SOCKET_NTHREADS=20"), std::string::npos) << t.warning;
  StreamPlan s = plan_streams(16, 8, "");  // 128 sockets: 64 / 16 = 4 per thread
  EXPECT_EQ(s.nthreads, 16);
  EXPECT_EQ(s.per_thread, 4);
  EXPECT_EQ(s.streams, kNcclMaxSockets);
  EXPECT_FALSE(s.warning.empty());
  StreamPlan r = plan_streams(3, 30, "");  // 90: 64 / 3 = 21 per thread, 63 streams
  EXPECT_EQ(r.per_thread, 21);
  EXPECT_EQ(r.streams, 63);
  StreamPlan a = plan_streams(kSocketAuto, 100, "0x1d0f");  // AWS's 2 x 100: 2 x 32
  EXPECT_EQ(a.per_thread, 32);
  EXPECT_EQ(a.streams, 64);
  EXPECT_TRUE(plan_streams(16, 4, "").warning.empty());  // exactly at the caps
}

TEST(Settings, SocketAliasesFillInAndWarnWhenContradicted) {
  std::string w;
  EXPECT_EQ(merge_socket_alias("NCCL_SOCKET_NTHREADS", false, kSocketAuto, "ZIPCCL_SOCKET_NTHREADS", kSocketUnset,
                               &w),
            kSocketAuto);
  EXPECT_EQ(merge_socket_alias("NCCL_SOCKET_NTHREADS", false, kSocketAuto, "ZIPCCL_SOCKET_NTHREADS", 3, &w), 3);
  EXPECT_TRUE(w.empty());
  EXPECT_EQ(merge_socket_alias("NCCL_SOCKET_NTHREADS", true, 4, "ZIPCCL_SOCKET_NTHREADS", 4, &w), 4);
  EXPECT_TRUE(w.empty());  // agreeing: no warning
  EXPECT_EQ(merge_socket_alias("NCCL_SOCKET_NTHREADS", true, 4, "ZIPCCL_SOCKET_NTHREADS", 3, &w), 4);
  EXPECT_NE(w.find("ZIPCCL_SOCKET_NTHREADS=3 contradicts NCCL_SOCKET_NTHREADS=4"), std::string::npos) << w;
  w.clear();
  EXPECT_EQ(merge_socket_alias("NCCL_NSOCKS_PERTHREAD", true, kSocketAuto, "ZIPCCL_NSOCKS_PERTHREAD", 2, &w),
            kSocketAuto);  // NCCL_NSOCKS_PERTHREAD=auto given explicitly still wins
  EXPECT_NE(w.find("NCCL_NSOCKS_PERTHREAD=auto"), std::string::npos) << w;
}

// NCCL's variables are declared in the registry with NCCL's default; the old names are aliases.
TEST(Settings, SocketCountsInTheRegistry) {
  int found = 0;
  for (const SettingInfo& i : describe_settings()) {
    if (i.name == "NCCL_SOCKET_NTHREADS" || i.name == "NCCL_NSOCKS_PERTHREAD") {
      ++found;
      EXPECT_EQ(i.default_value, "auto") << i.name;
      EXPECT_EQ(i.values, "auto|integer 0..1024") << i.name;
    }
    if (i.name == "ZIPCCL_SOCKET_NTHREADS" || i.name == "ZIPCCL_NSOCKS_PERTHREAD") {
      ++found;
      EXPECT_EQ(i.default_value, "unset") << i.name;
    }
  }
  EXPECT_EQ(found, 4);
}
