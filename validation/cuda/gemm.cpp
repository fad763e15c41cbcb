// GEMM through cuBLASLt: y[m, n] = x[m, k] @ W[n, k]^T for bf16 (bf16 out, fp32 accumulation), fp8 E4M3 (per-tensor
// scales, bf16 out, fp32 accumulation) and int8 (int32 out).
//
// cuBLASLt is column-major. Row-major y [m, n] is column-major y^T (n x m), and y^T = W x^T: A = W, stored as a
// column-major k x n matrix (ld k) used transposed; B = x, a column-major k x m matrix (ld k) used as is; C = D = y^T
// (ld n). That is the "TN" layout, the one cuBLASLt's FP8 and int8 (IMMA) kernels require.
#include <cublasLt.h>

#include <cstring>

#include "gpu.h"

namespace tpusim::cuda_ref {
namespace {

void lt_check(cublasStatus_t s, const std::string& what) {
  if (s != CUBLAS_STATUS_SUCCESS) throw std::runtime_error(what + ": " + cublasLtGetStatusString(s));
}

cublasLtHandle_t lt_handle(Gpu& gpu) {
  if (!gpu.cublaslt) {
    cublasLtHandle_t h = nullptr;
    lt_check(cublasLtCreate(&h), "cublasLtCreate");
    gpu.cublaslt = std::shared_ptr<void>(h, [](void* p) { cublasLtDestroy(static_cast<cublasLtHandle_t>(p)); });
    gpu.workspace = std::make_shared<DeviceBuffer>(size_t(32) << 20);
  }
  return static_cast<cublasLtHandle_t>(gpu.cublaslt.get());
}

std::shared_ptr<cublasLtMatrixLayoutOpaque_t> layout(cudaDataType_t t, uint64_t rows, uint64_t cols, int64_t ld) {
  cublasLtMatrixLayout_t l = nullptr;
  lt_check(cublasLtMatrixLayoutCreate(&l, t, rows, cols, ld), "cublasLtMatrixLayoutCreate");
  return std::shared_ptr<cublasLtMatrixLayoutOpaque_t>(l, [](cublasLtMatrixLayout_t p) { cublasLtMatrixLayoutDestroy(p); });
}

template <class T>
void set_attr(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t a, const T& v, const char* name) {
  lt_check(cublasLtMatmulDescSetAttribute(d, a, &v, sizeof(v)), std::string("cublasLtMatmulDescSetAttribute(") + name + ")");
}

}  // namespace

std::string cublaslt_version() { return std::to_string(cublasLtGetVersion()); }

PreparedCase prepare_gemm(const Case& c, Gpu& gpu, const NpySink& npy) {
  const int64_t m = c.dim("m"), n = c.dim("n"), k = c.dim("k");
  const std::string name = c.name();
  cublasLtHandle_t lt = lt_handle(gpu);

  cudaDataType_t ab_type, cd_type, scale_type;
  cublasComputeType_t compute;
  Buf x, w, y, scale_x, scale_w;
  size_t out_size;
  // alpha and beta live as long as the launches (cuBLASLt reads them at each call, host pointer mode).
  struct Scalars { float f_alpha = 1, f_beta = 0; int32_t i_alpha = 1, i_beta = 0; };
  auto scalars = std::make_shared<Scalars>();
  if (c.dtype == "bfloat16") {
    ab_type = CUDA_R_16BF, cd_type = CUDA_R_16BF, scale_type = CUDA_R_32F, compute = CUBLAS_COMPUTE_32F;
    auto xv = random_bf16(size_t(m * k), -1, 1, tensor_seed(name, "x"));
    auto wv = random_bf16(size_t(n * k), -1, 1, tensor_seed(name, "w"));
    if (npy.enabled) {
      write_npy_bf16_as_f32(npy.path("x"), {m, k}, xv);
      write_npy_bf16_as_f32(npy.path("w"), {n, k}, wv);
    }
    x = upload(xv), w = upload(wv);
    out_size = 2;
  } else if (c.dtype == "fp8") {
    ab_type = CUDA_R_8F_E4M3, cd_type = CUDA_R_16BF, scale_type = CUDA_R_32F, compute = CUBLAS_COMPUTE_32F;
    auto xv = random_e4m3(size_t(m * k), -2, 2, tensor_seed(name, "x"));
    auto wv = random_e4m3(size_t(n * k), -2, 2, tensor_seed(name, "w"));
    if (npy.enabled) {
      write_npy_e4m3_as_f32(npy.path("x"), {m, k}, xv);
      write_npy_e4m3_as_f32(npy.path("w"), {n, k}, wv);
      write_npy_f32(npy.path("scale_x"), {}, {kFp8ScaleX});
      write_npy_f32(npy.path("scale_w"), {}, {kFp8ScaleW});
    }
    x = upload(xv), w = upload(wv);
    scale_x = upload(std::vector<float>{kFp8ScaleX});
    scale_w = upload(std::vector<float>{kFp8ScaleW});
    out_size = 2;
  } else if (c.dtype == "int8") {
    ab_type = CUDA_R_8I, cd_type = CUDA_R_32I, scale_type = CUDA_R_32I, compute = CUBLAS_COMPUTE_32I;
    auto xv = random_int8(size_t(m * k), -128, 127, tensor_seed(name, "x"));
    auto wv = random_int8(size_t(n * k), -128, 127, tensor_seed(name, "w"));
    if (npy.enabled) {
      write_npy_i8(npy.path("x"), {m, k}, xv);
      write_npy_i8(npy.path("w"), {n, k}, wv);
    }
    x = upload(xv), w = upload(wv);
    out_size = 4;
  } else {
    throw std::runtime_error("gemm: unsupported dtype " + c.dtype);
  }
  y = std::make_shared<DeviceBuffer>(size_t(m * n) * out_size);

  cublasLtMatmulDesc_t op_raw = nullptr;
  lt_check(cublasLtMatmulDescCreate(&op_raw, compute, scale_type), "cublasLtMatmulDescCreate");
  std::shared_ptr<cublasLtMatmulDescOpaque_t> op(op_raw, [](cublasLtMatmulDesc_t p) { cublasLtMatmulDescDestroy(p); });
  set_attr(op.get(), CUBLASLT_MATMUL_DESC_TRANSA, CUBLAS_OP_T, "TRANSA");
  set_attr(op.get(), CUBLASLT_MATMUL_DESC_TRANSB, CUBLAS_OP_N, "TRANSB");
  if (c.dtype == "fp8") {
    // A is W and B is x (see the top of this file). Fast accumulation stays off (its default): the tensor cores'
    // partial sums are promoted to fp32 regularly.
    const void* sa = scale_w->get();
    const void* sb = scale_x->get();
    set_attr(op.get(), CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, sa, "A_SCALE_POINTER");
    set_attr(op.get(), CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, sb, "B_SCALE_POINTER");
  }
  auto a_layout = layout(ab_type, uint64_t(k), uint64_t(n), k);
  auto b_layout = layout(ab_type, uint64_t(k), uint64_t(m), k);
  auto c_layout = layout(cd_type, uint64_t(n), uint64_t(m), n);

  cublasLtMatmulPreference_t pref_raw = nullptr;
  lt_check(cublasLtMatmulPreferenceCreate(&pref_raw), "cublasLtMatmulPreferenceCreate");
  std::shared_ptr<cublasLtMatmulPreferenceOpaque_t> pref(pref_raw, [](cublasLtMatmulPreference_t p) { cublasLtMatmulPreferenceDestroy(p); });
  size_t ws_bytes = gpu.workspace->bytes();
  lt_check(cublasLtMatmulPreferenceSetAttribute(pref.get(), CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes,
                                                sizeof(ws_bytes)),
           "cublasLtMatmulPreferenceSetAttribute(MAX_WORKSPACE_BYTES)");
  // Split-k partial sums only in the compute type (fp32 / int32): the schemes that add them up in the output type
  // (bf16) would round each partial sum, an error a library call for accuracy does not make.
  uint32_t reduction_mask = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
  lt_check(cublasLtMatmulPreferenceSetAttribute(pref.get(), CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK,
                                                &reduction_mask, sizeof(reduction_mask)),
           "cublasLtMatmulPreferenceSetAttribute(REDUCTION_SCHEME_MASK)");
  cublasLtMatmulHeuristicResult_t heur;
  std::memset(&heur, 0, sizeof heur);
  int found = 0;
  lt_check(cublasLtMatmulAlgoGetHeuristic(lt, op.get(), a_layout.get(), b_layout.get(), c_layout.get(), c_layout.get(),
                                          pref.get(), 1, &heur, &found),
           "cublasLtMatmulAlgoGetHeuristic");
  if (found < 1) throw std::runtime_error("cuBLASLt has no algorithm for " + name);

  PreparedCase pc;
  // What the heuristic chose, for meta.json (each attribute is 4 bytes; -1 where cuBLASLt does not say).
  int32_t algo_id = -1, tile = -1, stages = -1, split_k = -1, reduction = -1;
  size_t written = 0;
  cublasLtMatmulAlgoConfigGetAttribute(&heur.algo, CUBLASLT_ALGO_CONFIG_ID, &algo_id, sizeof algo_id, &written);
  cublasLtMatmulAlgoConfigGetAttribute(&heur.algo, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile, sizeof tile, &written);
  cublasLtMatmulAlgoConfigGetAttribute(&heur.algo, CUBLASLT_ALGO_CONFIG_STAGES_ID, &stages, sizeof stages, &written);
  cublasLtMatmulAlgoConfigGetAttribute(&heur.algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &split_k, sizeof split_k, &written);
  cublasLtMatmulAlgoConfigGetAttribute(&heur.algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &reduction, sizeof reduction,
                                       &written);
  pc.algorithm = "cublasLt heuristic #1: algo " + std::to_string(algo_id) + ", tile " + std::to_string(tile) +
                 ", stages " + std::to_string(stages) + ", split-k " + std::to_string(split_k) + " (reduction scheme " + std::to_string(reduction) + "), workspace " +
                 std::to_string(heur.workspaceSize) + " B";
  const bool is_int = c.dtype == "int8";
  Buf ws = gpu.workspace;
  pc.launch = [=](cudaStream_t s) {
    const void* alpha = is_int ? static_cast<const void*>(&scalars->i_alpha) : &scalars->f_alpha;
    const void* beta = is_int ? static_cast<const void*>(&scalars->i_beta) : &scalars->f_beta;
    lt_check(cublasLtMatmul(lt, op.get(), alpha, w->get(), a_layout.get(), x->get(), b_layout.get(), beta, y->get(),
                            c_layout.get(), y->get(), c_layout.get(), &heur.algo, ws->get(), heur.workspaceSize, s),
             "cublasLtMatmul");
    (void)scale_x, (void)scale_w, (void)pref;  // kept alive with the descriptor that points at them
  };
  pc.save_output = [=] {
    if (!npy.enabled) return;
    if (is_int)
      write_npy_i32(npy.path("y"), {m, n}, download<int32_t>(y, size_t(m * n)));
    else
      write_npy_bf16_as_f32(npy.path("y"), {m, n}, download<uint16_t>(y, size_t(m * n)));
  };
  return pc;
}

}  // namespace tpusim::cuda_ref
