// NumPy .npy reader and writer. Format: https://numpy.org/doc/stable/reference/generated/numpy.lib.format.html
//   "\x93NUMPY" major minor, header length (uint16 LE for 1.0, uint32 LE for 2.0/3.0), then a Python dict literal
//   {'descr': '<f4', 'fortran_order': False, 'shape': (8, 64), } padded with spaces and ended by '\n', then the
//   raw elements.
#include "tpusim/runtime/npy.h"

#include <algorithm>
#include <bit>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string_view>

#include "tpusim/isa/numerics.h"

namespace tpusim::runtime {

static_assert(std::endian::native == std::endian::little, "the .npy code assumes a little-endian host");

namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicLen = 6;

[[noreturn]] void fail(const std::string& path, const std::string& msg) { throw Error(path + ": " + msg); }

std::string shape_str(const std::vector<int64_t>& shape) {  // Python's tuple syntax: (), (5,), (2, 3)
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  if (shape.size() == 1) s += ",";
  return s + ")";
}

// Elements and bytes of a shape, or false when a dimension is negative or the product overflows.
bool shape_size(const std::vector<int64_t>& shape, int64_t elem_size, int64_t* elements, int64_t* bytes) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0 || __builtin_mul_overflow(n, d, &n)) return false;
  }
  int64_t b;
  if (__builtin_mul_overflow(n, elem_size, &b)) return false;
  *elements = n;
  *bytes = b;
  return true;
}

// ---- the header: a small parser for the Python literals numpy writes ----

struct Value {
  enum Kind { Str, Bool, Int, None, Tuple, List } kind = None;
  std::string str;
  bool b = false;
  int64_t i = 0;
  std::vector<Value> items;
};

class HeaderParser {
 public:
  HeaderParser(const std::string& path, std::string_view text) : path_(path), t_(text) {}

  std::map<std::string, Value> dict() {
    ws();
    expect('{');
    std::map<std::string, Value> out;
    for (;;) {
      ws();
      if (peek() == '}') { ++p_; break; }
      Value key = value(0);
      if (key.kind != Value::Str) error("dictionary key is not a string");
      ws();
      expect(':');
      Value v = value(0);
      if (!out.emplace(key.str, std::move(v)).second) error("key '" + key.str + "' appears twice");
      ws();
      if (peek() == ',') { ++p_; continue; }
      if (peek() == '}') { ++p_; break; }
      error("expected ',' or '}'");
    }
    while (p_ < t_.size() && (t_[p_] == ' ' || t_[p_] == '\n' || t_[p_] == '\r' || t_[p_] == '\t' || t_[p_] == '\0')) ++p_;
    if (p_ != t_.size()) error("unexpected text after the dictionary");
    return out;
  }

 private:
  [[noreturn]] void error(const std::string& what) {
    fail(path_, "malformed .npy header (" + what + " at header offset " + std::to_string(p_) + ")");
  }
  char peek() const { return p_ < t_.size() ? t_[p_] : '\0'; }
  void ws() {
    while (p_ < t_.size() && (t_[p_] == ' ' || t_[p_] == '\t' || t_[p_] == '\n' || t_[p_] == '\r')) ++p_;
  }
  void expect(char c) {
    if (peek() != c) error(std::string("expected '") + c + "'");
    ++p_;
  }
  bool word(std::string_view w) {
    if (t_.substr(p_, w.size()) != w) return false;
    size_t e = p_ + w.size();
    if (e < t_.size() && (std::isalnum(static_cast<unsigned char>(t_[e])) || t_[e] == '_')) return false;
    p_ = e;
    return true;
  }

  Value value(int depth) {
    if (depth > 16) error("nesting too deep");
    ws();
    Value v;
    char c = peek();
    if (c == '\'' || c == '"') {
      ++p_;
      size_t start = p_;
      while (p_ < t_.size() && t_[p_] != c) {
        if (t_[p_] == '\\' || t_[p_] == '\n') error("unsupported character in a string");
        ++p_;
      }
      if (p_ >= t_.size()) error("unterminated string");
      v.kind = Value::Str;
      v.str = std::string(t_.substr(start, p_ - start));
      ++p_;
    } else if (c == '(' || c == '[') {
      char close = c == '(' ? ')' : ']';
      v.kind = c == '(' ? Value::Tuple : Value::List;
      ++p_;
      for (;;) {
        ws();
        if (peek() == close) { ++p_; break; }
        v.items.push_back(value(depth + 1));
        ws();
        if (peek() == ',') { ++p_; continue; }
        if (peek() == close) { ++p_; break; }
        error(std::string("expected ',' or '") + close + "'");
      }
    } else if (c == '-' || c == '+' || std::isdigit(static_cast<unsigned char>(c))) {
      bool neg = c == '-';
      if (c == '-' || c == '+') ++p_;
      if (!std::isdigit(static_cast<unsigned char>(peek()))) error("expected a digit");
      int64_t n = 0;
      while (std::isdigit(static_cast<unsigned char>(peek()))) {
        if (__builtin_mul_overflow(n, int64_t{10}, &n) || __builtin_add_overflow(n, int64_t{t_[p_] - '0'}, &n))
          error("integer too large");
        ++p_;
      }
      if (peek() == 'L' || peek() == 'l') ++p_;  // Python 2's long suffix, in files written long ago
      v.kind = Value::Int;
      v.i = neg ? -n : n;
    } else if (word("True")) {
      v.kind = Value::Bool;
      v.b = true;
    } else if (word("False")) {
      v.kind = Value::Bool;
    } else if (word("None")) {
      v.kind = Value::None;
    } else {
      error(p_ < t_.size() ? "unexpected character" : "unexpected end");
    }
    return v;
  }

  const std::string& path_;
  std::string_view t_;
  size_t p_ = 0;
};

// numpy's name for a dtype description like '<f8', for messages.
std::string numpy_type_name(const std::string& descr) {
  std::string_view d = descr;
  if (!d.empty() && (d[0] == '<' || d[0] == '>' || d[0] == '|' || d[0] == '=')) d.remove_prefix(1);
  if (d.empty()) return "'" + descr + "'";
  char kind = d[0];
  std::string_view digits = d.substr(1);
  int size = 0;
  for (char c : digits) {
    if (!std::isdigit(static_cast<unsigned char>(c)) || size > 100000) return "'" + descr + "'";
    size = size * 10 + (c - '0');
  }
  std::string bits = std::to_string(size * 8);
  switch (kind) {
    case 'f': return "float" + bits;
    case 'i': return "int" + bits;
    case 'u': return "uint" + bits;
    case 'c': return "complex" + bits;
    case 'b': return "bool";
    case 'U': return "str ('" + descr + "')";
    case 'S': return "bytes ('" + descr + "')";
    case 'V': return "void ('" + descr + "')";
    case 'O': return "object";
    default: return "'" + descr + "'";
  }
}

// int64 arrays (what ONNX models take as token ids) are read as int32, each element range-checked: `*wide` is set.
isa::DType dtype_from_descr(const std::string& path, const std::string& descr, bool* wide) {
  *wide = false;
  char order = descr.empty() ? '\0' : descr[0];
  std::string_view rest = descr;
  if (order == '<' || order == '>' || order == '|' || order == '=') rest.remove_prefix(1);
  std::string name = numpy_type_name(descr);
  isa::DType t;
  if (rest == "i1") {
    return isa::DType::I8;  // one byte: byte order does not matter
  } else if (rest == "i4") {
    t = isa::DType::I32;
  } else if (rest == "i8") {
    t = isa::DType::I32;
    *wide = true;
  } else if (rest == "f4") {
    t = isa::DType::F32;
  } else {
    fail(path, "dtype " + name + " is not supported (use float32, int32, int64 or int8)");
  }
  if (order == '>') {
    fail(path, "dtype " + name + " is big-endian ('" + descr + "'), which is not supported (save it little-endian, "
               "e.g. a.astype('<" + std::string(rest) + "'))");
  }
  if (order == '|') fail(path, "malformed dtype '" + descr + "' ('|' is only for one-byte types)");
  return t;
}

}  // namespace

std::string npy_file_name(const std::string& name) {
  static const char* hex = "0123456789ABCDEF";
  std::string out;
  for (size_t i = 0; i < name.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(name[i]);
    const bool alnum = (c >= '0' && c <= '9') || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z');
    if (alnum || c == '_' || c == '-' || (c == '.' && i > 0))
      out += static_cast<char>(c);
    else
      out += std::string("%") + hex[c >> 4] + hex[c & 15];
  }
  if (out.size() > 200) {
    uint64_t h = 14695981039346656037ull;  // FNV-1a, 64 bits
    for (unsigned char c : name) h = (h ^ c) * 1099511628211ull;
    std::string tail = "~";
    for (int i = 15; i >= 0; --i) tail += hex[(h >> (4 * i)) & 15];
    // Cut at a whole %XX escape.
    size_t cut = 160;
    if (out[cut - 1] == '%') cut -= 1;
    else if (out[cut - 2] == '%') cut -= 2;
    out = out.substr(0, cut) + tail;
  }
  return out + ".npy";
}

int64_t HostTensor::elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

HostTensor read_npy(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::file_status st = fs::status(path, ec);
  if (!fs::exists(st)) {
    fail(path, ec && ec != std::errc::no_such_file_or_directory ? "cannot access (" + ec.message() + ")"
                                                               : std::string("no such file"));
  }
  if (fs::is_directory(st)) fail(path, "is a directory, not a .npy file");

  std::ifstream f(path, std::ios::binary);
  if (!f) fail(path, std::string("cannot open for reading (") + std::strerror(errno) + ")");
  f.seekg(0, std::ios::end);
  std::streamoff size = f.tellg();
  f.seekg(0, std::ios::beg);
  if (size < 0 || !f) fail(path, "cannot determine the file's size (not a regular file?)");
  if (size == 0) fail(path, "empty file, not a .npy file");

  auto read_exact = [&](void* dst, std::streamoff n, const char* what) {
    f.read(static_cast<char*>(dst), n);
    if (f.gcount() != n) fail(path, std::string("read error in the ") + what);
  };

  unsigned char pre[12] = {};
  if (size < 8) fail(path, "not a .npy file (only " + std::to_string(size) + " bytes)");
  read_exact(pre, 8, "header");
  if (std::memcmp(pre, kMagic, kMagicLen) != 0) fail(path, "not a .npy file (it does not start with \\x93NUMPY)");
  int major = pre[6], minor = pre[7];
  size_t prefix;
  if (major == 1 && minor == 0) {
    prefix = 10;
  } else if ((major == 2 || major == 3) && minor == 0) {
    prefix = 12;
  } else {
    fail(path, ".npy format version " + std::to_string(major) + "." + std::to_string(minor) +
                   " is not supported (1.0, 2.0 and 3.0 are)");
  }
  if (size < static_cast<std::streamoff>(prefix)) fail(path, "truncated .npy header");
  read_exact(pre + 8, static_cast<std::streamoff>(prefix - 8), "header");
  uint64_t hlen = prefix == 10 ? (uint64_t{pre[8]} | uint64_t{pre[9]} << 8)
                               : (uint64_t{pre[8]} | uint64_t{pre[9]} << 8 | uint64_t{pre[10]} << 16 |
                                  uint64_t{pre[11]} << 24);
  if (static_cast<uint64_t>(size) - prefix < hlen) {
    fail(path, "truncated .npy header (header length " + std::to_string(hlen) + " but only " +
                   std::to_string(static_cast<uint64_t>(size) - prefix) + " bytes follow)");
  }
  std::string header(hlen, '\0');
  read_exact(header.data(), static_cast<std::streamoff>(hlen), "header");

  auto dict = HeaderParser(path, header).dict();
  for (const auto& [key, value] : dict) {
    if (key != "descr" && key != "fortran_order" && key != "shape")
      fail(path, "malformed .npy header (unexpected key '" + key + "')");
  }
  for (const char* key : {"descr", "fortran_order", "shape"}) {
    if (!dict.count(key)) fail(path, std::string("malformed .npy header (no '") + key + "')");
  }
  const Value& descr = dict["descr"];
  if (descr.kind == Value::List) fail(path, "structured dtypes are not supported (use float32, int32 or int8)");
  if (descr.kind != Value::Str) fail(path, "malformed .npy header ('descr' is not a string)");
  const Value& fortran = dict["fortran_order"];
  if (fortran.kind != Value::Bool) fail(path, "malformed .npy header ('fortran_order' is not True or False)");
  const Value& shape = dict["shape"];
  if (shape.kind != Value::Tuple) fail(path, "malformed .npy header ('shape' is not a tuple)");

  HostTensor t;
  bool wide = false;
  t.dtype = dtype_from_descr(path, descr.str, &wide);
  for (const Value& d : shape.items) {
    if (d.kind != Value::Int || d.i < 0)
      fail(path, "malformed .npy header ('shape' must hold non-negative integers)");
    t.shape.push_back(d.i);
  }
  if (fortran.b && t.shape.size() > 1) {
    // A Fortran-ordered array of one dimension (or none) is laid out as in C order, so only these are refused.
    fail(path, "Fortran-ordered arrays are not supported (save np.ascontiguousarray(a) instead)");
  }
  int64_t elements = 0, bytes = 0;
  if (!shape_size(t.shape, wide ? 8 : isa::dtype_size(t.dtype), &elements, &bytes))
    fail(path, "shape " + shape_str(t.shape) + " is too large");
  uint64_t remaining = static_cast<uint64_t>(size) - prefix - hlen;
  if (remaining < static_cast<uint64_t>(bytes)) {
    fail(path, "truncated data: shape " + shape_str(t.shape) + " of " + numpy_type_name(descr.str) + " needs " +
                   std::to_string(bytes) + " bytes, the file holds " + std::to_string(remaining));
  }
  if (remaining > static_cast<uint64_t>(bytes)) {
    fail(path, std::to_string(remaining - static_cast<uint64_t>(bytes)) + " unexpected bytes after the data of shape " +
                   shape_str(t.shape) + " of " + numpy_type_name(descr.str));
  }
  t.data.resize(static_cast<size_t>(bytes));
  if (bytes) read_exact(t.data.data(), bytes, "data");
  if (wide) {  // int64 -> int32, refusing values that do not fit
    std::vector<uint8_t> narrow(static_cast<size_t>(elements) * 4);
    for (int64_t i = 0; i < elements; ++i) {
      int64_t v;
      std::memcpy(&v, t.data.data() + 8 * i, 8);
      if (v < INT32_MIN || v > INT32_MAX)
        fail(path, "int64 element " + std::to_string(i) + " = " + std::to_string(v) +
                       " does not fit the int32 the chip uses for integer inputs");
      const auto w = static_cast<int32_t>(v);
      std::memcpy(narrow.data() + 4 * i, &w, 4);
    }
    t.data = std::move(narrow);
  }
  return t;
}

void write_npy(const std::string& path, const HostTensor& t) {
  const char* descr;
  switch (t.dtype) {
    case isa::DType::I8: descr = "|i1"; break;
    case isa::DType::I32: descr = "<i4"; break;
    case isa::DType::BF16:    // written as float32, exactly
    case isa::DType::F8E4M3:  // likewise (numpy has neither type)
    case isa::DType::F32: descr = "<f4"; break;
    default: fail(path, "cannot write a tensor of unknown dtype " + std::to_string(static_cast<int>(t.dtype)));
  }
  int64_t elements = 0, bytes = 0;
  if (!shape_size(t.shape, isa::dtype_size(t.dtype), &elements, &bytes))
    fail(path, "cannot write a tensor of shape " + shape_str(t.shape) + " (negative or too large)");
  if (t.data.size() != static_cast<uint64_t>(bytes)) {
    fail(path, "cannot write: the tensor holds " + std::to_string(t.data.size()) + " bytes but shape " +
                   shape_str(t.shape) + " of " + isa::dtype_name(t.dtype) + " needs " + std::to_string(bytes));
  }

  std::string header = std::string("{'descr': '") + descr + "', 'fortran_order': False, 'shape': " +
                       shape_str(t.shape) + ", }";
  // Pad with spaces and end with '\n' so that the data starts on a 64-byte boundary, as numpy does.
  auto padded = [&](size_t prefix) { return header.size() + 1 + (64 - (prefix + header.size() + 1) % 64) % 64; };
  size_t prefix = padded(10) <= 65535 ? 10 : 12;  // version 1.0 when the length fits in 16 bits, else 2.0
  uint64_t hlen = padded(prefix);
  header.append(hlen - 1 - header.size(), ' ');
  header += '\n';

  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) fail(path, std::string("cannot open for writing (") + std::strerror(errno) + ")");
  std::string pre(kMagic, kMagicLen);
  pre += static_cast<char>(prefix == 10 ? 1 : 2);
  pre += '\0';
  for (size_t i = 0; i < prefix - 8; ++i) pre += static_cast<char>((hlen >> (8 * i)) & 0xff);
  f.write(pre.data(), static_cast<std::streamsize>(pre.size()));
  f.write(header.data(), static_cast<std::streamsize>(header.size()));
  if (t.dtype == isa::DType::BF16 || t.dtype == isa::DType::F8E4M3) {
    const bool f8 = t.dtype == isa::DType::F8E4M3;
    std::vector<float> chunk;
    const size_t kChunk = 1 << 16;
    for (size_t i = 0; i < static_cast<size_t>(elements); i += kChunk) {
      size_t n = std::min(kChunk, static_cast<size_t>(elements) - i);
      chunk.resize(n);
      for (size_t j = 0; j < n; ++j) {
        if (f8) {
          chunk[j] = isa::f32_from_f8e4m3(t.data[i + j]);
          continue;
        }
        uint16_t h;
        std::memcpy(&h, t.data.data() + 2 * (i + j), 2);
        chunk[j] = isa::f32_from_bf16(h);
      }
      f.write(reinterpret_cast<const char*>(chunk.data()), static_cast<std::streamsize>(n * 4));
    }
  } else if (!t.data.empty()) {
    f.write(reinterpret_cast<const char*>(t.data.data()), static_cast<std::streamsize>(t.data.size()));
  }
  f.close();
  if (!f) fail(path, "write failed (disk full?)");
}

}  // namespace tpusim::runtime
