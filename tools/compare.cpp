// tpusim compare: cosine similarity, relative L2 error, max absolute error and max bf16 ulp distance between .npy
// tensors (compare.h).
#include "compare.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include "cli.h"
#include "tpusim/isa/numerics.h"
#include "tpusim/runtime/npy.h"

namespace fs = std::filesystem;

namespace tpusim::cli {

uint16_t bf16_bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  if (std::isnan(x)) return static_cast<uint16_t>((u >> 16) | 0x0040);  // keep the sign, force a quiet NaN
  uint32_t rounding = 0x7FFF + ((u >> 16) & 1);  // ties to even
  return static_cast<uint16_t>((u + rounding) >> 16);  // overflow past the largest finite rounds to inf, as it should
}

int64_t bf16_ulp_distance(float a, float b) {
  if (std::isnan(a) || std::isnan(b)) return -1;
  // Sign-magnitude bits to a line of integers: -0 and +0 both map to 0, the negatives below it in order.
  auto ordered = [](uint16_t h) -> int64_t {
    int64_t mag = h & 0x7FFF;
    return (h & 0x8000) ? -mag : mag;
  };
  int64_t d = ordered(bf16_bits(a)) - ordered(bf16_bits(b));
  return d < 0 ? -d : d;
}

CompareStats compare_values(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) throw std::invalid_argument("compare_values: sizes differ");
  CompareStats s;
  s.elements = a.size();
  double ab = 0, aa = 0, bb = 0, dd = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    bool na = std::isnan(a[i]), nb = std::isnan(b[i]);
    s.nan_a += na;
    s.nan_b += nb;
    ab += a[i] * b[i];
    aa += a[i] * a[i];
    bb += b[i] * b[i];
    double d = a[i] - b[i];
    dd += d * d;
    if (na || nb) continue;
    if (a[i] != b[i]) s.max_abs = std::max(s.max_abs, std::fabs(d));  // inf == inf is no difference
    s.max_ulp_bf16 = std::max(s.max_ulp_bf16, bf16_ulp_distance(static_cast<float>(a[i]), static_cast<float>(b[i])));
  }
  if (s.nan_a || s.nan_b) {
    s.cosine = s.rel_l2 = std::numeric_limits<double>::quiet_NaN();
    return s;
  }
  if (aa == 0 && bb == 0) {
    s.cosine = 1;
    s.rel_l2 = 0;
  } else {
    s.cosine = (aa == 0 || bb == 0) ? 0 : ab / (std::sqrt(aa) * std::sqrt(bb));
    s.rel_l2 = aa == 0 ? std::numeric_limits<double>::infinity() : std::sqrt(dd) / std::sqrt(aa);
  }
  return s;
}

namespace {

const char* kCompareUsage =
    "usage: tpusim compare A B [--max-rel-l2 X] [--min-cosine X]\n"
    "\n"
    "A and B are .npy files, or folders whose .npy files are matched by name (A is the reference). Prints per\n"
    "tensor: elements, cosine similarity, relative L2 error |A-B|/|A|, max absolute error, and max distance in bf16\n"
    "ulps (both sides rounded to bf16 first). Exits 1 when a shape differs, a file is on one side only, or a\n"
    "threshold given is missed (a NaN misses every threshold); 2 for a mistake in the command line.\n"
    "\n"
    "  --max-rel-l2 X   fail a tensor whose relative L2 error is above X\n"
    "  --min-cosine X   fail a tensor whose cosine similarity is below X\n";

double parse_threshold(const std::string& opt, const std::string& value) {
  try {
    size_t used = 0;
    double v = std::stod(value, &used);
    if (used != value.size() || !std::isfinite(v)) throw std::invalid_argument(value);
    return v;
  } catch (const std::logic_error&) {
    throw UsageError(opt + ": '" + value + "' is not a number");
  }
}

std::vector<double> values(const runtime::HostTensor& t) {
  std::vector<double> v(static_cast<size_t>(t.elements()));
  const uint8_t* p = t.data.data();
  for (size_t i = 0; i < v.size(); ++i) {
    switch (t.dtype) {
      case isa::DType::I8: v[i] = static_cast<int8_t>(p[i]); break;
      case isa::DType::I32: { int32_t x; std::memcpy(&x, p + 4 * i, 4); v[i] = x; break; }
      case isa::DType::F32: { float x; std::memcpy(&x, p + 4 * i, 4); v[i] = x; break; }
      case isa::DType::BF16: { uint16_t h; std::memcpy(&h, p + 2 * i, 2); uint32_t u = uint32_t(h) << 16;
                               float x; std::memcpy(&x, &u, 4); v[i] = x; break; }
      case isa::DType::F8E4M3: v[i] = isa::f32_from_f8e4m3(p[i]); break;
    }
  }
  return v;
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? "," : "") + std::to_string(shape[i]);
  return s + "]";
}

std::string num(double x) {
  std::ostringstream os;
  os << std::setprecision(6) << x;
  return os.str();
}

}  // namespace

int cmd_compare(const std::vector<std::string>& args) {
  std::vector<std::string> paths;
  std::optional<double> max_rel_l2, min_cosine;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--help" || a == "-h") {
      std::cout << kCompareUsage;
      return 0;
    }
    auto take_value = [&](const std::string& opt) -> std::optional<std::string> {
      if (a == opt) {
        if (i + 1 >= args.size()) throw UsageError(opt + " needs a value");
        return args[++i];
      }
      if (a.rfind(opt + "=", 0) == 0) return a.substr(opt.size() + 1);
      return std::nullopt;
    };
    if (auto v = take_value("--max-rel-l2")) {
      max_rel_l2 = parse_threshold("--max-rel-l2", *v);
    } else if (auto v2 = take_value("--min-cosine")) {
      min_cosine = parse_threshold("--min-cosine", *v2);
    } else if (a.size() > 1 && a[0] == '-') {
      throw UsageError("compare: unknown option '" + a + "' (see tpusim compare --help)");
    } else {
      paths.push_back(a);
    }
  }
  if (paths.size() != 2) throw UsageError("compare expects two paths, A and B (see tpusim compare --help)");

  // The pairs to compare: (name shown, path in A, path in B); a side's path is empty when its file is missing.
  struct Pair { std::string name; fs::path a, b; };
  std::vector<Pair> pairs;
  fs::path pa = paths[0], pb = paths[1];
  for (const auto& p : {pa, pb})
    if (!fs::exists(p)) throw std::runtime_error("'" + p.string() + "': no such file or folder");
  auto npy_files = [](const fs::path& dir) {
    std::set<std::string> names;
    for (const auto& e : fs::directory_iterator(dir))
      if (e.is_regular_file() && e.path().extension() == ".npy") names.insert(e.path().filename().string());
    return names;
  };
  bool dir_a = fs::is_directory(pa), dir_b = fs::is_directory(pb);
  if (dir_a && dir_b) {
    auto na = npy_files(pa), nb = npy_files(pb);
    std::set<std::string> all(na.begin(), na.end());
    all.insert(nb.begin(), nb.end());
    if (all.empty()) throw std::runtime_error("no .npy files in '" + pa.string() + "' or '" + pb.string() + "'");
    for (const auto& n : all) pairs.push_back({n, na.count(n) ? pa / n : fs::path(), nb.count(n) ? pb / n : fs::path()});
  } else if (dir_a || dir_b) {
    // A file against a folder: the folder's file of the same name.
    const fs::path& file = dir_a ? pb : pa;
    fs::path other = (dir_a ? pa : pb) / file.filename();
    fs::path in_other = fs::exists(other) ? other : fs::path();
    pairs.push_back({file.filename().string(), dir_a ? in_other : pa, dir_a ? pb : in_other});
  } else {
    pairs.push_back({pa.filename() == pb.filename() ? pa.filename().string() : pa.filename().string() + " vs " +
                     pb.filename().string(), pa, pb});
  }

  size_t name_w = 6;
  for (const auto& p : pairs) name_w = std::max(name_w, p.name.size());
  std::ostream& os = std::cout;
  os << std::left << std::setw(int(name_w)) << "tensor" << "  " << std::setw(16) << "shape" << std::right
     << std::setw(11) << "cosine" << std::setw(13) << "rel_l2" << std::setw(13) << "max_abs" << std::setw(10)
     << "max_ulp" << "  result\n";
  int failures = 0;
  for (const auto& p : pairs) {
    os << std::left << std::setw(int(name_w)) << p.name << "  ";
    if (p.a.empty() || p.b.empty()) {
      os << "FAIL: missing in " << (p.a.empty() ? "A (" + pa.string() + ")" : "B (" + pb.string() + ")") << "\n";
      ++failures;
      continue;
    }
    runtime::HostTensor ta = runtime::read_npy(p.a.string()), tb = runtime::read_npy(p.b.string());
    if (ta.shape != tb.shape) {
      os << "FAIL: shapes differ: " << shape_text(ta.shape) << " in A, " << shape_text(tb.shape) << " in B\n";
      ++failures;
      continue;
    }
    CompareStats s = compare_values(values(ta), values(tb));
    std::vector<std::string> missed;
    if (max_rel_l2 && !(s.rel_l2 <= *max_rel_l2)) missed.push_back("rel_l2 > " + num(*max_rel_l2));
    if (min_cosine && !(s.cosine >= *min_cosine)) missed.push_back("cosine < " + num(*min_cosine));
    os << std::setw(16) << shape_text(ta.shape) << std::right << std::setw(11) << num(s.cosine) << std::setw(13)
       << num(s.rel_l2) << std::setw(13) << num(s.max_abs) << std::setw(10) << s.max_ulp_bf16 << "  ";
    if (s.nan_a || s.nan_b) os << "(NaN: " << s.nan_a << " in A, " << s.nan_b << " in B) ";
    if (missed.empty()) {
      os << "ok\n";
    } else {
      ++failures;
      os << "FAIL:";
      for (const auto& m : missed) os << " " << m;
      os << "\n";
    }
  }
  if (failures) os << failures << " of " << pairs.size() << " tensor(s) failed\n";
  return failures ? 1 : 0;
}

}  // namespace tpusim::cli
