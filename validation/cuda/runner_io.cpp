// The CUDA reference runner's host side that needs no GPU (runner_io.h).
#include "runner_io.h"

#include <algorithm>
#include <array>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <limits>
#include <set>
#include <sstream>

namespace tpusim::cuda_ref {

// ---- The corpus -----------------------------------------------------------------------------------------------

const std::vector<OpSpec>& op_specs() {
  static const std::vector<OpSpec> specs = {
      {"gemm", {"bfloat16", "fp8", "int8"}, {"m", "n", "k"}, {"m", "n", "k"}, true},
      {"conv", {"bfloat16"}, {"n", "h", "w", "c", "k", "r", "s", "stride", "pad"},
       {"n", "h", "w", "c", "k", "r", "s", "st", "p"}, true},
      {"softmax", {"bfloat16"}, {"rows", "cols"}, {"r", "c"}, true},
      {"layernorm", {"bfloat16"}, {"rows", "cols"}, {"r", "c"}, true},
      {"gelu", {"bfloat16"}, {"elements"}, {"e"}, true},
      {"add", {"bfloat16"}, {"elements"}, {"e"}, true},
      {"causal_attention", {"bfloat16"}, {"batch_size", "seq_len", "heads", "kv_heads", "head_dim"},
       {"b", "s", "h", "kv", "d"}, false},
  };
  return specs;
}

const OpSpec& op_spec(const std::string& op) {
  for (const auto& s : op_specs())
    if (s.op == op) return s;
  std::string known;
  for (const auto& s : op_specs()) known += (known.empty() ? "" : ", ") + s.op;
  throw std::invalid_argument("unknown op '" + op + "' (known: " + known + ")");
}

int64_t Case::dim(const std::string& name) const {
  const OpSpec& s = op_spec(op);
  for (size_t i = 0; i < s.dims.size(); ++i)
    if (s.dims[i] == name) return dims.at(i);
  throw std::logic_error(op + " has no dim '" + name + "'");
}

std::string Case::name() const {
  const OpSpec& s = op_spec(op);
  std::string n = op + "_" + dtype;
  for (size_t i = 0; i < dims.size(); ++i) n += "_" + s.tags[i] + std::to_string(dims[i]);
  return n;
}

namespace {

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return "";
  size_t e = s.find_last_not_of(" \t\r");
  return s.substr(b, e - b + 1);
}

std::string join(const std::vector<std::string>& v, const std::string& sep) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) out += (i ? sep : "") + v[i];
  return out;
}

// The checks that depend on the op (runner_io.h, parse_corpus); returns "" when the case is fine.
std::string check_case(const Case& c) {
  if (c.op == "gemm") {
    int64_t n = c.dim("n"), k = c.dim("k");
    // cuBLASLt's FP8 and int8 (IMMA) kernels take the TN layout with 16-byte (fp8) / 4-byte (int8) aligned leading
    // dimensions: k for the inputs, n for the output (fp8's bf16 output: 8 elements; 16 asked for simplicity).
    if (c.dtype == "fp8" && (k % 16 || n % 16)) return "gemm fp8 needs k and n to be multiples of 16";
    if (c.dtype == "int8" && (k % 4 || n % 4)) return "gemm int8 needs k and n to be multiples of 4";
  } else if (c.op == "causal_attention") {
    int64_t h = c.dim("heads"), kv = c.dim("kv_heads"), d = c.dim("head_dim");
    if (h % kv) return "kv_heads (" + std::to_string(kv) + ") must divide heads (" + std::to_string(h) + ")";
    if (d != 32 && d != 64 && d != 128 && d != 256) return "head_dim must be 32, 64, 128 or 256";
  } else if (c.op == "conv") {
    int64_t h = c.dim("h"), w = c.dim("w"), r = c.dim("r"), s = c.dim("s"), pad = c.dim("pad");
    if (h + 2 * pad < r || w + 2 * pad < s) return "conv: the filter is larger than the padded input";
  }
  return "";
}

}  // namespace

std::vector<Case> parse_corpus(const std::string& text, const std::string& source) {
  std::vector<Case> cases;
  std::map<std::string, int> seen;  // case name -> line
  std::istringstream in(text);
  std::string raw;
  int line = 0;
  while (std::getline(in, raw)) {
    ++line;
    std::string l = trim(raw);
    if (l.empty() || l[0] == '#') continue;
    auto fail = [&](const std::string& what) {
      throw CorpusError(source + ":" + std::to_string(line) + ": " + what);
    };
    std::vector<std::string> f;
    std::stringstream ss(l);
    std::string tok;
    while (std::getline(ss, tok, ',')) f.push_back(trim(tok));
    if (!l.empty() && l.back() == ',') f.push_back("");
    const OpSpec* spec = nullptr;
    try {
      spec = &op_spec(f[0]);
    } catch (const std::invalid_argument& e) {
      fail(e.what());
    }
    if (f.size() < 2 || std::find(spec->dtypes.begin(), spec->dtypes.end(), f[1]) == spec->dtypes.end())
      fail(spec->op + ": dtype must be one of " + join(spec->dtypes, ", ") + ", got '" +
           (f.size() < 2 ? "" : f[1]) + "'");
    if (f.size() != 2 + spec->dims.size())
      fail(spec->op + " expects " + std::to_string(spec->dims.size()) + " dims after the dtype (" +
           join(spec->dims, ",") + "), got " + std::to_string(f.size() - 2));
    Case c;
    c.op = f[0];
    c.dtype = f[1];
    c.line = line;
    for (size_t i = 0; i < spec->dims.size(); ++i) {
      const std::string& v = f[2 + i];
      bool digits = !v.empty() && v.size() <= 12 && std::all_of(v.begin(), v.end(), [](unsigned char ch) { return ch >= '0' && ch <= '9'; });
      int64_t x = digits ? std::stoll(v) : -1;
      bool pad_ok = spec->dims[i] == "pad" && digits;  // a pad may be 0
      if (!(digits && (x > 0 || pad_ok)))
        fail(spec->op + ": " + spec->dims[i] + " must be a " + (spec->dims[i] == "pad" ? "non-negative" : "positive") +
             " integer, got '" + v + "'");
      c.dims.push_back(x);
    }
    std::string problem = check_case(c);
    if (!problem.empty()) fail(problem);
    auto [it, inserted] = seen.emplace(c.name(), line);
    if (!inserted) fail("the same case as line " + std::to_string(it->second));
    cases.push_back(c);
  }
  return cases;
}

std::vector<Case> read_corpus(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw CorpusError(path + ": cannot open: " + std::strerror(errno));
  std::stringstream ss;
  ss << in.rdbuf();
  std::vector<Case> cases = parse_corpus(ss.str(), path);
  if (cases.empty()) throw CorpusError(path + ": no cases");
  return cases;
}

int64_t case_tensor_bytes(const Case& c) {
  const auto& d = c.dims;
  if (c.op == "gemm") {
    const int64_t m = d[0], n = d[1], k = d[2];
    return c.dtype == "int8" ? (m * k + n * k) + 4 * m * n : 4 * (m * k + n * k + m * n) + (c.dtype == "fp8" ? 8 : 0);
  }
  if (c.op == "conv") {
    const int64_t n = d[0], h = d[1], w = d[2], ch = d[3], k = d[4], r = d[5], s = d[6], st = d[7], pad = d[8];
    const int64_t p = (h + 2 * pad - r) / st + 1, q = (w + 2 * pad - s) / st + 1;
    return 4 * (n * h * w * ch + k * r * s * ch + n * p * q * k);
  }
  if (c.op == "softmax") return 4 * 2 * d[0] * d[1];
  if (c.op == "layernorm") return 4 * (2 * d[0] * d[1] + 2 * d[1]);
  if (c.op == "gelu") return 4 * 2 * d[0];
  if (c.op == "add") return 4 * 3 * d[0];
  if (c.op == "causal_attention") {
    const int64_t b = d[0], s = d[1], h = d[2], kv = d[3], hd = d[4];
    return 4 * (2 * b * h * s * hd + 2 * b * kv * s * hd);
  }
  throw std::logic_error("case_tensor_bytes: unknown op " + c.op);
}

// ---- Deterministic inputs ------------------------------------------------------------------------------------

uint64_t SplitMix64::next() {
  uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

double SplitMix64::uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

uint64_t tensor_seed(const std::string& case_name, const std::string& tensor) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (unsigned char ch : case_name + "." + tensor) {
    h ^= ch;
    h *= 0x100000001B3ull;
  }
  return h;
}

// ---- Number formats --------------------------------------------------------------------------------------------

uint16_t float_to_bf16(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  if (std::isnan(x)) return static_cast<uint16_t>((u >> 16) | 0x0040);
  return static_cast<uint16_t>((u + 0x7FFF + ((u >> 16) & 1)) >> 16);
}

float bf16_to_float(uint16_t h) {
  uint32_t u = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

float e4m3_to_float(uint8_t b) {
  int sign = b >> 7, exp = (b >> 3) & 0xF, man = b & 7;
  if (exp == 0xF && man == 7) return std::numeric_limits<float>::quiet_NaN();
  float mag = exp == 0 ? std::ldexp(float(man) / 8.0f, -6) : std::ldexp(1.0f + float(man) / 8.0f, exp - 7);
  return sign ? -mag : mag;
}

uint8_t float_to_e4m3(float x) {
  if (std::isnan(x)) return 0x7F;
  // The 127 non-negative finite codes 0x00..0x7E are in increasing order of value: find the two around |x|.
  static const std::array<float, 127> table = [] {
    std::array<float, 127> t{};
    for (int i = 0; i < 127; ++i) t[i] = e4m3_to_float(static_cast<uint8_t>(i));
    return t;
  }();
  uint8_t sign = std::signbit(x) ? 0x80 : 0;
  float a = std::fabs(x);
  uint8_t code;
  if (a >= table[126]) {
    code = 126;  // saturate
  } else {
    size_t hi = std::upper_bound(table.begin(), table.end(), a) - table.begin();  // table[hi-1] <= a < table[hi]
    size_t lo = hi - 1;
    float dl = a - table[lo], dh = table[hi] - a;
    code = static_cast<uint8_t>(dl < dh ? lo : dh < dl ? hi : (lo % 2 == 0 ? lo : hi));  // tie: the even code
  }
  return sign | code;
}

std::vector<uint16_t> random_bf16(size_t n, float lo, float hi, uint64_t seed) {
  SplitMix64 g(seed);
  std::vector<uint16_t> v(n);
  for (auto& x : v) x = float_to_bf16(static_cast<float>(lo + (hi - lo) * g.uniform()));
  return v;
}

std::vector<uint8_t> random_e4m3(size_t n, float lo, float hi, uint64_t seed) {
  SplitMix64 g(seed);
  std::vector<uint8_t> v(n);
  for (auto& x : v) x = float_to_e4m3(static_cast<float>(lo + (hi - lo) * g.uniform()));
  return v;
}

std::vector<int8_t> random_int8(size_t n, int lo, int hi, uint64_t seed) {
  SplitMix64 g(seed);
  std::vector<int8_t> v(n);
  uint64_t span = static_cast<uint64_t>(hi - lo + 1);
  for (auto& x : v) x = static_cast<int8_t>(lo + static_cast<int>(g.next() % span));
  return v;
}

// ---- .npy files ----------------------------------------------------------------------------------------------

int64_t NpyArray::elements() const {
  int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

std::vector<double> NpyArray::as_double() const {
  std::vector<double> v(static_cast<size_t>(elements()));
  for (size_t i = 0; i < v.size(); ++i) {
    if (descr == "<f4") {
      float f;
      std::memcpy(&f, data.data() + 4 * i, 4);
      v[i] = f;
    } else if (descr == "<i4") {
      int32_t x;
      std::memcpy(&x, data.data() + 4 * i, 4);
      v[i] = x;
    } else {
      v[i] = static_cast<int8_t>(data[i]);
    }
  }
  return v;
}

namespace {

size_t descr_size(const std::string& descr) {
  if (descr == "<f4" || descr == "<i4") return 4;
  if (descr == "|i1") return 1;
  throw std::invalid_argument("npy: unsupported dtype '" + descr + "'");
}

}  // namespace

void write_npy(const std::string& path, const std::string& descr, const std::vector<int64_t>& shape,
               const void* data, size_t bytes) {
  int64_t n = 1;
  for (auto d : shape) n *= d;
  if (static_cast<size_t>(n) * descr_size(descr) != bytes)
    throw std::invalid_argument(path + ": " + std::to_string(bytes) + " bytes do not fit the shape");
  std::string shape_s = "(";
  for (size_t i = 0; i < shape.size(); ++i) shape_s += std::to_string(shape[i]) + (shape.size() == 1 ? "," : i + 1 < shape.size() ? ", " : "");
  shape_s += ")";
  std::string header = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + shape_s + ", }";
  size_t total = 10 + header.size() + 1;  // magic (6) + version (2) + length (2), header, '\n'
  header.append((64 - total % 64) % 64, ' ');
  header += '\n';
  if (header.size() > 65535) throw std::invalid_argument(path + ": npy header too long");
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw std::runtime_error(path + ": cannot open for writing: " + std::strerror(errno));
  out.write("\x93NUMPY\x01\x00", 8);
  uint16_t hl = static_cast<uint16_t>(header.size());
  char len[2] = {static_cast<char>(hl & 0xFF), static_cast<char>(hl >> 8)};
  out.write(len, 2);
  out.write(header.data(), static_cast<std::streamsize>(header.size()));
  out.write(static_cast<const char*>(data), static_cast<std::streamsize>(bytes));
  out.close();
  if (!out) throw std::runtime_error(path + ": cannot write: " + std::strerror(errno));
}

void write_npy_f32(const std::string& path, const std::vector<int64_t>& shape, const std::vector<float>& v) {
  write_npy(path, "<f4", shape, v.data(), v.size() * 4);
}

void write_npy_bf16_as_f32(const std::string& path, const std::vector<int64_t>& shape, const std::vector<uint16_t>& v) {
  std::vector<float> f(v.size());
  for (size_t i = 0; i < v.size(); ++i) f[i] = bf16_to_float(v[i]);
  write_npy_f32(path, shape, f);
}

void write_npy_e4m3_as_f32(const std::string& path, const std::vector<int64_t>& shape, const std::vector<uint8_t>& v) {
  std::vector<float> f(v.size());
  for (size_t i = 0; i < v.size(); ++i) f[i] = e4m3_to_float(v[i]);
  write_npy_f32(path, shape, f);
}

void write_npy_i8(const std::string& path, const std::vector<int64_t>& shape, const std::vector<int8_t>& v) {
  write_npy(path, "|i1", shape, v.data(), v.size());
}

void write_npy_i32(const std::string& path, const std::vector<int64_t>& shape, const std::vector<int32_t>& v) {
  write_npy(path, "<i4", shape, v.data(), v.size() * 4);
}

NpyArray read_npy(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(path + ": cannot open: " + std::strerror(errno));
  auto fail = [&](const std::string& what) { throw std::runtime_error(path + ": " + what); };
  char magic[8];
  if (!in.read(magic, 8) || std::memcmp(magic, "\x93NUMPY", 6) != 0) fail("not a .npy file");
  uint32_t hl = 0;
  unsigned char len[4] = {0, 0, 0, 0};
  if (magic[6] == 1) {
    in.read(reinterpret_cast<char*>(len), 2);
    hl = len[0] | (len[1] << 8);
  } else if (magic[6] == 2) {
    in.read(reinterpret_cast<char*>(len), 4);
    hl = len[0] | (len[1] << 8) | (len[2] << 16) | (uint32_t(len[3]) << 24);
  } else {
    fail("unsupported .npy version " + std::to_string(int(magic[6])));
  }
  std::string header(hl, '\0');
  if (!in.read(header.data(), hl)) fail("truncated header");
  auto value_of = [&](const std::string& key) {
    size_t k = header.find("'" + key + "'");
    if (k == std::string::npos) fail("header lacks '" + key + "'");
    size_t colon = header.find(':', k);
    return header.substr(colon + 1);
  };
  NpyArray a;
  std::string d = value_of("descr");
  size_t q1 = d.find('\''), q2 = d.find('\'', q1 + 1);
  a.descr = d.substr(q1 + 1, q2 - q1 - 1);
  if (a.descr == "<i1") a.descr = "|i1";
  size_t esize = 0;
  try {
    esize = descr_size(a.descr);
  } catch (const std::invalid_argument& e) {
    fail(e.what());
  }
  if (trim(value_of("fortran_order")).rfind("False", 0) != 0) fail("Fortran order is not supported");
  std::string s = value_of("shape");
  s = s.substr(s.find('(') + 1, s.find(')') - s.find('(') - 1);
  std::stringstream ss(s);
  std::string tok;
  while (std::getline(ss, tok, ',')) {
    tok = trim(tok);
    if (!tok.empty()) a.shape.push_back(std::stoll(tok));
  }
  a.data.resize(static_cast<size_t>(a.elements()) * esize);
  if (!in.read(reinterpret_cast<char*>(a.data.data()), static_cast<std::streamsize>(a.data.size())))
    fail("truncated data");
  return a;
}

// ---- Results -------------------------------------------------------------------------------------------------

double median(std::vector<double> v) {
  if (v.empty()) throw std::invalid_argument("median of nothing");
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

std::string results_header(const std::string& op) {
  const OpSpec& s = op_spec(op);
  return (s.dtype_column ? "dtype," : "") + join(s.dims, ",") + ",latency_us";
}

void write_results_csv(std::ostream& os, const std::string& op, const std::vector<CaseResult>& results) {
  const OpSpec& s = op_spec(op);
  os << results_header(op) << "\n";
  for (const auto& r : results) {
    if (r.c.op != op || !r.ok) continue;
    if (s.dtype_column) os << r.c.dtype << ",";
    for (auto d : r.c.dims) os << d << ",";
    char lat[64];
    std::snprintf(lat, sizeof lat, "%.4f", r.median_us);
    os << lat << "\n";
  }
}

std::vector<std::string> write_results(const std::string& dir, const std::vector<CaseResult>& results) {
  std::vector<std::string> files;
  for (const auto& s : op_specs()) {
    bool any = std::any_of(results.begin(), results.end(), [&](const CaseResult& r) { return r.ok && r.c.op == s.op; });
    if (!any) continue;
    std::string path = (std::filesystem::path(dir) / (s.op + ".csv")).string();
    std::ofstream out(path, std::ios::trunc);
    if (!out) throw std::runtime_error(path + ": cannot open for writing: " + std::strerror(errno));
    write_results_csv(out, s.op, results);
    out.close();
    if (!out) throw std::runtime_error(path + ": cannot write: " + std::strerror(errno));
    files.push_back(path);
  }
  return files;
}

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (unsigned char ch : s) {
    switch (ch) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      default:
        if (ch < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", ch);
          out += buf;
        } else {
          out += static_cast<char>(ch);
        }
    }
  }
  return out + "\"";
}

void write_meta_json(std::ostream& os, const std::vector<std::pair<std::string, std::string>>& fields,
                     const std::vector<CaseResult>& results) {
  os << "{\n";
  for (const auto& [k, v] : fields) os << "  " << json_string(k) << ": " << v << ",\n";
  os << "  \"cases\": [";
  for (size_t i = 0; i < results.size(); ++i) {
    const auto& r = results[i];
    const OpSpec& s = op_spec(r.c.op);
    os << (i ? "," : "") << "\n    {\"name\": " << json_string(r.c.name()) << ", \"op\": " << json_string(r.c.op)
       << ", \"dtype\": " << json_string(r.c.dtype) << ", \"dims\": {";
    for (size_t d = 0; d < s.dims.size(); ++d) os << (d ? ", " : "") << json_string(s.dims[d]) << ": " << r.c.dims[d];
    os << "}, \"status\": " << json_string(r.ok ? "ok" : "failed");
    if (r.ok) {
      char buf[160];
      std::snprintf(buf, sizeof buf, ", \"median_us\": %.4f, \"min_us\": %.4f, \"max_us\": %.4f, \"repeats\": %d",
                    r.median_us, r.min_us, r.max_us, r.repeats);
      os << buf << ", \"algorithm\": " << json_string(r.algorithm) << ", \"npy\": " << (r.npy ? "true" : "false");
    } else {
      os << ", \"error\": " << json_string(r.error);
    }
    os << "}";
  }
  os << "\n  ]\n}\n";
}

}  // namespace tpusim::cuda_ref
