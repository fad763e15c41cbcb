// Pieces the hand-written kernels share (kernels.cu, attention.cu).
#pragma once

#include <cuda_runtime_api.h>

#include <stdexcept>
#include <string>

namespace tpusim::cuda_ref {

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xFFFFFFFFu, v, o);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xFFFFFFFFu, v, o));
  return v;
}

// Throws when the launch just made failed (bad configuration, no kernel image for this GPU, ...).
inline void check_launch(const char* kernel) {
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) throw std::runtime_error(std::string(kernel) + ": launch failed: " + cudaGetErrorString(e));
}

}  // namespace tpusim::cuda_ref
