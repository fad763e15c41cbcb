.set N, 300
# vadd.s: y[N] = a[N] + b[N] in DT (DT_I32, DT_F32 or DT_BF16; default DT_F32): a memory-bound kernel that moves
# 3 * N * sizeof(DT) bytes through HBM and should run at HBM bandwidth.
#
# Defines: N (elements), DT (data type), VMEM_BYTES, VPU_WIDTH.
# Schedule: chunks of CH elements, double-buffered like cast.s: dmain loads chunk i+1 (a, then b) while the vector
# unit adds chunk i and dmaout stores chunk i-1. Semaphores: s1 A/B slot free, s2 A/B slot full (signalled by the
# load of b: a queue's transfers complete in order, so a is in place too), s3 Y slot free, s4 Y slot full.
.name "vadd"
.default DT, DT_F32
.set E, sizeof(DT)
.if N < 1
.error "vadd.s: N must be positive"
.endif
# Chunks are whole multiples of the vector unit's width, and the six buffers (a, b, y, two slots) fit in VMEM.
.set CH_VMEM, (VMEM_BYTES / (6 * E) / VPU_WIDTH) * VPU_WIDTH
.set CH, min(align(N, VPU_WIDTH), min(CH_VMEM, 4096 * VPU_WIDTH))
.set SLOT, align(CH * E, 64)
.set VB0, 2 * SLOT
.set VY0, 4 * SLOT

.input a, DT, [N]
.input b, DT, [N]
.output y, DT, [N]

.reg i0, r1
.reg n, r2
.reg slot, r3
.reg one, r4
.reg va, r5
.reg vb, r6
.reg vy, r7
.reg t0, r8
.reg t1, r9
.reg t2, r10

    sem.set s1, 2
    sem.set s2, 0
    sem.set s3, 2
    sem.set s4, 0
    li one, 1
    li slot, 0
    li i0, 0
chunk:
    li t0, N
    sub n, t0, i0
    li t0, CH
    min n, n, t0
    muli va, slot, SLOT
    addi vb, va, VB0
    addi vy, va, VY0
    muli t0, i0, E
    muli t2, n, E
    li t1, a
    add t1, t0, t1
    dma.ld va, t1, one, t2, t2, t2, wait=s1
    li t1, b
    add t1, t0, t1
    dma.ld vb, t1, one, t2, t2, t2, signal=s2
    vpu.sync wait=s3
    vpu.add vy, va, vb, n, DT, wait=s2, signal=s1
    vpu.sync signal=s4
    li t1, y
    add t1, t0, t1
    dma.st t1, vy, one, t2, t2, t2, wait=s4, signal=s3
    sub slot, one, slot
    addi i0, i0, CH
    li t0, N
    blt i0, t0, chunk
