// The runner's host-side GPU plumbing (runner.cpp, gemm.cpp, conv.cpp): error checks, device buffers, the
// context every case shares, and the shape of a prepared case.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "runner_io.h"

namespace tpusim::cuda_ref {

inline void cuda_check(cudaError_t e, const std::string& what) {
  if (e != cudaSuccess) throw std::runtime_error(what + ": " + cudaGetErrorName(e) + ": " + cudaGetErrorString(e));
}

// Device memory, freed when the last owner lets go.
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t bytes) : bytes_(bytes) {
    cuda_check(cudaMalloc(&p_, bytes ? bytes : 1), "cudaMalloc(" + std::to_string(bytes) + " bytes)");
  }
  ~DeviceBuffer() { cudaFree(p_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* get() const { return p_; }
  size_t bytes() const { return bytes_; }
  template <class T>
  T* as() const { return static_cast<T*>(p_); }

 private:
  void* p_ = nullptr;
  size_t bytes_;
};
using Buf = std::shared_ptr<DeviceBuffer>;

template <class T>
Buf upload(const std::vector<T>& v) {
  auto b = std::make_shared<DeviceBuffer>(v.size() * sizeof(T));
  cuda_check(cudaMemcpy(b->get(), v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice), "cudaMemcpy to the GPU");
  return b;
}

template <class T>
std::vector<T> download(const Buf& b, size_t n) {
  std::vector<T> v(n);
  cuda_check(cudaMemcpy(v.data(), b->get(), n * sizeof(T), cudaMemcpyDeviceToHost), "cudaMemcpy from the GPU");
  return v;
}

// What every case shares: the stream, and the libraries' handles and workspace (made by gemm.cpp / conv.cpp on
// first use).
struct Gpu {
  cudaStream_t stream = nullptr;
  std::shared_ptr<void> cublaslt;  // cublasLtHandle_t
  std::shared_ptr<void> cudnn;     // cudnnHandle_t
  Buf workspace;                   // cuBLASLt's (32 MiB, NVIDIA's advice for Hopper)
};

// Where a case's tensors go: DIR/<case name>.<tensor>.npy, or nowhere with --no-npy.
struct NpySink {
  std::string dir, case_name;
  bool enabled = true;
  std::string path(const std::string& tensor) const { return dir + "/" + case_name + "." + tensor + ".npy"; }
};

// A case ready to run: its inputs are on the GPU and every descriptor and algorithm is chosen, so launch() does
// only the work that is timed; save_output() copies the output back and writes it as .npy.
struct PreparedCase {
  std::function<void(cudaStream_t)> launch;
  std::function<void()> save_output;
  std::string algorithm;
};

PreparedCase prepare_gemm(const Case& c, Gpu& gpu, const NpySink& npy);
PreparedCase prepare_conv(const Case& c, Gpu& gpu, const NpySink& npy);     // conv.cpp (needs cuDNN)
PreparedCase prepare_kernel(const Case& c, Gpu& gpu, const NpySink& npy);   // softmax, layernorm, gelu, add, attention
std::string cublaslt_version();
std::string cudnn_version();  // "" when built without cuDNN

}  // namespace tpusim::cuda_ref
