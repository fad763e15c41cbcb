// The kernel plan: what the lowering (lower.h) makes of a graph, memory planning (memory_plan.h) places and
// codegen (codegen.h) assembles. Buffers are HBM tensors; calls are kernels run one after the other, each either a
// library kernel (kernels/*.s with defines), a generated copy kernel (kernels/copy.h: strided moves between
// buffers), a generated row-wise vector kernel (kernels/rowwise.h: a fused group of elementwise ops), the
// whole-chip attention kernel (kernels/attention_chip.h: a fused attention node group) or a generated cast of
// several tensors (kernels/cast.h: merge_casts.h).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "tpusim/isa/isa.h"
#include "tpusim/kernels/attention_chip.h"
#include "tpusim/kernels/rowwise.h"

namespace tpusim::compiler {

struct Buffer {
  enum class Kind { Input, Output, Const, Temp };  // Temp: an intermediate, not declared in the Program
  std::string name;
  Kind kind = Kind::Temp;
  isa::DType dtype = isa::DType::F32;
  std::vector<int64_t> shape;
  std::vector<uint8_t> data;  // Const only: the bytes, row-major
  uint64_t addr = 0;          // set by plan_memory
  uint64_t extra_bytes = 0;   // slack after the tensor that kernels may read (e.g. im2col's overhanging rows)
  // The bytes of the model's value it holds, where that differs from elements * size: a weight laid out in
  // padded tiles (the weight's own k x n), a constant the compiler made up (0: the model does not have it), an
  // embedding table (the rows a lookup reads, at most one per index).
  // For the ideal roofline bound (isa::Region::ideal_bytes).
  std::optional<uint64_t> model_bytes;

  uint64_t bytes() const;     // elements * size + extra_bytes
  uint64_t ideal_bytes() const { return model_bytes ? *model_bytes : bytes() - extra_bytes; }
};

// A strided move between buffers (kernels::Move with buffer-relative addresses).
struct BufferMove {
  int src = -1, dst = -1;          // buffer indices
  uint64_t src_off = 0, dst_off = 0;
  uint64_t rows = 0, rowbytes = 0;
  int64_t src_stride = 0, dst_stride = 0;
};

// One tensor a Cast call converts: n elements from buffer src (at src_off) to buffer dst (at dst_off).
struct BufferCast {
  int src = -1, dst = -1;  // buffer indices
  uint64_t src_off = 0, dst_off = 0;
  int64_t n = 0;
  std::string label;  // the graph node whose output it writes (the cast.s call's label)
};

struct KernelCall {
  enum class Kind { Library, Copy, Rowwise, Attention, Cast };
  Kind kind = Kind::Library;
  std::string label;                      // the graph node(s) it implements: "conv1+bn1+relu", "cast(x)"
  std::string kernel;                     // Library: "gemm.s", ...; otherwise the generated kernel's name
  std::map<std::string, int64_t> params;  // Library: defines besides the chip symbols
  // Every buffer the call touches, by a name: Library: the kernel's tensor names; Copy and Rowwise: any
  // distinct names. Memory planning reads liveness from here.
  std::map<std::string, int> tensors;
  std::map<std::string, uint64_t> offsets;  // Library: byte offset into the tensor's buffer (default 0)
  std::vector<BufferMove> moves;            // Copy
  std::vector<BufferCast> casts;            // Cast: several cast.s calls as one kernel (kernels/cast.h), from
                                            // params SDT to DDT
  kernels::rowwise::Program rows;           // Rowwise: addresses are filled in from the buffers below
  std::vector<int> row_inputs, row_outputs; // Rowwise: buffer of each rows.inputs[i] / rows.outputs[i]
  std::vector<uint64_t> row_input_offs, row_output_offs;
  kernels::AttentionChip attention;         // Attention: the whole-chip kernel's shape (tensors q, k, v, o, kb)
  std::string note;                         // for the compile report: e.g. why an attention group is not fused
  // > 0: its weights (`b`) were streamed into VMEM by background loads (dma.ld bg) of kernels before it
  // (codegen.cpp, stream_weights), the last of which signals this semaphore: a dmain.sync that waits for it goes
  // before its first load of them.
  int stream_wait = 0;
  // Work, for the compile report and roofline bounds: arithmetic operations (a multiply-add is 2) and HBM bytes
  // read and written (Library calls: set by the lowering; Copy and Rowwise: computed by codegen).
  double flops = 0, bytes = 0;
};

struct KernelPlan {
  std::vector<Buffer> buffers;  // inputs, then outputs (model order), then constants and temps as first used
  std::vector<KernelCall> calls;
};

}  // namespace tpusim::compiler
