// HBM layout: inputs, outputs and constants first (each aligned), then the intermediates, whose space is reused
// once their last reader has run.
#pragma once

#include <cstdint>
#include <string>

#include "kernel_plan.h"

namespace tpusim::compiler {

inline constexpr uint64_t kHbmAlign = 4096;

// Sets every buffer's addr and returns the HBM bytes the program needs (the end of the highest buffer in HBM).
// With shared_bytes > 0 (the chip's [shared] memory, not a cache: TPU v4's CMEM), intermediates go there where
// they fit beside those live at the same time (first fit, in the order the calls first name them), at addresses in
// the shared window (isa::kSharedWindow + their offset): the kernels reach them with the same instructions, and
// their traffic leaves HBM's bandwidth to the weights. The others go to HBM.
// Throws Error "<model>: model needs N bytes of HBM, the chip has M" when that exceeds `hbm_bytes`.
uint64_t plan_memory(KernelPlan& plan, uint64_t hbm_bytes, uint64_t shared_bytes, const std::string& model_name);

}  // namespace tpusim::compiler
