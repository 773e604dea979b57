// Plain SVG, written by hand: a tiny element writer and the picture `zipccl inspect --svg` draws
// (per tensor: the exponent histogram and the compression ratio beside its entropy bound).
// No plotting dependency; the output is self-contained SVG 1.1 text.
#pragma once

#include <string>

#include "inspect.h"

namespace zipccl {
namespace tools {

class Svg {
 public:
  Svg(double width, double height);
  // Attributes are passed pre-formatted ("fill=\"#333\" stroke-width=\"1\""); text is escaped.
  void rect(double x, double y, double w, double h, const std::string& attrs);
  void line(double x1, double y1, double x2, double y2, const std::string& attrs);
  void text(double x, double y, const std::string& content, const std::string& attrs);
  // Wraps what follows in <title> for hover text (closed by end_group).
  void begin_group(const std::string& title);
  void end_group();
  std::string finish();  // the whole document

  static std::string escape(const std::string& s);

 private:
  std::string body_;
  double width_, height_;
};

// The picture of a report. At most `max_rows` tensors are drawn (the largest; the rest are counted
// in a footnote).
std::string inspect_svg(const InspectReport& r, size_t max_rows = 64);

}  // namespace tools
}  // namespace zipccl
