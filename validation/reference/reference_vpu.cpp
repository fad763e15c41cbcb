// The reference machine's vector unit: element-wise arithmetic, reductions, casts and the accumulator drain.
#include <cmath>

#include "reference/reference.h"

namespace tpusim::reference {

using isa::Op;

namespace {
// IEEE 754-2019 maximum and minimum, as the ISA defines vpu.max, vpu.min, vpu.relu (maximum(x, +0)), vpu.rmax
// and vpu.acc's relu: NaN if either operand is NaN; -0 is below +0.
double maximum(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return std::nan("");
  if (a == b) return std::signbit(a) ? b : a;
  return a > b ? a : b;
}
double minimum(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return std::nan("");
  if (a == b) return std::signbit(a) ? a : b;
  return a < b ? a : b;
}
}  // namespace

void Reference::vpu(const isa::Instr& in) {
  switch (in.op) {
    case Op::VSYNC: return;
    case Op::VACC: return vpu_acc(in);
    case Op::VCAST: return vpu_cast(in);
    case Op::VRSUM:
    case Op::VRMAX: return vpu_reduce(in);
    case Op::VRDOT: return vpu_rdot(in);
    case Op::VCDOT: return vpu_cdot(in);
    case Op::VADDROW:
    case Op::VSUBROW:
    case Op::VMULROW: return vpu_rowwise(in);
    default: return vpu_elementwise(in);
  }
}

// vd[i] = op(va[i], vb[i]) or op(va[i]) for i < n. i32 wraps; floats are computed exactly (or in fp64 for
// exp/recip/rsqrt/log/sin/cos/erf/erfc: "evaluated in f64 and rounded once", which log, sin, cos, erf and erfc
// specify exactly)
// and rounded to f32, then to bf16 for bf16 ("compute in f32 and round").
void Reference::vpu_elementwise(const isa::Instr& in) {
  const DType dt = dtype(in, "dtype");
  const bool binary = in.desc().operand_index("vb") >= 0;
  const bool float_only = in.op == Op::VEXP || in.op == Op::VRECIP || in.op == Op::VRSQRT ||
                              in.op == Op::VLOG || in.op == Op::VSIN || in.op == Op::VCOS ||
                              in.op == Op::VERF || in.op == Op::VERFC ||
                              in.op == Op::VFLOOR || in.op == Op::VCEIL || in.op == Op::VROUND;
  if (float_only && is_int(dt)) fail(in.desc().mnemonic + " works on f32 or bf16");
  if (is_storage_only(dt)) fail(in.desc().mnemonic + " does not take f8e4m3 (only vpu.cast and vpu.acc convert it)");
  // i8 arithmetic could overflow and the ISA defines no i8 wrapping: only max, min and relu take i8.
  if (dt == DType::I8 && (in.op == Op::VADD || in.op == Op::VSUB || in.op == Op::VMUL || in.op == Op::VMADD))
    fail(in.desc().mnemonic + " does not take i8");
  int64_t vd = value(in, "vd"), va = value(in, "va"), vb = binary ? value(in, "vb") : 0, n = value(in, "n");
  const int64_t vc = in.op == Op::VMADD ? value(in, "vc") : 0;
  const int size = size_of(dt);
  for (int64_t i = 0; i < n; ++i) {
    double a = vmem_load(va + i * size, dt), b = binary ? vmem_load(vb + i * size, dt) : 0, r = 0;
    switch (in.op) {
      case Op::VADD: r = a + b; break;  // exact for integers; one double rounding at most for floats
      case Op::VMADD: {  // the product in dt (as vpu.mul), then the sum (as vpu.add)
        const double p = is_int(dt) ? static_cast<double>(wrap_to(int64_t(a) * int64_t(b), dt))
                                    : float_result(dt, a * b);
        r = p + vmem_load(vc + i * size, dt);
        break;
      }
      case Op::VSUB: r = a - b; break;
      case Op::VMUL: r = is_int(dt) ? static_cast<double>(wrap_to(int64_t(a) * int64_t(b), dt)) : a * b; break;
      case Op::VMAX: r = maximum(a, b); break;
      case Op::VMIN: r = minimum(a, b); break;
      case Op::VRELU: r = maximum(a, 0.0); break;
      case Op::VEXP: r = std::exp(a); break;
      case Op::VRECIP: r = 1.0 / a; break;
      case Op::VRSQRT: r = 1.0 / std::sqrt(a); break;
      case Op::VLOG: r = std::log(a); break;
      case Op::VSIN: r = std::sin(a); break;
      case Op::VCOS: r = std::cos(a); break;
      case Op::VERF: r = std::erf(a); break;
      case Op::VERFC: r = std::erfc(a); break;
      // Exact roundings of the operand (its sign kept on a zero result: floor(-0) = -0, ceil(-0.5) = -0).
      case Op::VFLOOR: r = std::isfinite(a) ? std::copysign(std::floor(a), a) : a; break;
      case Op::VCEIL: r = std::isfinite(a) ? std::copysign(std::ceil(a), a) : a; break;
      case Op::VROUND: r = std::isfinite(a) ? std::copysign(round_half_even(a), a) : a; break;
      default: fail("not a vector instruction");
    }
    r = is_int(dt) ? static_cast<double>(wrap_to(static_cast<int64_t>(r), dt)) : float_result(dt, r);
    // vpu.add's relu: maximum(x, +0) of the sum in its type, as vpu.relu
    if (in.op == Op::VADD && field(in, "relu") != 0) r = maximum(r, 0.0);
    vmem_store(vd + i * size, dt, r);
  }
}

// vpu.rdot: vd[i] = sum in order over j < cols of a[i, j] * b[i, j] (a of adt at va + i*astride, b f32 at vb +
// i*bstride), each product rounded to f32; the sum in fp64 (the fp64 reference) or in f32 in the ISA's order.
void Reference::vpu_rdot(const isa::Instr& in) {
  const DType adt = dtype(in, "adt");
  if (adt != DType::F32 && adt != DType::BF16 && adt != DType::I8) fail("vpu.rdot takes a as f32, bf16 or i8");
  const int64_t vd = value(in, "vd"), va = value(in, "va"), vb = value(in, "vb"), rows = value(in, "rows"),
                cols = value(in, "cols"), as = value(in, "astride"), bs = value(in, "bstride");
  const int size = size_of(adt);
  for (int64_t i = 0; i < rows; ++i) {
    double r = 0;
    for (int64_t j = 0; j < cols; ++j) {
      const double p = to_f32(vmem_load(va + i * as + j * size, adt) * vmem_load(vb + i * bs + j * 4, DType::F32));
      r = opts_.sums == FloatSums::Fp64 ? r + p : to_f32(r + p);
    }
    vmem_store(vd + i * 4, DType::F32, float_result(DType::F32, r));
  }
}

// vpu.cdot: vd[j] = sum in order over i < rows of a[i, j] * b[i] (a of adt at va + i*astride, b f32 at vb +
// i*bstride), each product rounded to f32; the sums in fp64 or in f32 in the ISA's order, stored once all are made.
void Reference::vpu_cdot(const isa::Instr& in) {
  const DType adt = dtype(in, "adt");
  if (adt != DType::F32 && adt != DType::BF16 && adt != DType::I8) fail("vpu.cdot takes a as f32, bf16 or i8");
  const int64_t vd = value(in, "vd"), va = value(in, "va"), vb = value(in, "vb"), rows = value(in, "rows"),
                cols = value(in, "cols"), as = value(in, "astride"), bs = value(in, "bstride");
  const int size = size_of(adt);
  std::vector<double> sums(static_cast<size_t>(std::max<int64_t>(cols, 0)), 0.0);
  for (int64_t j = 0; j < cols; ++j) {
    double r = 0;
    for (int64_t i = 0; i < rows; ++i) {
      const double p = to_f32(vmem_load(va + i * as + j * size, adt) * vmem_load(vb + i * bs, DType::F32));
      r = opts_.sums == FloatSums::Fp64 ? r + p : to_f32(r + p);
    }
    sums[static_cast<size_t>(j)] = r;
  }
  for (int64_t j = 0; j < cols; ++j) vmem_store(vd + j * 4, DType::F32, float_result(DType::F32, sums[static_cast<size_t>(j)]));
}

// vpu.rsum / vpu.rmax: vd[i] = sum (in order j = 0..cols-1) or max over j < cols of elem(va + i*stride + j*size).
void Reference::vpu_reduce(const isa::Instr& in) {
  const DType dt = dtype(in, "dtype");
  int64_t vd = value(in, "vd"), va = value(in, "va"), rows = value(in, "rows"), cols = value(in, "cols"),
          stride = value(in, "stride");
  const int size = size_of(dt);
  if (in.op == Op::VRMAX && cols < 1) fail("vpu.rmax over no columns");
  if (in.op == Op::VRSUM && dt == DType::I8) fail("vpu.rsum does not take i8");
  if (is_storage_only(dt)) fail(in.desc().mnemonic + " does not take f8e4m3");
  for (int64_t i = 0; i < rows; ++i) {
    double r = 0;
    int64_t isum = 0;
    for (int64_t j = 0; j < cols; ++j) {
      double x = vmem_load(va + i * stride + j * size, dt);
      if (in.op == Op::VRMAX) r = j == 0 ? x : maximum(r, x);
      else if (is_int(dt)) isum += static_cast<int64_t>(x);  // exact in int64, wrapped below
      else if (opts_.sums == FloatSums::Fp64) r += x;         // the fp64 reference
      else r = to_f32(r + x);                                 // the ISA's order, in f32
    }
    if (in.op == Op::VRSUM) r = is_int(dt) ? static_cast<double>(wrap_to(isum, dt)) : float_result(dt, r);
    vmem_store(vd + i * size, dt, r);
  }
}

// vpu.addrow / vpu.subrow / vpu.mulrow: for i < rows, j < cols:
// elem(vd + i*stride + j*size) = elem(va + i*stride + j*size) op elem(vb + i*size); stride in bytes.
// i32 wraps (mul keeps the low 32 bits); floats are computed exactly in fp64 (or with one rounding that does not
// change the f32 result) and rounded to f32, then to bf16 for bf16. i8 is refused.
void Reference::vpu_rowwise(const isa::Instr& in) {
  const DType dt = dtype(in, "dtype");
  if (dt == DType::I8) fail(in.desc().mnemonic + " does not take i8");
  if (is_storage_only(dt)) fail(in.desc().mnemonic + " does not take f8e4m3");
  int64_t vd = value(in, "vd"), va = value(in, "va"), vb = value(in, "vb"), rows = value(in, "rows"),
          cols = value(in, "cols"), stride = value(in, "stride");
  const int size = size_of(dt);
  for (int64_t i = 0; i < rows; ++i) {
    const double b = vmem_load(vb + i * size, dt);
    for (int64_t j = 0; j < cols; ++j) {
      const double a = vmem_load(va + i * stride + j * size, dt);
      double r = 0;
      if (is_int(dt)) {
        const int64_t x = static_cast<int64_t>(a), y = static_cast<int64_t>(b);
        const int64_t exact = in.op == Op::VADDROW ? x + y : in.op == Op::VSUBROW ? x - y : x * y;
        r = static_cast<double>(wrap_to(exact, dt));
      } else {
        r = float_result(dt, in.op == Op::VADDROW ? a + b : in.op == Op::VSUBROW ? a - b : a * b);
      }
      vmem_store(vd + i * stride + j * size, dt, r);
    }
  }
}

// vpu.cast: x = va[i] as sdt; with scale_en x = f32(x) * f32(scale); vd[i] = cast(x, ddt).
void Reference::vpu_cast(const isa::Instr& in) {
  const DType sdt = dtype(in, "sdt"), ddt = dtype(in, "ddt");
  int64_t vd = value(in, "vd"), va = value(in, "va"), n = value(in, "n");
  const bool scale_en = field(in, "scale_en") != 0;
  const double scale = f32_from_bits(static_cast<uint64_t>(value(in, "scale")));
  for (int64_t i = 0; i < n; ++i) {
    double x = vmem_load(va + i * size_of(sdt), sdt);
    if (scale_en) x = to_f32(to_f32(x) * scale);
    vmem_store(vd + i * size_of(ddt), ddt, cast_to(x, ddt));
  }
}

// vpu.acc: for i < rows, j < cols: x = ACC[acc+i][j] as adt; x += bias[j] (adt), or with dequant
// x = f32(x) * s[j] (+ b[j]) from the f32 pairs at bias; x = max(x, 0); x = f32(x) * f32(scale);
// VMEM elem(vaddr + i*stride + j*size(odt)) = cast(x, odt).
void Reference::vpu_acc(const isa::Instr& in) {
  const DType adt = dtype(in, "adt"), odt = dtype(in, "odt");
  if (adt != DType::I32 && adt != DType::F32) fail("vpu.acc reads accumulators as i32 or f32");
  int64_t vaddr = value(in, "vaddr"), acc0 = value(in, "acc"), rows = value(in, "rows"), cols = value(in, "cols"),
          stride = value(in, "stride"), bias = value(in, "bias");
  const bool bias_en = field(in, "bias_en") != 0, res = field(in, "res") != 0, relu = field(in, "relu") != 0,
             scale_en = field(in, "scale_en") != 0, dequant = field(in, "dequant") != 0;
  if (dequant && adt != DType::I32) fail("vpu.acc dequant reads accumulators as i32");
  if (res && (scale_en || (odt != DType::BF16 && odt != DType::F32)))
    fail("vpu.acc res adds a bf16 or f32 residual and takes no scale");
  const double scale = f32_from_bits(static_cast<uint64_t>(value(in, "scale")));
  const int64_t r = value(in, "scale");  // with res: the residual's address
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) {
      double x = acc_read(acc0 + i, j, adt);
      if (dequant) {  // f32(acc) x s[j] (+ b[j]), each step rounded to f32
        x = to_f32(to_f32(x) * vmem_load(bias + j * 8, DType::F32));
        if (bias_en) x = to_f32(x + vmem_load(bias + j * 8 + 4, DType::F32));
      } else if (bias_en) {
        double b = vmem_load(bias + j * 4, adt);
        x = adt == DType::I32 ? static_cast<double>(wrap_to(int64_t(x) + int64_t(b), DType::I32)) : to_f32(x + b);
      }
      if (relu && !res) x = maximum(x, 0.0);
      if (scale_en) x = to_f32(to_f32(x) * scale);
      const int64_t at = i * stride + j * size_of(odt);
      double y = cast_to(x, odt);
      if (res) {  // the residual's sum, rounded to odt, then (relu) its maximum with +0
        y = float_result(odt, y + vmem_load(r + at, odt));
        if (relu) y = maximum(y, 0.0);
      }
      vmem_store(vaddr + at, odt, y);
    }
}

}  // namespace tpusim::reference
