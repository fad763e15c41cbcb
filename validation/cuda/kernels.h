// Hand-written CUDA reference kernels (kernels.cu, attention.cu). Tensors are bf16 in device memory, passed as raw
// 16-bit words so that host code needs no CUDA headers beyond the runtime API; all arithmetic is fp32. Each
// launcher checks its arguments and the launch, and throws std::runtime_error naming the kernel.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace tpusim::cuda_ref {

// y[r, :] = softmax(x[r, :]) over the last axis of a [rows, cols] tensor (max subtracted first).
void launch_softmax(const uint16_t* x, uint16_t* y, int64_t rows, int64_t cols, cudaStream_t stream);

// y[r, :] = (x[r, :] - mean) / sqrt(var + eps) * gamma + beta; var is the biased (population) variance.
void launch_layernorm(const uint16_t* x, const uint16_t* gamma, const uint16_t* beta, uint16_t* y, int64_t rows,
                      int64_t cols, float eps, cudaStream_t stream);

// GELU, tanh approximation: y = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), over n elements.
void launch_gelu(const uint16_t* x, uint16_t* y, int64_t n, cudaStream_t stream);

// y = a + b over n elements (the sum in fp32, rounded once to bf16).
void launch_add(const uint16_t* a, const uint16_t* b, uint16_t* y, int64_t n, cudaStream_t stream);

// Causal self-attention: o = softmax(q k^T / sqrt(head_dim) + causal mask) v, per batch and head; q and o are
// [batch, heads, seq, head_dim], k and v [batch, kv_heads, seq, head_dim] (head h reads kv head
// h / (heads / kv_heads)). fp32 scores and accumulation, online softmax (one pass over the keys). head_dim 32, 64,
// 128 or 256.
void launch_causal_attention(const uint16_t* q, const uint16_t* k, const uint16_t* v, uint16_t* o, int batch,
                             int seq, int heads, int kv_heads, int head_dim, cudaStream_t stream);

}  // namespace tpusim::cuda_ref
