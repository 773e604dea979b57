#include "tensor_file.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <utility>

namespace zipccl {
namespace tools {

using codec::ElemType;

namespace {

// Values of the two header languages we read: a Python literal (.npy) and JSON (.safetensors).
struct Literal {
  enum Kind { kNull, kBool, kInt, kFloat, kString, kList, kDict } kind = kNull;
  bool b = false;
  bool negative = false;  // kInt: the value is -u
  uint64_t u = 0;         // kInt: magnitude
  std::string s;
  std::vector<Literal> items;
  std::vector<std::pair<std::string, Literal>> dict;

  const Literal* find(const std::string& key) const {
    for (const auto& kv : dict) {
      if (kv.first == key) return &kv.second;
    }
    return nullptr;
  }
};

constexpr int kMaxDepth = 32;

// A recursive-descent reader over [p, end), shared by both syntaxes; `python` picks the dialect.
class LiteralParser {
 public:
  LiteralParser(const char* p, const char* end, bool python) : p_(p), end_(end), python_(python) {}

  bool parse(Literal* out, std::string* error) {
    if (!value(out, 0)) {
      *error = error_.empty() ? "syntax error" : error_;
      return false;
    }
    skip_space();
    if (p_ != end_) {
      *error = "unexpected text after the header value";
      return false;
    }
    return true;
  }

 private:
  bool fail(const char* what) {
    if (error_.empty()) error_ = what;
    return false;
  }
  void skip_space() {
    while (p_ != end_ && (*p_ == ' ' || *p_ == '\t' || *p_ == '\n' || *p_ == '\r')) ++p_;
  }
  bool literal_word(const char* w) {
    size_t n = std::strlen(w);
    if (static_cast<size_t>(end_ - p_) < n || std::memcmp(p_, w, n) != 0) return false;
    p_ += n;
    return true;
  }

  bool value(Literal* v, int depth) {
    if (depth > kMaxDepth) return fail("header nested too deeply");
    skip_space();
    if (p_ == end_) return fail("header ends early");
    char c = *p_;
    if (c == '{') return dict(v, depth);
    if (c == '[') return sequence(v, depth, ']');
    if (python_ && c == '(') return sequence(v, depth, ')');
    if (c == '"' || (python_ && c == '\'')) {
      v->kind = Literal::kString;
      return string(&v->s);
    }
    if (c == '-' || (c >= '0' && c <= '9')) return number(v);
    const char* t = python_ ? "True" : "true";
    const char* f = python_ ? "False" : "false";
    const char* n = python_ ? "None" : "null";
    if (literal_word(t)) {
      v->kind = Literal::kBool;
      v->b = true;
      return true;
    }
    if (literal_word(f)) {
      v->kind = Literal::kBool;
      return true;
    }
    if (literal_word(n)) return true;
    return fail("unexpected character in header");
  }

  bool dict(Literal* v, int depth) {
    v->kind = Literal::kDict;
    ++p_;
    skip_space();
    if (p_ != end_ && *p_ == '}') return ++p_, true;
    for (;;) {
      skip_space();
      if (p_ == end_ || !(*p_ == '"' || (python_ && *p_ == '\''))) return fail("expected a string key");
      std::string key;
      if (!string(&key)) return false;
      skip_space();
      if (p_ == end_ || *p_ != ':') return fail("expected ':' after a key");
      ++p_;
      Literal item;
      if (!value(&item, depth + 1)) return false;
      for (const auto& kv : v->dict) {
        if (kv.first == key) return fail("duplicate key in header");
      }
      v->dict.emplace_back(std::move(key), std::move(item));
      skip_space();
      if (p_ == end_) return fail("header ends inside a dictionary");
      if (*p_ == '}') return ++p_, true;
      if (*p_ != ',') return fail("expected ',' or '}' in a dictionary");
      ++p_;
      skip_space();
      if (python_ && p_ != end_ && *p_ == '}') return ++p_, true;  // Python allows a trailing comma
    }
  }

  bool sequence(Literal* v, int depth, char close) {
    v->kind = Literal::kList;
    ++p_;
    skip_space();
    if (p_ != end_ && *p_ == close) return ++p_, true;
    for (;;) {
      Literal item;
      if (!value(&item, depth + 1)) return false;
      v->items.push_back(std::move(item));
      skip_space();
      if (p_ == end_) return fail("header ends inside a list");
      if (*p_ == close) return ++p_, true;
      if (*p_ != ',') return fail("expected ',' in a list");
      ++p_;
      skip_space();
      if (python_ && p_ != end_ && *p_ == close) return ++p_, true;
    }
  }

  static void append_utf8(std::string* s, uint32_t cp) {
    if (cp < 0x80) {
      s->push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
      s->push_back(static_cast<char>(0xC0 | (cp >> 6)));
      s->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else {
      s->push_back(static_cast<char>(0xE0 | (cp >> 12)));
      s->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      s->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
  }

  bool string(std::string* out) {
    const char quote = *p_++;
    while (p_ != end_ && *p_ != quote) {
      char c = *p_++;
      if (c != '\\') {
        out->push_back(c);
        continue;
      }
      if (p_ == end_) break;
      char e = *p_++;
      switch (e) {
        case 'n':
          out->push_back('\n');
          break;
        case 't':
          out->push_back('\t');
          break;
        case 'r':
          out->push_back('\r');
          break;
        case 'b':
          out->push_back('\b');
          break;
        case 'f':
          out->push_back('\f');
          break;
        case 'u': {
          // Surrogate pairs are kept as two code points: names only need to round-trip for display.
          if (end_ - p_ < 4) return fail("bad \\u escape in header");
          uint32_t cp = 0;
          for (int i = 0; i < 4; ++i) {
            char h = *p_++;
            cp <<= 4;
            if (h >= '0' && h <= '9')
              cp |= h - '0';
            else if (h >= 'a' && h <= 'f')
              cp |= h - 'a' + 10;
            else if (h >= 'A' && h <= 'F')
              cp |= h - 'A' + 10;
            else
              return fail("bad \\u escape in header");
          }
          append_utf8(out, cp);
          break;
        }
        default:
          out->push_back(e);  // \" \\ \/ \'
      }
    }
    if (p_ == end_) return fail("header ends inside a string");
    ++p_;
    return true;
  }

  bool number(Literal* v) {
    bool neg = false;
    if (*p_ == '-') neg = true, ++p_;
    if (p_ == end_ || *p_ < '0' || *p_ > '9') return fail("bad number in header");
    uint64_t u = 0;
    bool overflow = false;
    while (p_ != end_ && *p_ >= '0' && *p_ <= '9') {
      uint64_t d = static_cast<uint64_t>(*p_++ - '0');
      if (u > (UINT64_MAX - d) / 10) overflow = true;
      u = u * 10 + d;
    }
    bool is_float = false;
    while (p_ != end_ && (*p_ == '.' || *p_ == 'e' || *p_ == 'E' || *p_ == '+' || *p_ == '-' ||
                          (*p_ >= '0' && *p_ <= '9'))) {
      is_float = true;
      ++p_;
    }
    if (python_ && p_ != end_ && (*p_ == 'L' || *p_ == 'l')) ++p_;  // Python 2 long in old .npy files
    if (is_float || overflow) {
      v->kind = Literal::kFloat;  // only shapes and offsets are read, and those must be integers
      return true;
    }
    v->kind = Literal::kInt;
    v->u = u;
    v->negative = neg && u != 0;
    return true;
  }

  const char* p_;
  const char* end_;
  bool python_;
  std::string error_;
};

bool read_shape(const Literal& v, std::vector<uint64_t>* shape, uint64_t* count, std::string* error) {
  if (v.kind != Literal::kList) return *error = "shape is not a list", false;
  uint64_t n = 1;
  bool zero = false;
  for (const Literal& d : v.items) {
    if (d.kind != Literal::kInt || d.negative) return *error = "shape holds a non-integer", false;
    shape->push_back(d.u);
    if (d.u == 0) zero = true;
    // Overflow only matters while the product can still end up non-zero.
    if (!zero && n != 0 && d.u > UINT64_MAX / n) return *error = "shape too large", false;
    n *= d.u;
  }
  *count = zero ? 0 : n;
  return true;
}

uint64_t read_le(const uint8_t* p, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// numpy descr -> element size and type. Returns false with a message for what we cannot read.
bool npy_dtype(const std::string& d, size_t* itemsize, ElemType* type, std::string* error) {
  *type = ElemType::kNone;
  if (d == "bfloat16") {  // some writers spell out the ml_dtypes name
    *itemsize = 2;
    *type = ElemType::kBf16;
    return true;
  }
  if (d.size() < 3 || !std::strchr("<>|=", d[0])) return *error = "unsupported dtype '" + d + "'", false;
  char kind = d[1];
  size_t size = 0;
  for (size_t i = 2; i < d.size(); ++i) {
    if (d[i] < '0' || d[i] > '9' || size > 1u << 20) return *error = "unsupported dtype '" + d + "'", false;
    size = size * 10 + static_cast<size_t>(d[i] - '0');
  }
  if (size == 0 || !std::strchr("fiubcV", kind)) return *error = "unsupported dtype '" + d + "'", false;
  if (d[0] == '>' && size > 1 && kind != 'V') {
    return *error = "big-endian dtype '" + d + "' is not supported (convert with astype('<...'))", false;
  }
  *itemsize = size;
  if (kind == 'f' && size == 2) *type = ElemType::kFp16;
  if (kind == 'f' && size == 4) *type = ElemType::kFp32;
  if (kind == 'V' && size == 2) *type = ElemType::kBf16;  // ml_dtypes.bfloat16's dtype.str is '<V2'
  return true;
}

size_t safetensors_dtype_size(const std::string& d, ElemType* type) {
  *type = ElemType::kNone;
  if (d == "BF16") return *type = ElemType::kBf16, 2;
  if (d == "F16") return *type = ElemType::kFp16, 2;
  if (d == "F32") return *type = ElemType::kFp32, 4;
  if (d == "F64" || d == "I64" || d == "U64") return 8;
  if (d == "I32" || d == "U32") return 4;
  if (d == "I16" || d == "U16") return 2;
  if (d == "I8" || d == "U8" || d == "BOOL" || d == "F8_E4M3" || d == "F8_E5M2") return 1;
  return 0;  // a dtype newer than this reader: parsed, size not checked
}

std::string base_name(const std::string& path) {
  size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

bool ends_with(const std::string& s, const char* suffix) {
  size_t n = std::strlen(suffix);
  return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}

}  // namespace

bool parse_npy(const uint8_t* file, size_t size, TensorView* out, std::string* error) {
  static const uint8_t kMagic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};
  if (size < 10 || std::memcmp(file, kMagic, 6) != 0) return *error = "not a .npy file (bad magic)", false;
  const int major = file[6];
  if (major < 1 || major > 3) return *error = "unsupported .npy version " + std::to_string(major), false;
  const size_t len_bytes = major == 1 ? 2 : 4;
  if (size < 8 + len_bytes) return *error = ".npy header truncated", false;
  const uint64_t header_len = read_le(file + 8, static_cast<int>(len_bytes));
  const size_t header_start = 8 + len_bytes;
  if (header_len > size - header_start) return *error = ".npy header longer than the file", false;

  const char* h = reinterpret_cast<const char*>(file + header_start);
  Literal dict;
  std::string perr;
  if (!LiteralParser(h, h + header_len, true).parse(&dict, &perr)) {
    return *error = ".npy header: " + perr, false;
  }
  if (dict.kind != Literal::kDict) return *error = ".npy header is not a dictionary", false;
  const Literal* descr = dict.find("descr");
  const Literal* fortran = dict.find("fortran_order");
  const Literal* shape = dict.find("shape");
  if (!descr || !fortran || !shape) return *error = ".npy header lacks descr, fortran_order or shape", false;
  if (descr->kind == Literal::kList) return *error = "structured .npy dtypes are not supported", false;
  if (descr->kind != Literal::kString) return *error = ".npy descr is not a string", false;
  if (fortran->kind != Literal::kBool) return *error = ".npy fortran_order is not a bool", false;

  TensorView t;
  size_t itemsize = 0;
  if (!npy_dtype(descr->s, &itemsize, &t.type, error)) return false;
  uint64_t count = 0;
  if (!read_shape(*shape, &t.shape, &count, error)) return *error = ".npy " + *error, false;
  const size_t data_start = header_start + static_cast<size_t>(header_len);
  const size_t avail = size - data_start;
  if (count > avail / itemsize || count * itemsize != avail) {
    return *error = ".npy data is " + std::to_string(avail) + " bytes, the header's shape needs " +
                    (count > avail / itemsize ? std::string("more") : std::to_string(count * itemsize)),
           false;
  }
  // Fortran order only permutes the elements; the byte statistics the bench reports are the same.
  t.dtype = descr->s;
  t.data = file + data_start;
  t.size = avail;
  *out = std::move(t);
  return true;
}

bool parse_safetensors(const uint8_t* file, size_t size, std::vector<TensorView>* out, std::string* error) {
  constexpr uint64_t kMaxHeader = 100u << 20;  // the format's own limit
  if (size < 8) return *error = "not a .safetensors file (shorter than 8 bytes)", false;
  const uint64_t header_len = read_le(file, 8);
  if (header_len > size - 8 || header_len > kMaxHeader) {
    return *error = ".safetensors header length " + std::to_string(header_len) + " exceeds the file", false;
  }
  const char* h = reinterpret_cast<const char*>(file + 8);
  if (header_len < 2 || h[0] != '{') return *error = ".safetensors header is not a JSON object", false;
  Literal root;
  std::string perr;
  if (!LiteralParser(h, h + header_len, false).parse(&root, &perr)) {
    return *error = ".safetensors header: " + perr, false;
  }
  const uint8_t* data = file + 8 + header_len;
  const uint64_t data_size = size - 8 - header_len;

  std::vector<std::pair<uint64_t, TensorView>> tensors;
  for (const auto& kv : root.dict) {
    if (kv.first == "__metadata__") continue;
    const std::string where = ".safetensors tensor '" + kv.first + "': ";
    const Literal& v = kv.second;
    const Literal* dtype = v.kind == Literal::kDict ? v.find("dtype") : nullptr;
    const Literal* shape = v.kind == Literal::kDict ? v.find("shape") : nullptr;
    const Literal* offsets = v.kind == Literal::kDict ? v.find("data_offsets") : nullptr;
    if (!dtype || !shape || !offsets || dtype->kind != Literal::kString) {
      return *error = where + "needs dtype, shape and data_offsets", false;
    }
    if (offsets->kind != Literal::kList || offsets->items.size() != 2) {
      return *error = where + "data_offsets is not [begin, end]", false;
    }
    const Literal& b = offsets->items[0];
    const Literal& e = offsets->items[1];
    if (b.kind != Literal::kInt || e.kind != Literal::kInt || b.negative || e.negative || b.u > e.u ||
        e.u > data_size) {
      return *error = where + "data_offsets outside the data section", false;
    }
    TensorView t;
    uint64_t count = 0;
    if (!read_shape(*shape, &t.shape, &count, error)) return *error = where + *error, false;
    size_t dsize = safetensors_dtype_size(dtype->s, &t.type);
    if (dsize != 0 && (count > UINT64_MAX / dsize || count * dsize != e.u - b.u)) {
      return *error = where + "size " + std::to_string(e.u - b.u) + " disagrees with shape and dtype", false;
    }
    t.name = kv.first;
    t.dtype = dtype->s;
    t.data = data + b.u;
    t.size = static_cast<size_t>(e.u - b.u);
    tensors.emplace_back(b.u, std::move(t));
  }
  std::stable_sort(tensors.begin(), tensors.end(),
                   [](const auto& x, const auto& y) { return x.first < y.first; });
  out->clear();
  uint64_t prev_end = 0;
  for (auto& bt : tensors) {
    if (bt.first < prev_end)
      return *error = ".safetensors tensor '" + bt.second.name + "' overlaps another", false;
    prev_end = bt.first + bt.second.size;
    out->push_back(std::move(bt.second));
  }
  return true;
}

TensorFormat format_from_path(const std::string& path) {
  if (ends_with(path, ".npy")) return TensorFormat::kNpy;
  if (ends_with(path, ".safetensors")) return TensorFormat::kSafetensors;
  return TensorFormat::kRaw;
}

bool read_whole_file(const std::string& path, std::vector<uint8_t>* out, std::string* error) {
  FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return *error = path + ": " + std::strerror(errno), false;
  // The size is a hint (the file may change under us): read until fread comes back short.
  struct stat st;
  size_t step = ::fstat(fileno(f), &st) == 0 && S_ISREG(st.st_mode) ? static_cast<size_t>(st.st_size) + 1 : 0;
  step = std::max(step, size_t{1} << 16);
  out->clear();
  size_t have = 0;
  for (;;) {
    out->resize(have + step);
    const size_t got = std::fread(out->data() + have, 1, step, f);
    have += got;
    if (got < step) break;
    step = std::max(step, size_t{16} << 20);
  }
  const bool failed = std::ferror(f);
  const int err = errno;
  std::fclose(f);
  out->resize(have);
  if (failed) return *error = path + ": read error: " + std::strerror(err), false;
  return true;
}

bool load_tensor_file(const std::string& path, TensorFile* out, std::string* error) {
  TensorFile tf;
  tf.format = format_from_path(path);
  if (!read_whole_file(path, &tf.contents, error)) return false;
  const uint8_t* p = tf.contents.data();
  const size_t n = tf.contents.size();
  bool ok = true;
  if (tf.format == TensorFormat::kNpy) {
    TensorView t;
    ok = parse_npy(p, n, &t, error);
    t.name = base_name(path);
    tf.tensors.push_back(std::move(t));
  } else if (tf.format == TensorFormat::kSafetensors) {
    ok = parse_safetensors(p, n, &tf.tensors, error);
  } else {
    TensorView t;
    t.name = base_name(path);
    t.dtype = "raw";
    t.shape = {n};
    t.data = p;
    t.size = n;
    tf.tensors.push_back(std::move(t));
  }
  if (!ok) return *error = path + ": " + *error, false;
  *out = std::move(tf);
  return true;
}

}  // namespace tools
}  // namespace zipccl
