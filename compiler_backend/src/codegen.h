// Codegen: a placed kernel plan -> one isa::Program, the kernel fragments concatenated in call order.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "kernel_plan.h"
#include "tpusim/isa/program.h"
#include "tpusim/kernels/gemm_chip.h"

namespace tpusim::compiler {

// Each call is assembled by kernels::assemble with the chip `symbols` plus its params, its tensors at their
// buffers' addresses and base_pc = the code so far; source lines read "<label>: gemm.s:42". A fragment that does
// not start by synchronising (sem.set or fence before its first unit instruction) gets a `fence` in front, so it
// never overlaps the previous one; a `halt` inside a fragment other than the last jumps to the next fragment.
// The Program declares the Input, Output and Const buffers (in that order) with the constants in const_data.
// Regions (for profiles): each call's code (its fence included) lies in a "node" region named after the call's
// label, which names the graph nodes it implements: for a fused group the MatMul/Gemm node that heads it and the
// Add and Relu nodes folded into it, joined by "+", "cast(x)" for the cast of a graph value x the compiler inserts; consecutive
// calls with one label share one node region. Inside it, each fragment is a "kernel" region named after its
// kernel file ("gemm.s"), holding the kernel's own regions, if it marks any.
// The chip's symbol `name`, or `otherwise` where the map lacks it.
int64_t symbol_or(const std::map<std::string, int64_t>& s, const char* name, int64_t otherwise);
// A call's param `name` (a library kernel's define), or `otherwise` where it has none.
int64_t param_or(const KernelCall& call, const char* name, int64_t otherwise);

// A gemm.s call (its params: M, K, N, types, BIAS, RELU, ..., RESIDUAL, ACT with the program in call.rows) as
// the whole-chip kernel's description, every core and matrix unit allowed (at most 6 units with a bias, a
// residual or an activation), the tiled schedule.
kernels::GemmChip gemm_chip_of(const KernelCall& call, const std::map<std::string, int64_t>& symbols);

// The part of VMEM the weight stream may use (VMEM offsets [begin, end); codegen.cpp: stream_weights): what the
// intermediates kept in VMEM leave of their part. Empty: no stream.
struct StreamRing {
  int64_t begin = 0, end = 0;
};

// The calls as one program; `overlap`: a kernel and the whole-chip GEMM after it overlap where they can, and
// later GEMMs' weights stream into `ring` (Options::overlap_kernels). The weight stream sets the offsets of the
// GEMMs' b that it moves to VMEM, and notes on the calls, in `plan`.
isa::Program emit_program(KernelPlan& plan, const std::map<std::string, int64_t>& symbols,
                          const std::string& program_name, bool overlap = true, StreamRing ring = {});

}  // namespace tpusim::compiler
