# matmul.s: c[M,N] (i32) = a[M,K] (i8) @ b[K,N] (i8), the built-in int8 GEMM kernel under the examples' name.
.include "gemm_int8.s"
.name "matmul"
