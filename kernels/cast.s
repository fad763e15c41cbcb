# cast.s: y[N] = cast(x[N], DDT), optionally scaled: y = cast(f32(x) * SCALE) (round to nearest even,
# saturating to integers; see docs/isa.md, vpu.cast).
#
# Defines: N (elements), SDT and DDT (data types, DT_*), SCALE (f32 bits, 0 = none), VMEM_BYTES, VPU_WIDTH;
# SHARE_CORES (default 1): the cores that share the elements (an SPMD program of that many cores).
# Schedule: chunks of CH elements, double-buffered: dmain loads chunk i+1 while the vector unit casts chunk i
# and dmaout stores chunk i-1. Semaphores: s1 X slot free, s2 X slot full, s3 Y slot free, s4 Y slot full.
# With SHARE_CORES = P > 1, core c (core.id) takes chunks c, c + P, c + 2P, ... of at most ceil(N / P) elements
# each (rounded up to the vector unit's width), so every core gets work where N allows; a core with no chunk
# skips the kernel. Each element is cast by the same instruction either way: the results do not depend on P.
.name "cast"
.default SCALE, 0
.default SHARE_CORES, 1
.cores SHARE_CORES
.set SE, sizeof(SDT)
.set DE, sizeof(DDT)
.if N < 1
.error "cast.s: N must be positive"
.endif
.if SHARE_CORES < 1
.error "cast.s: SHARE_CORES must be at least 1"
.endif
# Chunks are whole multiples of the vector unit's width, and all four buffers fit in VMEM.
.set CH_VMEM, (VMEM_BYTES / (2 * (SE + DE)) / VPU_WIDTH) * VPU_WIDTH
.set CH, min(align((N + SHARE_CORES - 1) / SHARE_CORES, VPU_WIDTH), min(CH_VMEM, 64 * VPU_WIDTH))
.set X_BYTES, align(CH * SE, 64)
.set Y_BYTES, align(CH * DE, 64)
.set VY0, 2 * X_BYTES

.input x, SDT, [N]
.output y, DDT, [N]

.reg i0, r1
.reg n, r2
.reg slot, r3
.reg one, r4
.reg vx, r5
.reg vy, r6
.reg t0, r7
.reg t1, r8
.reg t2, r9
.reg scale, r10

    sem.set s1, 2
    sem.set s2, 0
    sem.set s3, 2
    sem.set s4, 0
    li one, 1
    li scale, SCALE
    li slot, 0
.if SHARE_CORES > 1
    core.id t0
    muli i0, t0, CH
    li t0, N
    bge i0, t0, done
.else
    li i0, 0
.endif
chunk:
    li t0, N
    sub n, t0, i0
    li t0, CH
    min n, n, t0
    muli vx, slot, X_BYTES
    muli vy, slot, Y_BYTES
    addi vy, vy, VY0
    muli t0, i0, SE
    li t1, x
    add t0, t0, t1
    muli t2, n, SE
    dma.ld vx, t0, one, t2, t2, t2, wait=s1, signal=s2
    vpu.sync wait=s3
    vpu.cast vy, vx, n, scale, SDT, DDT, scale_en=(SCALE != 0), wait=s2, signal=s1
    vpu.sync signal=s4
    muli t0, i0, DE
    li t1, y
    add t0, t0, t1
    muli t2, n, DE
    dma.st t0, vy, one, t2, t2, t2, wait=s4, signal=s3
    sub slot, one, slot
    addi i0, i0, CH * SHARE_CORES
    li t0, N
    blt i0, t0, chunk
done:
