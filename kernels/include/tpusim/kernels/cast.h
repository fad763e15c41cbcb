// cast: a generator of one kernel that converts the elements of several tensors from one type to another (a
// graph's outputs, bf16 values written out as f32), all of them through one pipeline.
//
// Contract. cast_kernel(parts, from, to) leaves memory as if each part ran kernels/cast.s alone, one after the
// other: part i's n elements of type `from` at src become elements of type `to` at dst (vpu.cast, round to
// nearest even; no scale). Parts must not overlap: no part's destination bytes may meet another part's source or
// destination bytes, nor its own source (the pipeline reads a later part before an earlier one's stores are done).
// Addresses are far addresses (HBM, the shared window, or this core's VMEM through the local window, as dma.ld
// and dma.st take them). Throws std::invalid_argument on an empty list, a part of no elements, overlapping parts,
// or more than kMaxCastChunks chunks.
// Chip symbols: VMEM_BYTES and VPU_WIDTH (required). It uses semaphores s1..s4 (set by sem.set at its start) and
// registers r1..r8, stages through VMEM from 0, and ends with halt.
//
// Schedule. Straight-line code. The parts are cut into chunks of at most cast_chunk() elements (a chunk never
// spans two parts), chunk j through slot j % 4 of four X slots (the source) and four Y slots (the result):
//   dmain:  chunk j's load into X[j % 4] (waits s1: an X slot free; signals s2: full)
//   vpu:    waits s3 (a Y slot free); casts X into Y (waits s2; signals s1: the X slot free); signals s4 (Y full)
//   dmaout: chunk j's store from Y[j % 4] (waits s4; signals s3: the Y slot free)
// With four slots, up to four stores are in flight, so their latencies overlap and the parts' stores follow each
// other at the memory's bandwidth; cast.s, one tensor per kernel with a fence after it, pays a store's latency,
// and its load and cast, once per tensor.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "tpusim/isa/isa.h"
#include "tpusim/isa/program.h"

namespace tpusim::kernels {

struct CastPart {
  uint64_t src = 0, dst = 0;  // far addresses
  int64_t n = 0;              // elements
};

inline constexpr int64_t kMaxCastChunks = 4096;

// The most elements one chunk holds: four X and four Y slots fit in VMEM_BYTES, a multiple of VPU_WIDTH, at most
// 256 x VPU_WIDTH (cast.s's bound). Throws std::invalid_argument where VMEM cannot hold one row of VPU_WIDTH.
int64_t cast_chunk(isa::DType from, isa::DType to, const std::map<std::string, int64_t>& symbols);

// The chunks `parts` are cut into (cast_chunk's size).
int64_t cast_chunks(const std::vector<CastPart>& parts, isa::DType from, isa::DType to,
                    const std::map<std::string, int64_t>& symbols);

// The kernel, with code starting at instruction base_pc; its source lines read "<cast>/NAME at cast.cpp:LINE".
isa::Program cast_kernel(const std::vector<CastPart>& parts, isa::DType from, isa::DType to,
                         const std::map<std::string, int64_t>& symbols, uint64_t base_pc = 0,
                         const std::string& name = "cast");

// The kernel as text: a line that says how it was cut up, then its disassembly (for reading and tests).
std::string cast_source(const std::vector<CastPart>& parts, isa::DType from, isa::DType to,
                        const std::map<std::string, int64_t>& symbols, const std::string& name = "cast");

}  // namespace tpusim::kernels
