// The chip's memories: HBM (allocated lazily, in pages), VMEM and the accumulator memory (allocated fully).
// Accesses are unchecked here; callers check ranges first with check_rows(), also in timing-only mode.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tpusim/sim/config.h"

namespace tpusim::sim::detail {

// HBM of up to a few tens of GiB, backed by 1 MiB pages allocated on first write; never-written bytes read as 0.
class Hbm {
 public:
  explicit Hbm(uint64_t bytes);
  uint64_t size() const { return size_; }
  void read(uint64_t addr, void* dst, uint64_t n) const;
  void write(uint64_t addr, const void* src, uint64_t n);

 private:
  static constexpr uint64_t kPageBytes = uint64_t(1) << 20;
  uint64_t size_;
  std::vector<std::unique_ptr<uint8_t[]>> pages_;
};

struct Memories {
  explicit Memories(const ChipConfig& cfg);
  Hbm hbm;
  std::vector<uint8_t> vmem;
  std::vector<uint32_t> acc;  // acc_rows x mxu.cols 32-bit words (i32 or f32 bits), row-major
  uint64_t acc_cols;
};

// Checks that rows i < `rows` of `rowbytes` bytes at `base + i*stride` all lie in [0, size). Returns "" or the
// error, e.g. "HBM read [0x1000, 0x2000) outside 1024 MiB" (`what` is "HBM read", `size_text` "1024 MiB").
std::string check_rows(const char* what, uint64_t size, const std::string& size_text, int64_t base, int64_t rows,
                       int64_t rowbytes, int64_t stride);

std::string hex(uint64_t v);

}  // namespace tpusim::sim::detail
