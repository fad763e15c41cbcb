#include <stdexcept>

#include "tpusim/kernels/dma_load.h"

namespace tpusim::kernels {

int64_t background_bytes(const std::vector<DmaLoad>& loads, int64_t begin, int64_t end, const std::string& kernel) {
  int64_t total = 0;
  for (const DmaLoad& l : loads) {
    if (l.rows != 1 || l.rowbytes <= 0 || l.vaddr < 0 || l.haddr < 0)
      throw std::invalid_argument(kernel + ": a background load is one run of bytes (rows 1, rowbytes > 0)");
    if (l.vaddr < end && l.vaddr + l.rowbytes > begin)
      throw std::invalid_argument(kernel + ": a background load into VMEM " + std::to_string(l.vaddr) +
                                  " inside the kernel's own [" + std::to_string(begin) + ", " + std::to_string(end) +
                                  ")");
    total += l.rowbytes;
  }
  return total;
}

void emit_background_piece(isa::Emitter& e, const std::vector<DmaLoad>& loads, int64_t piece, const BackgroundRegs& r) {
  if (loads.empty()) return;
  int64_t total = 0;
  for (const DmaLoad& l : loads) total += l.rowbytes;
  const isa::Label more = e.label(), done = e.label();
  e.li(r.limit, total);
  if (piece > 0) e.li(r.t0, piece), e.add(r.t0, r.t0, r.off), e.min(r.limit, r.limit, r.t0);
  e.bind(more);
  e.bge(r.off, r.limit, done);
  std::vector<isa::Label> at;  // the load that holds byte R[off]: the first whose end lies past it
  int64_t end = 0;
  for (const DmaLoad& l : loads) {
    end += l.rowbytes, at.push_back(e.label());
    e.li(r.t0, end), e.blt(r.off, r.t0, at.back());
  }
  e.jmp(done);
  int64_t begin = 0;
  for (size_t i = 0; i < loads.size(); ++i) {
    const DmaLoad& l = loads[i];
    end = begin + l.rowbytes;
    e.bind(at[i]);
    // t1: where this transfer ends (the run's end, or the piece's); the run's last byte signals l.signal
    e.li(r.t0, end), e.min(r.t1, r.t0, r.limit);
    e.li(r.t2, l.haddr - begin), e.add(r.t2, r.t2, r.off), e.li(r.t3, l.vaddr - begin), e.add(r.t3, r.t3, r.off);
    auto load = [&](isa::Sem signal) {  // a background load from R[off] to R[t1], then the next
      e.sub(r.t1, r.t1, r.off);
      e.dma_ld(r.t3, r.t2, r.one, r.t1, r.zero, r.zero, {.bg = true, .signal = signal}), e.add(r.off, r.off, r.t1);
      e.jmp(more);
    };
    if (l.signal > 0) {
      const isa::Label last = e.label();
      e.beq(r.t1, r.t0, last);
      load(isa::Sem{});
      e.bind(last);
      load(isa::sem(l.signal));
    } else {
      load(isa::Sem{});
    }
    begin = end;
  }
  e.bind(done);
}

}  // namespace tpusim::kernels
