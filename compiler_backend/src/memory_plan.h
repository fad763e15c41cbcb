// HBM layout: inputs, outputs and constants first (each aligned), then the intermediates, whose space is reused
// once their last reader has run.
#pragma once

#include <cstdint>
#include <string>

#include "kernel_plan.h"

namespace tpusim::compiler {

inline constexpr uint64_t kHbmAlign = 4096;

// An on-chip memory intermediates may go to: `bytes` at DMA addresses from `base` (a window: isa::kLocalWindow for
// a part of the core's VMEM, isa::kSharedWindow for the shared memory); bytes 0: none.
struct MemoryRegion {
  uint64_t base = 0, bytes = 0;
};

// Sets every buffer's addr and returns the HBM bytes the program needs (the end of the highest buffer in HBM).
// Declared tensors go to HBM. Each intermediate goes, in the order the calls first name them, to the first of
// `local` (VMEM kept from the kernels), `shared` (the chip's [shared] memory, not a cache: TPU v4's CMEM) and HBM
// where it fits beside those live at the same time (first fit): the kernels reach the on-chip ones with the same
// instructions, through the windows, and their traffic leaves HBM's bandwidth to the weights.
// An intermediate's bytes are placed again only from the `reuse_after`-th call after its last one on (0: from the
// next call's): on a chip of several cores, where codegen runs independent small kernels side by side and
// reorders them by their dependences (group_independent_calls), the compiler keeps 2, so that an immediate reuse
// of a freed buffer does not order two calls that touch nothing else in common.
// Throws Error "<model>: model needs N bytes of HBM, the chip has M" when that exceeds `hbm_bytes`.
uint64_t plan_memory(KernelPlan& plan, uint64_t hbm_bytes, MemoryRegion local, MemoryRegion shared,
                     const std::string& model_name, int reuse_after = 0);

}  // namespace tpusim::compiler
