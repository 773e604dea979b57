// Sizes and durations, one grammar for every ZIPCCL_* setting and every `zipccl` command option.
//
//   size      <number>[unit]   number: decimal digits with an optional fraction ("64", "1.5");
//                              unit (binary): B, K|k|KiB, M|m|MiB, G|g|GiB, T|t|TiB. The value must be a
//                              whole number of bytes and fit in 64 bits: "64K", "64KiB", "1.5M", "2G".
//   duration  <number>[unit]   unit: us, ms, s, m (minutes), h; a bare number is in the unit the
//                              option names (ZIPCCL_CONNECT_TIMEOUT_MS: milliseconds).
//
// Header-only, so the tool and the tests use it without linking the plugin.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <cstdio>
#include <string>

namespace zipccl {
namespace units {

namespace detail {
// "<digits>[.<digits>]<suffix>" as whole + frac / frac_scale; the suffix is left in *rest. False when
// there is no digit, the whole part passes 64 bits, or a fraction digit past the 9th is not zero.
inline bool parse_decimal(const char* s, uint64_t* whole, uint64_t* frac, uint64_t* frac_scale,
                          const char** rest, std::string* why) {
  const char* p = s;
  uint64_t w = 0;
  int digits = 0;
  for (; *p >= '0' && *p <= '9'; ++p, ++digits) {
    const uint64_t d = static_cast<uint64_t>(*p - '0');
    if (w > (UINT64_MAX - d) / 10) {
      if (why) *why = "too large for 64 bits";
      return false;
    }
    w = w * 10 + d;
  }
  uint64_t f = 0, scale = 1;
  if (*p == '.') {
    ++p;
    int fdigits = 0;
    for (; *p >= '0' && *p <= '9'; ++p, ++fdigits) {
      if (scale < 1000000000ull) {
        f = f * 10 + static_cast<uint64_t>(*p - '0');
        scale *= 10;
      } else if (*p != '0') {
        if (why) *why = "more than 9 fraction digits";
        return false;
      }
    }
    digits += fdigits;
  }
  if (digits == 0) {
    if (why) *why = "no number";
    return false;
  }
  *whole = w;
  *frac = f;
  *frac_scale = scale;
  *rest = p;
  return true;
}

// (whole + frac/scale) * mult as an integer: false (with why) on overflow or a fractional result.
inline bool scale_decimal(uint64_t whole, uint64_t frac, uint64_t scale, uint64_t mult, const char* unit_name,
                          uint64_t* out, std::string* why) {
  if (mult != 0 && whole > UINT64_MAX / mult) {
    if (why) *why = "too large for 64 bits";
    return false;
  }
  uint64_t v = whole * mult;
  // frac/scale * mult, exactly and without overflow (frac < scale <= 1e9): mult = q * scale + r.
  const uint64_t q = mult / scale, r = mult % scale;
  const uint64_t part = frac * q + (frac * r) / scale;
  if ((frac * r) % scale != 0) {
    if (why) *why = std::string("not a whole number of ") + unit_name;
    return false;
  }
  if (v > UINT64_MAX - part) {
    if (why) *why = "too large for 64 bits";
    return false;
  }
  *out = v + part;
  return true;
}
struct Unit {
  const char* name;
  uint64_t scale;  // in the result's unit
};

// "<number>[unit]" scaled by the matching unit (a bare number by `bare`) into *out.
template <size_t N>
bool parse_scaled(const char* s, const Unit (&units)[N], uint64_t bare, const char* result_unit,
                  const char* unit_list, uint64_t* out, std::string* why) {
  if (!s || !*s) {
    if (why) *why = "empty";
    return false;
  }
  uint64_t whole, frac, scale;
  const char* suffix;
  if (!parse_decimal(s, &whole, &frac, &scale, &suffix, why)) return false;
  uint64_t per = *suffix ? 0 : bare;
  for (const Unit& u : units) {
    if (std::strcmp(suffix, u.name) == 0) per = u.scale;
  }
  if (per == 0) {
    if (why) *why = std::string("unknown unit '") + suffix + "' (" + unit_list + ")";
    return false;
  }
  return scale_decimal(whole, frac, scale, per, result_unit, out, why);
}

}  // namespace detail

// Parses a size (grammar above) into bytes. False, with the reason in *why when given, otherwise.
inline bool parse_size(const char* s, uint64_t* out, std::string* why = nullptr) {
  static constexpr detail::Unit kUnits[] = {
      {"B", 1},          {"K", 1ull << 10}, {"k", 1ull << 10}, {"KiB", 1ull << 10}, {"M", 1ull << 20},
      {"m", 1ull << 20}, {"MiB", 1ull << 20}, {"G", 1ull << 30}, {"g", 1ull << 30}, {"GiB", 1ull << 30},
      {"T", 1ull << 40}, {"t", 1ull << 40}, {"TiB", 1ull << 40}};
  return detail::parse_scaled(s, kUnits, 1, "bytes", "B, K, KiB, M, MiB, G, GiB, T, TiB", out, why);
}

// Formats a byte count exactly, in the largest binary unit that divides it ("64KiB", "1000B").
inline std::string format_size(uint64_t n) {
  static const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (u < 4 && n >= 1024 && n % 1024 == 0) {
    n /= 1024;
    ++u;
  }
  return std::to_string(n) + kUnits[u];
}

// Formats a byte count for people, in binary units with two decimals ("512 B", "1.50 MiB"): the one
// such formatter of the plugin's logs and the tool's reports.
inline std::string human_size(double n) {
  static const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (u < 4 && n >= 1024) {
    n /= 1024;
    ++u;
  }
  char buf[48];
  if (u == 0)
    std::snprintf(buf, sizeof buf, "%.0f B", n);
  else
    std::snprintf(buf, sizeof buf, "%.2f %s", n, kUnits[u]);
  return buf;
}

// Microseconds per unit, for parse_duration's bare numbers.
constexpr uint64_t kMicroseconds = 1, kMilliseconds = 1000, kSeconds = 1000000;

// Parses a duration (grammar above) into `unit`s (kMilliseconds: "1.5s" -> 1500, "250" -> 250). False,
// with the reason in *why, when it is malformed, overflows or is not a whole number of `unit`s.
inline bool parse_duration(const char* s, uint64_t unit, uint64_t* out, std::string* why = nullptr) {
  static constexpr detail::Unit kUnits[] = {
      {"us", 1}, {"ms", 1000}, {"s", 1000000}, {"m", 60000000}, {"h", 3600000000ull}};
  uint64_t us;
  if (!detail::parse_scaled(s, kUnits, unit, "microseconds", "us, ms, s, m, h", &us, why)) return false;
  if (us % unit != 0) {
    if (why) *why = unit == kMilliseconds ? "not a whole number of milliseconds" : "not a whole number of units";
    return false;
  }
  *out = us / unit;
  return true;
}

}  // namespace units
}  // namespace zipccl
