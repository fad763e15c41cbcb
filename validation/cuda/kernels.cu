// Hand-written reference kernels: row softmax, LayerNorm, GELU (tanh approximation) and elementwise add, bf16 in and
// out with fp32 arithmetic (kernels.h). Written for clarity first: one block per row for the row-wise kernels,
// 16-byte vector loads for the elementwise ones.
#include <cuda_bf16.h>

#include <cstdint>
#include <stdexcept>
#include <string>

#include "kernels.h"
#include "kernels_common.cuh"

namespace tpusim::cuda_ref {
namespace {

using bf16 = __nv_bfloat16;

// A block-wide sum or max that every thread receives; blockDim.x is a multiple of 32 (at most 1024) and `scratch`
// holds 32 floats in shared memory.
template <bool kMax>
__device__ float block_reduce(float v, float* scratch) {
  v = kMax ? warp_max(v) : warp_sum(v);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  __syncthreads();  // a previous reduction may still be reading scratch
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float r = lane < warps ? scratch[lane] : (kMax ? -INFINITY : 0.0f);
  return kMax ? warp_max(r) : warp_sum(r);
}

__global__ void softmax_kernel(const bf16* __restrict__ x, bf16* __restrict__ y, int64_t cols) {
  __shared__ float scratch[32];
  const bf16* xr = x + static_cast<int64_t>(blockIdx.x) * cols;
  bf16* yr = y + static_cast<int64_t>(blockIdx.x) * cols;
  float m = -INFINITY;
  for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) m = fmaxf(m, __bfloat162float(xr[i]));
  m = block_reduce<true>(m, scratch);
  float s = 0.0f;
  for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) s += expf(__bfloat162float(xr[i]) - m);
  s = block_reduce<false>(s, scratch);
  for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) yr[i] = __float2bfloat16(expf(__bfloat162float(xr[i]) - m) / s);
}

__global__ void layernorm_kernel(const bf16* __restrict__ x, const bf16* __restrict__ gamma,
                                 const bf16* __restrict__ beta, bf16* __restrict__ y, int64_t cols, float eps) {
  __shared__ float scratch[32];
  const bf16* xr = x + static_cast<int64_t>(blockIdx.x) * cols;
  bf16* yr = y + static_cast<int64_t>(blockIdx.x) * cols;
  float s = 0.0f;
  for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) s += __bfloat162float(xr[i]);
  const float mean = block_reduce<false>(s, scratch) / static_cast<float>(cols);
  float s2 = 0.0f;
  for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) {
    float d = __bfloat162float(xr[i]) - mean;
    s2 += d * d;
  }
  const float var = block_reduce<false>(s2, scratch) / static_cast<float>(cols);
  const float rstd = 1.0f / sqrtf(var + eps);
  for (int64_t i = threadIdx.x; i < cols; i += blockDim.x)
    yr[i] = __float2bfloat16((__bfloat162float(xr[i]) - mean) * rstd * __bfloat162float(gamma[i]) +
                             __bfloat162float(beta[i]));
}

struct Gelu {
  __device__ float operator()(float x) const {
    const float k = 0.7978845608028654f;  // sqrt(2 / pi)
    return 0.5f * x * (1.0f + tanhf(k * (x + 0.044715f * x * x * x)));
  }
};

struct Add {
  __device__ float operator()(float a, float b) const { return a + b; }
};

// y[i] = f(x[i]) (kBinary: f(x[i], x2[i])); the first n_vec * 8 elements through 16-byte loads, the rest one by one.
template <bool kBinary, class F>
__global__ void elementwise_kernel(const bf16* __restrict__ x, const bf16* __restrict__ x2, bf16* __restrict__ y,
                                   int64_t n, int64_t n_vec, F f) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (int64_t i = tid; i < n_vec; i += stride) {
    uint4 a = reinterpret_cast<const uint4*>(x)[i], b = a, r;
    if constexpr (kBinary) b = reinterpret_cast<const uint4*>(x2)[i];
    const bf16* pa = reinterpret_cast<const bf16*>(&a);
    const bf16* pb = reinterpret_cast<const bf16*>(&b);
    bf16* pr = reinterpret_cast<bf16*>(&r);
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      if constexpr (kBinary)
        pr[j] = __float2bfloat16(f(__bfloat162float(pa[j]), __bfloat162float(pb[j])));
      else
        pr[j] = __float2bfloat16(f(__bfloat162float(pa[j])));
    }
    reinterpret_cast<uint4*>(y)[i] = r;
  }
  for (int64_t i = n_vec * 8 + tid; i < n; i += stride) {
    if constexpr (kBinary)
      y[i] = __float2bfloat16(f(__bfloat162float(x[i]), __bfloat162float(x2[i])));
    else
      y[i] = __float2bfloat16(f(__bfloat162float(x[i])));
  }
}

// Threads per block for a row of `cols`: about 8 elements per thread, a whole number of warps, at most 1024.
unsigned row_threads(int64_t cols) {
  int64_t t = (cols + 7) / 8;
  t = (t + 31) / 32 * 32;
  return static_cast<unsigned>(t < 32 ? 32 : t > 1024 ? 1024 : t);
}

void check_rows(const char* kernel, int64_t rows, int64_t cols) {
  if (rows < 1 || cols < 1 || rows > 0x7FFFFFFF)
    throw std::runtime_error(std::string(kernel) + ": rows must be in [1, 2^31), cols >= 1; got " +
                             std::to_string(rows) + " x " + std::to_string(cols));
}

template <bool kBinary, class F>
void launch_elementwise(const char* kernel, const uint16_t* x, const uint16_t* x2, uint16_t* y, int64_t n, F f,
                        cudaStream_t stream) {
  if (n < 1) throw std::runtime_error(std::string(kernel) + ": no elements");
  auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  bool vec = aligned(x) && aligned(y) && (!kBinary || aligned(x2));
  int64_t n_vec = vec ? n / 8 : 0;
  int64_t work = n_vec + (n - n_vec * 8);
  int64_t blocks = (work + 255) / 256;
  blocks = blocks < 1 ? 1 : blocks > 8192 ? 8192 : blocks;
  elementwise_kernel<kBinary><<<static_cast<unsigned>(blocks), 256, 0, stream>>>(
      reinterpret_cast<const bf16*>(x), reinterpret_cast<const bf16*>(x2), reinterpret_cast<bf16*>(y), n, n_vec, f);
  check_launch(kernel);
}

}  // namespace

void launch_softmax(const uint16_t* x, uint16_t* y, int64_t rows, int64_t cols, cudaStream_t stream) {
  check_rows("softmax", rows, cols);
  softmax_kernel<<<static_cast<unsigned>(rows), row_threads(cols), 0, stream>>>(
      reinterpret_cast<const bf16*>(x), reinterpret_cast<bf16*>(y), cols);
  check_launch("softmax");
}

void launch_layernorm(const uint16_t* x, const uint16_t* gamma, const uint16_t* beta, uint16_t* y, int64_t rows,
                      int64_t cols, float eps, cudaStream_t stream) {
  check_rows("layernorm", rows, cols);
  layernorm_kernel<<<static_cast<unsigned>(rows), row_threads(cols), 0, stream>>>(
      reinterpret_cast<const bf16*>(x), reinterpret_cast<const bf16*>(gamma), reinterpret_cast<const bf16*>(beta),
      reinterpret_cast<bf16*>(y), cols, eps);
  check_launch("layernorm");
}

void launch_gelu(const uint16_t* x, uint16_t* y, int64_t n, cudaStream_t stream) {
  launch_elementwise<false>("gelu", x, nullptr, y, n, Gelu{}, stream);
}

void launch_add(const uint16_t* a, const uint16_t* b, uint16_t* y, int64_t n, cudaStream_t stream) {
  launch_elementwise<true>("add", a, b, y, n, Add{}, stream);
}

}  // namespace tpusim::cuda_ref
