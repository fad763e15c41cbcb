// Causal self-attention with an online softmax (kernels.h). Correctness first, on CUDA cores (no tensor cores):
//
// A block of 4 warps takes 16 query rows of one (batch, head), 4 rows per warp, and walks the keys up to its last
// row in tiles of 32, K and V staged in shared memory as fp32. For a tile, lane j of a warp computes the score of
// key j against each of the warp's 4 rows (fp32 dot product over head_dim); the warp then updates each row's
// running max m, running sum l and accumulator (lane i holds output dims i, i+32, ...) in the usual way:
//   m' = max(m, max_j s_j);  l' = l e^(m - m') + sum_j e^(s_j - m');  acc' = acc e^(m - m') + sum_j e^(s_j - m') v_j
// and at the end o = acc / l. Masked scores (key > query) are -inf and contribute nothing.
#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "kernels.h"
#include "kernels_common.cuh"

namespace tpusim::cuda_ref {
namespace {

using bf16 = __nv_bfloat16;

constexpr int kWarps = 4;
constexpr int kRowsPerWarp = 4;
constexpr int kBlockQ = kWarps * kRowsPerWarp;  // query rows per block
constexpr int kTileK = 32;                      // keys per tile: one per lane

template <int D>
constexpr size_t smem_bytes() {
  // q rows [kBlockQ][D]; K tile [kTileK][D + 1] (the pad makes lane j's row start in bank j); V tile [kTileK][D].
  return sizeof(float) * (kBlockQ * D + kTileK * (D + 1) + kTileK * D);
}

template <int D>
__global__ void __launch_bounds__(kWarps * 32)
    causal_attention_kernel(const bf16* __restrict__ q, const bf16* __restrict__ k, const bf16* __restrict__ v,
                            bf16* __restrict__ o, int seq, int heads, int kv_heads, float scale) {
  constexpr int kPerLane = D / 32;
  extern __shared__ float smem[];
  float* qs = smem;
  float* ks = qs + kBlockQ * D;
  float* vs = ks + kTileK * (D + 1);

  const int b = blockIdx.z, h = blockIdx.y, kvh = h / (heads / kv_heads);
  const int q0 = blockIdx.x * kBlockQ;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const size_t q_base = (static_cast<size_t>(b) * heads + h) * seq * D;
  const size_t kv_base = (static_cast<size_t>(b) * kv_heads + kvh) * seq * D;

  for (int i = tid; i < kBlockQ * D; i += blockDim.x) {
    const int r = i / D, d = i % D;
    qs[i] = q0 + r < seq ? __bfloat162float(q[q_base + static_cast<size_t>(q0 + r) * D + d]) : 0.0f;
  }

  float m[kRowsPerWarp], l[kRowsPerWarp], acc[kRowsPerWarp][kPerLane];
#pragma unroll
  for (int rr = 0; rr < kRowsPerWarp; ++rr) {
    m[rr] = -INFINITY;
    l[rr] = 0.0f;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) acc[rr][i] = 0.0f;
  }
  const int row0 = q0 + warp * kRowsPerWarp;  // the warp's first query row
  const float* q_rows = qs + warp * kRowsPerWarp * D;
  const int last_key = min(seq - 1, q0 + kBlockQ - 1);

  for (int kt = 0; kt <= last_key; kt += kTileK) {
    __syncthreads();  // the previous tile is consumed (and, the first time, qs is written)
    for (int i = tid; i < kTileK * D; i += blockDim.x) {
      const int j = i / D, d = i % D, key = kt + j;
      float kx = 0.0f, vx = 0.0f;
      if (key < seq) {
        kx = __bfloat162float(k[kv_base + static_cast<size_t>(key) * D + d]);
        vx = __bfloat162float(v[kv_base + static_cast<size_t>(key) * D + d]);
      }
      ks[j * (D + 1) + d] = kx;
      vs[j * D + d] = vx;
    }
    __syncthreads();

    // Scores of key kt + lane against the warp's rows.
    float s[kRowsPerWarp];
#pragma unroll
    for (int rr = 0; rr < kRowsPerWarp; ++rr) s[rr] = 0.0f;
    const float* k_row = ks + lane * (D + 1);
#pragma unroll 8
    for (int d = 0; d < D; ++d) {
      const float kd = k_row[d];
#pragma unroll
      for (int rr = 0; rr < kRowsPerWarp; ++rr) s[rr] = fmaf(q_rows[rr * D + d], kd, s[rr]);
    }

    const int key = kt + lane;
    float p[kRowsPerWarp];
#pragma unroll
    for (int rr = 0; rr < kRowsPerWarp; ++rr) {
      const int row = row0 + rr;
      const float sc = (row < seq && key <= row) ? s[rr] * scale : -INFINITY;
      const float tile_max = warp_max(sc);
      p[rr] = 0.0f;
      if (tile_max == -INFINITY) continue;  // nothing visible to this row in this tile (the same for the whole warp)
      const float m_new = fmaxf(m[rr], tile_max);
      const float corr = expf(m[rr] - m_new);  // 0 on the first visible tile (m = -inf)
      p[rr] = sc == -INFINITY ? 0.0f : expf(sc - m_new);
      l[rr] = l[rr] * corr + warp_sum(p[rr]);
#pragma unroll
      for (int i = 0; i < kPerLane; ++i) acc[rr][i] *= corr;
      m[rr] = m_new;
    }

    // acc += p V over the tile's keys (p_j broadcast from lane j).
    for (int j = 0; j < kTileK; ++j) {
      float vj[kPerLane];
#pragma unroll
      for (int i = 0; i < kPerLane; ++i) vj[i] = vs[j * D + lane + 32 * i];
#pragma unroll
      for (int rr = 0; rr < kRowsPerWarp; ++rr) {
        const float pj = __shfl_sync(0xFFFFFFFFu, p[rr], j);
#pragma unroll
        for (int i = 0; i < kPerLane; ++i) acc[rr][i] = fmaf(pj, vj[i], acc[rr][i]);
      }
    }
  }

#pragma unroll
  for (int rr = 0; rr < kRowsPerWarp; ++rr) {
    const int row = row0 + rr;
    if (row >= seq) continue;
    const float inv = 1.0f / l[rr];
#pragma unroll
    for (int i = 0; i < kPerLane; ++i)
      o[q_base + static_cast<size_t>(row) * D + lane + 32 * i] = __float2bfloat16(acc[rr][i] * inv);
  }
}

template <int D>
void launch(const uint16_t* q, const uint16_t* k, const uint16_t* v, uint16_t* o, int batch, int seq, int heads,
            int kv_heads, cudaStream_t stream) {
  constexpr size_t bytes = smem_bytes<D>();
  static bool configured = false;  // the attribute once per head_dim, outside the timed launches
  if (!configured) {
    cudaError_t e = cudaFuncSetAttribute(causal_attention_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(bytes));
    if (e != cudaSuccess)
      throw std::runtime_error(std::string("causal_attention: cannot give the kernel ") + std::to_string(bytes) +
                               " bytes of shared memory: " + cudaGetErrorString(e));
    configured = true;
  }
  dim3 grid((seq + kBlockQ - 1) / kBlockQ, heads, batch);
  causal_attention_kernel<D><<<grid, kWarps * 32, bytes, stream>>>(
      reinterpret_cast<const bf16*>(q), reinterpret_cast<const bf16*>(k), reinterpret_cast<const bf16*>(v),
      reinterpret_cast<bf16*>(o), seq, heads, kv_heads, 1.0f / std::sqrt(static_cast<float>(D)));
  check_launch("causal_attention");
}

}  // namespace

void launch_causal_attention(const uint16_t* q, const uint16_t* k, const uint16_t* v, uint16_t* o, int batch,
                             int seq, int heads, int kv_heads, int head_dim, cudaStream_t stream) {
  if (batch < 1 || seq < 1 || heads < 1 || kv_heads < 1 || heads % kv_heads || batch > 65535 || heads > 65535)
    throw std::runtime_error("causal_attention: bad shape (batch " + std::to_string(batch) + ", seq " +
                             std::to_string(seq) + ", heads " + std::to_string(heads) + ", kv_heads " +
                             std::to_string(kv_heads) + ")");
  switch (head_dim) {
    case 32: return launch<32>(q, k, v, o, batch, seq, heads, kv_heads, stream);
    case 64: return launch<64>(q, k, v, o, batch, seq, heads, kv_heads, stream);
    case 128: return launch<128>(q, k, v, o, batch, seq, heads, kv_heads, stream);
    case 256: return launch<256>(q, k, v, o, batch, seq, heads, kv_heads, stream);
    default: throw std::runtime_error("causal_attention: head_dim " + std::to_string(head_dim) + " is not 32, 64, 128 or 256");
  }
}

}  // namespace tpusim::cuda_ref
