# gemm_int8.s: c[M,N] (i32) = a[M,K] (i8) @ b[K,N] (i8), exact. gemm.s with IN_DT=DT_I8, OUT_DT=DT_I32; any of
# gemm.s's defines (BIAS, RELU, SCALE, OUT_DT=DT_I8 for requantised output, ...) still apply.
.default IN_DT, DT_I8
.default OUT_DT, DT_I32
.include "gemm.s"
.name "gemm_int8"
