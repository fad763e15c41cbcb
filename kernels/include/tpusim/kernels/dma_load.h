// A DMA load whose operands are known when a kernel is generated: one kernel's generator issues it for another
// (GemmChip::b_area's weights, loaded inside the fused attention before the GEMM: attention_chip.h, prefetch).
#pragma once

#include <cstdint>

namespace tpusim::kernels {

// dma.ld's operands (isa.def): `rows` rows of `rowbytes` bytes from HBM at haddr (rows hstride apart) into VMEM at
// vaddr (rows vstride apart).
struct DmaLoad {
  int64_t vaddr = 0, haddr = 0, rows = 0, rowbytes = 0, hstride = 0, vstride = 0;
  bool operator==(const DmaLoad&) const = default;
};

}  // namespace tpusim::kernels
