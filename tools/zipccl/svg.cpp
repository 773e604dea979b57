#include "svg.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>

namespace zipccl {
namespace tools {
namespace {

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  std::string s = buf;
  if (s.size() > 2 && s.compare(s.size() - 2, 2, ".0") == 0) s.resize(s.size() - 2);
  return s;
}

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

// Page geometry (px).
constexpr double kWidth = 1200;
constexpr double kMargin = 24;
constexpr double kRowH = 40;
constexpr double kTop = 118;        // first row
constexpr double kNameX = kMargin;  // tensor column
constexpr double kHistX = 360;      // exponent histogram column
constexpr double kHistW = 460;
constexpr double kRatioX = 870;  // ratio column
constexpr double kRatioW = 230;
constexpr double kBarH = 30;

const char* type_color(codec::ElemType t) {
  switch (t) {
    case codec::ElemType::kBf16:
      return "#3b6fb6";
    case codec::ElemType::kFp16:
      return "#2e9c6a";
    case codec::ElemType::kFp32:
      return "#c46a21";
    default:
      return "#888888";
  }
}

}  // namespace

Svg::Svg(double width, double height) : width_(width), height_(height) {}

std::string Svg::escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    switch (c) {
      case '&':
        o += "&amp;";
        break;
      case '<':
        o += "&lt;";
        break;
      case '>':
        o += "&gt;";
        break;
      case '"':
        o += "&quot;";
        break;
      default:
        // Control characters are not allowed in XML 1.0 text.
        o += (static_cast<unsigned char>(c) < 0x20 && c != '\t' && c != '\n') ? '?' : c;
    }
  }
  return o;
}

void Svg::rect(double x, double y, double w, double h, const std::string& attrs) {
  body_ += "<rect x=\"" + num(x) + "\" y=\"" + num(y) + "\" width=\"" + num(std::max(w, 0.0)) +
           "\" height=\"" + num(std::max(h, 0.0)) + "\" " + attrs + "/>\n";
}

void Svg::line(double x1, double y1, double x2, double y2, const std::string& attrs) {
  body_ += "<line x1=\"" + num(x1) + "\" y1=\"" + num(y1) + "\" x2=\"" + num(x2) + "\" y2=\"" + num(y2) +
           "\" " + attrs + "/>\n";
}

void Svg::text(double x, double y, const std::string& content, const std::string& attrs) {
  body_ += "<text x=\"" + num(x) + "\" y=\"" + num(y) + "\" " + attrs + ">" + escape(content) + "</text>\n";
}

void Svg::begin_group(const std::string& title) {
  body_ += "<g><title>" + escape(title) + "</title>\n";
}

void Svg::end_group() {
  body_ += "</g>\n";
}

std::string Svg::finish() {
  return "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg xmlns=\"http://www.w3.org/2000/svg\" "
         "version=\"1.1\" "
         "width=\"" +
         num(width_) + "\" height=\"" + num(height_) + "\" viewBox=\"0 0 " + num(width_) + " " +
         num(height_) +
         "\" font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\">\n<rect width=\"100%\" "
         "height=\"100%\" "
         "fill=\"white\"/>\n" +
         body_ + "</svg>\n";
}

namespace {

// The rows: the largest tensors, drawn in file order.
std::vector<size_t> pick_rows(const InspectReport& r, size_t max_rows) {
  std::vector<size_t> order(r.tensors.size());
  std::iota(order.begin(), order.end(), 0);
  if (order.size() > max_rows) {
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return r.tensors[a].bytes > r.tensors[b].bytes; });
    order.resize(max_rows);
    std::sort(order.begin(), order.end());
  }
  return order;
}

// The scales every row shares: one exponent axis (unbiased exponents of normal numbers, plus a
// "zero" slot) and one ratio axis.
struct Axes {
  int lo = 0, hi = 0;
  bool any = false;  // some row has normal numbers
  int slots = 1;     // slot 0: zeros and subnormals
  double slot_w = kHistW;
  double max_ratio = 1.0;
  double rx = 0;  // px per unit of ratio
};

Axes make_axes(const InspectReport& r, const std::vector<size_t>& order) {
  Axes a;
  for (size_t i : order) {
    const ExponentHistogram& h = r.tensors[i].exponents;
    int f_lo, f_hi;
    if (h.bits && h.normal_range(&f_lo, &f_hi)) {
      a.lo = a.any ? std::min(a.lo, f_lo - h.bias) : f_lo - h.bias;
      a.hi = a.any ? std::max(a.hi, f_hi - h.bias) : f_hi - h.bias;
      a.any = true;
    }
  }
  a.slots = a.any ? a.hi - a.lo + 2 : 1;
  a.slot_w = kHistW / a.slots;
  for (size_t i : order) {
    const TensorReport& t = r.tensors[i];
    a.max_ratio = std::max(a.max_ratio, t.ratio());
    if (!std::isinf(t.bound_ratio())) a.max_ratio = std::max(a.max_ratio, t.bound_ratio());
  }
  a.max_ratio = std::ceil(a.max_ratio * 1.1 * 4) / 4;  // room for the labels; quarter steps
  a.rx = kRatioW / a.max_ratio;
  return a;
}

constexpr const char* kNote = "font-size=\"11\" fill=\"#666\"";

// Title, summary and column headings.
void draw_heading(Svg& s, const InspectReport& r) {
  const double total_ratio =
      r.total_actual ? static_cast<double>(r.total_bytes) / static_cast<double>(r.total_actual) : 1.0;
  const double bound_ratio =
      r.total_predicted ? static_cast<double>(r.total_bytes) / static_cast<double>(r.total_predicted) : 1.0;
  s.text(kMargin, 34, "zipccl inspect: " + r.file, "font-size=\"20\" font-weight=\"bold\" fill=\"#222\"");
  s.text(kMargin, 60,
         std::to_string(r.tensors.size()) + " tensors, " + human_bytes(static_cast<double>(r.total_bytes)) +
             " -> " + human_bytes(static_cast<double>(r.total_actual)) + " with zipccl (" +
             fmt("%.3fx", total_ratio) + ", " +
             fmt("%.1f%%", r.total_bytes ? 100.0 * (1.0 - 1.0 / total_ratio) : 0.0) +
             " less on the wire); order-0 entropy bound " + fmt("%.3fx", bound_ratio),
         "font-size=\"14\" fill=\"#444\"");

  const std::string head = "font-size=\"13\" font-weight=\"bold\" fill=\"#333\"";
  s.text(kNameX, 92, "tensor", head);
  s.text(kNameX, 106, "type, shape, size", kNote);
  s.text(kHistX, 92, "exponent histogram", head);
  s.text(kHistX, 106, "share of elements per power of two (tallest bar = the row's most common exponent)",
         kNote);
  s.text(kRatioX, 92, "compression ratio", head);
  s.text(kRatioX, 106, "bar: zipccl  |  black tick: entropy bound", kNote);
}

// Row stripes and the ratio grid, drawn before the rows' marks so that those lie on top.
void draw_grid(Svg& s, const Axes& a, size_t rows, double axis_y) {
  for (size_t row = 0; row < rows; row += 2) s.rect(0, kTop + kRowH * row, kWidth, kRowH, "fill=\"#f4f6f9\"");
  for (double v = 0; v <= a.max_ratio + 1e-9; v += a.max_ratio > 4 ? 1.0 : 0.5) {
    const double x = kRatioX + v * a.rx;
    s.line(x, kTop, x, axis_y, v == 1.0 ? "stroke=\"#b33\" stroke-dasharray=\"4 3\"" : "stroke=\"#e2e5ea\"");
    s.text(x, axis_y + 14, fmt("%g", v), "font-size=\"11\" fill=\"#444\" text-anchor=\"middle\"");
  }
  s.text(kRatioX, axis_y + 32, "original size / compressed size (red dashes: 1.0, no gain)", kNote);
}

void draw_histogram(Svg& s, const TensorReport& t, const Axes& a, double y) {
  const double base = y + 5 + kBarH;
  s.rect(kHistX, y + 5, kHistW, kBarH, "fill=\"none\" stroke=\"#d0d4da\"");
  const ExponentHistogram& h = t.exponents;
  if (!h.bits || !h.total) {
    s.text(kHistX + 8, y + 25, "no floating-point exponents (coded as bytes)", kNote);
    return;
  }
  uint64_t top = h.zero_or_subnormal();
  for (int f = 1; f < h.max_field(); ++f) top = std::max(top, h.counts[f]);
  auto bar = [&](int slot, uint64_t c, const char* color) {
    if (!c) return;
    const double bh = std::max(1.5, kBarH * static_cast<double>(c) / static_cast<double>(top));
    s.rect(kHistX + a.slot_w * slot + 0.5, base - bh, std::max(a.slot_w - 1.0, 1.0), bh,
           std::string("fill=\"") + color + "\"");
  };
  bar(0, h.zero_or_subnormal(), "#999999");
  for (int f = 1; f < h.max_field(); ++f) bar(f - h.bias - a.lo + 1, h.counts[f], type_color(t.type));
}

// One tensor: its name and shape, its exponent histogram, its ratio bar with the bound's tick.
void draw_row(Svg& s, const TensorReport& t, const Axes& a, double y) {
  std::string shape = "[";
  for (size_t d = 0; d < t.shape.size(); ++d) shape += (d ? "," : "") + std::to_string(t.shape[d]);
  shape += "]";
  s.begin_group(t.name + ": " + codec::elem_type_name(t.type) + " " + shape + ", " + std::to_string(t.bytes) +
                " bytes -> " + std::to_string(t.actual) + " bytes (" + fmt("%.3fx", t.ratio()) + ")");
  std::string name = t.name.size() > 40 ? t.name.substr(0, 39) + "~" : t.name;
  s.text(kNameX, y + 17, name, "font-size=\"13\" font-family=\"DejaVu Sans Mono, monospace\" fill=\"#111\"");
  s.text(kNameX, y + 32,
         std::string(codec::elem_type_name(t.type)) + "  " + shape + "  " + human_bytes(static_cast<double>(t.bytes)),
         kNote);
  draw_histogram(s, t, a, y);

  const double ratio = std::min(t.ratio(), a.max_ratio);
  s.rect(kRatioX, y + 10, ratio * a.rx, 20, std::string("fill=\"") + type_color(t.type) + "\" fill-opacity=\"0.85\"");
  if (!std::isinf(t.bound_ratio()))
    s.line(kRatioX + t.bound_ratio() * a.rx, y + 6, kRatioX + t.bound_ratio() * a.rx, y + 34,
           "stroke=\"#111\" stroke-width=\"2\"");
  s.text(kRatioX + kRatioW + 8, y + 25, fmt("%.2fx", t.ratio()), "font-size=\"13\" fill=\"#111\"");
  s.end_group();
}

// The exponent axis under the rows.
void draw_exponent_axis(Svg& s, const Axes& a, double axis_y) {
  if (!a.any) return;
  const int step = a.slots > 40 ? 10 : a.slots > 16 ? 5 : a.slots > 8 ? 2 : 1;
  s.text(kHistX + a.slot_w * 0.5, axis_y + 14, "z", "font-size=\"11\" fill=\"#444\" text-anchor=\"middle\"");
  for (int e = a.lo; e <= a.hi; ++e) {
    if (e % step != 0) continue;
    const double x = kHistX + a.slot_w * (e - a.lo + 1.5);
    s.line(x, axis_y - 4, x, axis_y, "stroke=\"#666\"");
    s.text(x, axis_y + 14, std::to_string(e), "font-size=\"11\" fill=\"#444\" text-anchor=\"middle\"");
  }
  s.text(kHistX, axis_y + 32, "exponent e of 2^e (slot z, grey: zeros and subnormals)", kNote);
}

// Legend (the float types drawn) and footnote.
void draw_legend(Svg& s, const InspectReport& r, const std::vector<size_t>& order, double axis_y) {
  double lx = kMargin;
  const double ly = axis_y + 58;
  for (codec::ElemType ty : {codec::ElemType::kBf16, codec::ElemType::kFp16, codec::ElemType::kFp32}) {
    if (std::none_of(order.begin(), order.end(), [&](size_t i) { return r.tensors[i].type == ty; })) continue;
    s.rect(lx, ly - 10, 12, 12, std::string("fill=\"") + type_color(ty) + "\"");
    s.text(lx + 16, ly, codec::elem_type_name(ty), "font-size=\"12\" fill=\"#333\"");
    lx += 70;
  }
  if (order.size() < r.tensors.size())
    s.text(lx + 20, ly,
           "showing the " + std::to_string(order.size()) + " largest of " + std::to_string(r.tensors.size()) +
               " tensors; the table lists all",
           "font-size=\"12\" fill=\"#333\"");
}

}  // namespace

std::string inspect_svg(const InspectReport& r, size_t max_rows) {
  const std::vector<size_t> order = pick_rows(r, max_rows);
  const Axes axes = make_axes(r, order);
  const double rows_h = kRowH * static_cast<double>(order.size());
  const double axis_y = kTop + rows_h + 4;
  Svg s(kWidth, kTop + rows_h + 96);
  draw_heading(s, r);
  draw_grid(s, axes, order.size(), axis_y);
  for (size_t row = 0; row < order.size(); ++row)
    draw_row(s, r.tensors[order[row]], axes, kTop + kRowH * static_cast<double>(row));
  draw_exponent_axis(s, axes, axis_y);
  draw_legend(s, r, order, axis_y);
  return s.finish();
}

}  // namespace tools
}  // namespace zipccl
