// Built-in accelerator kernels. Their sources are the assembly files in kernels/*.s, embedded at build time, so
// `tpusim run kernels/gemm_int8.s` and the compiler use the very same text.
//
// Kernel contracts (each kernel's header comment is the full statement):
//  gemm.s       c[M,N] = act(a[M,K] @ b[K,N] + bias[N]) for any M, K, N. Defines: M, K, N; IN_DT (DT_I8 or DT_BF16);
//               OUT_DT (DT_I8, DT_I32, DT_BF16, DT_F32); BIAS (0/1: input `bias`, i32 for i8, f32 for bf16);
//               RELU (0/1); SCALE (f32 bits applied to the accumulator before the cast; 0 = none).
//               Tensors: inputs a, b (IN_DT), [bias]; output c (OUT_DT).
//  gemm_int8.s  gemm.s with IN_DT=DT_I8, OUT_DT=DT_I32.     gemm_bf16.s  gemm.s with IN_DT=DT_BF16, OUT_DT=DT_F32.
//               ACT_RESIDENT (a and c kept in VMEM), B_TILED (b stored tile by tile), DEQUANT (int8's dequantising
//               epilogue: input `dq` f32 [N, 2] of per-column (scale, bias)) and Q_SCALE (with DEQUANT, a second
//               output `q`, the result's int8 copy): see gemm.s.
//               TRANS_B (0/1): b is given as [N, K] (b transposed, row-major) and c = a @ b^T (attention's Q @ K^T);
//               the weight loads transpose on the way in (mxu.lw trans), same timing; not with B_TILED.
//  cast.s       y[N] = cast(x[N] * SCALE?) from SDT to DDT. Defines N, SDT, DDT, SCALE (0 = none).
//  gather.s     y[M,D] = table[ids[m], :] (embedding lookup, dma.gather). Defines M, D, V (table rows), DT (DT_BF16
//               default, or DT_F32). Tensors: inputs ids (i32 [M]), table (DT [V, D]); output y (DT [M, D]). An id
//               < 0 or >= V is a run-time error naming it.
//  vadd.s       y[N] = a[N] + b[N], a memory-bound stream (see vadd.s for its defines).
// Every kernel also reads the chip symbols the caller defines (MXU_ROWS, MXU_COLS, ACC_ROWS, VMEM_BYTES,
// VPU_WIDTH; see sim::kernel_symbols) and uses semaphores s1..s8, which it initialises itself.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "tpusim/isa/assembler.h"
#include "tpusim/isa/program.h"

namespace tpusim::kernels {

std::vector<std::string> names();                          // "cast.s", "gemm.s", "gemm_bf16.s", ...
std::optional<std::string> source(const std::string& name);

// isa::AsmOptions::include for kernel sources: serves the embedded kernels by file name (so a kernel file given
// by path can include a built-in one), falling back to the file system.
decltype(isa::AsmOptions::include) include_resolver();

// Assembles built-in kernel `name` with `defines` (which must include the chip symbols), tensors at the given HBM
// addresses, code starting at instruction `base_pc`. Throws isa::Error.
isa::Program assemble(const std::string& name, const std::map<std::string, int64_t>& defines,
                      const std::map<std::string, uint64_t>& tensor_addr = {}, uint64_t base_pc = 0);
// assemble()'s work up to the tensor addresses and the code start, done once for the calls of one kernel with the
// same defines (isa::prepare): place() gives assemble(name, defines, tensor_addr, base_pc). Throws isa::Error
// where isa::prepare does.
isa::Prepared prepare(const std::string& name, const std::map<std::string, int64_t>& defines);

}  // namespace tpusim::kernels
