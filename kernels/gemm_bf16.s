# gemm_bf16.s: c[M,N] (f32) = a[M,K] (bf16) @ b[K,N] (bf16), f32 accumulation. gemm.s with IN_DT=DT_BF16,
# OUT_DT=DT_F32; any of gemm.s's defines still apply.
.default IN_DT, DT_BF16
.default OUT_DT, DT_F32
.include "gemm.s"
.name "gemm_bf16"
