// Convolution and pooling. Activations are NHWC inside the program. Conv (+ BatchNormalization + Relu folded into
// its weights and epilogue): 1x1 stride-1 convs (and 1xKW ones of stride KW, whose windows tile the rows) are a
// gemm on the activation itself; narrow ones compute several outputs of a row side by side (pack_factor); others
// copy the padded input into an im2col matrix (one strided move per image and kernel row, its taps one run, over a
// "virtual" output width Wv = Wp/stride so that a tap is one regular stride; one per tap where the taps of a row
// are not adjacent, a dilation: window_taps) and run gemm.s on it, then drop the Wv - OW overhanging
// columns; where a tap's row of channels is 64 bytes or more, gemm.s reads the taps from the padded input in place
// (implicit_im2col) and no matrix is copied. Padded inputs of one layout share a buffer whose borders the first
// window fills (window_phases); on chips of several cores the GEMM that makes a window's input writes it straight
// into that buffer, and a GEMM of virtual columns stores only its outputs (row maps: producer_writes_padded,
// implicit_im2col). Depthwise convs run on the vector unit (a row-wise kernel summing tap x
// weight, each tap read in place: tap_views); other grouped convs one gemm per group. MaxPool / AveragePool: taps
// read in place, reduced by a row-wise kernel (1-D: H = 1; 3-D: over H and W, then over D). GlobalAveragePool (and
// ReduceMean over H, W): colmean.s on the vector unit where its estimate wins, else a gemm of a row of ones with
// each image, scaled by 1/HW (lower_spatial_mean).
// Other ranks and transposed convolutions reuse the 2-D core (conv2d): a 1-D Conv is a 2-D one with H = 1 on its
// input made channels-last ([N, L, C]); a 3-D Conv is a 2-D one over N x OD images whose channels are the KD input
// depths each output depth reads (gathered by moves, zeros outside; channel order group, depth tap, channel). A
// ConvTranspose is the convolution, with stride 1 and flipped, transposed weights, of its input placed every stride
// on a zero canvas with dilation x (k - 1) - pad zeros around it (+ output_padding after). The 1-D and 3-D outputs are
// made row-major again by one strided copy.
#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>

#include "infer.h"
#include "lowering.h"
#include "tpusim/isa/numerics.h"
#include "tpusim/kernels/gemm_chip.h"

namespace tpusim::compiler {
namespace {

// ---- shape inference -----------------------------------------------------------------------------------------

// Checks that `pads` are not negative and returns the node's auto_pad (NOTSET when absent), one the compiler knows.
std::string checked_auto_pad(InferCtx& c, const Shape& pads) {
  for (int64_t p : pads)
    if (p < 0) fail(c.n, "pads=" + ints_str(pads) + " must not be negative");
  std::string auto_pad = c.as("auto_pad", "NOTSET");
  if (auto_pad.empty()) auto_pad = "NOTSET";
  if (auto_pad != "NOTSET" && auto_pad != "SAME_UPPER" && auto_pad != "SAME_LOWER" && auto_pad != "VALID")
    fail(c.n, "auto_pad='" + auto_pad + "' is not supported");
  return auto_pad;
}

// Spatial output sizes of Conv/MaxPool/AveragePool; rewrites the node's attributes to the explicit form:
// kernel_shape, strides, pads (begins then ends), dilations, no auto_pad.
Shape conv_spatial(InferCtx& c, const Shape& x, const Shape& kernel, bool ceil_mode) {
  const size_t sp = kernel.size();
  if (x.size() != sp + 2) fail(c.n, "input " + ir::shape_str(x) + " does not match the kernel rank");
  Shape strides = c.ais("strides"), dil = c.ais("dilations"), pads = c.ais("pads");
  if (strides.empty()) strides.assign(sp, 1);
  if (dil.empty()) dil.assign(sp, 1);
  if (pads.empty()) pads.assign(2 * sp, 0);
  if (strides.size() != sp || dil.size() != sp || pads.size() != 2 * sp)
    fail(c.n, "strides/dilations/pads do not match " + std::to_string(sp) + " spatial dimensions");
  for (size_t i = 0; i < sp; ++i) {
    if (strides[i] < 1) fail(c.n, "strides=" + ints_str(strides) + " must be positive");
    if (dil[i] < 1) fail(c.n, "dilations=" + ints_str(dil) + " must be positive");
  }
  const std::string auto_pad = checked_auto_pad(c, pads);
  Shape out(sp);
  for (size_t i = 0; i < sp; ++i) {
    const ir::Node& n = c.n;
    int64_t in = x[2 + i], ext = add(n, mul(n, kernel[i] - 1, dil[i]), 1);
    if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
      out[i] = add(n, in, strides[i] - 1) / strides[i];
      int64_t total = std::max<int64_t>(0, add(n, mul(n, out[i] - 1, strides[i]), ext - in));
      pads[i] = auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
      pads[sp + i] = total - pads[i];
      continue;
    }
    if (auto_pad == "VALID") pads[i] = pads[sp + i] = 0;
    int64_t span = add(n, add(n, in, pads[i]), pads[sp + i]) - ext;
    if (span < 0)
      fail(c.n, "the kernel (extent " + std::to_string(ext) + ") is larger than the padded input " +
                    ir::shape_str(x));
    out[i] = (ceil_mode ? add(n, span, strides[i] - 1) / strides[i] : span / strides[i]) + 1;
    if (ceil_mode && mul(n, out[i] - 1, strides[i]) >= in + pads[i]) --out[i];  // no window starting in the end pad
  }
  c.n.attrs.erase("auto_pad");
  c.set_ints("kernel_shape", kernel);
  c.set_ints("strides", strides);
  c.set_ints("pads", pads);
  c.set_ints("dilations", dil);
  return out;
}

void infer_conv(InferCtx& c) {
  same_types(c);
  const Shape x = c.shape(0), w = c.shape(1);
  if (x.size() < 3 || w.size() != x.size())
    fail(c.n, "input " + ir::shape_str(x) + " and weight " + ir::shape_str(w) + " must be N-D (N >= 3) alike");
  int64_t group = c.ai("group", 1);
  if (group < 1 || x[1] != mul(c.n, w[1], group) || w[0] % group != 0)
    fail(c.n, "input " + ir::shape_str(x) + ", weight " + ir::shape_str(w) + " and group=" + std::to_string(group) +
                  " do not fit");
  Shape kernel(w.begin() + 2, w.end());
  if (c.has_attr("kernel_shape") && c.ais("kernel_shape") != kernel)
    fail(c.n, "kernel_shape=" + ints_str(c.ais("kernel_shape")) + " differs from the weight " + ir::shape_str(w));
  if (c.has(2) && c.shape(2) != Shape{w[0]})
    fail(c.n, "bias " + ir::shape_str(c.shape(2)) + " must be [" + std::to_string(w[0]) + "]");
  Shape sp = conv_spatial(c, x, kernel, false);
  c.set_int("group", group);
  Shape out{x[0], w[0]};
  out.insert(out.end(), sp.begin(), sp.end());
  c.out(0, c.type(0), out);
}

// ConvTranspose: x [N, C, S...], weights [C, OC/group, K...]; output size s*(in-1) + output_padding + d*(k-1) + 1
// - pads. Rewrites the attributes to the explicit form (pads from output_shape or auto_pad as the ONNX spec
// derives them; output_padding, strides, dilations, kernel_shape, group spelled out).
void infer_conv_transpose(InferCtx& c) {
  same_types(c);
  const Shape x = c.shape(0), w = c.shape(1);
  if (x.size() < 3 || w.size() != x.size())
    fail(c.n, "input " + ir::shape_str(x) + " and weight " + ir::shape_str(w) + " must be N-D (N >= 3) alike");
  const int64_t group = c.ai("group", 1);
  if (group < 1 || w[0] != x[1] || x[1] % group != 0)
    fail(c.n, "input " + ir::shape_str(x) + ", weight " + ir::shape_str(w) + " and group=" + std::to_string(group) +
                  " do not fit (the weight is [C, OC/group, kernel...])");
  const int64_t oc = mul(c.n, w[1], group);
  const size_t sp = x.size() - 2;
  const Shape kernel(w.begin() + 2, w.end());
  if (c.has_attr("kernel_shape") && c.ais("kernel_shape") != kernel)
    fail(c.n, "kernel_shape=" + ints_str(c.ais("kernel_shape")) + " differs from the weight " + ir::shape_str(w));
  if (c.has(2) && c.shape(2) != Shape{oc}) fail(c.n, "bias " + ir::shape_str(c.shape(2)) + " must be [" + std::to_string(oc) + "]");
  Shape strides = c.ais("strides"), dil = c.ais("dilations"), pads = c.ais("pads"), opad = c.ais("output_padding");
  if (strides.empty()) strides.assign(sp, 1);
  if (dil.empty()) dil.assign(sp, 1);
  if (pads.empty()) pads.assign(2 * sp, 0);
  if (opad.empty()) opad.assign(sp, 0);
  if (strides.size() != sp || dil.size() != sp || pads.size() != 2 * sp || opad.size() != sp)
    fail(c.n, "strides/dilations/pads/output_padding do not match " + std::to_string(sp) + " spatial dimensions");
  for (size_t i = 0; i < sp; ++i) {
    if (strides[i] < 1) fail(c.n, "strides=" + ints_str(strides) + " must be positive");
    if (dil[i] < 1) fail(c.n, "dilations=" + ints_str(dil) + " must be positive");
    if (opad[i] < 0 || opad[i] >= std::max(strides[i], dil[i]))
      fail(c.n, "output_padding=" + ints_str(opad) + " must be below the stride or the dilation");
  }
  const std::string auto_pad = checked_auto_pad(c, pads);
  Shape want = c.ais("output_shape");  // the spatial sizes (or the whole output shape)
  if (want.size() == sp + 2) want.erase(want.begin(), want.begin() + 2);
  if (!want.empty() && want.size() != sp)
    fail(c.n, "output_shape=" + ints_str(c.ais("output_shape")) + " does not match " + std::to_string(sp) +
                  " spatial dimensions");
  if (want.empty() && (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER"))
    for (size_t i = 0; i < sp; ++i) want.push_back(mul(c.n, x[2 + i], strides[i]));
  const ir::Node& n = c.n;
  Shape out{x[0], oc};
  for (size_t i = 0; i < sp; ++i) {
    const int64_t full = add(n, add(n, mul(n, strides[i], x[2 + i] - 1), opad[i]), add(n, mul(n, kernel[i] - 1, dil[i]), 1));
    if (!want.empty()) {
      const int64_t total = full - want[i];
      if (total < 0)
        fail(c.n, "output_shape=" + ints_str(c.ais("output_shape")) + " is larger than the transposed convolution makes (" +
                      std::to_string(full) + " along axis " + std::to_string(2 + i) + ")");
      pads[i] = auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
      pads[sp + i] = total - pads[i];
    } else if (auto_pad == "VALID") {
      pads[i] = pads[sp + i] = 0;
    }
    const int64_t o = full - pads[i] - pads[sp + i];
    if (o < 1) fail(c.n, "pads=" + ints_str(pads) + " leave no output along axis " + std::to_string(2 + i));
    out.push_back(o);
  }
  c.n.attrs.erase("auto_pad");
  c.n.attrs.erase("output_shape");
  c.set_ints("kernel_shape", kernel);
  c.set_ints("strides", strides);
  c.set_ints("pads", pads);
  c.set_ints("dilations", dil);
  c.set_ints("output_padding", opad);
  c.set_int("group", group);
  c.out(0, c.type(0), out);
}

void infer_pool(InferCtx& c) {
  const Shape x = c.shape(0);
  if (!c.has_attr("kernel_shape")) fail(c.n, "attribute 'kernel_shape' is required");
  int64_t ceil_mode = c.ai("ceil_mode", 0);
  if (ceil_mode != 0 && ceil_mode != 1) fail(c.n, "ceil_mode=" + std::to_string(ceil_mode) + " is not supported");
  if (c.n.op == "MaxPool" && c.ai("storage_order", 0) != 0) fail(c.n, "storage_order=1 is not supported");
  Shape sp = conv_spatial(c, x, c.ais("kernel_shape"), ceil_mode == 1);
  Shape out{x[0], x[1]};
  out.insert(out.end(), sp.begin(), sp.end());
  c.out(0, c.type(0), out);
  c.out(1, ir::kInt64, out);  // MaxPool's Indices
}

void infer_global_pool(InferCtx& c) {
  Shape x = c.shape(0);
  if (x.size() < 3) fail(c.n, "input " + ir::shape_str(x) + " must have spatial dimensions");
  std::fill(x.begin() + 2, x.end(), 1);
  c.out(0, c.type(0), x);
}

// ---- lowering ------------------------------------------------------------------------------------------------

struct Window {
  int64_t kh, kw, sh, sw, dh, dw, pt, pl, pb, pr;
};

// Taps of a window over an NHWC input. The input is first padded and split into sh phases of rows (phase a holds
// padded rows a, a+sh, ...; one, the padded input itself, for stride 1), each [N, Hq, Wp, C] with the border
// filled with `pad_value`, Wp = Wv * sw the padded row. Output rows are then "virtual": r = (n, oh, ow') with ow' <
// Wv, and tap (kh, kw) of row r is row r * sw + offset of the phase buffer, a regular stride of sw rows (of C
// elements) over every virtual row: offset = phase (kh * dh) % sh's first row + (kh * dh / sh) * Wp + kw * dw
// (kernels::tap_row_offset with sw 1, wq Wp and a pitch of sw). The Wv - OW overhanging columns are garbage (a tap
// may read past a row's end, or past the last phase into `slack`), dropped afterwards. The taps are copied into an
// im2col matrix [rows, taps * cg] (window_taps: a kernel row's taps, adjacent without dilation, as one run each)
// or read in place (tap_views: the vector unit; implicit_im2col: the gemm on channel rows of 64 bytes or more).
struct Taps {
  int64_t oh, ow, wv, rows;  // rows = N * OH * Wv
};

Window window(Lowering& L, const ir::Node& n, int64_t h, int64_t w, int64_t kh, int64_t kw) {
  auto ints = [&](const char* key, std::vector<int64_t> def) {
    auto it = n.attrs.find(key);
    return it == n.attrs.end() || it->second.ints.empty() ? def : it->second.ints;
  };
  std::vector<int64_t> s = ints("strides", {1, 1}), d = ints("dilations", {1, 1}), p = ints("pads", {0, 0, 0, 0});
  if (s.size() != 2 || d.size() != 2 || p.size() != 4) L.fail(n, "only 2-D windows are supported");
  Window win{kh, kw, s[0], s[1], d[0], d[1], p[0], p[1], p[2], p[3]};
  auto ap = n.attrs.find("auto_pad");
  std::string mode = ap == n.attrs.end() ? "NOTSET" : ap->second.s;
  if (mode == "SAME_UPPER" || mode == "SAME_LOWER") {
    auto same = [&](int64_t in, int64_t k, int64_t st, int64_t dl, int64_t& lo, int64_t& hi) {
      int64_t out = (in + st - 1) / st;
      int64_t total = std::max<int64_t>((out - 1) * st + (k - 1) * dl + 1 - in, 0);
      lo = mode == "SAME_UPPER" ? total / 2 : total - total / 2;
      hi = total - lo;
    };
    same(h, kh, win.sh, win.dh, win.pt, win.pb);
    same(w, kw, win.sw, win.dw, win.pl, win.pr);
  } else if (mode == "VALID") {
    win.pt = win.pl = win.pb = win.pr = 0;
  }
  return win;
}

// The input padded and split into phases of rows (the first step of the taps above): P, its geometry, and the
// moves that fill it (none where the input itself serves: stride 1 down the rows, no padding, no slack). A phase
// that no tap reads (a 1x1 window of stride 2 reads one of two) is left unfilled.
struct Phases {
  Stored P;
  int64_t OH, OW, Hq, Wq, Wp, phases, slack;  // Wq: virtual columns (Wv); Wp = Wq * pitch, a phase row's pixels;
  int64_t pitch;                              // slack: pixels read past the last phase by the overhanging columns
  uint64_t row, image, phase_bytes;           // bytes of a phase row, image and phase
  std::vector<BufferMove> moves;
  // the first pixel (of C elements) of the phase buffer that tap t's virtual row 0 reads
  int64_t offset(const Window& w, int64_t t, int64_t n) const {
    const int64_t ih = t / w.kw * w.dh, jw = t % w.kw * w.dw;
    return ih % w.sh * n * Hq * Wp + ih / w.sh * Wp + jw;
  }
};

Phases window_phases(Lowering& L, const std::string& label, Stored x, const Shape& s /*NCHW*/, const Window& w,
                     float pad_value, int64_t out_h, int64_t out_w) {
  const int64_t N = s[0], C = s[1], H = s[2], W = s[3];
  int64_t OH = (H + w.pt + w.pb - w.dh * (w.kh - 1) - 1) / w.sh + 1;
  int64_t OW = (W + w.pl + w.pr - w.dw * (w.kw - 1) - 1) / w.sw + 1;
  if (out_h > 0) OH = out_h;  // pooling's ceil_mode
  if (out_w > 0) OW = out_w;
  const int64_t pb = std::max<int64_t>(w.pb, (OH - 1) * w.sh + (w.kh - 1) * w.dh + 1 - H - w.pt);
  const int64_t pr = std::max<int64_t>(w.pr, (OW - 1) * w.sw + (w.kw - 1) * w.dw + 1 - W - w.pl);
  const int64_t Hq = (H + w.pt + pb + w.sh - 1) / w.sh, Wq = (W + w.pl + pr + w.sw - 1) / w.sw, Wp = Wq * w.sw;
  const int64_t phases = w.sh;
  const int es = isa::dtype_size(x.dtype);
  Phases ph{x, OH, OW, Hq, Wq, Wp, phases, 0, w.sw, 0, 0, 0, {}};
  // Pixels read past the end of the last phase: the last virtual row, from the tap that reads furthest.
  int64_t reach = 0;
  const int64_t M = (N - 1) * Hq * Wq + OH * Wq;
  for (int64_t t = 0; t < w.kh * w.kw; ++t) reach = std::max(reach, (M - 1) * w.sw + ph.offset(w, t, N) + 1);
  ph.slack = std::max<int64_t>(0, reach - phases * N * Hq * Wp);
  ph.row = static_cast<uint64_t>(Wp * C * es);
  ph.image = static_cast<uint64_t>(Hq) * ph.row, ph.phase_bytes = static_cast<uint64_t>(N) * ph.image;
  if (phases == 1 && Hq == H && Wp == W && ph.slack == 0) return ph;  // the input itself
  ph.P = Stored{L.temp(label + ".padded", x.dtype, {phases, N, Hq, Wp, C}, static_cast<uint64_t>(ph.slack * C * es)),
                0, x.dtype, true};
  if (x.dtype == DType::I8 && pad_value != 0) throw LoweringIssue(label + ": internal: int8 padding must be 0");
  int pat = -1;  // the padding value's row, where some border needs it
  auto fill = [&](uint64_t off, int64_t rows, int64_t cols) {
    if (rows <= 0 || cols <= 0) return;
    if (pat < 0) pat = L.fill_pattern(pad_value, x.dtype, ph.row, ph.moves);
    ph.moves.push_back(BufferMove{pat, ph.P.buf, 0, off, static_cast<uint64_t>(rows),
                                  static_cast<uint64_t>(cols * C * es), 0, static_cast<int64_t>(ph.row)});
  };
  std::vector<bool> used(static_cast<size_t>(phases), false);
  for (int64_t i = 0; i < w.kh; ++i) used[static_cast<size_t>(i * w.dh % w.sh)] = true;
  for (int64_t a = 0; a < phases; ++a) {
    if (!used[static_cast<size_t>(a)]) continue;
    // phase row q <-> input row q * sh + a - pt; rows [q0, q1) are the input's
    const int64_t q0 = std::min<int64_t>(Hq, std::max<int64_t>(0, (w.pt - a + w.sh - 1) / w.sh));
    const int64_t q1 = std::max<int64_t>(q0, std::min<int64_t>(Hq, (H + w.pt - a + w.sh - 1) / w.sh));
    for (int64_t img = 0; img < N; ++img) {
      const uint64_t base = static_cast<uint64_t>(a) * ph.phase_bytes + static_cast<uint64_t>(img) * ph.image;
      fill(base, q0, Wp);
      fill(base + static_cast<uint64_t>(q1) * ph.row, Hq - q1, Wp);
      fill(base + static_cast<uint64_t>(q0) * ph.row, q1 - q0, w.pl);
      fill(base + static_cast<uint64_t>(q0) * ph.row + static_cast<uint64_t>((w.pl + W) * C * es), q1 - q0,
           Wp - W - w.pl);
      if (q1 > q0)
        ph.moves.push_back(BufferMove{x.buf, ph.P.buf,
                                      x.off + static_cast<uint64_t>(((img * H + q0 * w.sh + a - w.pt) * W) * C * es),
                                      base + static_cast<uint64_t>(q0) * ph.row + static_cast<uint64_t>(w.pl * C * es),
                                      static_cast<uint64_t>(q1 - q0), static_cast<uint64_t>(W * C * es),
                                      w.sh * W * C * es, static_cast<int64_t>(ph.row)});
    }
  }
  // One buffer for every window of this layout and these borders: the first fills the borders, the later ones
  // find them filled (only the interiors are written: the input's moves, or its GEMM's row map) and move only
  // the input; the buffer then lives from the first to the last of them.
  std::string key = std::string(isa::dtype_name(x.dtype)) + " " + ints_str({phases, N, Hq, Wp, C, ph.slack}) + " " +
                    std::to_string(isa::bits_from_f32(pad_value));
  // (the fills: the moves of the padding value into P; not a load of the pattern itself, fill_pattern's)
  auto is_fill = [&](const BufferMove& m) { return m.src == pat && m.dst == ph.P.buf; };
  for (const BufferMove& m : ph.moves)
    if (is_fill(m))
      key += " " + ints_str({static_cast<int64_t>(m.dst_off), static_cast<int64_t>(m.rows),
                             static_cast<int64_t>(m.rowbytes), m.dst_stride});
  const auto [held, fresh] = L.padded_.emplace(key, ph.P.buf);
  if (!fresh) {
    std::erase_if(ph.moves, is_fill);
    for (BufferMove& m : ph.moves)
      if (m.dst == ph.P.buf) m.dst = held->second;
    ph.P.buf = held->second;
  }
  return ph;
}

// Row maps (GemmChip::c_rows, gemm.s's C_* parameters): a GEMM storing its rows where the next kernel reads them,
// in place of a copy. Asked only on chips of several cores, whose GEMMs run as the whole-chip kernel (codegen's
// whole_chip_gemm then takes every GEMM with a map) and where a copy is dear: it runs on one core between barriers
// (or on every core, with its own), while the map costs the GEMM a few instructions per group of rows it stores.
// On one core a copy within VMEM is one transfer; there the maps lost (ResNet-50 on v5e 145,109 -> 151,971 cycles:
// the producers' stores a group at a time, layer 1's first 1 x 1 convolution 1,083 -> 1,667, and a weight stream
// planned otherwise), on h200-like they won (381,781 -> 364,196). Of bf16 outputs.
// Whether the window is the only reader of graph value v: its one user, no graph output, and no calibration
// output (an int8 compile's calibration run writes the inputs of its quantised matmuls at the program's end:
// Options::expose_calibration).
bool read_by_window_alone(const Lowering& L, int v) {
  return v >= 0 && L.users_[static_cast<size_t>(v)].size() == 1 && !L.is_output_[static_cast<size_t>(v)] &&
         !(L.opts_.expose_calibration && L.calib_.count(v));
}

bool maps_rows(const Lowering& L) {
  const auto cores = L.sym_.find("CORES");
  return cores != L.sym_.end() && cores->second > 1;
}

void set_row_map(KernelCall& call, int64_t group, int64_t keep, int64_t pitch, int64_t per_image, int64_t image_pitch,
                 int64_t rows) {
  call.params.insert({{"C_GROUP", group}, {"C_KEEP", keep}, {"C_PITCH", pitch}, {"C_PER_IMAGE", per_image},
                      {"C_IMAGE_PITCH", image_pitch}, {"C_ROWS", rows}});
}

// The padded input's interior written by the GEMM that makes x: where that GEMM is x's only writer and writes all
// of it ([rows, N] bf16, no map yet, no int8 copy, group or activation), x is read by this window alone
// (read_by_window_alone), and the input is one phase (stride 1 down the rows), the GEMM stores into ph.P through a row map
// (rows of W pixels ph.row bytes apart, images ph.image apart, from the first interior pixel) and the moves that
// copied x into it go; the borders' fills stay. Not where a call after the producer uses ph.P (another window of
// its layout: window_phases), which the producer's writes would overtake. `xv`: the graph value x holds. Returns
// whether it did.
bool producer_writes_padded(Lowering& L, int xv, const Stored& x, const Shape& s /*NCHW*/, const Window& w,
                            Phases& ph, const std::string& label) {
  const int64_t N = s[0], C = s[1], H = s[2], W = s[3];
  if (!maps_rows(L) || ph.phases != 1 || ph.P.buf == x.buf || x.dtype != DType::BF16 || !read_by_window_alone(L, xv))
    return false;
  KernelCall* producer = nullptr;
  for (KernelCall& call : L.plan_.calls) {
    // nothing after the producer may use the padded buffer (held by another window of its layout, whose reads
    // would follow this producer's writes)
    if (producer && std::any_of(call.tensors.begin(), call.tensors.end(),
                                [&](const auto& t) { return t.second == ph.P.buf; }))
      return false;
    for (const auto& [name, b] : call.tensors)
      if (b == x.buf) {
        if (producer || call.kind != KernelCall::Kind::Library || call.kernel != "gemm.s" || name != "c") return false;
        producer = &call;
      }
  }
  if (!producer || producer->offsets.at("c") != x.off) return false;
  auto param = [&](const char* k) { auto it = producer->params.find(k); return it == producer->params.end() ? 0 : it->second; };
  const int64_t M = param("M"), NC = param("N");
  if (param("OUT_DT") != static_cast<int64_t>(DType::BF16) || param("Q_SCALE") || param("Q_ONLY") || param("GROUP_N") ||
      param("ACT") || param("ACT_RESIDENT") || param("C_GROUP") || NC <= 0 || M * NC != N * H * W * C ||
      (W * C) % NC != 0)
    return false;
  const int64_t es = 2, base = (w.pt * ph.Wp + w.pl) * C * es;
  const uint64_t bytes = L.plan_.buffers[static_cast<size_t>(ph.P.buf)].bytes() - ph.P.off;
  producer->tensors["c"] = ph.P.buf, producer->offsets["c"] = ph.P.off + static_cast<uint64_t>(base);
  set_row_map(*producer, W * C / NC, W * C / NC, static_cast<int64_t>(ph.row), H, static_cast<int64_t>(ph.image),
              (static_cast<int64_t>(bytes) - base) / (NC * es));
  producer->note = (producer->note.empty() ? "" : producer->note + "; ") + "writes the padded input of " + label;
  std::erase_if(ph.moves, [&](const BufferMove& m) { return m.src == x.buf; });
  return true;
}

// The padded input's interior copied from where the copy that made x read it: where x's only writer is the last
// call, a copy of dense rows into x (a convolution's drop of its virtual columns, keep_outputs and drop_virtual),
// x is read by this window alone (read_by_window_alone), each of the window's moves of x's rows becomes a move of
// those rows from the copy's source, and that copy goes (a copy's fixed cost, and x's bytes moved once, not
// twice). `xv`: the graph value x holds. Returns whether it did.
bool copy_writes_padded(Lowering& L, int xv, const Stored& x, Phases& ph) {
  if (!read_by_window_alone(L, xv) || L.plan_.calls.empty() || ph.P.buf == x.buf) return false;
  const KernelCall& writer = L.plan_.calls.back();
  if (writer.kind != KernelCall::Kind::Copy || writer.moves.empty()) return false;
  for (const BufferMove& a : writer.moves)
    if (a.dst != x.buf || a.src == x.buf || static_cast<uint64_t>(a.dst_stride) != a.rowbytes) return false;
  for (size_t c = 0; c + 1 < L.plan_.calls.size(); ++c)
    for (const auto& t : L.plan_.calls[c].tensors)
      if (t.second == x.buf) return false;
  std::vector<BufferMove> moves;
  for (const BufferMove& b : ph.moves) {
    if (b.src != x.buf) {
      moves.push_back(b);
      continue;
    }
    // b reads rows of b.rowbytes from x at b.src_off, b.src_stride apart: all inside one of the writer's moves,
    // each within one of its rows, at rows a whole number apart
    const BufferMove* from = nullptr;
    for (const BufferMove& a : writer.moves)
      if (b.src_off >= a.dst_off && b.src_off < a.dst_off + a.rows * a.rowbytes) from = &a;
    if (!from) return false;
    const BufferMove& a = *from;
    const uint64_t rel = b.src_off - a.dst_off, row = rel / a.rowbytes, col = rel % a.rowbytes;
    if (col + b.rowbytes > a.rowbytes || b.src_stride < 0 || static_cast<uint64_t>(b.src_stride) % a.rowbytes != 0 ||
        (b.rows > 0 && row + (b.rows - 1) * (static_cast<uint64_t>(b.src_stride) / a.rowbytes) >= a.rows))
      return false;
    moves.push_back(BufferMove{a.src, b.dst, a.src_off + row * static_cast<uint64_t>(a.src_stride) + col, b.dst_off,
                               b.rows, b.rowbytes,
                               static_cast<int64_t>(static_cast<uint64_t>(b.src_stride) / a.rowbytes) * a.src_stride,
                               b.dst_stride});
  }
  ph.moves = std::move(moves);
  L.plan_.calls.pop_back();
  return true;
}

// The padded input's interior written in place where that can be had: by the GEMM that makes x, else by moves
// from where the copy that made x read it (producer_writes_padded, copy_writes_padded).
void padded_in_place(Lowering& L, int xv, const Stored& x, const Shape& s /*NCHW*/, const Window& w, Phases& ph,
                     const std::string& label) {
  if (!producer_writes_padded(L, xv, x, s, w, ph, label)) copy_writes_padded(L, xv, x, ph);
}

// The im2col matrix [N * OH * Wv, taps * cg] of channels [c0, c0 + cg) of each tap, columns (kh, kw, c): where the
// taps of a kernel row are adjacent (dilation 1 across) and take every channel, one move per image and kernel row
// of runs kw * C elements (a 3-channel stem's 7 taps one run of 42 bytes), else one per tap.
Taps window_taps(Lowering& L, const std::string& label, Stored x, const Shape& s /*NCHW*/, const Window& w, float pad_value,
                 int64_t c0, int64_t cg, int dst, int64_t out_h = -1, int64_t out_w = -1) {
  const int64_t N = s[0], C = s[1];
  const int es = isa::dtype_size(x.dtype);
  Phases ph = window_phases(L, label, x, s, w, pad_value, out_h, out_w);
  const int64_t OH = ph.OH, OW = ph.OW, Wq = ph.Wq, taps = w.kh * w.kw;
  const bool runs = w.dw == 1 && cg == C;
  std::vector<BufferMove> moves = std::move(ph.moves);
  for (int64_t img = 0; img < N; ++img)
    for (int64_t t = 0; t < taps; t += runs ? w.kw : 1) {
      const uint64_t src = ph.P.off + static_cast<uint64_t>((ph.offset(w, t, N) + img * ph.Hq * ph.Wp) * C * es) +
                           static_cast<uint64_t>(c0 * es);
      const uint64_t d = static_cast<uint64_t>(((img * OH * Wq * taps) + t) * cg * es);
      moves.push_back(BufferMove{ph.P.buf, dst, src, d, static_cast<uint64_t>(OH * Wq),
                                 static_cast<uint64_t>((runs ? w.kw : 1) * cg * es), ph.pitch * C * es,
                                 taps * cg * es});
    }
  L.copy(label, std::move(moves));
  return Taps{OH, OW, Wq, N * OH * Wq};
}

// The taps of a window as views of the padded, phase-split input (for the vector unit, which reads a tap's rows as
// one operand, `pitch` bytes apart, 0 where contiguous): tap t is the M rows of C elements from pixel offset(t) of the phases, with M =
// (N - 1) * Hq * Wq + OH * Wq virtual rows that span whole images, so that no tap is copied. Issues the padding's
// moves. `whole`: the virtual rows are the outputs themselves (Wq = OW, and one image or Hq = OH).
struct TapViews {
  Phases ph;
  int64_t rows, pitch;
  std::vector<Stored> taps;
  bool whole;
};

TapViews tap_views(Lowering& L, const std::string& label, Stored x, const Shape& s /*NCHW*/, const Window& w,
                   float pad_value, int64_t out_h = -1, int64_t out_w = -1, int xv = -1) {
  const int64_t N = s[0], C = s[1];
  const int es = isa::dtype_size(x.dtype);
  TapViews v{window_phases(L, label, x, s, w, pad_value, out_h, out_w), 0, 0, {}, false};
  padded_in_place(L, xv, x, s, w, v.ph, label);
  L.copy(label, std::move(v.ph.moves));
  v.rows = (N - 1) * v.ph.Hq * v.ph.Wq + v.ph.OH * v.ph.Wq;
  v.pitch = v.ph.pitch > 1 ? v.ph.pitch * C * es : 0;  // 0: contiguous rows
  v.whole = v.ph.Wq == v.ph.OW && (N == 1 || v.ph.Hq == v.ph.OH);
  for (int64_t t = 0; t < w.kh * w.kw; ++t)
    v.taps.push_back(Stored{v.ph.P.buf, v.ph.P.off + static_cast<uint64_t>(v.ph.offset(w, t, N) * C * es), x.dtype, false});
  return v;
}

// The outputs among image-spanning virtual rows (tap_views, implicit_im2col): per image, its OH rows of OW of the
// Wq virtual columns, from G ([rows, C], Hq * Wq rows per image) into Y ([N, OH, OW, C]).
void keep_outputs(Lowering& L, const std::string& label, Stored G, Stored Y, const Phases& ph, int64_t n, int64_t c) {
  const int es = isa::dtype_size(G.dtype);
  std::vector<BufferMove> keep;
  for (int64_t img = 0; img < n; ++img)
    keep.push_back(BufferMove{G.buf, Y.buf, G.off + static_cast<uint64_t>(img * ph.Hq * ph.Wq * c * es),
                              Y.off + static_cast<uint64_t>(img * ph.OH * ph.OW * c * es),
                              static_cast<uint64_t>(ph.OH), static_cast<uint64_t>(ph.OW * c * es), ph.Wq * c * es,
                              ph.OW * c * es});
  L.copy(label, std::move(keep));
}

// Drops the overhanging virtual columns: [N*OH*Wv, C] -> [N*OH*OW, C].
void drop_virtual(Lowering& L, const std::string& label, Stored from, Stored to, const Taps& t, int64_t n, int64_t c) {
  const int es = isa::dtype_size(from.dtype);
  L.copy(label, {BufferMove{from.buf, to.buf, from.off, to.off, static_cast<uint64_t>(n * t.oh),
                          static_cast<uint64_t>(t.ow * c * es), t.wv * c * es, t.ow * c * es}});
}

// The taps a depthwise convolution's row-wise kernel takes at once (depthwise in conv2d): all of them where that
// kernel fits a core's VMEM, else the most whose kernel does, with the partial sums of the chunk before as an input
// and written out in f32 (the bias and the ReLU counted too).
int64_t depthwise_chunk(const Lowering& L, int64_t rows, int64_t C, int64_t taps, int64_t pitch, bool bias, bool relu) {
  auto fits = [&](int64_t n, bool first) {
    rw::Program p;
    p.rows = rows, p.cols = C;
    int acc = -1;
    if (!first) p.inputs.push_back(rw::Input{0, DType::F32}), acc = p.input(0);
    for (int64_t k = 0; k < n; ++k) {
      p.inputs.push_back(rw::Input{0, DType::BF16, false, 0, "", pitch});
      const int x = p.input(static_cast<int>(p.inputs.size()) - 1);
      p.inputs.push_back(rw::Input{0, DType::F32, false, 1});
      const int prod = p.binary(rw::Op::Mul, x, p.input(static_cast<int>(p.inputs.size()) - 1));
      acc = acc < 0 ? prod : p.binary(rw::Op::Add, acc, prod);
    }
    if (bias) {
      p.inputs.push_back(rw::Input{0, DType::F32, false, 1});
      acc = p.binary(rw::Op::Add, acc, p.input(static_cast<int>(p.inputs.size()) - 1));
    }
    if (relu) acc = p.unary(rw::Op::Relu, acc);
    p.outputs.push_back(rw::Output{acc, 0, DType::F32});
    return L.rowwise_fits(p);
  };
  if (fits(taps, true)) return taps;
  int64_t n = taps - 1;
  while (n > 1 && !fits(n, false)) --n;
  return n;
}

// A convolution in the form the 2-D core computes: an NHWC input, [OC, Cg, KH, KW] weights, an NHWC output.
struct Conv2d {
  std::string label, wname;
  Stored X;  // NHWC, bf16 (int8 when q8)
  Shape xs;  // its logical NCHW shape
  Window win;
  std::vector<float> w;  // [OC, Cg, KH, KW]; empty: timing-only
  int64_t OC, Cg, KH, KW, groups;
  std::vector<float> bias;  // [OC]
  bool has_bias, relu, q8;
  int x;  // the graph value X holds (its int8 scale)
  Stored Y;
  int64_t OH, OW;
  int value;     // the graph value Y holds, -1 when Y is an intermediate form of it
  double flops;  // the model's multiply-adds x 2
  // The model's weight elements this convolution computes with, where its own weights hold zeros besides (the
  // dense form of a grouped convolution: group_pack); -1: its weights are the model's. For the ideal bound
  // (Buffer::model_bytes).
  int64_t model_weights = -1;
};

// The implicit im2col (gemm.s's TAP_* parameters, kernels/gemm_chip.h ConvTaps) where a tap's row of input channels
// is at least this many bytes (a DMA row shorter than that, as a 3-channel stem's 6 bytes, is left to the copied
// matrix, whose copies move a kernel row's taps as one run: window_taps).
constexpr int64_t kMinTapBytes = 64;

// The convolution's GEMM, out = act(a[m, KH*KW*C] @ wt + bias) into `dst` (int8 weights where c.q8); `wt`: the
// weights as [(kh, kw, c), OC]; `value`: the graph value dst holds, -1 for virtual rows.
void conv_gemm(Lowering& L, const ir::Node& n, const Conv2d& c, const std::vector<float>& wt, Stored a, int64_t m,
               Stored dst, int value) {
  const int64_t k = c.KH * c.KW * c.xs[1];
  if (c.q8) {
    L.int8_gemm(n, c.label, a, c.x, wt, m, k, c.OC, c.has_bias ? c.bias : std::vector<float>{}, c.wname, c.relu, dst,
                c.flops, value);
    return;
  }
  int B = L.tiled_weights(c.wname, wt, k, c.OC, c.model_weights);
  int bias_buf = c.has_bias ? L.const_f32(c.wname + ".bias", {c.OC}, c.bias) : -1;
  L.gemm(c.label, a, Stored{B, 0, DType::BF16, false}, bias_buf, dst, m, k, c.OC, c.relu, 1.0f, true, false);
  L.plan_.calls.back().flops = c.flops;
}

// A convolution (groups 1; bf16, or int8 on int8 weights) whose gemm reads its taps from the padded input in
// place, so that the matrix of copied taps (taps times the input's bytes, written and read back) never exists. The
// gemm's rows are virtual as in window_taps, and also span each image's Hq - OH rows below its outputs, so that a
// row's taps are one regular offset over all the images: M = (N - 1) * Hq * Wq + OH * Wq rows; the rows that are
// no output are dropped after.
// `wt`: the weights as [(kh, kw, c), OC]. Same products summed in the same order as the copied matrix: same bits.
void implicit_im2col(Lowering& L, const ir::Node& n, const Conv2d& c, const std::vector<float>& wt) {
  const int64_t N = c.xs[0], C = c.xs[1], OC = c.OC;
  Phases ph = window_phases(L, c.label, c.X, c.xs, c.win, 0.0f, -1, -1);
  padded_in_place(L, c.q8 ? -1 : c.x, c.X, c.xs, c.win, ph, c.label);
  L.copy(c.label, std::move(ph.moves));
  const int64_t M = (N - 1) * ph.Hq * ph.Wq + ph.OH * ph.Wq, phase_rows = N * ph.Hq * ph.Wp;
  const bool whole = ph.Wq == c.OW && (N == 1 || ph.Hq == c.OH);  // the gemm's rows are the outputs themselves
  // Or the GEMM stores the outputs among them itself (a row map: OW of each Wq rows, where no image has rows below
  // its outputs between it and the next), and no copy drops the others
  const bool dropped = !whole && maps_rows(L) && !c.q8 && c.Y.dtype == DType::BF16 && (N == 1 || ph.Hq == c.OH);
  Stored G = whole || dropped ? c.Y : Stored{L.temp(c.label + ".virtual", DType::BF16, {M, OC}), 0, DType::BF16, true};
  conv_gemm(L, n, c, wt, ph.P, M, G, whole ? c.value : -1);
  KernelCall& call = L.plan_.calls.back();
  if (dropped) set_row_map(call, ph.Wq, c.OW, c.OW * OC * 2, 0, 0, N * c.OH * c.OW);
  // phases of rows only: one phase across (TAP_SW 1), a phase row the padded row, the stride across the pitch
  call.params.insert({{"TAP_CIN", C}, {"TAP_ROWS", ph.phases * phase_rows + ph.slack}, {"TAP_KW", c.KW},
                      {"TAP_SH", c.win.sh}, {"TAP_SW", 1}, {"TAP_DH", c.win.dh}, {"TAP_DW", c.win.dw},
                      {"TAP_WQ", ph.Wp}, {"TAP_PHASE_ROWS", phase_rows}});
  if (ph.pitch != 1) call.params["TAP_PITCH"] = ph.pitch;
  if (!whole && !dropped) keep_outputs(L, c.label, G, c.Y, ph, N, OC);
}

// Output pixels side by side: a convolution of fewer output channels than a matrix unit has columns computes P
// adjacent outputs of an image row in one GEMM row, as a convolution of P * OC output channels whose weights are
// the kernel shifted by the stride for each of the P (a kernel (P - 1) * sw + (KW - 1) * dw + 1 wide, of stride
// P * sw, zeros elsewhere). Its output, [N, OH, OW / P, P * OC] NHWC, is the same bytes as [N, OH, OW, OC]: a
// P-th of the GEMM's rows, P times the columns it fills, a kernel wider by (P - 1) * sw columns. A 1x1 stride-1
// convolution (`direct`) becomes a 1xP one of stride P, itself direct: the GEMM on the input as it lies, [rows / P,
// P * C], with block-diagonal weights. Chosen by the matrix work of four units (rows x folds of K x strips of
// columns, the units splitting the rows where the strips are fewer, a fold at least R cycles: the weight load
// hides behind R rows; four, not the chip's count, so that a chip cut to one unit computes the same bits), where it
// is at most 0.8 of the plain convolution's; OW a multiple of P, P * OC at most the unit's columns; where the taps
// are copied into a matrix, only if it is no larger (a kernel at most P times as wide over a P-th of the rows), on
// units of at least 64 rows (a tensor core's 16 rows: the GEMM's time is its traffic, which the wider kernel
// raises). The same products, summed in other passes: the results within the sum's rounding of the plain ones.
int64_t pack_factor(const Lowering& L, const Conv2d& c, bool direct) {
  const int64_t R = L.sym_.at("MXU_ROWS"), C = L.sym_.at("MXU_COLS"), U = 4;
  if (R < 64 || C <= 0) return 1;
  // taps copied into a matrix (a row of channels under kMinTapBytes): only where the matrix is no larger, P times
  // fewer rows of a kernel at most P times as wide
  const bool copied = !direct && c.xs[1] * isa::dtype_size(c.X.dtype) < kMinTapBytes;
  const int64_t M = c.xs[0] * c.OH * c.OW;
  auto cdiv = [](int64_t a, int64_t b) { return (a + b - 1) / b; };
  // a unit's work, of U: its share of the strips of columns, each over its share of the rows (units split the rows
  // where there are fewer strips than units), a fold at least R cycles
  auto work = [&](int64_t P) {
    const int64_t kw = (P - 1) * c.win.sw + (c.KW - 1) * c.win.dw + 1, K = c.KH * kw * c.xs[1];
    const int64_t strips = cdiv(P * c.OC, C), rows = cdiv(M / P, std::max<int64_t>(1, U / strips));
    return static_cast<double>(cdiv(strips, U) * cdiv(K, R) * std::max(rows, R));
  };
  int64_t best = 1;
  for (int64_t P = 2; c.OW % P == 0 && P * c.OC <= C; P *= 2)
    if (work(P) <= 0.8 * work(best) && (!copied || (P - 1) * c.win.sw + (c.KW - 1) * c.win.dw + 1 <= P * c.KW))
      best = P;
  return best;
}

// The convolution c computed P outputs of a row at a time (pack_factor): the wider kernel of P * OC channels.
Conv2d packed(const Conv2d& c, int64_t P) {
  Conv2d p = c;
  const int64_t C = c.xs[1], KW = (P - 1) * c.win.sw + (c.KW - 1) * c.win.dw + 1;
  p.OC = P * c.OC, p.KW = KW, p.OW = c.OW / P, p.wname = c.wname + ".packed" + std::to_string(P);
  p.win.kw = KW, p.win.sw = P * c.win.sw, p.win.dw = 1;
  if (!c.w.empty()) {  // [OC, C, KH, KW] -> [P * OC, C, KH, KW']: output j of the P at columns j * sw + x * dw
    p.w.assign(static_cast<size_t>(p.OC * C * c.KH * KW), 0.0f);
    for (int64_t j = 0; j < P; ++j)
      for (int64_t o = 0; o < c.OC; ++o)
        for (int64_t ci = 0; ci < C; ++ci)
          for (int64_t y = 0; y < c.KH; ++y)
            for (int64_t x = 0; x < c.KW; ++x)
              p.w[static_cast<size_t>((((j * c.OC + o) * C + ci) * c.KH + y) * KW + j * c.win.sw + x * c.win.dw)] =
                  c.w[static_cast<size_t>(((o * C + ci) * c.KH + y) * c.KW + x)];
  }
  p.bias.clear();
  for (int64_t j = 0; j < P; ++j) p.bias.insert(p.bias.end(), c.bias.begin(), c.bias.end());
  return p;
}

// The groups of a grouped convolution computed together: P consecutive groups as one convolution of P * Cg input
// and P * OCg output channels, whose weights are block-diagonal (zeros between the groups), so that P times the
// multiply-adds and the weight bytes buy P times fewer convolutions, each with its own copies, fill and drain of
// the matrix units. The divisor P of the groups with the least estimated time: groups / P convolutions, each its
// matrix work on the chip's units (as pack_factor counts it: the units share the strips of columns, or split the
// rows where the strips are fewer; a fold at least R cycles), plus its weights at HBM's bandwidth, plus 4 x (R + C)
// cycles (the arrays' fill and drain, and the kernels around them); the largest P on a tie. Fitted on nine grouped
// 3 x 3 convolutions (RegNetY's and ResNeXt's shapes, groups of 4 to 256 channels) on the seven presets, each
// timed at every P (scripts/group-pack-sweep.py; Options::group_pack forces P): the choice's time is 1.045x the
// best P's (geometric mean) and never above one GEMM per group's; docs/compiler.md, "Grouped convolutions". The
// same products, with zeros between them, summed in other passes: the results within the sums' rounding of one
// GEMM per group (and they depend on the chip, as P does).
int64_t group_pack(const Lowering& L, const Conv2d& c) {
  const int64_t groups = c.groups;
  if (groups <= 1) return 1;
  auto sym = [&](const char* name) {
    const auto it = L.sym_.find(name);
    return it != L.sym_.end() ? std::max<int64_t>(1, it->second) : 1;
  };
  const int64_t R = sym("MXU_ROWS"), C = sym("MXU_COLS"), U = sym("MXUS") * sym("CORES");
  const double hbm = static_cast<double>(sym("HBM_BYTES_PER_CYCLE"));
  const int64_t M = c.xs[0] * c.OH * c.OW, taps = c.KH * c.KW, OCg = c.OC / groups;
  auto cdiv = [](int64_t a, int64_t b) { return (a + b - 1) / b; };
  auto cost = [&](int64_t P) {
    const int64_t K = taps * P * c.Cg, N = P * OCg, strips = cdiv(N, C), rows = cdiv(M, std::max<int64_t>(1, U / strips));
    const double work = static_cast<double>(cdiv(strips, U) * cdiv(K, R) * std::max(rows, R));
    const double bytes = static_cast<double>(K * N * isa::dtype_size(DType::BF16));
    return static_cast<double>(groups / P) * (work + bytes / hbm + 4.0 * static_cast<double>(R + C));
  };
  if (L.opts_.group_pack > 0 && groups % L.opts_.group_pack == 0) return L.opts_.group_pack;  // (measuring)
  int64_t best = 1;
  double least = cost(1);
  for (int64_t P = 2; P <= groups; ++P) {
    if (groups % P != 0) continue;
    const double t = cost(P);
    if (t <= least) best = P, least = t;
  }
  return best;
}

void conv2d(Lowering& L, const ir::Node& n, const Conv2d& c) {
  const std::string& label = c.label;
  const Stored& X = c.X;
  const Stored& Y = c.Y;
  const int64_t N = c.xs[0], C = c.xs[1], OC = c.OC, Cg = c.Cg, KH = c.KH, KW = c.KW, OH = c.OH, OW = c.OW;
  const int64_t groups = c.groups, taps = KH * KW;
  const std::vector<float>& w = c.w;
  const Window& win = c.win;
  if (groups == 1) {
    // direct: each output reads a run of KW pixels that tile the input's rows (a 1x1 stride-1 convolution, or a
    // 1xKW one of stride KW: the input is [N*OH*OW, KW*C] as it lies)
    const bool direct = KH == 1 && win.sh == 1 && win.pt == 0 && win.pl == 0 && win.pb == 0 && win.pr == 0 &&
                        ((KW == 1 && win.sw == 1) || (KW == win.sw && win.dw == 1 && OW * KW == c.xs[3]));
    if (const int64_t P = pack_factor(L, c, direct); P > 1) {
      const size_t first = L.plan_.calls.size();
      const Conv2d p = packed(c, P);
      conv2d(L, n, p);
      for (size_t i = first; i < L.plan_.calls.size(); ++i)
        if (L.plan_.calls[i].kernel == "gemm.s")
          L.plan_.calls[i].note = std::to_string(P) + " outputs of a row side by side: a " + std::to_string(p.KH) +
                                  "x" + std::to_string(p.KW) + " kernel of stride " + std::to_string(p.win.sh) + "x" +
                                  std::to_string(p.win.sw) + ", " + std::to_string(p.OC) + " output channels";
      return;
    }
    // weights [OC, C, KH, KW] -> [(kh, kw, c), OC], the im2col matrix's column order
    std::vector<float> wt(w.empty() ? 0 : static_cast<size_t>(taps * C * OC));  // empty: timing-only
    for (int64_t o = 0; o < OC && !w.empty(); ++o)
      for (int64_t ci = 0; ci < C; ++ci)
        for (int64_t t = 0; t < taps; ++t)
          wt[static_cast<size_t>((t * C + ci) * OC + o)] = w[static_cast<size_t>((o * C + ci) * taps + t)];
    auto matmul = [&](Stored a, int64_t m, Stored dst, int value) { conv_gemm(L, n, c, wt, a, m, dst, value); };
    // One output row (a 1 x 1 convolution of a 1 x 1 image: a squeeze-and-excitation block's two, after its global
    // pool): a matrix-vector product on the vector unit (gemv), as a MatMul of one row is, where a matrix unit would
    // shift in every weight tile for that one row
    if (direct && N * OH * OW == 1 && !c.q8 && gemv_fits(L, C, OC, false, c.has_bias, c.relu, Y.dtype)) {
      gemv(L, label, X, wt, C, OC, c.has_bias ? c.bias : std::vector<float>{}, c.wname, c.relu, Y, false);
      L.plan_.calls.back().flops = c.flops;
      return;
    }
    if (direct) return matmul(X, N * OH * OW, Y, c.value);
    if (C * isa::dtype_size(X.dtype) >= kMinTapBytes) return implicit_im2col(L, n, c, wt);
    int im = L.temp(label + ".im2col", X.dtype, {1});
    Taps t = window_taps(L, label, X, c.xs, win, 0.0f, 0, C, im);
    L.plan_.buffers[im].shape = {t.rows, taps * C};
    if (t.wv == OW) return matmul(Stored{im, 0, X.dtype, false}, t.rows, Y, c.value);
    Stored G{L.temp(label + ".virtual", DType::BF16, {t.rows, OC}), 0, DType::BF16, true};
    matmul(Stored{im, 0, X.dtype, false}, t.rows, G, -1);
    drop_virtual(L, label, G, Y, t, N, OC);
    return;
  }
  if (Cg == 1 && OC == groups) {  // depthwise: sum over taps of tap * w[tap] on the vector unit, taps read in place
    // Where the intermediates stay in VMEM (Options::vmem_intermediates), a bf16 input is cast to f32 once, by a
    // cast kernel, and the taps read that: the row-wise kernel cast each tap's tile, a vector pass a tap for every
    // element, beside the tap's multiply and add (the same f32 values, the same bits). Where they lie in HBM or the
    // shared memory, the f32 taps' bytes cost more than the passes save (EfficientNet-B0 on v4 262,385 -> 283,814
    // cycles, on edge 8,200,610 -> 8,639,836) and h200-like's 228 KB of VMEM cannot hold their tiles.
    Stored Xt = X;
    if (X.dtype == DType::BF16 && taps > 1 && L.opts_.vmem_intermediates) {
      Xt = Stored{L.temp(label + ".f32", DType::F32, {N, c.xs[2], c.xs[3], C}), 0, DType::F32, false};
      L.cast(label, X, Xt, N * c.xs[2] * c.xs[3] * C);
    }
    TapViews v = tap_views(L, label, Xt, c.xs, win, 0.0f, -1, -1, Xt.buf != X.buf || c.q8 ? -1 : c.x);
    Stored G = v.whole ? Y : Stored{L.temp(label + ".virtual", DType::BF16, {v.rows, C}), 0, DType::BF16, true};
    // The taps in chunks whose row-wise kernels fit a core's VMEM (all of them but on h200-like's 228 KB, for
    // EfficientNet-B0's 5 x 5 convolutions of 1152 channels): each chunk after the first adds its products to
    // the f32 partial sums of the one before, in the same order: the same sums as one kernel's.
    const int64_t chunk = depthwise_chunk(L, v.rows, C, taps, v.pitch, c.has_bias, c.relu);
    Stored partial;
    for (int64_t k0 = 0; k0 < taps; k0 += chunk) {
      const int64_t k1 = std::min(taps, k0 + chunk);
      KernelCall call = L.rowwise_call(label, v.rows, C);
      int acc = k0 > 0 ? L.rw_input(call, partial, false, 0) : -1;
      for (int64_t k = k0; k < k1; ++k) {
        std::vector<float> wk(w.empty() ? 0 : static_cast<size_t>(C));  // empty: timing-only
        for (int64_t ci = 0; ci < static_cast<int64_t>(wk.size()); ++ci) wk[ci] = w[static_cast<size_t>(ci * taps + k)];
        int xi = L.rw_input(call, v.taps[static_cast<size_t>(k)], false, 0, v.pitch);
        int wi = L.rw_input(
            call, Stored{L.const_f32(c.wname + ".tap" + std::to_string(k), {C}, wk), 0, DType::F32, false}, false, 1);
        int prodn = L.rw_node(call, rw::Op::Mul, {xi, wi});
        acc = acc < 0 ? prodn : L.rw_node(call, rw::Op::Add, {acc, prodn});
      }
      if (k1 < taps) {  // the partial sums, for the next chunk
        partial = Stored{L.temp(label + ".partial" + std::to_string(k1), DType::F32, {v.rows, C}), 0, DType::F32, false};
      } else {
        if (c.has_bias) {
          int bi = L.rw_input(call, Stored{L.const_f32(c.wname + ".bias", {C}, c.bias), 0, DType::F32, false}, false, 1);
          acc = L.rw_node(call, rw::Op::Add, {acc, bi});
        }
        if (c.relu) acc = L.rw_node(call, rw::Op::Relu, {acc});
      }
      L.rw_output(call, acc, k1 < taps ? partial : G);
      call.flops = c.flops * static_cast<double>(k1 - k0) / static_cast<double>(taps);
      L.plan_.calls.push_back(std::move(call));
    }
    if (!v.whole) keep_outputs(L, label, G, Y, v.ph, N, C);
    return;
  }
  // Grouped: P consecutive groups at a time (group_pack), as one convolution of P * Cg input and P * OCg output
  // channels whose weights are block-diagonal (an output channel's weights on its own group's input channels,
  // zeros on the others'). All of them (P = groups): an ordinary convolution, every path of groups 1 open to it.
  const int64_t OCg = OC / groups, P = group_pack(L, c), PC = P * Cg, PO = P * OCg;
  // The weights of the P groups from group g0 on, as [(kh, kw, channel of the P groups), output of the P groups]
  auto block_diagonal = [&](int64_t g0) {
    std::vector<float> wt(w.empty() ? 0 : static_cast<size_t>(taps * PC * PO));  // empty: timing-only
    for (int64_t o = 0; o < PO && !w.empty(); ++o)
      for (int64_t ci = 0; ci < Cg; ++ci)
        for (int64_t t = 0; t < taps; ++t)
          wt[static_cast<size_t>((t * PC + o / OCg * Cg + ci) * PO + o)] =
              w[static_cast<size_t>(((g0 * OCg + o) * Cg + ci) * taps + t)];
    return wt;
  };
  if (P == groups) {
    Conv2d d = c;
    d.groups = 1, d.Cg = C, d.wname = c.wname + ".dense", d.model_weights = OC * Cg * taps;
    if (!w.empty()) {  // [OC, C, KH, KW]: output o's weights on its group's Cg channels, zeros on the others'
      d.w.assign(static_cast<size_t>(OC * C * taps), 0.0f);
      for (int64_t o = 0; o < OC; ++o)
        std::copy_n(w.begin() + o * Cg * taps, Cg * taps, d.w.begin() + (o * C + o / OCg * Cg) * taps);
    }
    const size_t first = L.plan_.calls.size();
    conv2d(L, n, d);
    for (size_t i = first; i < L.plan_.calls.size(); ++i)
      if (L.plan_.calls[i].kernel == "gemm.s") {
        std::string& note = L.plan_.calls[i].note;
        note = std::to_string(groups) + " groups as one convolution of block-diagonal weights" +
               (note.empty() ? "" : "; " + note);
      }
    return;
  }
  // Else one im2col and gemm per P groups, their columns copied into place.
  for (int64_t gi = 0; gi < groups / P; ++gi) {
    const std::vector<float> wt = block_diagonal(gi * P);
    std::vector<float> bg(c.bias.begin() + gi * PO, c.bias.begin() + (gi + 1) * PO);
    const std::string gl = c.wname + ".g" + std::to_string(gi);
    int B = L.tiled_weights(gl, wt, taps * PC, PO, P * taps * Cg * OCg);
    int bias_buf = c.has_bias ? L.const_f32(gl + ".bias", {PO}, bg) : -1;
    int im = L.temp(label + ".im2col", DType::BF16, {1});
    Taps t = window_taps(L, label, X, c.xs, win, 0.0f, gi * PC, PC, im);
    L.plan_.buffers[im].shape = {t.rows, taps * PC};
    Stored G{L.temp(label + ".group", DType::BF16, {t.rows, PO}), 0, DType::BF16, false};
    L.gemm(label, Stored{im, 0, DType::BF16, false}, Stored{B, 0, DType::BF16, false}, bias_buf, G, t.rows, taps * PC,
           PO, c.relu, 1.0f, true, false);
    L.plan_.calls.back().flops = c.flops * static_cast<double>(P) / static_cast<double>(groups);
    if (P > 1) L.plan_.calls.back().note = std::to_string(P) + " groups at a time, block-diagonal weights";
    std::vector<BufferMove> moves;
    for (int64_t r = 0; r < N * OH; ++r)
      moves.push_back(BufferMove{G.buf, Y.buf, G.off + static_cast<uint64_t>(r * t.wv * PO * 2),
                                 Y.off + static_cast<uint64_t>((r * OW * OC + gi * PO) * 2),
                                 static_cast<uint64_t>(OW), static_cast<uint64_t>(PO * 2), PO * 2, OC * 2});
    L.copy(label, std::move(moves));
  }
}

// A row-major [N, C, S...] value copied channels-last, [N, S..., C].
Stored channels_last(Lowering& L, const std::string& label, Stored x, const Shape& s) {
  Shape cl{s[0]};
  cl.insert(cl.end(), s.begin() + 2, s.end());
  cl.push_back(s[1]);
  Stored to{L.temp(label + ".channels_last", x.dtype, cl), 0, x.dtype, false};
  std::vector<int64_t> st = strides_of(s), sstr{st[0]};
  sstr.insert(sstr.end(), st.begin() + 2, st.end());
  sstr.push_back(st[1]);
  L.view_copy(label, x, 0, cl, sstr, to, 0, strides_of(cl));
  return to;
}

// The channels-last input of a transposed convolution placed on a zero canvas: input position i of spatial axis d
// lands at i * stride[d] + lead[d] (dropped when outside the canvas of `canvas` sizes). x: [N, S..., C].
Stored zero_canvas(Lowering& L, const std::string& label, Stored x, const Shape& s /*[N, C, S...]*/,
                   const Shape& stride, const Shape& lead, const Shape& canvas) {
  const size_t sp = canvas.size();
  const int64_t N = s[0], C = s[1];
  const int es = isa::dtype_size(x.dtype);
  Shape cs{N};
  cs.insert(cs.end(), canvas.begin(), canvas.end());
  cs.push_back(C);
  Stored Z{L.temp(label + ".canvas", x.dtype, cs), 0, x.dtype, false};
  const uint64_t row = static_cast<uint64_t>(canvas[sp - 1] * C * es);
  std::vector<BufferMove> moves;
  int pat = L.pattern(0.0f, x.dtype, row);
  moves.push_back(BufferMove{pat, Z.buf, 0, 0, static_cast<uint64_t>(N * prod(canvas, 0, sp - 1)), row, 0,
                             static_cast<int64_t>(row)});
  // the positions along the last axis that land inside the canvas
  const int64_t last_in = s[1 + sp], st = stride[sp - 1], ld = lead[sp - 1];
  int64_t i0 = 0, i1 = last_in;  // [i0, i1)
  while (i0 < last_in && i0 * st + ld < 0) ++i0;
  while (i1 > i0 && (i1 - 1) * st + ld >= canvas[sp - 1]) --i1;
  if (i1 > i0) {
    Shape outer(s.begin() + 2, s.end() - 1);  // the other spatial axes
    const int64_t count = prod(outer);
    const std::vector<int64_t> zs = strides_of(cs), xsr = strides_of(Shape(s.begin(), s.end()));
    for (int64_t img = 0; img < N; ++img)
      for (int64_t o = 0; o < count; ++o) {
        // o -> indices of the other axes; their canvas positions
        int64_t rem = o, src = img, dst = img * zs[0];
        bool inside = true;
        std::vector<int64_t> idx(outer.size());
        for (int64_t d = static_cast<int64_t>(outer.size()) - 1; d >= 0; --d) idx[d] = rem % outer[d], rem /= outer[d];
        for (size_t d = 0; d < outer.size(); ++d) {
          src = src * s[2 + d] + idx[d];
          const int64_t z = idx[d] * stride[d] + lead[d];
          inside = inside && z >= 0 && z < canvas[d];
          dst += z * zs[1 + d];
        }
        if (!inside) continue;
        src = (src * last_in + i0) * C;  // channels-last element offset
        dst += (i0 * st + ld) * C;
        moves.push_back(BufferMove{x.buf, Z.buf, x.off + static_cast<uint64_t>(src * es),
                                   static_cast<uint64_t>(dst * es), static_cast<uint64_t>(i1 - i0),
                                   static_cast<uint64_t>(C * es), C * es, st * C * es});
      }
  }
  L.copy(label, std::move(moves));
  return Z;
}

// ConvTranspose as a convolution: weights [C, OC/g, K...] -> [OC, C/g, K...] with the kernel flipped.
std::vector<float> transposed_weights(const std::vector<float>& w, const Shape& ws, int64_t groups) {
  if (w.empty()) return {};
  const int64_t C = ws[0], OCg = ws[1], K = prod(ws, 2), Cg = C / groups;
  std::vector<float> out(w.size());
  for (int64_t g = 0; g < groups; ++g)
    for (int64_t cg = 0; cg < Cg; ++cg)
      for (int64_t o = 0; o < OCg; ++o)
        for (int64_t k = 0; k < K; ++k)
          out[static_cast<size_t>(((g * OCg + o) * Cg + cg) * K + (K - 1 - k))] =
              w[static_cast<size_t>(((g * Cg + cg) * OCg + o) * K + k)];
  return out;
}

// Conv (1-D, 2-D, 3-D) and ConvTranspose (the same, on a zero canvas): the input made channels-last and 2-D (1-D:
// H = 1; 3-D: the KD depth taps of each output depth gathered as channels, so that a 3-D convolution is a 2-D one
// over N x OD images of KD x C channels), the 2-D core, the output made row-major again.
void lower_conv(Lowering& L, const ir::Node& n) {
  const bool transposed = n.op == "ConvTranspose";
  int x = n.inputs[0], wv = n.inputs[1];
  if (!L.val(wv).is_const) L.fail(n, "weights computed at run time are not supported");
  const Shape xs = L.shape(x), ws = L.shape(wv);
  const size_t sp = xs.size() - 2;
  if (sp < 1 || sp > 3)
    L.fail(n, "only 1-D, 2-D and 3-D convolutions (3-D to 5-D inputs) are supported, got " + ir::shape_str(xs));
  const int64_t groups = n.attr_int("group", 1);
  const int64_t N = xs[0], C = xs[1], OC = transposed ? ws[1] * groups : ws[0], Cg = C / groups;
  auto ints = [&](const char* key, int64_t def, size_t count) {
    auto it = n.attrs.find(key);
    std::vector<int64_t> v = it == n.attrs.end() || it->second.ints.empty() ? std::vector<int64_t>(count, def)
                                                                             : it->second.ints;
    if (v.size() != count) L.fail(n, std::string(key) + "=" + ints_str(v) + " does not fit the kernel");
    return v;
  };
  Shape stride = ints("strides", 1, sp), dil = ints("dilations", 1, sp), pads = ints("pads", 0, 2 * sp);
  const Shape kernel(ws.begin() + 2, ws.end());
  std::vector<float> w = transposed ? transposed_weights(L.val(wv).data, ws, groups) : L.val(wv).data;
  std::vector<float> bias(static_cast<size_t>(OC), 0.0f);
  bool has_bias = false;
  if (n.inputs.size() > 2 && n.inputs[2] >= 0) {
    if (!L.val(n.inputs[2]).is_const) L.fail(n, "a bias computed at run time is not supported");
    bias = L.val(n.inputs[2]).data;
    has_bias = true;
  }
  std::string label = n.name;
  int out = n.outputs[0];
  // BatchNormalization folds into the weights and bias.
  if (L.users_[out].size() == 1 && !L.is_output_[out] && L.g_.nodes[L.users_[out][0]].op == "BatchNormalization") {
    const ir::Node& bn = L.g_.nodes[L.users_[out][0]];
    bool consts = true;
    for (size_t k = 1; k < 5; ++k) consts = consts && L.val(bn.inputs[k]).is_const;
    if (consts) {
      const float eps = bn.attr_float("epsilon", 1e-5f);
      const auto &gam = L.val(bn.inputs[1]).data, &beta = L.val(bn.inputs[2]).data, &mean = L.val(bn.inputs[3]).data,
                 &var = L.val(bn.inputs[4]).data;
      const int64_t per = Cg * prod(kernel);
      for (int64_t o = 0; o < OC; ++o) {
        const float sc = gam[o] / std::sqrt(var[o] + eps);
        for (int64_t e = 0; e < per && !w.empty(); ++e) w[static_cast<size_t>(o * per + e)] *= sc;
        bias[o] = (bias[o] - mean[o]) * sc + beta[o];
      }
      has_bias = true;
      L.done_[L.users_[out][0]] = true;
      label += "+" + bn.name;
      out = bn.outputs[0];
    }
  }
  bool relu = false;
  if (L.users_[out].size() == 1 && !L.is_output_[out] && L.g_.nodes[L.users_[out][0]].op == "Relu") {
    relu = true;
    L.done_[L.users_[out][0]] = true;
    label += "+" + L.g_.nodes[L.users_[out][0]].name;
    out = L.g_.nodes[L.users_[out][0]].outputs[0];
  }
  const Shape os = L.shape(out);
  const bool q8 = groups == 1 && L.int8(x);
  // The model's multiply-adds: each output position of a convolution, each input position of a transposed one.
  const double flops = 2.0 * static_cast<double>(transposed ? prod(xs, 2) : prod(os, 2)) * static_cast<double>(N) *
                       static_cast<double>(prod(kernel) * Cg * OC);

  Conv2d c{label, L.val(wv).name, {}, {}, {}, {}, OC, Cg, 1, 1, groups, bias, has_bias, relu, q8, x, {}, 1, 1, out,
           flops};
  // The input, channels-last: [N, S..., C] (NHWC for 2-D).
  Stored X;
  if (sp == 2) X = q8 ? L.quantized(n, x, true) : L.get(x, DType::BF16, true);
  else X = channels_last(L, label, q8 ? L.quantized(n, x, false) : L.get(x, DType::BF16, false), xs);
  Shape in_sp(xs.begin() + 2, xs.end());  // the convolution's spatial input sizes
  if (transposed) {
    // y = conv(x placed every stride[d] on a zero canvas, flipped weights) with stride 1 and no padding: the canvas
    // has d*(k-1) - pad_begin zeros before the first input and d*(k-1) - pad_end + output_padding after the last
    // (negative counts crop).
    Shape opad = ints("output_padding", 0, sp), lead(sp), canvas(sp);
    for (size_t d = 0; d < sp; ++d) {
      lead[d] = dil[d] * (kernel[d] - 1) - pads[d];
      canvas[d] = (xs[2 + d] - 1) * stride[d] + 1 + lead[d] + dil[d] * (kernel[d] - 1) - pads[sp + d] + opad[d];
    }
    X = zero_canvas(L, label, X, xs, stride, lead, canvas);
    in_sp = canvas;
    std::fill(stride.begin(), stride.end(), 1);
    std::fill(pads.begin(), pads.end(), 0);
  }
  // The 2-D form.
  if (sp == 1) {
    c.xs = {N, C, 1, in_sp[0]};
    c.win = Window{1, kernel[0], 1, stride[0], 1, dil[0], 0, pads[0], 0, pads[1]};
    c.KW = kernel[0];
    c.OH = 1, c.OW = os[2];
  } else if (sp == 2) {
    c.xs = {N, C, in_sp[0], in_sp[1]};
    c.win = Window{kernel[0], kernel[1], stride[0], stride[1], dil[0], dil[1], pads[0], pads[1], pads[2], pads[3]};
    c.KH = kernel[0], c.KW = kernel[1];
    c.OH = os[2], c.OW = os[3];
  } else {
    // Depth taps as channels: image (n, od) of G holds, for each group, the KD input depths od*sd + kd*dd - pd
    // (zeros outside the input), each of the group's Cg channels: channel (g, kd, cg).
    const int64_t D = in_sp[0], H = in_sp[1], W = in_sp[2], KD = kernel[0], OD = os[2];
    const int64_t Ct = KD * C, es = isa::dtype_size(X.dtype);
    Stored G{L.temp(label + ".depth_taps", X.dtype, {N * OD, H, W, Ct}), 0, X.dtype, true};
    std::vector<BufferMove> moves;
    const uint64_t plane = static_cast<uint64_t>(H * W * Ct * es);
    bool outside = false;
    for (int64_t od = 0; od < OD; ++od)
      for (int64_t kd = 0; kd < KD; ++kd) {
        const int64_t d = od * stride[0] + kd * dil[0] - pads[0];
        outside = outside || d < 0 || d >= D;
      }
    if (outside) {
      int pat = L.pattern(0.0f, X.dtype, plane);
      moves.push_back(BufferMove{pat, G.buf, 0, 0, static_cast<uint64_t>(N * OD), plane, 0,
                                 static_cast<int64_t>(plane)});
    }
    for (int64_t img = 0; img < N; ++img)
      for (int64_t od = 0; od < OD; ++od)
        for (int64_t kd = 0; kd < KD; ++kd) {
          const int64_t d = od * stride[0] + kd * dil[0] - pads[0];
          if (d < 0 || d >= D) continue;
          for (int64_t g = 0; g < groups; ++g)
            moves.push_back(BufferMove{
                X.buf, G.buf, X.off + static_cast<uint64_t>((((img * D + d) * H * W) * C + g * Cg) * es),
                static_cast<uint64_t>(((img * OD + od) * H * W * Ct + (g * KD + kd) * Cg) * es),
                static_cast<uint64_t>(H * W), static_cast<uint64_t>(Cg * es), C * es, Ct * es});
        }
    L.copy(label, std::move(moves));
    X = G;
    c.xs = {N * OD, Ct, H, W};
    c.win = Window{kernel[1], kernel[2], stride[1], stride[2], dil[1], dil[2], pads[1], pads[2], pads[4], pads[5]};
    c.Cg = KD * Cg;
    c.KH = kernel[1], c.KW = kernel[2];
    c.OH = os[3], c.OW = os[4];
    if (!w.empty()) {  // [OC, Cg, KD, KH, KW] -> [OC, (kd, cg), KH, KW]
      std::vector<float> w2(w.size());
      const int64_t hw = kernel[1] * kernel[2];
      for (int64_t o = 0; o < OC; ++o)
        for (int64_t cg = 0; cg < Cg; ++cg)
          for (int64_t kd = 0; kd < KD; ++kd)
            for (int64_t t = 0; t < hw; ++t)
              w2[static_cast<size_t>(((o * KD + kd) * Cg + cg) * hw + t)] =
                  w[static_cast<size_t>(((o * Cg + cg) * KD + kd) * hw + t)];
      w = std::move(w2);
    }
  }
  c.X = X;
  c.w = std::move(w);
  if (sp == 2) {
    c.Y = L.remember(out, Stored{L.temp(L.val(out).name, DType::BF16, os), 0, DType::BF16, true});
    return conv2d(L, n, c);
  }
  // 1-D and 3-D: the core's NHWC output is [N, S..., OC] channels-last, made row-major [N, OC, S...].
  Shape cl{N};
  cl.insert(cl.end(), os.begin() + 2, os.end());
  cl.push_back(OC);
  c.Y = Stored{L.temp(label + ".channels_last_out", DType::BF16, cl), 0, DType::BF16, true};
  c.value = -1;
  conv2d(L, n, c);
  Stored Y = L.remember(out, Stored{L.temp(L.val(out).name, DType::BF16, os), 0, DType::BF16, false});
  std::vector<int64_t> cst = strides_of(cl), dstr{cst[0], cst[cl.size() - 1]};
  dstr.insert(dstr.end(), cst.begin() + 1, cst.end() - 1);
  L.view_copy(label, c.Y, 0, os, dstr, Y, 0, strides_of(os));
}

// Pooling of an NHWC input X (logical NCHW shape xs) into an NHWC output Y ([N, OH, OW, C]): taps read in place
// (tap_views), reduced (max, or a sum times 1 / the count of taps inside the input, or inside the padded input with
// count_include_pad) by a row-wise kernel. `out` makes Y (after the kernel's own buffers).
void pool2d(Lowering& L, const std::string& label, Stored X, const Shape& xs, const Window& win, int64_t OH,
            int64_t OW, bool is_max, bool include_pad, const std::function<Stored()>& out, int xv = -1) {
  const int64_t N = xs[0], C = xs[1], taps = win.kh * win.kw;
  const float lowest = -std::numeric_limits<float>::infinity();
  TapViews v = tap_views(L, label, X, xs, win, is_max ? lowest : 0.0f, OH, OW, xv);
  KernelCall call = L.rowwise_call(label, v.rows, C);
  int acc = -1;
  for (int64_t k = 0; k < taps; ++k) {
    int xi = L.rw_input(call, v.taps[static_cast<size_t>(k)], false, 0, v.pitch);
    acc = acc < 0 ? xi : L.rw_node(call, is_max ? rw::Op::Max : rw::Op::Add, {acc, xi});
  }
  if (!is_max) {
    // divisor per output position: taps inside the input (count_include_pad 0) or inside the padded input; one
    // image's Hq x Wq virtual rows, repeated per image (the rows that are no output divide by 1)
    const int64_t Hq = v.ph.Hq, Wq = v.ph.Wq;
    std::vector<float> inv(static_cast<size_t>(Hq * Wq), 1.0f);
    for (int64_t oh = 0; oh < OH; ++oh)
      for (int64_t ow = 0; ow < Wq; ++ow) {
        int64_t cnt = 0;
        for (int64_t a = 0; a < win.kh; ++a)
          for (int64_t b = 0; b < win.kw; ++b) {
            int64_t ih = oh * win.sh + a * win.dh - win.pt, iw = ow * win.sw + b * win.dw - win.pl;
            bool inside = include_pad ? (ih >= -win.pt && ih < xs[2] + win.pb && iw >= -win.pl && iw < xs[3] + win.pr)
                                      : (ih >= 0 && ih < xs[2] && iw >= 0 && iw < xs[3]);
            cnt += inside ? 1 : 0;
          }
        inv[static_cast<size_t>(oh * Wq + ow)] = cnt ? 1.0f / static_cast<float>(cnt) : 0.0f;
      }
    int di = L.rw_input(call, Stored{L.const_f32(label + ".inv_count", {Hq * Wq}, inv), 0, DType::F32, false}, true,
                        Hq * Wq);
    acc = L.rw_node(call, rw::Op::Mul, {acc, di});
  }
  const Stored Y = out();
  Stored G = v.whole ? Y : Stored{L.temp(label + ".virtual", DType::BF16, {v.rows, C}), 0, DType::BF16, true};
  L.rw_output(call, acc, G);
  L.plan_.calls.push_back(std::move(call));
  if (!v.whole) keep_outputs(L, label, G, Y, v.ph, N, C);
}

// MaxPool and AveragePool: 2-D on the NHWC input; 1-D as 2-D with H = 1 on the input made channels-last; 3-D as
// two 2-D poolings of the channels-last input [N, D, H, W, C], over H and W (N x D images), then over D (N images
// of D x OH*OW, a window of KD x 1). The two are the 3-D pooling: a maximum over a box is the maximum of maxima
// over its rows, and the taps of a box inside the input (or the padded input) are the product of those along each
// axis, so that a mean divides exactly as the 3-D one does. The 1-D and 3-D outputs are made row-major again.
void lower_pool(Lowering& L, const ir::Node& n) {
  int x = n.inputs[0], y = n.outputs[0];
  Shape xs = L.shape(x), ys = L.shape(y);
  const size_t sp = xs.size() - 2;
  if (sp < 1 || sp > 3) L.fail(n, "only 1-D, 2-D and 3-D pooling (3-D to 5-D inputs) is supported, got " + ir::shape_str(xs));
  auto ks = n.attrs.find("kernel_shape");
  if (ks == n.attrs.end() || ks->second.ints.size() != sp)
    L.fail(n, "kernel_shape must have " + std::to_string(sp) + " values");
  const bool is_max = n.op == "MaxPool";
  if (n.outputs.size() > 1 && n.outputs[1] >= 0 && !L.users_[n.outputs[1]].empty()) L.fail(n, "the Indices output is not supported");
  const bool include_pad = n.attr_int("count_include_pad", 0) != 0;
  if (sp == 2) {
    Window win = window(L, n, xs[2], xs[3], ks->second.ints[0], ks->second.ints[1]);
    Stored X = L.get(x, DType::BF16, true);
    return pool2d(L, n.name, X, xs, win, ys[2], ys[3], is_max, include_pad,
                  [&] { return L.remember(y, Stored{L.temp(L.val(y).name, DType::BF16, ys), 0, DType::BF16, true}); }, x);
  }
  // Shape inference spelled the window out (kernel_shape, strides, pads, dilations; no auto_pad).
  const Shape k = ks->second.ints, st = n.attrs.at("strides").ints, p = n.attrs.at("pads").ints,
              d = n.attrs.at("dilations").ints;
  const int64_t N = xs[0], C = xs[1];
  Stored X = channels_last(L, n.name, L.get(x, DType::BF16, false), xs);
  Shape cl{N};  // the output, channels-last
  cl.insert(cl.end(), ys.begin() + 2, ys.end());
  cl.push_back(C);
  Stored Yc{L.temp(n.name + ".channels_last_out", DType::BF16, cl), 0, DType::BF16, true};
  if (sp == 1) {
    pool2d(L, n.name, X, {N, C, 1, xs[2]}, Window{1, k[0], 1, st[0], 1, d[0], 0, p[0], 0, p[1]}, 1, ys[2], is_max,
           include_pad, [&] { return Yc; });
  } else {
    const int64_t D = xs[2], OD = ys[2], OH = ys[3], OW = ys[4];
    Stored H{L.temp(n.name + ".hw", DType::BF16, {N * D, OH, OW, C}), 0, DType::BF16, true};
    pool2d(L, n.name, X, {N * D, C, xs[3], xs[4]}, Window{k[1], k[2], st[1], st[2], d[1], d[2], p[1], p[2], p[4], p[5]},
           OH, OW, is_max, include_pad, [&] { return H; });
    pool2d(L, n.name, H, {N, C, D, OH * OW}, Window{k[0], 1, st[0], 1, d[0], 1, p[0], 0, p[3], 0}, OD, OH * OW,
           is_max, include_pad, [&] { return Yc; });
  }
  Stored Y = L.remember(y, Stored{L.temp(L.val(y).name, DType::BF16, ys), 0, DType::BF16, false});
  std::vector<int64_t> cst = strides_of(cl), dstr{cst[0], cst[cl.size() - 1]};
  dstr.insert(dstr.end(), cst.begin() + 1, cst.end() - 1);
  L.view_copy(n.name, Yc, 0, ys, dstr, Y, 0, strides_of(ys));
}

void lower_global_average_pool(Lowering& L, const ir::Node& n) { lower_spatial_mean(L, n, n.inputs[0], n.outputs[0]); }

bool conv_weights(const ir::Graph& g, const ir::Node& n, size_t k) { return k == 1; }

bool quantises_conv(const Lowering& L, const ir::Node& n) {
  return L.val(n.inputs[1]).is_const && n.attr_int("group", 1) == 1;
}

}  // namespace

// Whether colmean.s (the vector unit: a cast and the halvings, about 2 x HW x C elements, a vector instruction's
// latency per halving, two transfers) beats a gemm of one row (the matrix unit loading a weight tile of R rows for
// every R x MXU_COLS block of the image, spread over the units: ResNet-50's 7 x 7 x 2048 on v6e, 8 tiles, 1,109
// cycles as the whole-chip GEMM) by its estimate, and one column of the image fits VMEM (the kernel's chunks).
bool colmean_wins(const Lowering& L, int64_t HW, int64_t C, DType out) {
  auto sym = [&](const char* k) {
    const auto it = L.sym_.find(k);
    return it == L.sym_.end() ? int64_t{0} : it->second;
  };
  const int64_t width = sym("VPU_WIDTH"), R = sym("MXU_ROWS"), cols = sym("MXU_COLS"), vmem = sym("VMEM_BYTES");
  if (width < 1 || R < 1 || cols < 1 || (out != DType::BF16 && out != DType::F32) ||
      6 * HW + isa::dtype_size(out) + 192 > vmem)
    return false;
  const int64_t units = std::max<int64_t>(1, sym("MXUS")), lat = sym("DMA_LATENCY");
  const double vpu = 2.0 * static_cast<double>(HW * C) / static_cast<double>(width) +
                     static_cast<double>(sym("VPU_LATENCY")) * (std::ceil(std::log2(static_cast<double>(HW))) + 2) +
                     2.0 * static_cast<double>(lat);
  const int64_t tiles = (HW + R - 1) / R * ((C + cols - 1) / cols);
  const double mxu = static_cast<double>((tiles + units - 1) / units * R + R + cols) + 2.0 * static_cast<double>(lat);
  return vpu < mxu;
}

// Per image, the mean of its HW pixels' C channels: colmean.s on the vector unit where its estimate wins
// (colmean_wins), else a gemm of a row of ones [1, HW] with the image [HW, C], scaled by 1/HW.
void lower_spatial_mean(Lowering& L, const ir::Node& n, int x, int y) {
  Shape xs = L.shape(x);
  if (xs.size() != 4) L.fail(n, "a 4-D input is required");
  const int64_t N = xs[0], C = xs[1], HW = xs[2] * xs[3];
  Stored X = L.get(x, DType::BF16, true);
  Stored Y = L.destination(y, L.storage_type(y));  // [N, C, 1, 1]: NHWC and NCHW are the same bytes
  const float scale = 1.0f / static_cast<float>(HW);
  const bool vpu = colmean_wins(L, HW, C, Y.dtype);
  const int ones =
      vpu ? -1 : L.const_bf16("ones." + std::to_string(HW), {1, HW}, std::vector<float>(static_cast<size_t>(HW), 1.0f));
  for (int64_t img = 0; img < N; ++img) {
    Stored xi = X, yi = Y;
    xi.off += static_cast<uint64_t>(img * HW * C * 2);
    yi.off += static_cast<uint64_t>(img * C * isa::dtype_size(Y.dtype));
    if (!vpu) {
      L.gemm(n.name, Stored{ones, 0, DType::BF16, false}, xi, -1, yi, 1, HW, C, false, scale, false, false);
      continue;
    }
    KernelCall call;
    call.label = n.name;
    call.kernel = "colmean.s";
    call.tensors = {{"x", xi.buf}, {"y", yi.buf}};
    call.offsets = {{"x", xi.off}, {"y", yi.off}};
    call.params = {{"ROWS", HW}, {"COLS", C}, {"DDT", dt(Y.dtype)},
                   {"SCALE", static_cast<int64_t>(isa::bits_from_f32(scale))}};
    call.flops = static_cast<double>(HW * C);
    call.bytes = static_cast<double>(HW * C * 2 + C * isa::dtype_size(Y.dtype));
    L.plan_.calls.push_back(std::move(call));
  }
}

void add_conv_ops(OpTable& t) {
  const std::map<std::string, K> window = {{"auto_pad", K::String}, {"dilations", K::Ints}, {"kernel_shape", K::Ints},
                                           {"pads", K::Ints}, {"strides", K::Ints}};
  auto with = [](std::map<std::string, K> m, std::map<std::string, K> more) {
    m.insert(more.begin(), more.end());
    return m;
  };
  t.add({.name = "Conv", .min_inputs = 2, .max_inputs = 3, .attrs = with(window, {{"group", K::Int}}),
         .infer = infer_conv, .lower = lower_conv, .quantises = quantises_conv, .weight_input = conv_weights});
  t.add({.name = "ConvTranspose", .min_inputs = 2, .max_inputs = 3,
         .attrs = with(window, {{"group", K::Int}, {"output_padding", K::Ints}, {"output_shape", K::Ints}}),
         .infer = infer_conv_transpose, .lower = lower_conv, .quantises = quantises_conv, .weight_input = conv_weights});
  t.add({.name = "MaxPool", .max_outputs = 2,
         .attrs = with(window, {{"ceil_mode", K::Int}, {"storage_order", K::Int}}), .infer = infer_pool,
         .lower = lower_pool});
  t.add({.name = "AveragePool", .attrs = with(window, {{"ceil_mode", K::Int}, {"count_include_pad", K::Int}}),
         .infer = infer_pool, .lower = lower_pool});
  t.add({.name = "GlobalAveragePool", .infer = infer_global_pool, .lower = lower_global_average_pool});
  t.add({.name = "GlobalMaxPool", .infer = infer_global_pool});
}

}  // namespace tpusim::compiler
