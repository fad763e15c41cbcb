// Convolution through cuDNN's legacy API (still in cuDNN 9, no frontend needed): NHWC bf16 input x [n, h, w, c],
// filter [k, r, s, c] (KRSC, cuDNN's NHWC filter layout), output y [n, p, q, k] bf16, fp32 accumulation (cuDNN's
// BFLOAT16 configuration with a FLOAT convolution type), cross-correlation as in PyTorch, dilation 1, the same
// stride and padding in both dimensions. The algorithm is cuDNN's heuristic first choice.
#include <cudnn.h>

#include "gpu.h"

namespace tpusim::cuda_ref {
namespace {

void dnn_check(cudnnStatus_t s, const std::string& what) {
  if (s != CUDNN_STATUS_SUCCESS) throw std::runtime_error(what + ": " + cudnnGetErrorString(s));
}

const char* algo_name(cudnnConvolutionFwdAlgo_t a) {
  switch (a) {
    case CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM: return "IMPLICIT_GEMM";
    case CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM: return "IMPLICIT_PRECOMP_GEMM";
    case CUDNN_CONVOLUTION_FWD_ALGO_GEMM: return "GEMM";
    case CUDNN_CONVOLUTION_FWD_ALGO_DIRECT: return "DIRECT";
    case CUDNN_CONVOLUTION_FWD_ALGO_FFT: return "FFT";
    case CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING: return "FFT_TILING";
    case CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD: return "WINOGRAD";
    case CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED: return "WINOGRAD_NONFUSED";
    default: return "?";
  }
}

template <class T, class Destroy>
std::shared_ptr<std::remove_pointer_t<T>> own(T p, Destroy d) {
  return std::shared_ptr<std::remove_pointer_t<T>>(p, d);
}

}  // namespace

std::string cudnn_version() { return std::to_string(cudnnGetVersion()); }

PreparedCase prepare_conv(const Case& c, Gpu& gpu, const NpySink& npy) {
  const int n = int(c.dim("n")), h = int(c.dim("h")), w = int(c.dim("w")), ch = int(c.dim("c"));
  const int k = int(c.dim("k")), r = int(c.dim("r")), s = int(c.dim("s"));
  const int stride = int(c.dim("stride")), pad = int(c.dim("pad"));
  const std::string name = c.name();
  if (!gpu.cudnn) {
    cudnnHandle_t hd = nullptr;
    dnn_check(cudnnCreate(&hd), "cudnnCreate");
    gpu.cudnn = std::shared_ptr<void>(hd, [](void* p) { cudnnDestroy(static_cast<cudnnHandle_t>(p)); });
  }
  auto handle = static_cast<cudnnHandle_t>(gpu.cudnn.get());
  dnn_check(cudnnSetStream(handle, gpu.stream), "cudnnSetStream");

  cudnnTensorDescriptor_t xd_raw, yd_raw;
  cudnnFilterDescriptor_t wd_raw;
  cudnnConvolutionDescriptor_t cd_raw;
  dnn_check(cudnnCreateTensorDescriptor(&xd_raw), "cudnnCreateTensorDescriptor");
  auto xd = own(xd_raw, cudnnDestroyTensorDescriptor);
  dnn_check(cudnnCreateTensorDescriptor(&yd_raw), "cudnnCreateTensorDescriptor");
  auto yd = own(yd_raw, cudnnDestroyTensorDescriptor);
  dnn_check(cudnnCreateFilterDescriptor(&wd_raw), "cudnnCreateFilterDescriptor");
  auto wd = own(wd_raw, cudnnDestroyFilterDescriptor);
  dnn_check(cudnnCreateConvolutionDescriptor(&cd_raw), "cudnnCreateConvolutionDescriptor");
  auto cd = own(cd_raw, cudnnDestroyConvolutionDescriptor);

  dnn_check(cudnnSetTensor4dDescriptor(xd.get(), CUDNN_TENSOR_NHWC, CUDNN_DATA_BFLOAT16, n, ch, h, w),
            "cudnnSetTensor4dDescriptor(x)");
  dnn_check(cudnnSetFilter4dDescriptor(wd.get(), CUDNN_DATA_BFLOAT16, CUDNN_TENSOR_NHWC, k, ch, r, s),
            "cudnnSetFilter4dDescriptor");
  dnn_check(cudnnSetConvolution2dDescriptor(cd.get(), pad, pad, stride, stride, 1, 1, CUDNN_CROSS_CORRELATION,
                                            CUDNN_DATA_FLOAT),
            "cudnnSetConvolution2dDescriptor");
  dnn_check(cudnnSetConvolutionMathType(cd.get(), CUDNN_TENSOR_OP_MATH), "cudnnSetConvolutionMathType");
  int on = 0, oc = 0, oh = 0, ow = 0;
  dnn_check(cudnnGetConvolution2dForwardOutputDim(cd.get(), xd.get(), wd.get(), &on, &oc, &oh, &ow),
            "cudnnGetConvolution2dForwardOutputDim");
  dnn_check(cudnnSetTensor4dDescriptor(yd.get(), CUDNN_TENSOR_NHWC, CUDNN_DATA_BFLOAT16, on, oc, oh, ow),
            "cudnnSetTensor4dDescriptor(y)");

  cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
  int returned = 0;
  dnn_check(cudnnGetConvolutionForwardAlgorithm_v7(handle, xd.get(), wd.get(), cd.get(), yd.get(),
                                                   CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &returned, perf),
            "cudnnGetConvolutionForwardAlgorithm_v7");
  int chosen = -1;
  for (int i = 0; i < returned; ++i)
    if (perf[i].status == CUDNN_STATUS_SUCCESS) {
      chosen = i;
      break;
    }
  if (chosen < 0) throw std::runtime_error("cuDNN has no forward algorithm for " + name);
  const cudnnConvolutionFwdAlgo_t algo = perf[chosen].algo;
  size_t ws_bytes = 0;
  dnn_check(cudnnGetConvolutionForwardWorkspaceSize(handle, xd.get(), wd.get(), cd.get(), yd.get(), algo, &ws_bytes),
            "cudnnGetConvolutionForwardWorkspaceSize");
  Buf ws = std::make_shared<DeviceBuffer>(ws_bytes);

  auto xv = random_bf16(size_t(n) * h * w * ch, -1, 1, tensor_seed(name, "x"));
  auto wv = random_bf16(size_t(k) * r * s * ch, -1, 1, tensor_seed(name, "w"));
  if (npy.enabled) {
    write_npy_bf16_as_f32(npy.path("x"), {n, h, w, ch}, xv);
    write_npy_bf16_as_f32(npy.path("w"), {k, r, s, ch}, wv);
  }
  Buf x = upload(xv), wt = upload(wv);
  const size_t y_elems = size_t(on) * oh * ow * oc;
  Buf y = std::make_shared<DeviceBuffer>(y_elems * 2);

  PreparedCase pc;
  pc.algorithm = std::string("cuDNN ") + algo_name(algo) + ", math type " +
                 (perf[chosen].mathType == CUDNN_TENSOR_OP_MATH ? "TENSOR_OP" : std::to_string(int(perf[chosen].mathType))) +
                 ", workspace " + std::to_string(ws_bytes) + " B";
  dnn_check(cudnnSetConvolutionMathType(cd.get(), perf[chosen].mathType), "cudnnSetConvolutionMathType");
  pc.launch = [=](cudaStream_t) {  // on gpu.stream, set above (the runner times that stream)
    const float alpha = 1.0f, beta = 0.0f;
    dnn_check(cudnnConvolutionForward(handle, &alpha, xd.get(), x->get(), wd.get(), wt->get(), cd.get(), algo,
                                      ws->get(), ws_bytes, &beta, yd.get(), y->get()),
              "cudnnConvolutionForward");
  };
  pc.save_output = [=] {
    if (npy.enabled) write_npy_bf16_as_f32(npy.path("y"), {on, oh, ow, oc}, download<uint16_t>(y, y_elems));
  };
  return pc;
}

}  // namespace tpusim::cuda_ref
