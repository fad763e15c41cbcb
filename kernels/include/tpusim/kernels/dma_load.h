// A DMA load whose operands are known when a kernel is generated: one kernel's generator issues it for another
// (GemmChip::b_area's weights, loaded inside the fused attention before the GEMM: attention_chip.h, prefetch; the
// compiler's weight stream, loaded a piece at a time by the kernels before the GEMMs that read them:
// GemmChip::background, rowwise::Program::background).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tpusim/isa/emitter.h"

namespace tpusim::kernels {

// dma.ld's operands (isa.def): `rows` rows of `rowbytes` bytes from HBM at haddr (rows hstride apart) into VMEM at
// vaddr (rows vstride apart).
struct DmaLoad {
  int64_t vaddr = 0, haddr = 0, rows = 0, rowbytes = 0, hstride = 0, vstride = 0;
  // Background loads (emit_background_piece): > 0, the semaphore that the load of this run's last byte signals
  // (the compiler's weight stream: the GEMM that reads the weight waits for it); 0: none.
  int signal = 0;
  // The core that issues it, in a kernel of several cores (a later GEMM's b_area on each core: that core's first
  // tile's weights, GemmChip::b_area); -1: every core that issues the kernel's loads.
  int core = -1;
  // A background load (dma.ld bg) where the kernel issues it as a plain one otherwise (GemmChip::prefetch: the
  // weight stream's share of a GEMM's tail, which the kernels after it need not wait for).
  bool bg = false;
  bool operator==(const DmaLoad&) const = default;
};

// Background loads (each one run of bytes: rows 1, rowbytes > 0), checked: none may write VMEM's [begin, end) (the
// kernel's own). Returns their bytes; throws std::invalid_argument naming `kernel` otherwise.
int64_t background_bytes(const std::vector<DmaLoad>& loads, int64_t begin, int64_t end, const std::string& kernel);

// The registers emit_background_piece uses: `off` holds the bytes issued so far (0 before the first piece) and
// keeps them between pieces; `limit` and t0..t3 are scratch; `one` holds 1 and `zero` 0.
struct BackgroundRegs {
  isa::Reg off, limit, t0, t1, t2, t3, one, zero;
};

// The next piece of `loads` (their bytes one after the other): from byte R[off] to min(R[off] + piece, the total),
// or to the total with piece 0, a background dma.ld (dma.ld bg: the kernel's own loads after it do not wait for
// it) per load it touches, which signals the load's `signal` where it loads the load's last byte; R[off] advances
// past it.
void emit_background_piece(isa::Emitter& e, const std::vector<DmaLoad>& loads, int64_t piece, const BackgroundRegs& r);

}  // namespace tpusim::kernels
