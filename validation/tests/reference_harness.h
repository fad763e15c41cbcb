// Shared pieces of the reference tests: a tiny program builder over isa::encode, random data of each type, and
// the pair (simulated chip, reference machine) that every comparison runs on.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <functional>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "reference/numerics.h"
#include "reference/reference.h"
#include "reference/tolerance.h"
#include "tpusim/isa/isa.h"
#include "tpusim/isa/program.h"
#include "tpusim/sim/chip.h"

namespace tpusim::reftest {

using isa::DType;
using isa::Op;
namespace ref = tpusim::reference;

// Builds a program one instruction at a time, operands by their isa.def names (unnamed ones are 0).
struct Builder {
  isa::Program p;
  Builder& emit(Op op, std::initializer_list<std::pair<const char*, int64_t>> operands) {
    isa::Instr in;
    in.op = op;
    for (const auto& [name, v] : operands) {
      int i = in.desc().operand_index(name);
      if (i < 0) throw std::logic_error(in.desc().mnemonic + " has no operand " + name);
      in.f[i] = v;
    }
    p.code.push_back(isa::encode(in));
    return *this;
  }
  Builder& li(int r, int64_t v) { return emit(Op::LI, {{"rd", r}, {"imm", v}}); }
  Builder& fence() { return emit(Op::FENCE, {}); }
  // One contiguous transfer of `bytes` bytes (registers r28..r31 are scratch).
  Builder& load(uint64_t vaddr, uint64_t haddr, int64_t bytes) { return transfer(Op::DMALD, vaddr, haddr, bytes); }
  Builder& store(uint64_t haddr, uint64_t vaddr, int64_t bytes) { return transfer(Op::DMAST, vaddr, haddr, bytes); }

 private:
  Builder& transfer(Op op, uint64_t vaddr, uint64_t haddr, int64_t bytes) {
    li(28, static_cast<int64_t>(vaddr)).li(29, static_cast<int64_t>(haddr)).li(30, 1).li(31, bytes);
    return emit(op, {{"vaddr", 28}, {"haddr", 29}, {"rows", 30}, {"rowbytes", 31}, {"hstride", 31}, {"vstride", 31}});
  }
};

// Values <-> bytes in the ISA's encoding (little-endian; the reference's own encoder).
inline std::vector<uint8_t> encode(const std::vector<double>& v, DType t) {
  std::vector<uint8_t> out(v.size() * ref::size_of(t));
  for (size_t i = 0; i < v.size(); ++i) ref::store_value(out.data() + i * ref::size_of(t), t, v[i]);
  return out;
}
inline std::vector<double> decode(const std::vector<uint8_t>& b, DType t) {
  std::vector<double> out(b.size() / ref::size_of(t));
  for (size_t i = 0; i < out.size(); ++i) out[i] = ref::load_value(b.data() + i * ref::size_of(t), t);
  return out;
}

// Random values of type t: integers over [lo, hi]; floats as +-m * 2^e with e uniform in [elo, ehi] (so small
// and large magnitudes both occur), rounded to t.
struct Random {
  std::mt19937_64 gen;
  explicit Random(uint64_t seed) : gen(seed) {}
  int64_t integer(int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(gen); }
  double real(double lo, double hi) { return std::uniform_real_distribution<double>(lo, hi)(gen); }
  double value(DType t, int elo = -4, int ehi = 4) {
    if (t == DType::I8) return static_cast<double>(integer(-128, 127));
    if (t == DType::I32) return static_cast<double>(integer(INT32_MIN, INT32_MAX));
    double v = std::ldexp(real(1, 2), static_cast<int>(integer(elo, ehi))) * (integer(0, 1) ? 1 : -1);
    return ref::cast_to(v, t);
  }
  std::vector<double> values(DType t, size_t n, int elo = -4, int ehi = 4) {
    std::vector<double> v(n);
    for (auto& x : v) x = value(t, elo, ehi);
    return v;
  }
};

// Float results compared "bit for bit": equal values, NaN matching NaN (payloads and the sign of zero are not
// compared: the ISA does not specify them).
inline bool same(double a, double b) { return a == b || (std::isnan(a) && std::isnan(b)); }

// A value as a message shows it: decimal and exact hexadecimal.
inline std::string num(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.9g (%a)", v, v);
  return buf;
}

// Fails with the first few elements for which ok(i) is false, each described by describe(i).
inline void expect_all(const std::string& what, size_t n, const std::function<bool(size_t)>& ok,
                       const std::function<std::string(size_t)>& describe) {
  size_t bad = 0;
  std::string first;
  for (size_t i = 0; i < n; ++i)
    if (!ok(i) && bad++ < 5) first += "\n    [" + std::to_string(i) + "] " + describe(i);
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << n << " elements differ" << first;
}

// The chip every test in this process runs on, with a reference machine of the same shape for each way of
// summing floats. SystemC allows one chip per process: ctest runs each test in its own process; run directly,
// the binary shares the first test's chip, and a test that needs another shape skips.
struct Machines {
  sim::ChipConfig cfg;
  std::vector<std::string> sets;
  std::unique_ptr<sim::Chip> chip;
  std::unique_ptr<ref::Reference> fp64;    // FloatSums::Fp64: within tolerance.h's bounds
  std::unique_ptr<ref::Reference> isaf32;  // FloatSums::IsaF32: bit for bit

  void write(uint64_t addr, const std::vector<uint8_t>& bytes) {
    chip->write_hbm(addr, bytes.data(), bytes.size());
    fp64->write_hbm(addr, bytes.data(), bytes.size());
    isaf32->write_hbm(addr, bytes.data(), bytes.size());
  }
  void write(uint64_t addr, const std::vector<double>& v, DType t) { write(addr, encode(v, t)); }
  void run(const isa::Program& p) {
    chip->run(p);
    fp64->run(p);
    isaf32->run(p);
  }
  std::vector<double> read_sim(uint64_t addr, size_t n, DType t) {
    std::vector<uint8_t> b(n * ref::size_of(t));
    chip->read_hbm(addr, b.data(), b.size());
    return decode(b, t);
  }
  static std::vector<double> read(const ref::Reference& r, uint64_t addr, size_t n, DType t) {
    std::vector<uint8_t> b(n * ref::size_of(t));
    r.read_hbm(addr, b.data(), b.size());
    return decode(b, t);
  }
};

inline const std::vector<std::string>& default_sets() {
  static const std::vector<std::string> s{"mxu.rows=8", "mxu.cols=8", "mxu.acc_rows=32"};
  return s;
}

// The process's machines; nullptr when the process already holds a chip of another shape.
Machines* machines(const std::vector<std::string>& sets = default_sets());

#define TPUSIM_MACHINES(m, ...)                                                          \
  ::tpusim::reftest::Machines* m = ::tpusim::reftest::machines(__VA_ARGS__);             \
  if (!m) GTEST_SKIP() << "this process already elaborated a chip of another shape; run the test alone (ctest)"

}  // namespace tpusim::reftest
