// Program helpers and the .tpub binary format (layout in program.h; details below).
//
// Section payloads (little-endian):
//   1 code      u64 instruction words
//   2 tensors   u32 count, then per tensor: u32 name length, name bytes, u8 kind, u8 dtype, u8 space, u32 rank,
//               i64 dims[rank], u64 addr, u64 const_offset
//   3 const     raw bytes
//   4 name      raw bytes (UTF-8)
//   5 source    u32 count, then per line: u32 length, bytes
//   6 regions   u32 count, then per region: u32 kind length, kind bytes, u32 name length, name bytes, u32 begin,
//               u32 end (instruction indices; rules in program.h, checked after every section is read), f64 flops,
//               f64 bytes (IEEE 754 binary64; 0 = unknown; finite and >= 0)
// Every field is bounds-checked before it is read, so corrupt input ends in an isa::Error, never a crash.
#include "tpusim/isa/program.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <set>
#include <sstream>

namespace tpusim::isa {

const char* tensor_kind_name(TensorKind k) {
  switch (k) {
    case TensorKind::Input: return "input";
    case TensorKind::Output: return "output";
    case TensorKind::Const: return "const";
  }
  return "?";
}

int64_t TensorDecl::elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

const TensorDecl* Program::find(const std::string& name) const {
  for (const auto& t : tensors)
    if (t.name == name) return &t;
  return nullptr;
}

uint64_t Program::footprint(MemSpace space) const {
  uint64_t end = 0;
  for (const auto& t : tensors)
    if (t.space == space) end = std::max(end, t.addr + t.bytes());
  return end;
}

const char* mem_space_name(MemSpace s) { return s == MemSpace::Vmem ? "vmem" : "hbm"; }

namespace {

constexpr char kMagic[4] = {'T', 'P', 'U', 'B'};
enum SectionId : uint32_t { kCode = 1, kTensors = 2, kConst = 3, kName = 4, kSource = 5, kRegions = 6, kCores = 7,
                       kTimingOnly = 8, kIdeal = 9 };
// The most cores a program may ask for (chip.cores allows the same).
constexpr uint32_t kMaxCores = 1024;

const char* section_name(uint32_t id) {
  switch (id) {
    case kCode: return "code";
    case kTensors: return "tensors";
    case kConst: return "constant data";
    case kName: return "name";
    case kSource: return "source";
    case kRegions: return "regions";
    case kCores: return "cores";
    case kTimingOnly: return "timing-only";
    case kIdeal: return "ideal bytes";
  }
  return "unknown";
}

// ---- writing ------------------------------------------------------------------------------------------------

struct Writer {
  std::vector<uint8_t> out;
  void u8(uint8_t v) { out.push_back(v); }
  void le(uint64_t v, int bytes) {
    for (int i = 0; i < bytes; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
  }
  void u32(uint32_t v) { le(v, 4); }
  void u64(uint64_t v) { le(v, 8); }
  void f64(double v) { u64(std::bit_cast<uint64_t>(v)); }
  void raw(const void* p, size_t n) {
    auto b = static_cast<const uint8_t*>(p);
    out.insert(out.end(), b, b + n);
  }
  void str(const std::string& s) {
    u32(static_cast<uint32_t>(s.size()));
    raw(s.data(), s.size());
  }
  void section(uint32_t id, const std::vector<uint8_t>& payload) {
    u32(id);
    u64(payload.size());
    raw(payload.data(), payload.size());
  }
};

std::vector<uint8_t> code_payload(const Program& p) {
  Writer w;
  for (Word x : p.code) w.u64(x);
  return std::move(w.out);
}

std::vector<uint8_t> tensors_payload(const Program& p) {
  Writer w;
  w.u32(static_cast<uint32_t>(p.tensors.size()));
  for (const auto& t : p.tensors) {
    w.str(t.name);
    w.u8(static_cast<uint8_t>(t.kind));
    w.u8(static_cast<uint8_t>(t.dtype));
    w.u8(static_cast<uint8_t>(t.space));
    w.u32(static_cast<uint32_t>(t.shape.size()));
    for (int64_t d : t.shape) w.u64(static_cast<uint64_t>(d));
    w.u64(t.addr);
    w.u64(t.const_offset);
  }
  return std::move(w.out);
}

std::vector<uint8_t> source_payload(const Program& p) {
  Writer w;
  w.u32(static_cast<uint32_t>(p.source.size()));
  for (const auto& s : p.source) w.str(s);
  return std::move(w.out);
}

std::vector<uint8_t> regions_payload(const Program& p) {
  Writer w;
  w.u32(static_cast<uint32_t>(p.regions.size()));
  for (const Region& r : p.regions) {
    w.str(r.kind);
    w.str(r.name);
    w.u32(r.begin);
    w.u32(r.end);
    w.f64(r.flops);
    w.f64(r.bytes);
  }
  return std::move(w.out);
}

// Program::ideal_bytes, then Region::ideal_bytes, one per region in order. A section of its own, written only
// when one of them is given, so that files without them (older ones, hand-written assembly) keep their layout and
// version.
bool has_ideal_bytes(const Program& p) {
  return p.ideal_bytes != 0 ||
         std::any_of(p.regions.begin(), p.regions.end(), [](const Region& r) { return r.ideal_bytes != 0; });
}
std::vector<uint8_t> ideal_payload(const Program& p) {
  Writer w;
  w.f64(p.ideal_bytes);
  w.u32(static_cast<uint32_t>(p.regions.size()));
  for (const Region& r : p.regions) w.f64(r.ideal_bytes);
  return std::move(w.out);
}

// ---- reading ------------------------------------------------------------------------------------------------

// A bounded cursor over [pos, end) of the whole file; errors name the absolute byte offset.
class Reader {
 public:
  Reader(const std::vector<uint8_t>& b, size_t pos, size_t end, std::string what)
      : b_(b), pos_(pos), end_(end), what_(std::move(what)) {}

  [[noreturn]] void fail(const std::string& msg, size_t at) const {
    throw Error("program: byte " + std::to_string(at) + ": " + msg);
  }
  [[noreturn]] void fail(const std::string& msg) const { fail(msg, pos_); }

  size_t pos() const { return pos_; }
  size_t left() const { return end_ - pos_; }
  void need(uint64_t n, const char* field) const {
    if (n > left())
      fail(what_ + " truncated: " + field + " needs " + std::to_string(n) + " bytes, " + std::to_string(left()) +
           " left");
  }
  uint64_t le(int bytes, const char* field) {
    need(bytes, field);
    uint64_t v = 0;
    for (int i = 0; i < bytes; ++i) v |= static_cast<uint64_t>(b_[pos_ + i]) << (8 * i);
    pos_ += bytes;
    return v;
  }
  uint8_t u8(const char* field) { return static_cast<uint8_t>(le(1, field)); }
  uint32_t u32(const char* field) { return static_cast<uint32_t>(le(4, field)); }
  uint64_t u64(const char* field) { return le(8, field); }
  double f64(const char* field) { return std::bit_cast<double>(le(8, field)); }
  std::string bytes(uint64_t n, const char* field) {
    need(n, field);
    std::string s(reinterpret_cast<const char*>(b_.data() + pos_), n);
    pos_ += n;
    return s;
  }
  std::string str(const char* field) { return bytes(u32(field), field); }
  std::vector<uint8_t> raw(uint64_t n, const char* field) {
    need(n, field);
    std::vector<uint8_t> v(b_.begin() + pos_, b_.begin() + pos_ + n);
    pos_ += n;
    return v;
  }
  void skip(uint64_t n, const char* field) {
    need(n, field);
    pos_ += n;
  }
  // A count of records, each at least `min_size` bytes: rejects counts the remaining bytes cannot hold, so a
  // corrupt count never causes a huge allocation.
  uint32_t count(const char* field, uint64_t min_size) {
    size_t at = pos_;
    uint32_t n = u32(field);
    if (n * min_size > left())
      fail(what_ + ": " + field + " " + std::to_string(n) + " needs at least " + std::to_string(n * min_size) +
               " bytes, " + std::to_string(left()) + " left",
           at);
    return n;
  }
  void expect_end() const {
    if (left() != 0) fail(what_ + ": " + std::to_string(left()) + " unexpected bytes at the end");
  }

 private:
  const std::vector<uint8_t>& b_;
  size_t pos_, end_;
  std::string what_;
};

void read_code(Reader& r, Program& p) {
  if (r.left() % 8 != 0) r.fail("section 1 (code): length " + std::to_string(r.left()) + " is not a multiple of 8");
  while (r.left() > 0) {
    size_t at = r.pos();
    Word w = r.u64("instruction");
    try {
      decode(w);
    } catch (const Error& e) {
      r.fail("instruction " + std::to_string(p.code.size()) + ": " + e.what(), at);
    }
    p.code.push_back(w);
  }
}

TensorDecl read_tensor(Reader& r) {
  size_t at = r.pos();
  TensorDecl t;
  t.name = r.str("tensor name");
  uint8_t kind = r.u8("tensor kind"), dtype = r.u8("tensor dtype"), space = r.u8("tensor memory space");
  if (kind > 2) r.fail("tensor '" + t.name + "': unknown kind " + std::to_string(kind), at);
  if (space > 1) r.fail("tensor '" + t.name + "': unknown memory space " + std::to_string(space), at);
  t.space = static_cast<MemSpace>(space);
  if (dtype >= kNumDTypes) r.fail("tensor '" + t.name + "': unknown data type " + std::to_string(dtype), at);
  t.kind = static_cast<TensorKind>(kind);
  t.dtype = static_cast<DType>(dtype);
  uint32_t rank = r.count("tensor rank", 8);
  if (rank > kMaxRank)
    r.fail("tensor '" + printable(t.name) + "': rank " + std::to_string(rank) + " is more than the limit of " +
               std::to_string(kMaxRank),
           at);
  for (uint32_t i = 0; i < rank; ++i) t.shape.push_back(static_cast<int64_t>(r.u64("tensor dimension")));
  t.addr = r.u64("tensor address");
  t.const_offset = r.u64("tensor constant offset");
  try {
    check_tensor(t);
  } catch (const Error& e) {
    r.fail(e.what(), at);
  }
  return t;
}

void read_tensors(Reader& r, Program& p, std::vector<size_t>& offsets) {
  uint32_t n = r.count("tensor count", 4 + 1 + 1 + 1 + 4 + 8 + 8);
  std::set<std::string> names;
  for (uint32_t i = 0; i < n; ++i) {
    offsets.push_back(r.pos());
    p.tensors.push_back(read_tensor(r));
    if (!names.insert(p.tensors.back().name).second)
      r.fail("duplicate tensor '" + printable(p.tensors.back().name) + "'", offsets.back());
  }
}

void read_source(Reader& r, Program& p) {
  uint32_t n = r.count("source line count", 4);
  for (uint32_t i = 0; i < n; ++i) p.source.push_back(r.str("source line"));
}

void read_regions(Reader& r, Program& p) {
  uint32_t n = r.count("region count", 4 + 4 + 4 + 4 + 8 + 8);
  for (uint32_t i = 0; i < n; ++i) {
    Region g;
    g.kind = r.str("region kind");
    g.name = r.str("region name");
    g.begin = r.u32("region begin");
    g.end = r.u32("region end");
    g.flops = r.f64("region flops");
    g.bytes = r.f64("region bytes");
    p.regions.push_back(std::move(g));
  }
}

std::string number_text(double v) {
  std::ostringstream s;
  s << v;
  return s.str();
}

// Section kIdeal: Program::ideal_bytes, then the regions' (applied to them once every section is read).
std::vector<double> read_ideal(Reader& r, Program& p) {
  const size_t at = r.pos();
  p.ideal_bytes = r.f64("program ideal bytes");
  if (!std::isfinite(p.ideal_bytes) || p.ideal_bytes < 0)
    r.fail("the program's ideal bytes " + number_text(p.ideal_bytes) + " are not a finite count >= 0", at);
  uint32_t n = r.count("region ideal bytes count", 8);
  std::vector<double> v(n);
  for (uint32_t i = 0; i < n; ++i) v[i] = r.f64("region ideal bytes");
  return v;
}

// Checks that need every section: const tensors inside the constant data, one source line per instruction.
void validate(const Program& p, const std::vector<size_t>& tensor_offsets, size_t source_offset,
              size_t regions_offset) {
  try {
    validate_tensors(p);
  } catch (const Error& e) {
    throw Error("program: byte " + std::to_string(tensor_offsets.empty() ? 0 : tensor_offsets.front()) +
                " (tensors): " + e.what());
  }
  if (!p.source.empty() && p.source.size() != p.code.size())
    throw Error("program: byte " + std::to_string(source_offset) + ": " + std::to_string(p.source.size()) +
                " source lines for " + std::to_string(p.code.size()) + " instructions");
  try {
    validate_regions(p);
  } catch (const Error& e) {
    throw Error("program: byte " + std::to_string(regions_offset) + ": " + e.what());
  }
}

std::string size_text(uint64_t v) {
  return (v % (uint64_t{1} << 40)) == 0 ? std::to_string(v >> 40) + " TiB" : std::to_string(v) + " bytes";
}

}  // namespace

// One tensor's own rules (validate_tensors checks the rest).
void check_tensor(const TensorDecl& t) {
  const std::string what = std::string(tensor_kind_name(t.kind)) + " '" + printable(t.name) + "'";
  if (t.name.empty()) throw Error("a tensor has an empty name");
  if (t.shape.size() > kMaxRank)
    throw Error(what + ": rank " + std::to_string(t.shape.size()) + " is more than the limit of " +
                std::to_string(kMaxRank));
  uint64_t bytes = dtype_size(t.dtype);
  for (int64_t d : t.shape)
    if (d < 0) throw Error(what + ": negative dimension " + std::to_string(d));
  // The sizes other than 0 are bounded too, so that no partial product of a shape (as elements() makes them)
  // can overflow, even where a size of 0 makes the tensor empty: [2^29, 2^53, 0] is refused.
  uint64_t nonzero = dtype_size(t.dtype);
  for (int64_t d : t.shape)
    if (d != 0 && (__builtin_mul_overflow(nonzero, static_cast<uint64_t>(d), &nonzero) || nonzero > kMaxTensorBytes))
      throw Error(what + ": more than " + size_text(kMaxTensorBytes) + " (the limit for one tensor)" +
                  (std::count(t.shape.begin(), t.shape.end(), 0) ? " in its sizes other than 0" : ""));
  for (int64_t d : t.shape)
    if (d == 0) bytes = 0;
  for (int64_t d : t.shape)
    if (bytes && (__builtin_mul_overflow(bytes, static_cast<uint64_t>(d), &bytes) || bytes > kMaxTensorBytes))
      throw Error(what + ": more than " + size_text(kMaxTensorBytes) + " (the limit for one tensor)");
  if (t.addr > kMaxAddress || bytes > kMaxAddress - t.addr)
    throw Error(what + ": [" + std::to_string(t.addr) + ", +" + std::to_string(bytes) + ") passes address " +
                std::to_string(kMaxAddress) + " (2^48, the limit)");
  if (t.kind != TensorKind::Const && t.const_offset != 0)
    throw Error(what + ": a constant offset (" + std::to_string(t.const_offset) + ") on a tensor that is not const");
  if (t.kind == TensorKind::Const && t.space != MemSpace::Hbm) throw Error(what + ": a const tensor lives in HBM");
}

void validate_tensors(const Program& p) {
  std::set<std::string> names;
  for (const TensorDecl& t : p.tensors) {
    check_tensor(t);
    if (!names.insert(t.name).second) throw Error("duplicate tensor '" + printable(t.name) + "'");
    uint64_t size = p.const_data.size();
    if (t.kind == TensorKind::Const && !p.timing_only && (t.const_offset > size || t.bytes() > size - t.const_offset))
      throw Error("const tensor '" + printable(t.name) + "' (" + std::to_string(t.bytes()) + " bytes at offset " +
                  std::to_string(t.const_offset) + ") lies outside the constant data (" + std::to_string(size) +
                  " bytes)");
  }
  if (auto o = overlapping_tensors(p)) {
    const TensorDecl &a = p.tensors[o->first], &b = p.tensors[o->second];
    auto range = [](const TensorDecl& t) {
      return "[" + std::to_string(t.addr) + ", " + std::to_string(t.addr + t.bytes()) + ")";
    };
    throw Error(std::string(tensor_kind_name(b.kind)) + " '" + printable(b.name) + "' " + range(b) + " overlaps " +
                tensor_kind_name(a.kind) + " '" + printable(a.name) + "' " + range(a) + " in " +
                mem_space_name(b.space));
  }
}

// Sorted by (space, address), each tensor is checked against the one reaching furthest before it in its space.
std::optional<std::pair<size_t, size_t>> overlapping_tensors(const Program& p) {
  std::vector<size_t> order;
  for (size_t i = 0; i < p.tensors.size(); ++i)
    if (p.tensors[i].bytes() > 0) order.push_back(i);
  const auto& t = p.tensors;
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return std::pair(t[a].space, t[a].addr) < std::pair(t[b].space, t[b].addr); });
  size_t reach = SIZE_MAX;
  auto end = [&](size_t i) { return t[i].addr + t[i].bytes(); };
  for (size_t i : order) {
    if (reach != SIZE_MAX && t[reach].space == t[i].space && end(reach) > t[i].addr)
      return std::pair(std::min(reach, i), std::max(reach, i));
    if (reach == SIZE_MAX || t[reach].space != t[i].space || end(i) > end(reach)) reach = i;
  }
  return std::nullopt;
}

namespace {

std::string region_text(const Region& r, size_t i) {
  return "region " + std::to_string(i) + " (" + r.kind + " '" + r.name + "', [" + std::to_string(r.begin) + ", " +
         std::to_string(r.end) + "))";
}

// What the assembler reads as a `.region` kind: letters, digits and '_', not starting with a digit.
bool is_region_kind(const std::string& s) {
  if (s.empty() || std::isdigit(static_cast<unsigned char>(s[0]))) return false;
  return std::all_of(s.begin(), s.end(), [](unsigned char ch) { return std::isalnum(ch) || ch == '_'; });
}

}  // namespace

// One pass with a stack of the regions that enclose the current one.
void validate_regions(const Program& p) {
  if (!std::isfinite(p.ideal_bytes) || p.ideal_bytes < 0)
    throw Error("the program's ideal bytes " + number_text(p.ideal_bytes) + " are not a finite count >= 0");
  std::vector<size_t> open;
  for (size_t i = 0; i < p.regions.size(); ++i) {
    const Region& r = p.regions[i];
    if (!is_region_kind(r.kind)) throw Error(region_text(r, i) + ": the kind is not an identifier");
    if (r.begin >= r.end) throw Error(region_text(r, i) + " holds no instructions");
    if (r.end > p.code.size())
      throw Error(region_text(r, i) + " ends past the code (" + std::to_string(p.code.size()) + " instructions)");
    for (auto [what, v] : {std::pair{"flops", r.flops}, std::pair{"bytes", r.bytes},
                           std::pair{"ideal_bytes", r.ideal_bytes}})
      if (!std::isfinite(v) || v < 0)
        throw Error(region_text(r, i) + ": " + what + " " + number_text(v) + " is not a finite count >= 0");
    if (i > 0 && r.begin < p.regions[i - 1].begin)
      throw Error(region_text(r, i) + " begins before the region listed before it (regions are listed by begin)");
    while (!open.empty() && p.regions[open.back()].end <= r.begin) open.pop_back();
    if (!open.empty() && r.end > p.regions[open.back()].end)
      throw Error(region_text(r, i) + " overlaps " + region_text(p.regions[open.back()], open.back()) +
                  " without nesting in it");
    open.push_back(i);
  }
}

std::vector<int> region_parents(const std::vector<Region>& regions) {
  std::vector<int> parent(regions.size(), -1);
  std::vector<int> open;
  for (size_t i = 0; i < regions.size(); ++i) {
    while (!open.empty() && regions[open.back()].end <= regions[i].begin) open.pop_back();
    if (!open.empty()) parent[i] = open.back();
    open.push_back(static_cast<int>(i));
  }
  return parent;
}

std::vector<uint8_t> serialize(const Program& p) {
  Writer w;
  w.raw(kMagic, 4);
  w.u32(kProgramVersion);
  const bool ideal = has_ideal_bytes(p);
  w.u32(4 + !p.source.empty() + !p.regions.empty() + (p.cores != 1) + p.timing_only + ideal);
  w.section(kCode, code_payload(p));
  w.section(kTensors, tensors_payload(p));
  w.section(kConst, p.const_data);
  w.section(kName, std::vector<uint8_t>(p.name.begin(), p.name.end()));
  if (!p.source.empty()) w.section(kSource, source_payload(p));
  if (!p.regions.empty()) w.section(kRegions, regions_payload(p));
  if (p.cores != 1) {
    Writer c;
    c.u32(p.cores);
    w.section(kCores, c.out);
  }
  if (p.timing_only) {  // no payload; a reader that predates it finds the constants missing and refuses the file
    w.section(kTimingOnly, {});
  }
  if (ideal) w.section(kIdeal, ideal_payload(p));
  return std::move(w.out);
}

Program deserialize(const std::vector<uint8_t>& bytes) {
  Reader head(bytes, 0, bytes.size(), "header");
  if (bytes.size() < 4 || std::memcmp(bytes.data(), kMagic, 4) != 0)
    throw Error("program: byte 0: not a tpusim program (bad magic)");
  head.bytes(4, "magic");
  uint32_t version = head.u32("version");
  if (version != kProgramVersion)
    head.fail("unsupported program version " + std::to_string(version) + " (this build reads " +
                  std::to_string(kProgramVersion) + ")",
              4);
  uint32_t sections = head.u32("section count");

  Program p;
  std::vector<size_t> tensor_offsets;
  size_t source_offset = 0, regions_offset = 0, ideal_offset = 0;
  std::optional<std::vector<double>> ideal;
  std::set<uint32_t> seen;
  for (uint32_t s = 0; s < sections; ++s) {
    size_t at = head.pos();
    uint32_t id = head.u32("section id");
    uint64_t len = head.u64("section length");
    std::string what = "section " + std::to_string(id) + " (" + section_name(id) + ")";
    if (len > head.left())
      head.fail(what + " truncated: needs " + std::to_string(len) + " bytes, " + std::to_string(head.left()) + " left",
                at);
    if (((id >= kCode && id <= kCores) || id == kIdeal) && !seen.insert(id).second)
      head.fail("duplicate " + what, at);
    Reader r(bytes, head.pos(), head.pos() + len, what);
    head.skip(len, "section");
    switch (id) {
      case kCode: read_code(r, p); break;
      case kTensors: read_tensors(r, p, tensor_offsets); break;
      case kConst: p.const_data = r.raw(len, "constant data"); break;
      case kName: p.name = r.bytes(len, "name"); break;
      case kSource: source_offset = at, read_source(r, p); break;
      case kRegions: regions_offset = at, read_regions(r, p); break;
      case kCores:
        p.cores = r.u32("cores");
        if (p.cores < 1 || p.cores > kMaxCores)
          r.fail("the program asks for " + std::to_string(p.cores) + " cores (1.." + std::to_string(kMaxCores) + ")",
                 at);
        break;
      case kTimingOnly: p.timing_only = true; break;
      case kIdeal: ideal_offset = at, ideal = read_ideal(r, p); break;
      default: r.skip(len, "section"); break;  // unknown section: skipped, so later versions can add some
    }
    r.expect_end();
  }
  head.expect_end();
  if (ideal) {
    if (ideal->size() != p.regions.size())
      head.fail("section 9 (ideal bytes) has " + std::to_string(ideal->size()) + " region values for " +
                    std::to_string(p.regions.size()) + " regions",
                ideal_offset);
    for (size_t i = 0; i < ideal->size(); ++i) p.regions[i].ideal_bytes = (*ideal)[i];
  }
  validate(p, tensor_offsets, source_offset, regions_offset);
  return p;
}

void save_program(const Program& p, const std::string& path) {
  validate_tensors(p);  // never write a file that load_program refuses
  validate_regions(p);
  std::vector<uint8_t> bytes = serialize(p);
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) throw Error("cannot open '" + path + "' for writing: " + std::strerror(errno));
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  f.close();
  if (!f) throw Error("cannot write '" + path + "': " + std::strerror(errno));
}

Program load_program(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw Error("cannot open '" + path + "': " + std::strerror(errno));
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (f.bad()) throw Error("cannot read '" + path + "': " + std::strerror(errno));
  try {
    return deserialize(bytes);
  } catch (const Error& e) {
    throw Error(path + ": " + e.what());
  }
}

}  // namespace tpusim::isa
