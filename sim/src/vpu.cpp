// Timing: an instruction over E elements takes vpu.latency + ceil(E / (vpu.lanes * vpu.sublanes)) cycles, one at
// a time, in order (the special functions exp, log, sin, cos, erf, erfc, recip and rsqrt: ceil(E / vpu.special) when
// vpu.special is set and below the lanes' width, as a GPU's special function units, 16 per cycle per SM against
// its 128 FP32 lanes); its results are written (and its semaphore signalled) when it completes. vpu.sync takes 0.
// The VMEM bytes it reads and writes are booked on VMEM's bank ports from its start (VmemPorts, memory.h); when
// the ports are busier than that (DMA traffic, or more bytes per cycle than they give), it ends vpu.latency after
// its VMEM traffic does instead.
//
// Numerics (isa.def, docs/isa.md): integers compute in i32, wrapping; floats in f32; bf16 is computed in f32
// and rounded to nearest even on the way out; casts to integers round to nearest even and saturate.
// Data types: add, sub, mul, rsum and addrow/subrow/mulrow take i32, f32, bf16; max, min, relu and rmax also i8
// (they cannot overflow); exp, recip, rsqrt, log, sin, cos, floor, ceil and round take f32 and bf16 (log, sin, cos
// and the roundings are isa/numerics.h's); cast and vpu.acc's output take all four.
#include "vpu.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "params.h"
#include "tpusim/isa/numerics.h"

namespace tpusim::sim::detail {

void declare_vpu_params(std::vector<Param>& out) {
  ParamSection<VpuParams>(out, "vpu", &ChipConfig::vpu)
      .add(&VpuParams::lanes, "lanes", 128, "lanes", "vector lanes: elements per cycle per sublane", 1, 65536)
      .add(&VpuParams::sublanes, "sublanes", 8, "sublanes", "vector sublanes", 1, 1024)
      .add(&VpuParams::latency, "latency", 8, "cycles", "pipeline cycles added to every vector instruction", 0,
           1000000)
      .add(&VpuParams::special, "special", 0, "results/cycle",
           "results per cycle of the special functions (exp, log, sin, cos, erf, erfc, recip, rsqrt), when fewer than the "
           "lanes' (vpu.lanes x vpu.sublanes); 0: at the lanes' rate",
           0, 1 << 30);
}

namespace {
using isa::DType;
using isa::Op;

template <class T>
T load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
template <class T>
void store(uint8_t* p, T v) {
  std::memcpy(p, &v, sizeof v);
}

bool is_float(DType t) { return t == DType::BF16 || t == DType::F32; }
// f8e4m3 is a storage type: vpu.cast and vpu.acc convert to and from it, nothing else computes on it.
bool is_floating(DType t) { return is_float(t) || t == DType::F8E4M3; }

// An element as the vector unit computes on it: integer types as i32, float types as f32.
int32_t load_int(DType t, const uint8_t* p) { return t == DType::I8 ? load<int8_t>(p) : load<int32_t>(p); }
float load_float(DType t, const uint8_t* p) {
  if (t == DType::F8E4M3) return isa::f32_from_f8e4m3(*p);
  return t == DType::BF16 ? isa::f32_from_bf16(load<uint16_t>(p)) : load<float>(p);
}

// i32 to bf16 with a single rounding (to nearest even): i32 -> f32 rounded to odd, then f32 -> bf16. Rounding to
// odd at 24 bits keeps enough information for the 8-bit rounding to be correct (no double-rounding error).
uint16_t bf16_from_i32(int32_t x) {
  const double d = x;
  float f = static_cast<float>(d);
  if (static_cast<double>(f) != d) {
    uint32_t b = isa::bits_from_f32(f);
    if (std::fabs(static_cast<double>(f)) > std::fabs(d)) --b;  // truncate toward zero
    f = isa::f32_from_bits(b | 1u);
  }
  return isa::bf16_from_f32(f);
}

void store_float(DType t, uint8_t* p, float x) {
  switch (t) {
    case DType::I8: return store<int8_t>(p, isa::saturate_i8(x));
    case DType::I32: return store<int32_t>(p, isa::saturate_i32(x));
    case DType::BF16: return store<uint16_t>(p, isa::bf16_from_f32(x));
    case DType::F32: return store<float>(p, x);
    case DType::F8E4M3: *p = isa::f8e4m3_from_f32(x); return;
  }
}
void store_int(DType t, uint8_t* p, int32_t x) {
  switch (t) {
    case DType::I8: return store<int8_t>(p, static_cast<int8_t>(std::clamp(x, -128, 127)));
    case DType::I32: return store<int32_t>(p, x);
    case DType::BF16: return store<uint16_t>(p, bf16_from_i32(x));
    case DType::F32: return store<float>(p, static_cast<float>(x));
    // One rounding: x -> f32 is exact up to 2^24, and anything above 464 is NaN whatever the f32 rounding did.
    case DType::F8E4M3: *p = isa::f8e4m3_from_f32(static_cast<float>(x)); return;
  }
}

int32_t wrap(int64_t v) { return static_cast<int32_t>(static_cast<uint32_t>(static_cast<uint64_t>(v))); }

struct Add {
  int32_t operator()(int32_t a, int32_t b) const { return wrap(int64_t(a) + b); }
  float operator()(float a, float b) const { return a + b; }
};
struct Sub {
  int32_t operator()(int32_t a, int32_t b) const { return wrap(int64_t(a) - b); }
  float operator()(float a, float b) const { return a - b; }
};
struct Mul {
  int32_t operator()(int32_t a, int32_t b) const { return wrap(int64_t(a) * b); }
  float operator()(float a, float b) const { return a * b; }
};
// max and min are IEEE 754-2019 maximum and minimum (isa.def): a NaN operand gives NaN, and -0 < +0.
struct Max {
  int32_t operator()(int32_t a, int32_t b) const { return std::max(a, b); }
  float operator()(float a, float b) const {
    if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<float>::quiet_NaN();
    if (a == b) return std::signbit(a) ? b : a;
    return a < b ? b : a;
  }
};
struct Min {
  int32_t operator()(int32_t a, int32_t b) const { return std::min(a, b); }
  float operator()(float a, float b) const {
    if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<float>::quiet_NaN();
    if (a == b) return std::signbit(a) ? a : b;
    return b < a ? b : a;
  }
};
struct Relu {  // maximum(x, +0): NaN stays NaN, -0 becomes +0
  template <class T>
  T operator()(T a) const { return Max{}(a, T(0)); }
};
struct Exp {
  float operator()(float a) const { return std::exp(a); }
};
struct Recip {
  float operator()(float a) const { return 1.0f / a; }
};
struct Rsqrt {
  float operator()(float a) const { return 1.0f / std::sqrt(a); }
};
template <float (*F)(float)>
struct Fn {
  float operator()(float a) const { return F(a); }
};

// vd[i] = f(va[i], vb[i]) for i < n, in order.
template <class F>
void binary(DType t, uint8_t* vm, uint64_t vd, uint64_t va, uint64_t vb, uint64_t n, F f) {
  const int sz = isa::dtype_size(t);
  for (uint64_t i = 0, o = 0; i < n; ++i, o += sz) {
    if (is_float(t))
      store_float(t, vm + vd + o, f(load_float(t, vm + va + o), load_float(t, vm + vb + o)));
    else
      store_int(t, vm + vd + o, f(load_int(t, vm + va + o), load_int(t, vm + vb + o)));
  }
}

// vd[i] = f(va[i]) for i < n, in order. Integer types only when F takes integers.
template <class F>
void unary(DType t, uint8_t* vm, uint64_t vd, uint64_t va, uint64_t n, F f) {
  const int sz = isa::dtype_size(t);
  for (uint64_t i = 0, o = 0; i < n; ++i, o += sz) {
    if (is_float(t)) {
      store_float(t, vm + vd + o, f(load_float(t, vm + va + o)));
    } else if constexpr (std::is_invocable_r_v<int32_t, F, int32_t>) {
      store_int(t, vm + vd + o, f(load_int(t, vm + va + o)));
    }
  }
}

// Row broadcast (vpu.addrow/subrow/mulrow): elem(vd + i*stride + j*size) = f(elem(va + i*stride + j*size),
// elem(vb + i*size)) for i < rows, j < cols, row by row in order; stride in bytes.
template <class F>
void rowwise(DType t, uint8_t* vm, int64_t vd, int64_t va, int64_t vb, int64_t rows, int64_t cols, int64_t stride,
             F f) {
  const int sz = isa::dtype_size(t);
  for (int64_t i = 0; i < rows; ++i) {
    const uint8_t* in = vm + va + i * stride;
    uint8_t* out = vm + vd + i * stride;
    if (is_float(t)) {
      const float b = load_float(t, vm + vb + i * sz);
      for (int64_t j = 0; j < cols; ++j) store_float(t, out + j * sz, f(load_float(t, in + j * sz), b));
    } else {
      const int32_t b = load_int(t, vm + vb + i * sz);
      for (int64_t j = 0; j < cols; ++j) store_int(t, out + j * sz, f(load_int(t, in + j * sz), b));
    }
  }
}

// vd[i] = reduction over j < cols of elem(va + i*stride + j*size), in order.
template <class F>
void reduce(DType t, uint8_t* vm, uint64_t vd, int64_t va, int64_t rows, int64_t cols, int64_t stride, F f) {
  const int sz = isa::dtype_size(t);
  for (int64_t i = 0; i < rows; ++i) {
    const uint8_t* row = vm + va + i * stride;
    if (is_float(t)) {
      float x = f.template identity<float>();
      for (int64_t j = 0; j < cols; ++j) x = f(x, load_float(t, row + j * sz));
      store_float(t, vm + vd + i * sz, x);
    } else {
      int32_t x = f.template identity<int32_t>();
      for (int64_t j = 0; j < cols; ++j) x = f(x, load_int(t, row + j * sz));
      store_int(t, vm + vd + i * sz, x);
    }
  }
}
struct Sum : Add {
  template <class T>
  T identity() const { return T(0); }
};
struct RMax : Max {
  template <class T>
  T identity() const {  // -inf for floats (a row of -inf has max -inf); for i8 rows the lowest i32 clamps on the way out
    return std::numeric_limits<T>::has_infinity ? -std::numeric_limits<T>::infinity() : std::numeric_limits<T>::lowest();
  }
};

// The VMEM accesses of an instruction (operands already checked): add(addr, rows, rowbytes, stride, write) for
// each.
template <class Add>
void vmem_accesses(const Entry& e, Add add) {
  auto rd = [&](int64_t addr, int64_t rows, int64_t rowbytes, int64_t stride) { add(addr, rows, rowbytes, stride, false); };
  auto wr = [&](int64_t addr, int64_t rows, int64_t rowbytes, int64_t stride) { add(addr, rows, rowbytes, stride, true); };
  auto n_bytes = [&](const char* dt) { return e.arg("n") * isa::dtype_size(e.dtype(dt)); };
  switch (e.in.op) {
    case Op::VACC:
      wr(e.arg("vaddr"), e.arg("rows"), e.arg("cols") * isa::dtype_size(e.dtype("odt")), e.arg("stride"));
      if ((e.arg("bias_en") || e.arg("dequant")) && e.arg("rows"))
        rd(e.arg("bias"), 1, e.arg("cols") * (e.arg("dequant") ? 8 : 4), 0);
      if (e.arg("res"))  // the residual, laid out as the output
        rd(e.arg("scale"), e.arg("rows"), e.arg("cols") * isa::dtype_size(e.dtype("odt")), e.arg("stride"));
      break;
    case Op::VMADD:
      rd(e.arg("vc"), 1, n_bytes("dtype"), 0);
      [[fallthrough]];
    case Op::VADD:
    case Op::VSUB:
    case Op::VMUL:
    case Op::VMAX:
    case Op::VMIN:
      rd(e.arg("vb"), 1, n_bytes("dtype"), 0);
      [[fallthrough]];
    case Op::VRELU:
    case Op::VEXP:
    case Op::VRECIP:
    case Op::VRSQRT:
    case Op::VLOG:
    case Op::VSIN:
    case Op::VCOS:
    case Op::VERF:
    case Op::VERFC:
    case Op::VFLOOR:
    case Op::VCEIL:
    case Op::VROUND:
      rd(e.arg("va"), 1, n_bytes("dtype"), 0);
      wr(e.arg("vd"), 1, n_bytes("dtype"), 0);
      break;
    case Op::VCAST:
      rd(e.arg("va"), 1, n_bytes("sdt"), 0);
      wr(e.arg("vd"), 1, n_bytes("ddt"), 0);
      break;
    case Op::VRSUM:
    case Op::VRMAX: {
      const int size = isa::dtype_size(e.dtype("dtype"));
      rd(e.arg("va"), e.arg("rows"), e.arg("cols") * size, e.arg("stride"));
      wr(e.arg("vd"), 1, e.arg("rows") * size, 0);
      break;
    }
    case Op::VADDROW:
    case Op::VSUBROW:
    case Op::VMULROW: {
      const int size = isa::dtype_size(e.dtype("dtype"));
      rd(e.arg("va"), e.arg("rows"), e.arg("cols") * size, e.arg("stride"));
      rd(e.arg("vb"), 1, e.arg("rows") * size, 0);
      wr(e.arg("vd"), e.arg("rows"), e.arg("cols") * size, e.arg("stride"));
      break;
    }
    case Op::VRDOT:
    case Op::VCDOT: {  // rdot: a row of b per row of a, a sum per row; cdot: one b per row of a, a sum per column
      const bool row = e.in.op == Op::VRDOT;
      rd(e.arg("va"), e.arg("rows"), e.arg("cols") * isa::dtype_size(e.dtype("adt")), e.arg("astride"));
      rd(e.arg("vb"), e.arg("rows"), row ? e.arg("cols") * 4 : 4, e.arg("bstride"));
      wr(e.arg("vd"), 1, (row ? e.arg("rows") : e.arg("cols")) * 4, 0);
      break;
    }
    default: break;
  }
}

// The same as VmemPorts demand per bank. Accesses at or past `vmem` (VMEM's bytes) are the accumulators
// (isa.def): read and written at the lanes' rate, they take no VMEM port.
VmemPorts::Demand vmem_traffic(const Entry& e, const VmemPorts& ports, uint64_t vmem) {
  VmemPorts::Demand d = ports.demand();
  vmem_accesses(e, [&](int64_t addr, int64_t rows, int64_t rowbytes, int64_t stride, bool) {
    if (rows > 0 && rowbytes > 0 && static_cast<uint64_t>(addr) < vmem)
      ports.add(d, {static_cast<uint64_t>(addr), static_cast<uint64_t>(rows), static_cast<uint64_t>(rowbytes), stride});
  });
  return d;
}

// The kind of element operation an instruction does, for the energy model (energy.h: Action::VpuFloatAdd, ...).
Action element_action(const Entry& e) {
  bool flt = false, mul = false;
  switch (e.in.op) {
    case Op::VACC: flt = e.dtype("adt") == DType::F32 || e.arg("dequant"); mul = e.arg("dequant"); break;
    case Op::VCAST: flt = is_floating(e.dtype("sdt")) || is_floating(e.dtype("ddt")); break;
    case Op::VRDOT:
    case Op::VCDOT: flt = true; mul = true; break;
    case Op::VMUL:
    case Op::VMADD:
    case Op::VMULROW:
    case Op::VEXP:
    case Op::VRECIP:
    case Op::VRSQRT:
    case Op::VLOG:
    case Op::VSIN:
    case Op::VCOS:
    case Op::VERF:
    case Op::VERFC: mul = true; [[fallthrough]];
    default: flt = is_float(e.dtype("dtype"));
  }
  return flt ? (mul ? Action::VpuFloatMul : Action::VpuFloatAdd) : (mul ? Action::VpuIntMul : Action::VpuIntAdd);
}

}  // namespace

Vpu::Vpu(const sc_core::sc_module_name& name, ChipState& st)
    : UnitModule(name, st, isa::Unit::Vpu) {
  rate_.fill(static_cast<uint64_t>(st.cfg.vpu_width()));
  // The instructions isa.def times at vpu.special's rate (described there once).
  for (const isa::InstrDesc& d : isa::instructions())
    if (d.timing.find("vpu.special") != std::string::npos)
      rate_[d.opcode] = static_cast<uint64_t>(st.cfg.vpu_special_width());
}

void Vpu::execute(const Entry& e) {
  const uint64_t start = st_.now();
  if (e.in.op == Op::VSYNC) return finish(e, start, start);
  const uint64_t elements = check(e);
  // Energy's actions (energy.h): the elements computed, the VMEM bytes read and written, vpu.acc's accumulator
  // reads.
  act(e.pc, element_action(e), elements);
  const uint64_t vmem = st_.cfg.vmem_bytes();
  vmem_accesses(e, [&](int64_t addr, int64_t rows, int64_t rowbytes, int64_t, bool write) {
    if (rows <= 0 || rowbytes <= 0) return;
    const bool acc = static_cast<uint64_t>(addr) >= vmem;  // the accumulators (isa.def)
    act(e.pc, acc ? (write ? Action::AccWrite : Action::AccRead) : (write ? Action::VmemWrite : Action::VmemRead),
        static_cast<uint64_t>(rows * rowbytes));
  });
  if (e.in.op == Op::VACC) act(e.pc, Action::AccRead, elements * 4);
  if (e.in.op == Op::VACC && e.arg("res")) act(e.pc, Action::VpuFloatAdd, elements);  // the residual's add
  if (e.in.op == Op::VMADD)  // the add beside the multiply
    act(e.pc, is_float(e.dtype("dtype")) ? Action::VpuFloatAdd : Action::VpuIntAdd, elements);
  const auto latency = static_cast<uint64_t>(st_.cfg.vpu.latency);
  const uint64_t vmem_done = st_.mem.vmem_ports.reserve(start, start, vmem_traffic(e, st_.mem.vmem_ports, vmem));
  const uint64_t rate = rate_[static_cast<uint8_t>(e.in.op)];
  const uint64_t compute_end = start + latency + (elements + rate - 1) / rate;
  const uint64_t end = std::max(compute_end, vmem_done + latency);
  st_.wait_until(end);
  if (st_.functional()) compute(e);
  finish(e, start, end);
  note_memory_wait(compute_end, end);  // the VMEM ports, not the lanes, set the pace
}

uint64_t Vpu::check(const Entry& e) {
  // Operands lie in VMEM or in the accumulators after it (isa.def).
  const uint64_t vmem = st_.cfg.local_bytes();
  const std::string vmem_text = std::to_string(st_.cfg.vmem_bytes()) + " bytes and the accumulators' " +
                                std::to_string(st_.cfg.acc_bytes());
  auto range = [&](const char* what, int64_t addr, int64_t rows, int64_t rowbytes, int64_t stride) {
    std::string err = check_rows(what, vmem, vmem_text, addr, rows, rowbytes, stride);
    if (!err.empty()) st_.fail(e.pc, err);
  };
  auto nonneg = [&](const char* name) {
    int64_t v = e.arg(name);
    if (v < 0) st_.fail(e.pc, std::string("negative ") + name + " " + std::to_string(v));
    return v;
  };
  auto allow = [&](DType t, bool i8, bool i32) {
    bool ok = is_float(t) || (t == DType::I8 && i8) || (t == DType::I32 && i32);
    if (!ok) st_.fail(e.pc, std::string("data type ") + isa::dtype_name(t) + " not supported here");
  };
  auto count = [&](int64_t rows, int64_t cols) {
    auto total = static_cast<unsigned __int128>(rows) * static_cast<unsigned __int128>(cols);
    if (total >> 62) st_.fail(e.pc, "more than 2^62 elements");
    return static_cast<uint64_t>(total);
  };

  switch (e.in.op) {
    case Op::VACC: {
      const int64_t rows = nonneg("rows"), cols = nonneg("cols"), acc = e.arg("acc");
      const DType adt = e.dtype("adt"), odt = e.dtype("odt");
      if (adt != DType::I32 && adt != DType::F32)
        st_.fail(e.pc, std::string("accumulators read as ") + isa::dtype_name(adt) + ": adt must be i32 or f32");
      if (e.arg("dequant") && adt != DType::I32)
        st_.fail(e.pc, "dequant dequantises i32 accumulators: adt must be i32");
      const auto acc_rows = st_.cfg.core_acc_rows();  // every matrix unit's rows, numbered across them
      if (acc < 0 || acc > acc_rows || rows > acc_rows - acc || cols > st_.cfg.mxu.cols)
        st_.fail(e.pc, "accumulator block [" + std::to_string(acc) + ", " + std::to_string(acc + rows) + ") x " +
                           std::to_string(cols) + " outside " + std::to_string(acc_rows) + " x " +
                           std::to_string(st_.cfg.mxu.cols));
      range("VMEM write", e.arg("vaddr"), rows, cols * isa::dtype_size(odt), e.arg("stride"));
      if ((e.arg("bias_en") || e.arg("dequant")) && rows)
        range("VMEM read", e.arg("bias"), 1, cols * (e.arg("dequant") ? 8 : 4), 0);
      if (e.arg("res")) {
        if (odt != DType::BF16 && odt != DType::F32)
          st_.fail(e.pc, std::string("res adds a residual of the output's type: odt must be bf16 or f32, not ") +
                             isa::dtype_name(odt));
        if (e.arg("scale_en")) st_.fail(e.pc, "res takes the scale operand as the residual's address: no scale_en");
        range("VMEM read (the residual)", e.arg("scale"), rows, cols * isa::dtype_size(odt), e.arg("stride"));
      }
      return count(rows, cols);
    }
    case Op::VADD:
    case Op::VSUB:
    case Op::VMUL:
    case Op::VMADD:
    case Op::VMAX:
    case Op::VMIN: {
      const int64_t n = nonneg("n");
      const DType t = e.dtype("dtype");
      allow(t, e.in.op == Op::VMAX || e.in.op == Op::VMIN, true);
      range("VMEM read", e.arg("va"), 1, n * isa::dtype_size(t), 0);
      range("VMEM read", e.arg("vb"), 1, n * isa::dtype_size(t), 0);
      if (e.in.op == Op::VMADD) range("VMEM read", e.arg("vc"), 1, n * isa::dtype_size(t), 0);
      range("VMEM write", e.arg("vd"), 1, n * isa::dtype_size(t), 0);
      return count(n, 1);
    }
    case Op::VRELU:
    case Op::VEXP:
    case Op::VRECIP:
    case Op::VRSQRT:
    case Op::VLOG:
    case Op::VSIN:
    case Op::VCOS:
    case Op::VERF:
    case Op::VERFC:
    case Op::VFLOOR:
    case Op::VCEIL:
    case Op::VROUND: {
      const int64_t n = nonneg("n");
      const DType t = e.dtype("dtype");
      allow(t, e.in.op == Op::VRELU, e.in.op == Op::VRELU);
      range("VMEM read", e.arg("va"), 1, n * isa::dtype_size(t), 0);
      range("VMEM write", e.arg("vd"), 1, n * isa::dtype_size(t), 0);
      return count(n, 1);
    }
    case Op::VCAST: {
      const int64_t n = nonneg("n");
      range("VMEM read", e.arg("va"), 1, n * isa::dtype_size(e.dtype("sdt")), 0);
      range("VMEM write", e.arg("vd"), 1, n * isa::dtype_size(e.dtype("ddt")), 0);
      return count(n, 1);
    }
    case Op::VRSUM:
    case Op::VRMAX: {
      const int64_t rows = nonneg("rows"), cols = nonneg("cols");
      const DType t = e.dtype("dtype");
      allow(t, e.in.op == Op::VRMAX, true);
      range("VMEM read", e.arg("va"), rows, cols * isa::dtype_size(t), e.arg("stride"));
      range("VMEM write", e.arg("vd"), 1, rows * isa::dtype_size(t), 0);
      return count(rows, cols);
    }
    case Op::VRDOT:
    case Op::VCDOT: {  // (as vmem_accesses: b a row or one f32 per row of a; a sum per row or per column)
      const bool row = e.in.op == Op::VRDOT;
      const int64_t rows = nonneg("rows"), cols = nonneg("cols");
      const DType t = e.dtype("adt");
      allow(t, true, false);
      range("VMEM read", e.arg("va"), rows, cols * isa::dtype_size(t), e.arg("astride"));
      range("VMEM read", e.arg("vb"), rows, row ? cols * 4 : 4, e.arg("bstride"));
      range("VMEM write", e.arg("vd"), 1, (row ? rows : cols) * 4, 0);
      return count(rows, cols);
    }
    case Op::VADDROW:
    case Op::VSUBROW:
    case Op::VMULROW: {
      const int64_t rows = nonneg("rows"), cols = nonneg("cols");
      const DType t = e.dtype("dtype");
      allow(t, false, true);
      const int64_t size = isa::dtype_size(t);
      range("VMEM read", e.arg("va"), rows, cols * size, e.arg("stride"));
      range("VMEM read", e.arg("vb"), 1, rows * size, 0);
      range("VMEM write", e.arg("vd"), rows, cols * size, e.arg("stride"));
      return count(rows, cols);
    }
    default: st_.fail(e.pc, "not a vector instruction");
  }
}

void Vpu::compute(const Entry& e) {
  uint8_t* vm = st_.mem.vmem.data();
  switch (e.in.op) {
    case Op::VACC: {
      const int64_t rows = e.arg("rows"), cols = e.arg("cols"), acc = e.arg("acc"), vaddr = e.arg("vaddr"),
                    stride = e.arg("stride"), bias = e.arg("bias");
      const DType adt = e.dtype("adt"), odt = e.dtype("odt");
      const bool bias_en = e.arg("bias_en"), res = e.arg("res"), relu = e.arg("relu") && !res,
                 res_relu = e.arg("relu") && res, scale_en = e.arg("scale_en"), dequant = e.arg("dequant");
      const int64_t r = e.arg("scale");  // with res: the residual's address
      const float scale = isa::f32_from_bits(static_cast<uint32_t>(e.arg("scale")));
      const int osz = isa::dtype_size(odt);
      for (int64_t i = 0; i < rows; ++i) {
        const uint32_t* a = st_.mem.acc.data() + static_cast<size_t>(acc + i) * st_.mem.acc_cols;
        uint8_t* out = vm + vaddr + i * stride;
        for (int64_t j = 0; j < cols; ++j) {
          if (dequant) {  // i32 -> f32 (rounded to nearest even) x s[j] (+ b[j]), as f32 from here on
            float x = static_cast<float>(static_cast<int32_t>(a[j])) * load<float>(vm + bias + j * 8);
            if (bias_en) x += load<float>(vm + bias + j * 8 + 4);
            if (relu) x = Relu{}(x);
            if (scale_en) x *= scale;
            store_float(odt, out + j * osz, x);
          } else if (adt == DType::I32) {
            int32_t x = static_cast<int32_t>(a[j]);
            if (bias_en) x = wrap(int64_t(x) + load<int32_t>(vm + bias + j * 4));
            if (relu) x = std::max(x, 0);
            if (scale_en)
              store_float(odt, out + j * osz, static_cast<float>(x) * scale);
            else
              store_int(odt, out + j * osz, x);
          } else {
            float x = isa::f32_from_bits(a[j]);
            if (bias_en) x += load<float>(vm + bias + j * 4);
            if (relu) x = Relu{}(x);
            if (scale_en) x *= scale;
            store_float(odt, out + j * osz, x);
          }
          if (res) {  // vpu.add (relu) of the residual: the sum in f32, rounded to odt, then its ReLU
            uint8_t* y = out + j * osz;
            store_float(odt, y, Add{}(load_float(odt, y), load_float(odt, vm + r + i * stride + j * osz)));
            if (res_relu) store_float(odt, y, Relu{}(load_float(odt, y)));
          }
        }
      }
      return;
    }
    case Op::VADD:
      binary(e.dtype("dtype"), vm, e.arg("vd"), e.arg("va"), e.arg("vb"), e.arg("n"), Add{});
      if (e.arg("relu")) unary(e.dtype("dtype"), vm, e.arg("vd"), e.arg("vd"), e.arg("n"), Relu{});
      return;
    case Op::VSUB: return binary(e.dtype("dtype"), vm, e.arg("vd"), e.arg("va"), e.arg("vb"), e.arg("n"), Sub{});
    case Op::VMUL: return binary(e.dtype("dtype"), vm, e.arg("vd"), e.arg("va"), e.arg("vb"), e.arg("n"), Mul{});
    case Op::VMADD: {  // vpu.mul then vpu.add, element by element (vd may be va, vb or vc)
      const DType t = e.dtype("dtype");
      const int sz = isa::dtype_size(t);
      const int64_t n = e.arg("n"), vd = e.arg("vd"), va = e.arg("va"), vb = e.arg("vb"), vc = e.arg("vc");
      for (int64_t i = 0, o = 0; i < n; ++i, o += sz) {
        uint8_t p[4];  // the product, in dtype
        const uint8_t *a = vm + va + o, *b = vm + vb + o, *c = vm + vc + o;
        if (is_float(t)) {
          store_float(t, p, Mul{}(load_float(t, a), load_float(t, b)));
          store_float(t, vm + vd + o, Add{}(load_float(t, p), load_float(t, c)));
        } else {
          store_int(t, p, Mul{}(load_int(t, a), load_int(t, b)));
          store_int(t, vm + vd + o, Add{}(load_int(t, p), load_int(t, c)));
        }
      }
      return;
    }
    case Op::VMAX: return binary(e.dtype("dtype"), vm, e.arg("vd"), e.arg("va"), e.arg("vb"), e.arg("n"), Max{});
    case Op::VMIN: return binary(e.dtype("dtype"), vm, e.arg("vd"), e.arg("va"), e.arg("vb"), e.arg("n"), Min{});
    case Op::VRELU: return unary(e.dtype("dtype"), vm, e.arg("vd"), e.arg("va"), e.arg("n"), Relu{});
    case Op::VEXP: return unary(e.dtype("dtype"), vm, e.arg("vd"), e.arg("va"), e.arg("n"), Exp{});
    case Op::VRECIP: return unary(e.dtype("dtype"), vm, e.arg("vd"), e.arg("va"), e.arg("n"), Recip{});
    case Op::VRSQRT: return unary(e.dtype("dtype"), vm, e.arg("vd"), e.arg("va"), e.arg("n"), Rsqrt{});
    case Op::VLOG: return unary(e.dtype("dtype"), vm, e.arg("vd"), e.arg("va"), e.arg("n"), Fn<isa::vpu_log>{});
    case Op::VSIN: return unary(e.dtype("dtype"), vm, e.arg("vd"), e.arg("va"), e.arg("n"), Fn<isa::vpu_sin>{});
    case Op::VCOS: return unary(e.dtype("dtype"), vm, e.arg("vd"), e.arg("va"), e.arg("n"), Fn<isa::vpu_cos>{});
    case Op::VERF: return unary(e.dtype("dtype"), vm, e.arg("vd"), e.arg("va"), e.arg("n"), Fn<isa::vpu_erf>{});
    case Op::VERFC: return unary(e.dtype("dtype"), vm, e.arg("vd"), e.arg("va"), e.arg("n"), Fn<isa::vpu_erfc>{});
    case Op::VFLOOR: return unary(e.dtype("dtype"), vm, e.arg("vd"), e.arg("va"), e.arg("n"), Fn<isa::vpu_floor>{});
    case Op::VCEIL: return unary(e.dtype("dtype"), vm, e.arg("vd"), e.arg("va"), e.arg("n"), Fn<isa::vpu_ceil>{});
    case Op::VROUND: return unary(e.dtype("dtype"), vm, e.arg("vd"), e.arg("va"), e.arg("n"), Fn<isa::vpu_round>{});
    case Op::VCAST: {
      const DType sdt = e.dtype("sdt"), ddt = e.dtype("ddt");
      const int64_t n = e.arg("n"), vd = e.arg("vd"), va = e.arg("va");
      const bool scale_en = e.arg("scale_en");
      const float scale = isa::f32_from_bits(static_cast<uint32_t>(e.arg("scale")));
      const int ssz = isa::dtype_size(sdt), dsz = isa::dtype_size(ddt);
      for (int64_t i = 0; i < n; ++i) {
        const uint8_t* in = vm + va + i * ssz;
        uint8_t* out = vm + vd + i * dsz;
        if (is_floating(sdt)) {
          float x = load_float(sdt, in);
          store_float(ddt, out, scale_en ? x * scale : x);
        } else {
          int32_t x = load_int(sdt, in);
          if (scale_en)
            store_float(ddt, out, static_cast<float>(x) * scale);
          else
            store_int(ddt, out, x);
        }
      }
      return;
    }
    case Op::VRSUM:
      return reduce(e.dtype("dtype"), vm, e.arg("vd"), e.arg("va"), e.arg("rows"), e.arg("cols"), e.arg("stride"),
                    Sum{});
    case Op::VRMAX:
      return reduce(e.dtype("dtype"), vm, e.arg("vd"), e.arg("va"), e.arg("rows"), e.arg("cols"), e.arg("stride"),
                    RMax{});
    case Op::VRDOT: {  // vpu.cast, vpu.mul and vpu.rsum's roundings: each product to f32, then the f32 sum in order
      const DType adt = e.dtype("adt");
      const int asz = isa::dtype_size(adt);
      const int64_t rows = e.arg("rows"), cols = e.arg("cols"), as = e.arg("astride"), bs = e.arg("bstride");
      const int64_t va = e.arg("va"), vb = e.arg("vb"), vd = e.arg("vd");
      const bool fa = is_float(adt);
      for (int64_t i = 0; i < rows; ++i) {
        const uint8_t* a = vm + va + i * as;
        const uint8_t* b = vm + vb + i * bs;
        float x = Sum{}.identity<float>();
        for (int64_t j = 0; j < cols; ++j) {
          const float av = fa ? load_float(adt, a + j * asz) : static_cast<float>(load_int(adt, a + j * asz));
          x = Sum{}(x, Mul{}(av, load_float(DType::F32, b + j * 4)));
        }
        store_float(DType::F32, vm + vd + i * 4, x);
      }
      return;
    }
    case Op::VCDOT: {  // vpu.cast, vpu.mulrow and vpu.add's roundings: each product to f32, each column's f32 sum
      // over the rows in order; every operand read before the results are written
      const DType adt = e.dtype("adt");
      const int asz = isa::dtype_size(adt);
      const int64_t rows = e.arg("rows"), cols = e.arg("cols"), as = e.arg("astride"), bs = e.arg("bstride");
      const int64_t va = e.arg("va"), vb = e.arg("vb"), vd = e.arg("vd");
      const bool fa = is_float(adt);
      std::vector<float> x(static_cast<size_t>(cols), Sum{}.identity<float>());
      for (int64_t i = 0; i < rows; ++i) {
        const uint8_t* a = vm + va + i * as;
        const float b = load_float(DType::F32, vm + vb + i * bs);
        for (int64_t j = 0; j < cols; ++j) {
          const float av = fa ? load_float(adt, a + j * asz) : static_cast<float>(load_int(adt, a + j * asz));
          x[static_cast<size_t>(j)] = Sum{}(x[static_cast<size_t>(j)], Mul{}(av, b));
        }
      }
      for (int64_t j = 0; j < cols; ++j) store_float(DType::F32, vm + vd + j * 4, x[static_cast<size_t>(j)]);
      return;
    }
    case Op::VADDROW:
      return rowwise(e.dtype("dtype"), vm, e.arg("vd"), e.arg("va"), e.arg("vb"), e.arg("rows"), e.arg("cols"),
                     e.arg("stride"), Add{});
    case Op::VSUBROW:
      return rowwise(e.dtype("dtype"), vm, e.arg("vd"), e.arg("va"), e.arg("vb"), e.arg("rows"), e.arg("cols"),
                     e.arg("stride"), Sub{});
    case Op::VMULROW:
      return rowwise(e.dtype("dtype"), vm, e.arg("vd"), e.arg("va"), e.arg("vb"), e.arg("rows"), e.arg("cols"),
                     e.arg("stride"), Mul{});
    default: return;
  }
}

}  // namespace tpusim::sim::detail
