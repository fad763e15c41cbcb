// The vector unit's attention kernel (attention_vpu.cpp), which attention_chip_kernel, _plan and _source use where
// AttentionChip::vector_unit is set. Internal to the kernels library.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "tpusim/isa/program.h"
#include "tpusim/kernels/attention_chip.h"

namespace tpusim::kernels::attention_detail {

AttentionPlan attention_vpu_plan(const AttentionChip& a, const std::map<std::string, int64_t>& symbols);
isa::Program attention_vpu_kernel(const AttentionChip& a, const std::map<std::string, int64_t>& symbols,
                                  const std::map<std::string, uint64_t>& tensor_addr, uint64_t base_pc,
                                  uint64_t hbm_base);
std::string attention_vpu_source(const AttentionChip& a, const std::map<std::string, int64_t>& symbols);

}  // namespace tpusim::kernels::attention_detail
