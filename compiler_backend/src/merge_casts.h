// The graph's outputs cast in one kernel (merge_casts.cpp): a pass over the kernel plan, after the lowering and
// before memory planning.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "kernel_plan.h"

namespace tpusim::compiler {

// On a chip of one core (`symbols`: the chip's, CORES at most 1), each run of two or more consecutive cast.s calls
// of the same types and no scale (the lowering writes the graph's outputs so, after the last node: a decoder's
// present keys and values, bf16 values written out as f32) becomes one Cast call (kernels/cast.h), whose
// pipeline keeps four stores in flight across the tensors where each cast.s call, fenced from the next, waits for
// its own load, cast and store one after the other. A call joins the run only where its buffers are none of the
// run's outputs and its output is none of the run's inputs (the merged kernel reads later tensors before earlier
// ones are written), and while the run stays within kernels::kMaxCastChunks chunks. The merged call's label is
// "FIRST+...+LAST" of the calls' labels (their graph nodes). The same bits: each element cast by one vpu.cast, as
// cast.s casts it. Several cores keep their calls (codegen spreads independent ones over the cores). Returns the
// number of calls merged away.
int merge_casts(KernelPlan& plan, const std::map<std::string, int64_t>& symbols);

// A Cast call's parts (its params SDT and DDT set), with the tensors and offsets (x0, y0, x1, ...) and bytes that
// memory planning and the report read from them.
void set_casts(KernelCall& call, std::vector<BufferCast> parts);

}  // namespace tpusim::compiler
