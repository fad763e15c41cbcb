// The built-in kernels (kernels/*.s) over random shapes that are not multiples of the array, M tiled through a
// small accumulator memory: the simulator against (a) the reference machine running the same program and (b) the
// math done directly on the host (int64 / double loops, the host's own f32 arithmetic). int8 results exactly,
// bf16 within tolerance.h's bound.
#include <algorithm>
#include <cstdio>
#include <functional>
#include <map>

#include "reference_harness.h"
#include "tpusim/kernels/kernels.h"
#include "tpusim/sim/config.h"

namespace tpusim::reftest {
namespace {

constexpr int64_t kDtCode[] = {0, 1, 2, 3};  // DT_I8, DT_I32, DT_BF16, DT_F32 = isa::DType values
int64_t code(DType t) { return kDtCode[static_cast<int>(t)]; }


struct Io {
  std::vector<double> values;
  DType dt;
};
struct KernelRun {
  std::vector<double> sim, fp64, isaf32;
};

// Assembles `kernel` for this chip, writes the inputs where the program declares them, fills the output with a
// pattern, runs it on all machines and reads the output `out` back.
KernelRun run_kernel(Machines& m, const std::string& kernel, std::map<std::string, int64_t> defines,
                     const std::map<std::string, Io>& inputs, const std::string& out = "c") {
  for (const auto& [name, v] : sim::kernel_symbols(m.cfg)) defines[name] = v;
  isa::Program p = kernels::assemble(kernel, defines);
  for (const auto& [name, io] : inputs) {
    const isa::TensorDecl* d = p.find(name);
    if (!d) throw std::logic_error(kernel + " has no tensor " + name);
    if (d->dtype != io.dt || static_cast<size_t>(d->elements()) != io.values.size())
      throw std::logic_error(kernel + ": tensor " + name + " of another type or size");
    m.write(d->addr, io.values, io.dt);
  }
  const isa::TensorDecl* o = p.find(out);
  m.write(o->addr, std::vector<uint8_t>(o->bytes(), 0xa5));
  m.run(p);
  const size_t n = static_cast<size_t>(o->elements());
  return {m.read_sim(o->addr, n, o->dtype), Machines::read(*m.fp64, o->addr, n, o->dtype),
          Machines::read(*m.isaf32, o->addr, n, o->dtype)};
}


struct Shape {
  int64_t m, k, n;
};
std::string text(const std::string& kernel, const Shape& s) {
  return kernel + " M=" + std::to_string(s.m) + " K=" + std::to_string(s.k) + " N=" + std::to_string(s.n);
}

// A few fixed shapes (one element; exactly one tile; one past the tile), then random ones.
std::vector<Shape> shapes(int count, uint64_t seed, const sim::ChipConfig& cfg) {
  const int64_t R = cfg.mxu.rows, C = cfg.mxu.cols;
  std::vector<Shape> s{{1, 1, 1}, {R, R, C}, {cfg.mxu.acc_rows / 2 + 1, R + 1, C + 1}};
  Random r(seed);
  while (static_cast<int>(s.size()) < count) s.push_back({r.integer(1, 70), r.integer(1, 50), r.integer(1, 45)});
  s.resize(count);
  return s;
}

// The exact GEMM (as doubles) and sum |a*b| per element.
void host_gemm(const std::vector<double>& a, const std::vector<double>& b, const Shape& s, std::vector<double>& exact,
               std::vector<double>& mag) {
  exact.assign(s.m * s.n, 0), mag.assign(s.m * s.n, 0);
  for (int64_t i = 0; i < s.m; ++i)
    for (int64_t l = 0; l < s.k; ++l)
      for (int64_t j = 0; j < s.n; ++j) {
        double p = a[i * s.k + l] * b[l * s.n + j];  // exact: i8 x i8 or bf16 x bf16
        exact[i * s.n + j] += p;                    // exact for i8 (|sum| < 2^53); fp64 for bf16
        mag[i * s.n + j] += std::fabs(p);
      }
}

// ---- int8 ---------------------------------------------------------------------------------------------------

struct Int8Options {
  bool bias = false, relu = false;
  DType out = DType::I32;
  float scale = 0;  // 0: none
};

void gemm_int8_cases(Machines& m, const std::vector<Shape>& cases, const Int8Options& opt, uint64_t seed) {
  Random r(seed);
  for (const Shape& s : cases) {
    std::vector<double> a = r.values(DType::I8, s.m * s.k), b = r.values(DType::I8, s.k * s.n), bias(s.n);
    for (auto& x : bias) x = static_cast<double>(r.integer(-20000, 20000));
    std::map<std::string, int64_t> defs{{"M", s.m}, {"K", s.k}, {"N", s.n}, {"OUT_DT", code(opt.out)},
                                        {"BIAS", opt.bias}, {"RELU", opt.relu},
                                        {"SCALE", opt.scale != 0 ? ref::bits_of_f32(opt.scale) : 0}};
    std::map<std::string, Io> in{{"a", {a, DType::I8}}, {"b", {b, DType::I8}}};
    if (opt.bias) in["bias"] = {bias, DType::I32};
    KernelRun run = run_kernel(m, "gemm_int8.s", defs, in);

    // Host math: int64 sums; then bias, relu, and the scale as the host's own f32 multiply; round and saturate.
    std::vector<double> exact, mag, want(s.m * s.n);
    host_gemm(a, b, s, exact, mag);
    for (size_t i = 0; i < want.size(); ++i) {
      int64_t x = static_cast<int64_t>(exact[i]) + (opt.bias ? static_cast<int64_t>(bias[i % s.n]) : 0);
      if (opt.relu) x = std::max<int64_t>(x, 0);
      double v = opt.scale != 0 ? double(float(x) * opt.scale) : double(x);
      want[i] = opt.out == DType::I8 ? std::clamp(std::nearbyint(v), -128.0, 127.0) : v;
    }
    const std::string what = text("gemm_int8.s", s);
    expect_all(what + ": sim vs reference", want.size(), [&](size_t i) { return run.sim[i] == run.fp64[i]; },
               [&](size_t i) { return "sim " + num(run.sim[i]) + ", reference " + num(run.fp64[i]); });
    expect_all(what + ": sim vs host", want.size(), [&](size_t i) { return run.sim[i] == want[i]; },
               [&](size_t i) { return "sim " + num(run.sim[i]) + ", host " + num(want[i]); });
    expect_all(what + ": reference vs host", want.size(), [&](size_t i) { return run.fp64[i] == want[i]; },
               [&](size_t i) { return "reference " + num(run.fp64[i]) + ", host " + num(want[i]); });
  }
}

TEST(ReferenceKernels, GemmInt8ToInt32) {
  TPUSIM_MACHINES(m);
  gemm_int8_cases(*m, shapes(8, 101, m->cfg), {}, 1);
}

TEST(ReferenceKernels, GemmInt8BiasRelu) {
  TPUSIM_MACHINES(m);
  gemm_int8_cases(*m, shapes(5, 102, m->cfg), {.bias = true, .relu = true}, 2);
}

TEST(ReferenceKernels, GemmInt8RequantisedToInt8) {
  // SCALE = 1.3/4096: sums of up to 50 products of 2^14 land around +-260 and saturate sometimes.
  TPUSIM_MACHINES(m);
  gemm_int8_cases(*m, shapes(5, 103, m->cfg), {.bias = true, .relu = false, .out = DType::I8, .scale = 1.3f / 4096},
                  3);
}

// ---- bf16 ---------------------------------------------------------------------------------------------------

struct Bf16Options {
  bool bias = false, relu = false;
  DType out = DType::F32;
};

void gemm_bf16_cases(Machines& m, const std::vector<Shape>& cases, const Bf16Options& opt, uint64_t seed) {
  Random r(seed);
  for (const Shape& s : cases) {
    std::vector<double> a = r.values(DType::BF16, s.m * s.k, -3, 3), b = r.values(DType::BF16, s.k * s.n, -3, 3);
    std::vector<double> bias = r.values(DType::F32, s.n, -2, 2);
    std::map<std::string, int64_t> defs{{"M", s.m},           {"K", s.k},          {"N", s.n},
                                        {"OUT_DT", code(opt.out)}, {"BIAS", opt.bias}, {"RELU", opt.relu}};
    std::map<std::string, Io> in{{"a", {a, DType::BF16}}, {"b", {b, DType::BF16}}};
    if (opt.bias) in["bias"] = {bias, DType::F32};
    KernelRun run = run_kernel(m, "gemm_bf16.s", defs, in);
    const std::string what = text("gemm_bf16.s", s);
    std::vector<double> exact, mag, want(s.m * s.n), err(s.m * s.n);
    host_gemm(a, b, s, exact, mag);
    for (size_t i = 0; i < want.size(); ++i) {
      double x = exact[i] + (opt.bias ? bias[i % s.n] : 0);
      want[i] = opt.relu ? std::max(x, 0.0) : x;
      err[i] = ref::sum_error_bound(s.k, mag[i] + (opt.bias ? std::fabs(bias[i % s.n]) : 0));
    }
    expect_all(what + ": sim vs reference", want.size(),
               [&](size_t i) { return ref::within_sum_bound(opt.out, run.sim[i], run.fp64[i], err[i]); },
               [&](size_t i) { return "sim " + num(run.sim[i]) + ", reference " + num(run.fp64[i]) + ", bound " + num(err[i]); });
    expect_all(what + ": sim vs host fp64", want.size(),
               [&](size_t i) { return ref::within_sum_bound(opt.out, run.sim[i], want[i], err[i]); },
               [&](size_t i) { return "sim " + num(run.sim[i]) + ", host " + num(want[i]) + ", bound " + num(err[i]); });
    expect_all(what + ": reference vs host fp64", want.size(),
               [&](size_t i) { return ref::within_sum_bound(opt.out, run.fp64[i], want[i], err[i]); },
               [&](size_t i) { return "reference " + num(run.fp64[i]) + ", host " + num(want[i]); });
  }
}

TEST(ReferenceKernels, GemmBf16ToF32) {
  TPUSIM_MACHINES(m);
  gemm_bf16_cases(*m, shapes(7, 201, m->cfg), {}, 4);
}

TEST(ReferenceKernels, GemmBf16ToBf16BiasRelu) {
  TPUSIM_MACHINES(m);
  gemm_bf16_cases(*m, shapes(5, 202, m->cfg), {.bias = true, .relu = true, .out = DType::BF16}, 5);
}

// ---- gemm.s with TRANS_B: c = a @ b^T, b given as [N, K] --------------------------------------------------------

// Runs gemm.s twice, with b as [N, K] and TRANS_B=1, and with b^T as [K, N] and TRANS_B=0: the results must be
// equal bit for bit (the same products, summed in the same order), TRANS_B=1 must match the reference and the
// host (int8 exactly, bf16 within the bound). Timing: mxu.lw trans has the timing of a plain load and the DMA
// moves the same bytes, but as nt rows of kt elements instead of kt rows of nt, so HBM channels/banks and VMEM
// banks see other addresses: with `exact_cycles` (memories whose timing depends only on the bytes moved) the
// cycles must be equal, otherwise within 3%.
void gemm_trans_b_cases(Machines& m, DType dt, const std::vector<Shape>& cases, uint64_t seed, bool exact_cycles) {
  Random r(seed);
  const DType out = dt == DType::I8 ? DType::I32 : DType::F32;
  for (const Shape& s : cases) {
    std::vector<double> a = r.values(dt, s.m * s.k, -3, 3), bt = r.values(dt, s.n * s.k, -3, 3), b(s.k * s.n);
    for (int64_t l = 0; l < s.k; ++l)
      for (int64_t j = 0; j < s.n; ++j) b[l * s.n + j] = bt[j * s.k + l];
    std::map<std::string, int64_t> defs{{"M", s.m}, {"K", s.k}, {"N", s.n}, {"IN_DT", code(dt)}, {"OUT_DT", code(out)}};
    for (const auto& [name, v] : sim::kernel_symbols(m.cfg)) defs[name] = v;
    std::map<std::string, int64_t> plain_defs = defs;
    defs["TRANS_B"] = 1;
    const KernelRun t = run_kernel(m, "gemm.s", defs, {{"a", {a, dt}}, {"b", {bt, dt}}});
    const KernelRun p = run_kernel(m, "gemm.s", plain_defs, {{"a", {a, dt}}, {"b", {b, dt}}});
    const std::string what = text(std::string("gemm.s TRANS_B=1 ") + isa::dtype_name(dt), s);
    std::vector<double> exact, mag;
    host_gemm(a, b, s, exact, mag);
    expect_all(what + ": sim vs sim TRANS_B=0 on b^T", exact.size(), [&](size_t i) { return same(t.sim[i], p.sim[i]); },
               [&](size_t i) { return "TRANS_B=1 " + num(t.sim[i]) + ", TRANS_B=0 " + num(p.sim[i]); });
    expect_all(what + ": sim and reference vs host", exact.size(), [&](size_t i) {
      if (dt == DType::I8) return t.sim[i] == exact[i] && t.fp64[i] == exact[i];
      const double err = ref::sum_error_bound(s.k, mag[i]);
      return ref::within_sum_bound(out, t.sim[i], exact[i], err) && ref::within_sum_bound(out, t.fp64[i], exact[i], err);
    }, [&](size_t i) { return "sim " + num(t.sim[i]) + ", reference " + num(t.fp64[i]) + ", host " + num(exact[i]); });
    // The same timing contract: equal cycles.
    const uint64_t ct = m.chip->run(kernels::assemble("gemm.s", defs)).stats.cycles;
    const uint64_t cp = m.chip->run(kernels::assemble("gemm.s", plain_defs)).stats.cycles;
    if (exact_cycles)
      EXPECT_EQ(ct, cp) << what << ": cycles with TRANS_B=1 and TRANS_B=0";
    else
      EXPECT_LE(std::fabs(double(ct) - double(cp)), 0.03 * double(cp)) << what << ": TRANS_B=1 " << ct << " cycles, TRANS_B=0 " << cp;
  }
}

TEST(ReferenceKernels, GemmTransBInt8AndBf16) {
  TPUSIM_MACHINES(m);
  gemm_trans_b_cases(*m, DType::I8, shapes(7, 501, m->cfg), 11, false);
  gemm_trans_b_cases(*m, DType::BF16, shapes(7, 502, m->cfg), 12, false);
}

// One HBM channel with one bank and one VMEM bank: memory timing depends on the bytes moved only, so TRANS_B=1
// and TRANS_B=0 must take exactly the same cycles (its own process under ctest).
TEST(ReferenceKernels, GemmTransBSameCyclesOnUniformMemory) {
  static const std::vector<std::string> sets{"mxu.rows=8",    "mxu.cols=8",  "mxu.acc_rows=32",
                                             "hbm.channels=1", "hbm.banks=1", "vmem.banks=1"};
  TPUSIM_MACHINES(m, sets);
  gemm_trans_b_cases(*m, DType::I8, shapes(6, 503, m->cfg), 13, true);
  gemm_trans_b_cases(*m, DType::BF16, shapes(6, 504, m->cfg), 14, true);
}

TEST(ReferenceKernels, GemmTransBRefusesBTiled) {
  std::map<std::string, int64_t> d{{"M", 8}, {"K", 8}, {"N", 8}, {"TRANS_B", 1}, {"B_TILED", 1}, {"MXU_ROWS", 8},
                                   {"MXU_COLS", 8}, {"ACC_ROWS", 32}, {"VMEM_BYTES", 1 << 20}};
  try {
    kernels::assemble("gemm.s", d);
    ADD_FAILURE() << "gemm.s accepted TRANS_B with B_TILED";
  } catch (const isa::Error& e) {
    EXPECT_NE(std::string(e.what()).find("TRANS_B and B_TILED"), std::string::npos) << e.what();
  }
}

// ---- gemm.s with BATCH: c[i] = a[i] @ b[i] for i < BATCH -------------------------------------------------------

// Runs gemm.s once with BATCH items and once per item (BATCH=1 on each item's a and b): the items' results must be
// equal bit for bit (each item is the same tiles, folds and drains), and match the reference and the host (int8
// exactly, bf16 within the bound); the batch, whose items go on while the one before drains, takes fewer cycles
// than the items one call after the other.
void gemm_batch_cases(Machines& m, DType dt, const std::vector<Shape>& cases, int64_t batch, bool trans_b,
                      uint64_t seed) {
  Random r(seed);
  const DType out = dt == DType::I8 ? DType::I32 : DType::F32;
  for (const Shape& s : cases) {
    std::vector<double> a = r.values(dt, batch * s.m * s.k, -3, 3), b = r.values(dt, batch * s.k * s.n, -3, 3);
    std::map<std::string, int64_t> one{{"M", s.m}, {"K", s.k}, {"N", s.n}, {"IN_DT", code(dt)}, {"OUT_DT", code(out)},
                                       {"TRANS_B", trans_b}};
    std::map<std::string, int64_t> all = one;
    all["BATCH"] = batch;
    const KernelRun got = run_kernel(m, "gemm.s", all, {{"a", {a, dt}}, {"b", {b, dt}}});
    const std::string what = text("gemm.s BATCH=" + std::to_string(batch) + (trans_b ? " TRANS_B=1 " : " ") +
                                      isa::dtype_name(dt), s);
    uint64_t separate = 0;
    for (int64_t i = 0; i < batch; ++i) {
      const std::vector<double> ai(a.begin() + i * s.m * s.k, a.begin() + (i + 1) * s.m * s.k);
      const std::vector<double> bi(b.begin() + i * s.k * s.n, b.begin() + (i + 1) * s.k * s.n);
      const KernelRun item = run_kernel(m, "gemm.s", one, {{"a", {ai, dt}}, {"b", {bi, dt}}});
      std::map<std::string, int64_t> defs = one;
      for (const auto& [name, v] : sim::kernel_symbols(m.cfg)) defs[name] = v;
      separate += m.chip->run(kernels::assemble("gemm.s", defs)).stats.cycles;
      std::vector<double> bk = bi;  // as [K, N]
      if (trans_b)
        for (int64_t l = 0; l < s.k; ++l)
          for (int64_t j = 0; j < s.n; ++j) bk[l * s.n + j] = bi[j * s.k + l];
      std::vector<double> exact, mag;
      host_gemm(ai, bk, s, exact, mag);
      const size_t at = static_cast<size_t>(i * s.m * s.n);
      const std::string it = what + " item " + std::to_string(i);
      expect_all(it + ": batch vs its own call", exact.size(), [&](size_t e) { return same(got.sim[at + e], item.sim[e]); },
                 [&](size_t e) { return "batch " + num(got.sim[at + e]) + ", own call " + num(item.sim[e]); });
      expect_all(it + ": sim and reference vs host", exact.size(), [&](size_t e) {
        if (dt == DType::I8) return got.sim[at + e] == exact[e] && got.fp64[at + e] == exact[e];
        const double err = ref::sum_error_bound(s.k, mag[e]);
        return ref::within_sum_bound(out, got.sim[at + e], exact[e], err) &&
               ref::within_sum_bound(out, got.fp64[at + e], exact[e], err);
      }, [&](size_t e) { return "sim " + num(got.sim[at + e]) + ", reference " + num(got.fp64[at + e]) + ", host " + num(exact[e]); });
    }
    std::map<std::string, int64_t> defs = all;
    for (const auto& [name, v] : sim::kernel_symbols(m.cfg)) defs[name] = v;
    const uint64_t together = m.chip->run(kernels::assemble("gemm.s", defs)).stats.cycles;
    EXPECT_LT(together, separate) << what << ": the batch in one call, " << together << " cycles, against "
                                  << separate << " for its items one call after the other";
  }
}

TEST(ReferenceKernels, GemmBatchItemsAsTheirOwnCalls) {
  TPUSIM_MACHINES(m);
  // (shapes(): one element, one tile, more than a tile each way with two row tiles, then random ones)
  gemm_batch_cases(*m, DType::BF16, shapes(5, 601, m->cfg), 5, false, 21);
  gemm_batch_cases(*m, DType::BF16, shapes(4, 602, m->cfg), 3, true, 22);
  gemm_batch_cases(*m, DType::I8, shapes(4, 603, m->cfg), 4, false, 23);
}

TEST(ReferenceKernels, GemmBatchRefusesWhatItDoesNotDo) {
  for (const char* with : {"GROUP_N", "ACT_RESIDENT", "B_TILED"}) {
    std::map<std::string, int64_t> d{{"M", 8}, {"K", 8}, {"N", 8}, {"BATCH", 2}, {with, 8}, {"MXU_ROWS", 8},
                                     {"MXU_COLS", 8}, {"ACC_ROWS", 32}, {"VMEM_BYTES", 1 << 20}};
    if (std::string(with) != "GROUP_N") d[with] = 1;
    try {
      kernels::assemble("gemm.s", d);
      ADD_FAILURE() << "gemm.s accepted BATCH with " << with;
    } catch (const isa::Error& e) {
      EXPECT_NE(std::string(e.what()).find("BATCH must be positive"), std::string::npos) << e.what();
    }
  }
}

// ---- gather.s -----------------------------------------------------------------------------------------------

TEST(ReferenceKernels, GatherBf16AndF32) {
  TPUSIM_MACHINES(m);
  Random r(601);
  struct Case {
    int64_t M, D, V;
    DType dt;
  };
  for (const Case& c : {Case{128, 768, 1000, DType::BF16}, Case{128, 768, 1000, DType::F32}, Case{1, 1, 1, DType::F32},
                        Case{77, 33, 5, DType::BF16}, Case{300, 100, 2000, DType::F32}}) {
    std::vector<double> table = r.values(c.dt, c.V * c.D, -8, 8), ids(c.M);
    for (auto& x : ids) x = static_cast<double>(r.integer(0, c.V - 1));
    ids[0] = static_cast<double>(c.V - 1);  // the last row too
    const KernelRun k = run_kernel(*m, "gather.s", {{"M", c.M}, {"D", c.D}, {"V", c.V}, {"DT", code(c.dt)}},
                                   {{"ids", {ids, DType::I32}}, {"table", {table, c.dt}}}, "y");
    std::vector<double> want(c.M * c.D);
    for (int64_t i = 0; i < c.M; ++i)
      for (int64_t j = 0; j < c.D; ++j) want[i * c.D + j] = table[static_cast<int64_t>(ids[i]) * c.D + j];
    expect_all("gather.s M=" + std::to_string(c.M) + " D=" + std::to_string(c.D) + " V=" + std::to_string(c.V) + " " +
                   isa::dtype_name(c.dt),
               want.size(), [&](size_t i) { return same(k.sim[i], want[i]) && same(k.fp64[i], want[i]); },
               [&](size_t i) { return "sim " + num(k.sim[i]) + ", reference " + num(k.fp64[i]) + ", host " + num(want[i]); });
  }
}

// An id beyond the table (or negative) in gather.s: a run-time error naming the pc, dma.gather and the id.
TEST(ReferenceKernels, GatherIdOutsideTheTableIsAnError) {
  TPUSIM_MACHINES(m);
  for (double bad : {-1.0, 50.0}) {
    std::vector<double> ids(40, 3.0);
    ids[37] = bad;
    std::string msg;
    try {
      run_kernel(*m, "gather.s", {{"M", 40}, {"D", 16}, {"V", 50}}, {{"ids", {ids, DType::I32}},
                 {"table", {std::vector<double>(50 * 16, 1.0), DType::BF16}}}, "y");
    } catch (const std::exception& e) {
      msg = e.what();
    }
    EXPECT_NE(msg.find("dma.gather"), std::string::npos) << msg;
    EXPECT_NE(msg.find("pc "), std::string::npos) << msg;
    EXPECT_NE(msg.find("index " + std::to_string(static_cast<int>(bad))), std::string::npos) << msg;
  }
}

// ---- cast.s -------------------------------------------------------------------------------------------------

TEST(ReferenceKernels, CastF32ToBf16AndToInt8Scaled) {
  TPUSIM_MACHINES(m);
  Random r(301);
  const float scale = 0.37f;
  for (int64_t n : {int64_t{1}, int64_t{33}, r.integer(100, 3000)}) {
    std::vector<double> x = r.values(DType::F32, n, -12, 12);
    for (size_t i = 0; i < x.size() && i < 4; ++i) x[i] = std::vector<double>{1 + 0x1p-8, 300.5, -128.5, 2.5}[i];
    // to bf16: the host's version is the integer bit trick on the f32 bits.
    KernelRun b = run_kernel(*m, "cast.s", {{"N", n}, {"SDT", 3}, {"DDT", 2}}, {{"x", {x, DType::F32}}}, "y");
    std::vector<double> want(n);
    for (int64_t i = 0; i < n; ++i) {
      uint32_t bits = ref::bits_of_f32(x[i]);
      want[i] = ref::f32_from_bits(((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16) << 16);
    }
    expect_all("cast.s f32->bf16 N=" + std::to_string(n), n,
               [&](size_t i) { return same(b.sim[i], want[i]) && same(b.fp64[i], want[i]); },
               [&](size_t i) { return "x " + num(x[i]) + ": sim " + num(b.sim[i]) + ", reference " + num(b.fp64[i]) + ", host " + num(want[i]); });
    // to i8 with SCALE: the host's f32 multiply, nearbyint (ties to even), clamp.
    KernelRun q = run_kernel(*m, "cast.s", {{"N", n}, {"SDT", 3}, {"DDT", 0}, {"SCALE", ref::bits_of_f32(scale)}},
                             {{"x", {x, DType::F32}}}, "y");
    for (int64_t i = 0; i < n; ++i) want[i] = std::clamp(std::nearbyint(double(float(x[i]) * scale)), -128.0, 127.0);
    expect_all("cast.s f32->i8 scale 0.37 N=" + std::to_string(n), n,
               [&](size_t i) { return q.sim[i] == want[i] && q.fp64[i] == want[i]; },
               [&](size_t i) { return "x " + num(x[i]) + ": sim " + num(q.sim[i]) + ", reference " + num(q.fp64[i]) + ", host " + num(want[i]); });
  }
}

// cast.s and gather.s shared over the cores (SHARE_CORES, an SPMD program; the compiler's whole-chip cast and
// embedding lookup). cast.s: on 3 cores the
// same bits as the host's bit trick and as the reference machine (which runs the cores one after another), for
// fewer chunks than cores (1 and 33 elements: the other cores skip), one chunk per core and several; and the
// same bits on one core. The vector unit is 8 x 8 = 64 lanes here and VMEM 16 KiB, so chunks are of at most
// 16384 / (2 x (4 + 2)) = 1365 -> 1344 elements: 3 cores take chunks of min(align(ceil(N / 3), 64), 1344), and
// N from 4100 on gives every core more than one. gather.s: 2 rows (the third core skips) and 1000 rows of 16
// bf16 elements, in chunks of at most (16384 - 256) / (2 x (32 + 4)) = 224 rows: 5 chunks of 200, two on each of
// cores 0 and 1; against the table's rows, on 3 cores and on 1.
TEST(ReferenceKernels, CastAndGatherSharedOverCoresSameBits) {
  static const std::vector<std::string> sets{"mxu.rows=8", "mxu.cols=8", "mxu.acc_rows=32", "chip.cores=3",
                                             "vmem.size_kib=16"};
  TPUSIM_MACHINES(m, sets);
  Random r(302);
  for (int64_t n : {int64_t{1}, int64_t{33}, int64_t{190}, r.integer(4100, 9000)}) {
    std::vector<double> x = r.values(DType::F32, n, -12, 12);
    std::vector<double> want(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      const uint32_t bits = ref::bits_of_f32(x[i]);
      want[i] = ref::f32_from_bits(((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16) << 16);
    }
    for (const int64_t cores : {int64_t{3}, int64_t{1}}) {
      const KernelRun b = run_kernel(*m, "cast.s", {{"N", n}, {"SDT", 3}, {"DDT", 2}, {"SHARE_CORES", cores}},
                                     {{"x", {x, DType::F32}}}, "y");
      expect_all("cast.s on " + std::to_string(cores) + " cores, N=" + std::to_string(n), static_cast<size_t>(n),
                 [&](size_t i) { return same(b.sim[i], want[i]) && same(b.fp64[i], want[i]); },
                 [&](size_t i) { return "sim " + num(b.sim[i]) + ", reference " + num(b.fp64[i]) + ", host " + num(want[i]); });
    }
  }
  for (const int64_t rows : {int64_t{2}, int64_t{1000}}) {
    const int64_t D = 16, V = 300;
    std::vector<double> table = r.values(DType::BF16, V * D, -8, 8), ids(static_cast<size_t>(rows));
    for (auto& x : ids) x = static_cast<double>(r.integer(0, V - 1));
    std::vector<double> want(static_cast<size_t>(rows * D));
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < D; ++j) want[i * D + j] = table[static_cast<int64_t>(ids[i]) * D + j];
    for (const int64_t cores : {int64_t{3}, int64_t{1}}) {
      const KernelRun k = run_kernel(*m, "gather.s", {{"M", rows}, {"D", D}, {"V", V}, {"SHARE_CORES", cores}},
                                     {{"ids", {ids, DType::I32}}, {"table", {table, DType::BF16}}}, "y");
      expect_all("gather.s on " + std::to_string(cores) + " cores, M=" + std::to_string(rows), want.size(),
                 [&](size_t i) { return same(k.sim[i], want[i]) && same(k.fp64[i], want[i]); },
                 [&](size_t i) { return "sim " + num(k.sim[i]) + ", reference " + num(k.fp64[i]) + ", host " + num(want[i]); });
    }
  }
}

// ---- colmean.s ----------------------------------------------------------------------------------------------

// colmean.s (a global average pool on the vector unit): each column's ROWS bf16 values summed in f32 in halves (of n
// rows, the last floor(n / 2) added onto the first, until one is left), times SCALE, cast to bf16 or f32. The
// simulator and the reference machine of the ISA's f32 order bit for bit as the host doing the same halvings in
// float; the fp64 reference (exact sums) within the output's rounding and the f32 sums' (ROWS x 2^-24 each). One
// row (no sums), odd counts, ResNet's 7 x 7 x 2048, and a VMEM of 16 KiB: 49 rows then take chunks of
// (16384 - 192) / (6 x 49 + 2) = 54 columns, 4 chunks for 200 (the same sums whatever the chunk).
TEST(ReferenceKernels, ColMeanSumsTheRowsInHalvesInF32) {
  static const std::vector<std::string> sets{"vmem.size_kib=16"};
  TPUSIM_MACHINES(m, sets);
  Random r(311);
  struct Case {
    int64_t rows, cols;
    DType out;
  };
  for (const Case& c : {Case{1, 5, DType::BF16}, Case{7, 33, DType::F32}, Case{49, 200, DType::BF16},
                        Case{49, 200, DType::F32}, Case{64, 70, DType::BF16}, Case{3, 1, DType::F32}}) {
    const std::vector<double> x = r.values(DType::BF16, static_cast<size_t>(c.rows * c.cols), -6, 6);
    const float scale = 1.0f / static_cast<float>(c.rows);
    const KernelRun k = run_kernel(*m, "colmean.s",
                                   {{"ROWS", c.rows}, {"COLS", c.cols}, {"DDT", code(c.out)},
                                    {"SCALE", ref::bits_of_f32(scale)}},
                                   {{"x", {x, DType::BF16}}}, "y");
    std::vector<double> want(static_cast<size_t>(c.cols)), exact(static_cast<size_t>(c.cols));
    for (int64_t j = 0; j < c.cols; ++j) {
      std::vector<float> v(static_cast<size_t>(c.rows));
      for (int64_t i = 0; i < c.rows; ++i) {
        v[static_cast<size_t>(i)] = static_cast<float>(x[static_cast<size_t>(i * c.cols + j)]);
        exact[static_cast<size_t>(j)] += x[static_cast<size_t>(i * c.cols + j)];
      }
      for (int64_t n = c.rows; n > 1;) {
        const int64_t h = n / 2;
        for (int64_t i = 0; i < h; ++i) v[static_cast<size_t>(i)] += v[static_cast<size_t>(n - h + i)];
        n -= h;
      }
      const double y = static_cast<double>(v[0] * scale);
      want[static_cast<size_t>(j)] = c.out == DType::BF16 ? ref::to_bf16(y) : y;
      exact[static_cast<size_t>(j)] *= static_cast<double>(scale);
    }
    const std::string what = "colmean.s ROWS=" + std::to_string(c.rows) + " COLS=" + std::to_string(c.cols) + " " +
                             isa::dtype_name(c.out);
    expect_all(what, want.size(),
               [&](size_t i) {
                 const double tol = std::fabs(exact[i]) * (c.out == DType::BF16 ? 0x1p-8 : 0x1p-24) +
                                    static_cast<double>(c.rows) * 0x1p-24 * 64.0;
                 return same(k.sim[i], want[i]) && same(k.isaf32[i], want[i]) && std::fabs(k.fp64[i] - exact[i]) <= tol;
               },
               [&](size_t i) {
                 return "sim " + num(k.sim[i]) + ", ISA-order reference " + num(k.isaf32[i]) + ", host " +
                        num(want[i]) + ", fp64 " + num(k.fp64[i]) + " (exact " + num(exact[i]) + ")";
               });
  }
}

// ---- another array shape (its own process under ctest) -----------------------------------------------------

const std::vector<std::string>& array16() {
  static const std::vector<std::string> s{"mxu.rows=16", "mxu.cols=16", "mxu.acc_rows=64"};
  return s;
}

TEST(ReferenceKernels, GemmsOn16x16Array) {
  TPUSIM_MACHINES(m, array16());
  gemm_int8_cases(*m, shapes(3, 401, m->cfg), {.bias = true, .relu = true}, 7);
  gemm_bf16_cases(*m, shapes(3, 402, m->cfg), {}, 8);
}

}  // namespace
}  // namespace tpusim::reftest
