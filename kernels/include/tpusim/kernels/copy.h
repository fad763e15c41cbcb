// copy: a generator of data-movement kernels between HBM tensors (im2col, padding, transposes, concat/split/slice,
// layout changes), each expressed as a list of strided 2-D moves.
//
// Contract. copy_kernel(moves) is a kernel that leaves HBM as if the moves ran one after the other, each copying
// its rows in order: a later move's writes win where destinations overlap, and a move reads what earlier moves
// wrote. Within one move, the destination rows must not overlap each other (|dst_stride| >= rowbytes when
// rows > 1) and the source rows must not overlap the destination rows; src_stride may be 0 (one pattern row
// repeated, e.g. a zero row filling a padded buffer). Moves with rows == 0 or rowbytes == 0 are skipped.
// copy_kernel throws std::invalid_argument on negative or overflowing sizes and addresses (every address and
// stride must fit in 47 bits, every move in 2^62 bytes) and on the overlaps above; nothing is checked against the
// chip's HBM size (the simulator faults at run time).
// Chip symbols: VMEM_BYTES (required); optional COPY_VMEM_BASE (default 0) and COPY_VMEM_BYTES (default
// VMEM_BYTES / 2): the VMEM window the kernel stages through. It uses semaphores s1..s3 (set by sem.set at its
// start) and registers r1..r31 (r0 reads 0), and ends with halt.
//
// Schedule. Straight-line code, no loops; the window holds NSLOTS = 4 slots of SLOT bytes.
//   1. Moves are normalised (contiguous rows collapse into one row) and consecutive moves that continue one
//      regular 2-D pattern (same rowbytes, source and destination rows in arithmetic progression, no move reading
//      what the merged ones wrote) merge into one.
//   2. Moves are cut into pieces that fit a slot: runs of rows, or column strips of rows wider than a slot (a
//      single contiguous row is cut anywhere). Pieces are packed one after another into groups, one group per
//      slot use (group g uses slot g % NSLOTS), up to SLOT bytes and 256 pieces each.
//   3. Within a group, consecutive pieces whose HBM and VMEM sides continue one 2-D pattern share one transfer:
//      element moves of a transpose load as one strided transfer per run and store as one contiguous transfer.
//   dmain:  group g's loads (the first waits s1: a slot is free; the last signals s2: the slot is full; loads
//           complete in order, so all of the group's are in place)
//   dmaout: group g's stores (the first waits s2; the last signals s1: the slot is free again)
//   Loads of group g+1 are interleaved in the code with the stores of group g, so both queues stay busy and the
//   dispatching core never blocks one queue behind the other.
// Within VMEM. On one core, moves whose both sides lie in the local window (isa::kLocalWindow: a one-core chip's
// intermediates kept in VMEM), no more of them than a DMA queue keeps in flight (DMA_ENGINES) and each of one row
// or of rows of at least 64 bytes, run as one dma.ld each from the window into VMEM, nothing staged: the queue
// completes them in order, which keeps the contract.
// Ordering. The simulator moves a transfer's bytes when it completes; each queue completes in order, but a load
// may complete before an earlier store of the other queue. So:
//   - a store after a load of the same bytes (write after read) is safe: every store waits for its group's last
//     load, and loads complete in order;
//   - stores complete in order, so overlapping destinations end with the later move's bytes (write after write);
//   - a load of bytes that an earlier store writes (read after write) is detected at generation time, exactly for
//     arithmetic row patterns (conservatively when that would cost too much): the group is closed if the writer
//     is in the same group, the writer's group ends with `dmaout.sync signal=s3` and the load is preceded by
//     `dmain.sync wait=s3`. Stores the load already waits for (those of group g - NSLOTS and earlier, through
//     its slot's s1, and those before an earlier sync) need nothing. Without such hazards the pipeline never
//     drains.
// Cost: a transfer has dma.latency cycles of latency and each queue keeps dma.engines in flight, so a large copy
// runs at about 2 * bytes / HBM bandwidth (loads and stores share it) plus a latency or two, or slower where one
// core's VMEM ports (which both queues use) are narrower than HBM: 2 * bytes / VMEM_BYTES_PER_CYCLE.
// Several cores (cores > 1, an SPMD kernel of `.cores cores`). The moves (after step 1) are cut into phases of
// mutually independent moves, in order: a move starts a new phase when it reads or writes bytes that a move of
// the current phase writes, or writes bytes one reads (exactly for arithmetic row patterns, else assumed), and
// after 1024 moves. A phase's bytes, in move order, are cut into `cores` runs of about equal size (whole rows of
// a move of several rows, byte ranges of a single row); each core moves its run as one core moves a whole list
// (steps 2 and 3), reached through core.id and a chain of compares (r30, r31); the cores meet at a barrier
// between phases. Rows of one move are independent (the contract above), so the runs are.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "tpusim/isa/program.h"

namespace tpusim::kernels {

// The most moves a copy kernel takes after merging (step 1); more throw std::invalid_argument.
inline constexpr size_t kMaxMergedMoves = size_t{1} << 19;

// One strided 2-D move in HBM: `rows` rows of `rowbytes` bytes from src + i*src_stride to dst + i*dst_stride.
// src_stride may be 0 (the same source row repeated: fills a region from one pattern row); dst rows must not
// overlap each other within one move.
struct Move {
  uint64_t src = 0, dst = 0;   // HBM byte addresses
  uint64_t rows = 0, rowbytes = 0;
  int64_t src_stride = 0, dst_stride = 0;  // bytes between row starts
};

// A kernel that performs `moves` as if one after the other (a later move's writes win where destinations overlap; a
// move may read what an earlier one wrote), staging through VMEM, double-buffered so that loads of one chunk overlap
// stores of the previous, with code starting at instruction base_pc. Built through the typed emitter
// (tpusim/isa/emitter.h), without assembly text; its source lines read "<copy>/NAME at copy.cpp:LINE". `symbols` are
// the chip symbols (VMEM_BYTES, ... as for kernels::assemble). `name` becomes the program's name. `cores` > 1:
// shared among that many cores (above).
// Whether copy_kernel makes `moves` direct transfers within the core's VMEM (a few moves of whole rows, both sides
// in the local window, one core): the kernel then uses no VMEM of its own and no semaphore.
bool copy_direct(const std::vector<Move>& moves, const std::map<std::string, int64_t>& symbols, int64_t cores = 1);

isa::Program copy_kernel(const std::vector<Move>& moves, const std::map<std::string, int64_t>& symbols,
                         uint64_t base_pc = 0, const std::string& name = "copy", int64_t cores = 1);

// copy_kernel's program (at base 0) as assembly text that assembles back to it (isa::disassemble), after a comment
// line that says how the moves were cut up ("... in 4 phases ..."): for reading and for tests.
std::string copy_source(const std::vector<Move>& moves, const std::map<std::string, int64_t>& symbols,
                        const std::string& name = "copy", int64_t cores = 1);

// Estimated cycles of the kernel on `cores` cores (for choosing how many): the larger of 2 * bytes / (cores x
// VMEM_BYTES_PER_CYCLE) and 2 * bytes / HBM_BYTES_PER_CYCLE, plus a load's and a store's latency per phase and a
// barrier (SYNC_LATENCY) between phases. Throws as copy_kernel.
double copy_estimate(const std::vector<Move>& moves, const std::map<std::string, int64_t>& symbols, int64_t cores);

}  // namespace tpusim::kernels
