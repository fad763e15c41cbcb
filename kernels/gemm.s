# gemm.s: c[M,N] = act(scale * (a[M,K] @ b[K,N] + bias[N])), for any M, K, N.
#
# Defines (-D NAME=VALUE; defaults below):
#   M, K, N     problem size (required)
#   IN_DT       DT_I8 (accumulates in i32) or DT_BF16 (accumulates in f32)
#   OUT_DT      DT_I8, DT_I32, DT_BF16 or DT_F32
#   BIAS        1: input `bias` [N] (i32 for DT_I8 inputs, f32 for DT_BF16) is added to the accumulators
#   RELU        1: max(x, 0) after the bias
#   SCALE       f32 bit pattern multiplied in after bias and ReLU (requantisation); 0: none
#   MXU_ROWS, MXU_COLS, ACC_ROWS, VMEM_BYTES: the chip (tpusim passes them from the config)
#
# Schedule. Weight-stationary: each mxu.lw holds a K-by-N tile of b (R = MXU_ROWS rows of K, C = MXU_COLS
# columns of N); the rows of a stream through it, TM rows at a time, into one of two accumulator regions.
#   for n0 in 0..N step C:            (one column strip of c)
#     for m0 in 0..M step TM:         (one output tile: accumulator region `accslot`)
#       for k0 in 0..K step R:        (one fold: A tile and B tile in VMEM slot `slot`)
#         dmain:  load A[m0:+mt, k0:+kt] and B[k0:+kt, n0:+nt] into slot       waits s1 (slot free)
#         mxu:    lw B tile (waits s2: slot full); mm A tile, overwrite at k0 = 0 (waits s3: region free)
#                 else accumulate; the mm frees the slot (s1) when done
#       mxu.sync signals s4 (region full); vpu drains it with bias/ReLU/scale/cast into a C buffer
#       (waits s5: C buffer free; frees the region: s3, fills the buffer: s6); dmaout stores it (frees s5)
# Edge tiles are partial: DMA moves only the valid rows and bytes and mxu.lw zero-fills the rest of the tile,
# so no operand is padded in HBM. Slots, accumulator regions and C buffers are each double-buffered, so the
# DMA of fold i+1 and the drain of tile t overlap the matrix unit's work on fold i and tile t+1.

.name "gemm"
.default IN_DT, DT_BF16
.default OUT_DT, DT_F32
.default BIAS, 0
.default RELU, 0
.default SCALE, 0

.if IN_DT == DT_I8
.set ACC_DT, DT_I32
.elif IN_DT == DT_BF16
.set ACC_DT, DT_F32
.else
.error "gemm.s: IN_DT must be DT_I8 or DT_BF16"
.endif
.set E, sizeof(IN_DT)
.set O, sizeof(OUT_DT)
.if M < 1 || K < 1 || N < 1
.error "gemm.s: M, K and N must be positive"
.endif

.set R, MXU_ROWS
.set C, MXU_COLS
# VMEM layout: [bias | A slot 0 | A slot 1 | B slot 0 | B slot 1 | C buffer 0 | C buffer 1]
.set BIAS_BYTES, align(BIAS * N * 4, 64)
.set TM_VMEM, (VMEM_BYTES - BIAS_BYTES - 2 * R * C * E) / (2 * R * E + 2 * C * O)
.set TM, min(min(M, ACC_ROWS / 2), TM_VMEM)
.if TM < 1
.error "gemm.s: the operand tiles do not fit in VMEM"
.endif
.set A_BYTES, align(TM * R * E, 64)
.set B_BYTES, align(R * C * E, 64)
.set C_BYTES, align(TM * C * O, 64)
.set VA0, BIAS_BYTES
.set VB0, VA0 + 2 * A_BYTES
.set VC0, VB0 + 2 * B_BYTES

.input a, IN_DT, [M, K]
.input b, IN_DT, [K, N]
.if BIAS
.input bias, ACC_DT, [N]
.endif
.output c, OUT_DT, [M, N]

.reg n0, r1
.reg m0, r2
.reg k0, r3
.reg nt, r4
.reg mt, r5
.reg kt, r6
.reg slot, r7
.reg accslot, r8
.reg one, r9
.reg va, r10
.reg vb, r11
.reg acc, r12
.reg t0, r13
.reg t1, r14
.reg t2, r15
.reg t3, r16
.reg t4, r17
.reg vc, r18
.reg scale, r19

    sem.set s1, 2            # A/B slots free
    sem.set s2, 0            # A/B slot full
    sem.set s3, 2            # accumulator regions free
    sem.set s4, 0            # accumulator region full
    sem.set s5, 2            # C buffers free
    sem.set s6, 0            # C buffer full
    sem.set s7, 0            # bias loaded
    li one, 1
    li scale, SCALE
.if BIAS
    li t0, 0
    li t1, bias
    li t2, N * 4
    dma.ld t0, t1, one, t2, t2, t2, signal=s7
    vpu.sync wait=s7
.endif
    li slot, 0
    li accslot, 0
    li n0, 0
strip:
    li t0, N
    sub nt, t0, n0
    li t0, C
    min nt, nt, t0
    li m0, 0
tile:
    li t0, M
    sub mt, t0, m0
    li t0, TM
    min mt, mt, t0
    muli acc, accslot, TM
    li k0, 0
fold:
    li t0, K
    sub kt, t0, k0
    li t0, R
    min kt, kt, t0
    # A tile: rows m0.., bytes k0*E.., from a (row pitch K*E) into slot (row pitch R*E)
    muli va, slot, A_BYTES
    addi va, va, VA0
    muli t0, m0, K
    add t0, t0, k0
    muli t0, t0, E
    li t1, a
    add t0, t0, t1
    muli t1, kt, E
    li t2, K * E
    li t3, R * E
    dma.ld va, t0, mt, t1, t2, t3, wait=s1
    # B tile: rows k0.., bytes n0*E.., from b (row pitch N*E) into slot (row pitch C*E)
    muli vb, slot, B_BYTES
    addi vb, vb, VB0
    muli t0, k0, N
    add t0, t0, n0
    muli t0, t0, E
    li t1, b
    add t0, t0, t1
    muli t1, nt, E
    li t2, N * E
    li t4, C * E
    dma.ld vb, t0, kt, t1, t2, t4, signal=s2
    mxu.lw vb, kt, nt, t4, IN_DT, wait=s2
    beq k0, r0, first
    mxu.mm va, mt, acc, t3, IN_DT, accumulate, signal=s1
    jmp next
first:
    mxu.mm va, mt, acc, t3, IN_DT, wait=s3, signal=s1
next:
    sub slot, one, slot
    addi k0, k0, R
    li t0, K
    blt k0, t0, fold
    # drain the tile: accumulators -> (bias, relu, scale, cast) -> C buffer -> c[m0.., n0..]
    mxu.sync signal=s4
    muli vc, accslot, C_BYTES
    addi vc, vc, VC0
    muli t0, n0, 4
    muli t1, nt, O
    vpu.sync wait=s5
    vpu.acc vc, acc, mt, nt, t1, t0, scale, ACC_DT, OUT_DT, bias_en=BIAS, relu=RELU, scale_en=(SCALE != 0), wait=s4, signal=s3
    vpu.sync signal=s6
    muli t0, m0, N
    add t0, t0, n0
    muli t0, t0, O
    li t2, c
    add t0, t0, t2
    li t2, N * O
    dma.st t0, vc, mt, t1, t2, t1, wait=s6, signal=s5
    sub accslot, one, accslot
    addi m0, m0, TM
    li t0, M
    blt m0, t0, tile
    addi n0, n0, C
    li t0, N
    blt n0, t0, strip
