# gemm.s: c[M,N] = act(scale * (a[M,K] @ b[K,N] + bias[N])), for any M, K, N (or a @ b^T with TRANS_B).
#
# Defines (-D NAME=VALUE; defaults below):
#   M, K, N     problem size (required)
#   IN_DT       DT_I8 (accumulates in i32) or DT_BF16 (accumulates in f32)
#   OUT_DT      DT_I8, DT_I32, DT_BF16 or DT_F32
#   BIAS        1: input `bias` [N] (i32 for DT_I8 inputs, f32 for DT_BF16) is added to the accumulators
#   RELU        1: max(x, 0) after the bias
#   SCALE       f32 bit pattern multiplied in after bias and ReLU (requantisation); 0: none
#   DEQUANT     1: the dequantising epilogue of an int8 matmul (IN_DT DT_I8, OUT_DT DT_BF16 or DT_F32): input
#               `dq` f32 [N, 2] holds per output column the pair (scale, bias) and the drain computes
#               x = f32(acc) * scale, + bias with BIAS=1 (no `bias` input then), ReLU, the cast (vpu.acc dequant),
#               so the int32 accumulators never leave the chip
#   Q_SCALE     with DEQUANT, f32 bit pattern > 0: a second output `q` i8 [M, N] = saturate(round(x * Q_SCALE)) of
#               the same x after the ReLU (the next layer's int8 activations, written in the same pass); 0: none
#   Q_ONLY      with Q_SCALE, 1: q is the only output (c is not declared, drained nor stored), for a layer whose
#               result only the next int8 matmul reads
#   ACT_RESIDENT 1: a and c live in VMEM (`@ vmem`, at A_VADDR and C_VADDR), as a layer's activations do in a
#               TPUv1's Unified Buffer: the kernel reads a and writes c in place, and only b (and bias) come
#               from HBM. The runtime writes a into VMEM and reads c from it.
#   B_TILED     1: b is stored tile by tile, [cdiv(K,R), cdiv(N,C), R, C] (zero-padded), as a compiler lays out
#               weights: each fold's weights are one contiguous HBM read instead of R strided rows.
#   TRANS_B     1: b is given transposed, [N, K] row-major, and c = a @ b^T (attention's Q @ K^T): each B tile is
#               loaded as the nt x kt block of b and mxu.lw transposes it on the way into the array (`trans`),
#               with the same timing as TRANS_B=0. Not with B_TILED.
#   TAP_CIN     > 0: an implicit im2col (kernels/gemm_chip.h, ConvTaps): `a` is [TAP_ROWS, TAP_CIN], a
#               convolution's padded input split into TAP_SH x TAP_SW phases of TAP_PHASE_ROWS rows of TAP_WQ
#               pixels, and element (r, t*TAP_CIN + c) of the matrix is a[r + offset(t)][c] for the tap t = (i, j)
#               = (t / TAP_KW, t % TAP_KW) at input offsets (ih, jw) = (i*TAP_DH, j*TAP_DW):
#               offset(t) = ((ih % TAP_SH)*TAP_SW + jw % TAP_SW)*TAP_PHASE_ROWS + (ih / TAP_SH)*TAP_WQ + jw / TAP_SW.
#               TAP_PITCH (default 1): the element is a[r*TAP_PITCH + offset(t)][c] (phases of rows only, the
#               stride across columns as the pitch: TAP_SW 1, TAP_WQ the padded row).
#               Each fold's A block is loaded tap by tap into the same A region, so results and matrix work are
#               those of the copied matrix. Not with ACT_RESIDENT.
#   RESIDUAL    1: input `r` [M, N] of OUT_DT (a residual connection) is added to each drained tile after the cast,
#               as the separate elementwise add would do it (vpu.add: in f32, rounded to OUT_DT), then with
#               RES_RELU max(x, 0): c = cast(...) + r, so the result is bit for bit that of the GEMM followed by the
#               Add (and Relu) kernel, without writing and reading back the GEMM's output. dmain loads r's tile into
#               the C buffer's second half once the buffer is free. Without RELU and SCALE the drain's vpu.acc adds
#               it in its own pass (res), else a vpu.add after it. OUT_DT DT_BF16 or DT_F32; not with
#               ACT_RESIDENT, Q_SCALE or GROUP_N.
#   GROUP_N     > 0: c is stored as N / GROUP_N groups of GROUP_N columns one after the other, [N / GROUP_N, M,
#               GROUP_N] (a Split of the result's columns into equal parts is then views of it); GROUP_N a multiple
#               of MXU_COLS. Not with ACT_RESIDENT or Q_SCALE.
#   BATCH       > 1: BATCH independent products one after the other, c[i] = a[i] @ b[i] (a [BATCH, M, K], b
#               [BATCH, K, N] or with TRANS_B [BATCH, N, K], c [BATCH, M, N]), item i's rows as more row tiles of
#               one product: its A load, weight loads, products and drains go on while item i - 1 drains, where
#               BATCH calls each wait for the one before to finish. Not with ACT_RESIDENT, TAP_CIN, GROUP_N,
#               RESIDUAL, Q_SCALE or B_TILED.
#   MXU_ROWS, MXU_COLS, ACC_ROWS, VMEM_BYTES: the chip (tpusim passes them from the config)
#
# Schedule. Weight-stationary: each mxu.lw holds a K-by-N tile of b (R = MXU_ROWS rows of K, C = MXU_COLS
# columns of N); TM rows of a, held in VMEM for all of N, stream through it into one of two accumulator regions.
#   for m0 in 0..M step TM:           (one row tile of a, resident in A region `aslot`)
#     for n0 in 0..N step C:          (one output tile: accumulator region `accslot`)
#       for k0 in 0..K step R:        (one fold: B tile in VMEM slot `slot`)
#         dmain:  in the first strip only, load A[m0:+mt, k0:+kt] into the A region (its first block waits s8:
#                 region free); then load B[k0:+kt, n0:+nt] into slot (waits s1: slot free; signals s2)
#         mxu:    lw B tile (waits s2; frees the slot, s1, once the tile is in the array's shadow buffer);
#                 mm the A region's columns k0.., overwrite at k0 = 0 (waits s3: region free) else accumulate
#       mxu.sync signals s4 (region full); vpu drains it with bias/ReLU/scale/cast into a C buffer
#       (waits s5: C buffer free; frees the region: s3, fills the buffer: s6); dmaout stores it (frees s5)
#     mxu.sync signals s8: the A region is free for the row tile after next
# a is read from HBM once and b once per row tile (M/TM times): activations stay in VMEM and weights stream,
# as on a TPU. Edge tiles are partial: DMA moves only the valid rows and bytes and mxu.lw zero-fills the rest of
# the tile, so no operand is padded in HBM. A regions, B slots, accumulator regions and C buffers are each
# double-buffered, so the DMA of fold i+1, the drain of tile t and the load of the next row tile overlap the
# matrix unit's work.

.name "gemm"
.set NACC, 2
.default IN_DT, DT_BF16
.default OUT_DT, DT_F32
.default BIAS, 0
.default RELU, 0
.default SCALE, 0
.default DEQUANT, 0
.default Q_SCALE, 0
.default Q_ONLY, 0
.default ACT_RESIDENT, 0
.default B_TILED, 0
.default TRANS_B, 0
.default GROUP_N, 0
.default RESIDUAL, 0
.default RES_RELU, 0
.default ACT, 0
.default BATCH, 1
.if ACT
.error "gemm.s: ACT (an activation in the epilogue) is gemm_chip's, not gemm.s's (kernels/gemm_chip.h)"
.endif
.default TAP_CIN, 0
.default TAP_ROWS, 0
.default TAP_KW, 1
.default TAP_SH, 1
.default TAP_SW, 1
.default TAP_DH, 1
.default TAP_DW, 1
.default TAP_WQ, 1
.default TAP_PHASE_ROWS, 0
.default TAP_PITCH, 1
.if TRANS_B && B_TILED
.error "gemm.s: TRANS_B and B_TILED cannot be combined"
.endif
.if BATCH < 1 || (BATCH > 1 && (ACT_RESIDENT || TAP_CIN || GROUP_N || RESIDUAL || Q_SCALE || B_TILED))
.error "gemm.s: BATCH must be positive, and above 1 without ACT_RESIDENT, TAP_CIN, GROUP_N, RESIDUAL, Q_SCALE or B_TILED"
.endif

.set QO, Q_SCALE != 0
.if RESIDUAL && ((OUT_DT != DT_BF16 && OUT_DT != DT_F32) || ACT_RESIDENT || QO || GROUP_N)
.error "gemm.s: RESIDUAL gives OUT_DT DT_BF16 or DT_F32, without ACT_RESIDENT, Q_SCALE or GROUP_N"
.endif
.if RES_RELU && !RESIDUAL
.error "gemm.s: RES_RELU needs RESIDUAL"
.endif
.if Q_ONLY && !QO
.error "gemm.s: Q_ONLY needs Q_SCALE"
.endif
.if DEQUANT && (IN_DT != DT_I8 || (OUT_DT != DT_BF16 && OUT_DT != DT_F32))
.error "gemm.s: DEQUANT takes IN_DT DT_I8 and gives OUT_DT DT_BF16 or DT_F32"
.endif
.if QO && (!DEQUANT || SCALE != 0 || ACT_RESIDENT)
.error "gemm.s: Q_SCALE needs DEQUANT, and neither SCALE nor ACT_RESIDENT"
.endif

.if IN_DT == DT_I8
.set ACC_DT, DT_I32
.elif IN_DT == DT_BF16
.set ACC_DT, DT_F32
.else
.error "gemm.s: IN_DT must be DT_I8 or DT_BF16"
.endif
.set E, sizeof(IN_DT)
.if GROUP_N && (GROUP_N < 0 || N % GROUP_N != 0 || GROUP_N % MXU_COLS != 0 || ACT_RESIDENT || Q_SCALE != 0)
.error "gemm.s: GROUP_N must divide N, be a multiple of MXU_COLS, and go without ACT_RESIDENT and Q_SCALE"
.endif
.if GROUP_N
.set CP, GROUP_N
.else
.set CP, N
.endif
.if TAP_CIN && (TAP_CIN < 0 || ACT_RESIDENT || K % TAP_CIN != 0 || TAP_ROWS < 1 || TAP_KW < 1 || TAP_SH < 1 || TAP_SW < 1 || TAP_DH < 1 || TAP_DW < 1 || TAP_WQ < 1 || TAP_PHASE_ROWS < 0 || TAP_PITCH < 1)
.error "gemm.s: TAP_CIN needs K in whole taps, TAP_ROWS, TAP_KW, strides, dilations, TAP_WQ and TAP_PITCH positive, and no ACT_RESIDENT"
.endif
.set O, sizeof(OUT_DT)
.if M < 1 || K < 1 || N < 1
.error "gemm.s: M, K and N must be positive"
.endif

.set R, MXU_ROWS
.set C, MXU_COLS
.set KT, cdiv(K, R)
.set NT, cdiv(N, C)
.if DEQUANT
.set BIAS_BYTES, align(N * 8, 64)
.else
.set BIAS_BYTES, align(BIAS * N * 4, 64)
.endif
.set B_BYTES, align(R * C * E, 64)
# Row tiles of at most TM_MAX rows (half the accumulators: two tiles in flight), all of the same size: M = 2700
# with TM_MAX = 2048 runs as 2 x 1350, not 2048 + 652, whose weight loads the short tile could not hide.
.if ACT_RESIDENT
# VMEM layout: [bias | B slot 0 | B slot 1 | a | c]
.set TM_MAX, ACC_ROWS / 2
.set VB0, BIAS_BYTES
.default A_VADDR, VB0 + 2 * B_BYTES
.default C_VADDR, align(A_VADDR + M * K * E, 64)
.if C_VADDR + M * N * O > VMEM_BYTES
.error "gemm.s: with ACT_RESIDENT, a and c do not fit in VMEM"
.endif
.set TM, cdiv(M, cdiv(M, TM_MAX))
.set A_BYTES, 0
.input a, IN_DT, [M, K] @ vmem A_VADDR
.else
# VMEM layout: [bias | A region 0 | A region 1 | B slot 0 | B slot 1 | C buffer 0 | C buffer 1]; an A region
# holds TM rows of a at their HBM row pitch K*E, a C buffer a tile of c (and, with Q_SCALE, one of q after it;
# with RESIDUAL, one of r). (256 bytes cover the alignment of the four aligned regions, 128 more the two q or r
# tiles.)
.set TM_VMEM, (VMEM_BYTES - BIAS_BYTES - 2 * B_BYTES - 256 - 128 * (QO || RESIDUAL)) / (2 * K * E + 2 * C * (O + QO + RESIDUAL * O))
.set TM_MAX, min(ACC_ROWS / 2, TM_VMEM)
.if TM_MAX < 1
.error "gemm.s: a row of a and the operand tiles do not fit in VMEM"
.endif
.set TM, cdiv(M, cdiv(M, TM_MAX))
.set A_BYTES, align(TM * K * E, 64)
.set C_BYTES, align(TM * C * O, 64)
.set CQ_BYTES, C_BYTES + QO * align(TM * C, 64) + RESIDUAL * C_BYTES
# With BATCH, up to 4 A regions, accumulator regions and C buffers (NACC) where the accumulators and VMEM hold
# them: more items in flight, each one's drain (mxu.rows + mxu.cols cycles after its last row) behind the next
# ones' products, where with two the third item's A load waited for the first's drain
.if BATCH > 1
.set NACC, min(4, min(ACC_ROWS / TM, (VMEM_BYTES - BIAS_BYTES - 2 * B_BYTES - 256 - 128 * QO) / (A_BYTES + CQ_BYTES)))
.if NACC < 2
.set NACC, 2
.endif
.endif
.set VA0, BIAS_BYTES
.set VB0, VA0 + NACC * A_BYTES
.set VC0, VB0 + 2 * B_BYTES
.if TAP_CIN
.input a, IN_DT, [TAP_ROWS, TAP_CIN]
.elif BATCH > 1
.input a, IN_DT, [BATCH, M, K]
.else
.input a, IN_DT, [M, K]
.endif
.endif
.if B_TILED
.input b, IN_DT, [KT, NT, R, C]
.elif TRANS_B && BATCH > 1
.input b, IN_DT, [BATCH, N, K]
.elif TRANS_B
.input b, IN_DT, [N, K]
.elif BATCH > 1
.input b, IN_DT, [BATCH, K, N]
.else
.input b, IN_DT, [K, N]
.endif
.if DEQUANT
.input dq, DT_F32, [N, 2]
.elif BIAS
.input bias, ACC_DT, [N]
.endif
.if RESIDUAL
.input r, OUT_DT, [M, N]
.endif
.if ACT_RESIDENT
.output c, OUT_DT, [M, N] @ vmem C_VADDR
.elif GROUP_N
.output c, OUT_DT, [N / GROUP_N, M, GROUP_N]
.elif BATCH > 1
.output c, OUT_DT, [BATCH, M, N]
.elif !Q_ONLY
.output c, OUT_DT, [M, N]
.endif
.if QO
.output q, DT_I8, [M, N]
.endif

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
.reg aslot, r20
.reg abase, r21
.reg vq, r22
.reg qscale, r23
.reg col, r24
.reg cend, r25
.reg w, r26
.reg u0, r27
.reg u1, r28
.reg u2, r29
.reg vr, r30
.reg bi, r31

    sem.set s1, 2            # B slots free
    sem.set s2, 0            # B slot full
    sem.set s3, NACC         # accumulator regions free
    sem.set s4, 0            # accumulator region full
    sem.set s5, NACC         # C buffers free
    sem.set s6, 0            # C buffer full
    sem.set s7, 0            # bias loaded
    sem.set s8, NACC         # A regions free
.if RESIDUAL
    sem.set s9, 0            # r tile loaded
.endif
    li one, 1
    li scale, SCALE
.if DEQUANT
    li t0, 0
    li t1, dq
    li t2, N * 8
    dma.ld t0, t1, one, t2, t2, t2, signal=s7
    vpu.sync wait=s7
.elif BIAS
    li t0, 0
    li t1, bias
    li t2, N * 4
    dma.ld t0, t1, one, t2, t2, t2, signal=s7
    vpu.sync wait=s7
.endif
    li slot, 0
    li accslot, 0
    li aslot, 0
.if BATCH > 1
    li bi, 0
.endif
    li m0, 0
rowtile:
    li t0, M
    sub mt, t0, m0
    li t0, TM
    min mt, mt, t0
.if ACT_RESIDENT
    muli abase, m0, K * E
    addi abase, abase, a
.else
    muli abase, aslot, A_BYTES
    addi abase, abase, VA0
.endif
    li n0, 0
strip:
    li t0, N
    sub nt, t0, n0
    li t0, C
    min nt, nt, t0
    muli acc, accslot, TM
    li k0, 0
fold:
    li t0, K
    sub kt, t0, k0
    li t0, R
    min kt, kt, t0
    muli va, k0, E
    add va, va, abase
    li t3, K * E
.if TAP_CIN
    bne n0, r0, btile
    # first strip: the A block's columns k0..k0+kt tap by tap, rows m0*TAP_PITCH + offset(t).. of a (pitch
    # TAP_PITCH*TAP_CIN*E),
    # into the A region (pitch K*E); the row tile's first block waits s8 (region free)
    bne k0, r0, tapgo
    dmain.sync wait=s8
tapgo:
    addi col, k0, 0
    add cend, k0, kt
tapload:
    li u0, TAP_CIN
    div u1, col, u0          # tap
    rem u2, col, u0          # channel
    sub w, u0, u2
    sub u0, cend, col
    min w, w, u0             # elements of this tap in the block
    li u0, TAP_KW
    div t0, u1, u0           # i
    rem u1, u1, u0           # j
    muli t0, t0, TAP_DH      # ih
    muli u1, u1, TAP_DW      # jw
    li u0, TAP_SH
    rem t1, t0, u0
    div t0, t0, u0
    muli t0, t0, TAP_WQ      # (ih / SH) * WQ
    li u0, TAP_SW
    rem t2, u1, u0
    div u1, u1, u0
    add t0, t0, u1           # + jw / SW
    muli t1, t1, TAP_SW
    add t1, t1, t2
    muli t1, t1, TAP_PHASE_ROWS
    add t0, t0, t1           # + the phase's first row: offset(t)
.if TAP_PITCH != 1
    muli t1, m0, TAP_PITCH
    add t0, t0, t1
.else
    add t0, t0, m0
.endif
    muli t0, t0, TAP_CIN
    add t0, t0, u2
    muli t0, t0, E
    li u0, a
    add t0, t0, u0           # source
    sub t1, col, k0
    muli t1, t1, E
    add t1, t1, va           # destination
    muli t2, w, E
    li u0, TAP_CIN * TAP_PITCH * E
    dma.ld t1, t0, mt, t2, u0, t3
    add col, col, w
    blt col, cend, tapload
.elif !ACT_RESIDENT
    bne n0, r0, btile
    # first strip: A block rows m0.., bytes k0*E.., from a into the A region, both at row pitch K*E
    muli t0, m0, K
    add t0, t0, k0
    muli t0, t0, E
    li t1, a
    add t0, t0, t1
.if BATCH > 1
    muli t1, bi, M * K * E   # item bi's a
    add t0, t0, t1
.endif
    muli t1, kt, E
    bne k0, r0, ablock
    dma.ld va, t0, mt, t1, t3, t3, wait=s8
    jmp btile
ablock:
    dma.ld va, t0, mt, t1, t3, t3
.endif
btile:
    muli vb, slot, B_BYTES
    addi vb, vb, VB0
.if B_TILED
    # B tile (k0/R, n0/C): R x C elements stored contiguously; its first kt rows of nt elements into slot
    li t1, R
    div t0, k0, t1
    muli t0, t0, NT
    li t1, C
    div t1, n0, t1
    add t0, t0, t1
    muli t0, t0, R * C * E
    li t2, C * E
.elif TRANS_B
    # B^T tile: rows n0.. of b, bytes k0*E.. (row pitch K*E) into slot (row pitch R*E): an nt x kt block
    muli t0, n0, K
    add t0, t0, k0
    muli t0, t0, E
    li t2, K * E
.else
    # B tile: rows k0.., bytes n0*E.., from b (row pitch N*E) into slot (row pitch C*E)
    muli t0, k0, N
    add t0, t0, n0
    muli t0, t0, E
    li t2, N * E
.endif
    li t1, b
    add t0, t0, t1
.if BATCH > 1
    muli t1, bi, K * N * E   # item bi's b
    add t0, t0, t1
.endif
.if TRANS_B
    muli t1, kt, E
    li t4, R * E
    dma.ld vb, t0, nt, t1, t2, t4, wait=s1, signal=s2
.else
    muli t1, nt, E
    li t4, C * E
    dma.ld vb, t0, kt, t1, t2, t4, wait=s1, signal=s2
.endif
    # the weights leave the slot once shifted into the array's shadow buffer: the lw frees it (s1)
    mxu.lw vb, kt, nt, t4, IN_DT, trans=TRANS_B, wait=s2, signal=s1
    beq k0, r0, first
    mxu.mm va, mt, acc, t3, IN_DT, accumulate
    jmp next
first:
    mxu.mm va, mt, acc, t3, IN_DT, wait=s3
next:
    sub slot, one, slot
    addi k0, k0, R
    li t0, K
    blt k0, t0, fold
    # drain the tile: accumulators -> (bias or dequant, relu, scale, cast) -> C buffer -> c[m0.., n0..]
    mxu.sync signal=s4
    muli t0, n0, 4 + 4 * DEQUANT
.if ACT_RESIDENT
    # straight into c[m0.., n0..] in VMEM (row pitch N*O)
    muli vc, m0, N
    add vc, vc, n0
    muli vc, vc, O
    addi vc, vc, c
    li t1, N * O
    vpu.acc vc, acc, mt, nt, t1, t0, scale, ACC_DT, OUT_DT, bias_en=BIAS, relu=RELU, scale_en=(SCALE != 0), dequant=DEQUANT, wait=s4, signal=s3
.else
    muli vc, accslot, CQ_BYTES
    addi vc, vc, VC0
    muli t1, nt, O
.if RESIDUAL
    # r[m0.., n0..] into the C buffer's second half once the buffer is free (s5): loaded, s9
    muli t2, m0, N
    add t2, t2, n0
    muli t2, t2, O
    li t3, r
    add t2, t2, t3
    addi vr, vc, C_BYTES
    li t3, N * O
    dma.ld vr, t2, mt, t1, t3, t1, wait=s5, signal=s9
    vpu.sync wait=s9
.else
    vpu.sync wait=s5
.endif
.if QO && Q_ONLY
    # q's tile alone (x * Q_SCALE, i8)
    addi vq, vc, C_BYTES
    li qscale, Q_SCALE
    vpu.acc vq, acc, mt, nt, nt, t0, qscale, ACC_DT, DT_I8, bias_en=BIAS, relu=RELU, scale_en, dequant=1, wait=s4, signal=s3
.elif QO
    # c's tile, then q's (x * Q_SCALE, i8) from the same accumulators: the second drain frees the region
    vpu.acc vc, acc, mt, nt, t1, t0, scale, ACC_DT, OUT_DT, bias_en=BIAS, relu=RELU, dequant=1, wait=s4
    addi vq, vc, C_BYTES
    li qscale, Q_SCALE
    vpu.acc vq, acc, mt, nt, nt, t0, qscale, ACC_DT, DT_I8, bias_en=BIAS, relu=RELU, scale_en, dequant=1, signal=s3
.elif RESIDUAL && !RELU && SCALE == 0
    # r (packed as the C buffer) added in the drain's own pass, its ReLU after the add (res: r's address in the
    # scale operand's place; the bits of the drain and then the vpu.add below)
    vpu.acc vc, acc, mt, nt, t1, t0, vr, ACC_DT, OUT_DT, bias_en=BIAS, relu=RES_RELU, dequant=DEQUANT, res, wait=s4, signal=s3
.else
    vpu.acc vc, acc, mt, nt, t1, t0, scale, ACC_DT, OUT_DT, bias_en=BIAS, relu=RELU, scale_en=(SCALE != 0), dequant=DEQUANT, wait=s4, signal=s3
.endif
.if RESIDUAL && (RELU || SCALE != 0)
    # the tile is packed (row pitch nt*O) as r's is: c + r over its mt*nt elements, and its ReLU (one pass)
    mul t2, mt, nt
    vpu.add vc, vc, vr, t2, OUT_DT, relu=RES_RELU
.endif
    vpu.sync signal=s6
.if GROUP_N
    # c's element (m0, n0) in its group: (n0 / GROUP_N, m0, n0 % GROUP_N)
    li t2, GROUP_N
    div t3, n0, t2
    mul t2, t3, t2
    sub t0, n0, t2
    muli t3, t3, M
    add t3, t3, m0
    muli t3, t3, GROUP_N
    add t0, t0, t3
.else
    muli t0, m0, N
    add t0, t0, n0
.endif
.if QO && Q_ONLY
    # q[m0.., n0..] (row pitch N), which frees the buffer
    li t2, q
    add t2, t2, t0
    li t3, N
    dma.st t2, vq, mt, nt, t3, nt, wait=s6, signal=s5
.else
.if QO
    # q[m0.., n0..] (row pitch N), then c's: the stores complete in order, so the second frees the C buffer
    li t2, q
    add t2, t2, t0
    li t3, N
    dma.st t2, vq, mt, nt, t3, nt, wait=s6
.endif
    muli t0, t0, O
    li t2, c
    add t0, t0, t2
.if BATCH > 1
    muli t2, bi, M * N * O   # item bi's c
    add t0, t0, t2
.endif
    li t2, CP * O
.if QO
    dma.st t0, vc, mt, t1, t2, t1, signal=s5
.else
    dma.st t0, vc, mt, t1, t2, t1, wait=s6, signal=s5
.endif
.endif
.endif
.if NACC == 2
    sub accslot, one, accslot
.else
    addi accslot, accslot, 1
    li t0, NACC
    blt accslot, t0, accnext
    li accslot, 0
accnext:
.endif
    addi n0, n0, C
    li t0, N
    blt n0, t0, strip
    mxu.sync signal=s8
.if NACC == 2
    sub aslot, one, aslot
.else
    addi aslot, aslot, 1
    li t0, NACC
    blt aslot, t0, anext
    li aslot, 0
anext:
.endif
    addi m0, m0, TM
    li t0, M
    blt m0, t0, rowtile
.if BATCH > 1
    # the next item: its row tiles after this one's, in the same regions, slots and buffers
    li m0, 0
    addi bi, bi, 1
    li t0, BATCH
    blt bi, t0, rowtile
.endif
