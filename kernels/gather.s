# gather.s: y[M, D] = table[ids[m], :], an embedding lookup with indices known only at run time.
#
# Defines (-D NAME=VALUE; defaults below):
#   M           rows to gather (ids' length; required)
#   D           elements per table row (required)
#   V           rows of the table (required): an id < 0 or >= V is a run-time error naming it (dma.gather's count)
#   DT          element type of table and y: DT_BF16 (default) or DT_F32 (any type works: rows are copied bytes)
#   SHARE_CORES the cores that share the rows (default 1; an SPMD program of that many cores): core c takes
#               chunks c, c + P, c + 2P, ... of at most ceil(M / P) rows; a core with no chunk skips the kernel.
#               Every row is gathered by the same instructions either way: the results do not depend on P.
#   VMEM_BYTES: the chip (tpusim passes it from the config)
# Tensors: inputs ids (i32 [M]) and table (DT [V, D]); output y (DT [M, D]).
#
# Schedule: chunks of CH rows, double-buffered as in cast.s. dmain loads the ids of chunk i+1 while it gathers
# chunk i (dma.gather reads its indices when it starts, so an ids slot may be refilled as soon as the gather that
# used it has been issued: the load queue is in order); dmaout stores chunk i-1. Semaphores: s1 Y slot free,
# s2 ids of a chunk loaded (loads complete in order, so the i-th wait consumes chunk i's), s4 Y slot full.
.name "gather"
.default DT, DT_BF16
.default SHARE_CORES, 1
.cores SHARE_CORES
.set E, sizeof(DT)
.set RB, D * E
.if M < 1 || D < 1 || V < 1
.error "gather.s: M, D and V must be positive"
.endif
# Chunks of up to 128 KiB of rows (fewer, longer transfers hide dma.latency), all four buffers in VMEM, all
# chunks of the same size.
.set CH_MAX, min(max(131072 / RB, 1), (VMEM_BYTES - 256) / (2 * (RB + 4)))
.if CH_MAX < 1
.error "gather.s: two rows of the table do not fit in VMEM"
.endif
.if SHARE_CORES < 1
.error "gather.s: SHARE_CORES must be at least 1"
.endif
.set CH_ONE, min(CH_MAX, cdiv(M, SHARE_CORES))
.set CH, cdiv(M, cdiv(M, CH_ONE))
.set I_BYTES, align(CH * 4, 64)
.set Y_BYTES, align(CH * RB, 64)
.set VY0, 2 * I_BYTES

.input ids, DT_I32, [M]
.input table, DT, [V, D]
.output y, DT, [M, D]

.reg i0, r1
.reg n, r2
.reg slot, r3
.reg one, r4
.reg vi, r5
.reg vy, r6
.reg t0, r7
.reg t1, r8
.reg t2, r9
.reg rb, r10
.reg count, r11
.reg tab, r12
.reg nn, r13
.reg vin, r14

    sem.set s1, 2
    sem.set s2, 0
    sem.set s4, 0
    li one, 1
    li rb, RB
    li count, V
    li tab, table
    li slot, 0
.if SHARE_CORES > 1
    core.id t0
    muli i0, t0, CH
    li t1, M
    bge i0, t1, done
.else
    li i0, 0
.endif
    # the ids of this core's first chunk into ids slot 0
    li t0, M
    sub n, t0, i0
    li t1, CH
    min n, n, t1
    li vi, 0
    muli t0, i0, 4
    li t1, ids
    add t0, t0, t1
    muli t2, n, 4
    dma.ld vi, t0, one, t2, t2, t2, signal=s2
chunk:
    li t0, M
    sub n, t0, i0
    li t0, CH
    min n, n, t0
    muli vi, slot, I_BYTES
    muli vy, slot, Y_BYTES
    addi vy, vy, VY0
    # prefetch the ids of this core's next chunk into the other ids slot (its gather, this core's previous
    # chunk, was issued before)
    addi t0, i0, CH * SHARE_CORES
    li t1, M
    bge t0, t1, gather
    sub nn, t1, t0
    li t1, CH
    min nn, nn, t1
    muli t0, t0, 4
    li t1, ids
    add t0, t0, t1
    li vin, I_BYTES
    sub vin, vin, vi
    muli t2, nn, 4
    dma.ld vin, t0, one, t2, t2, t2, signal=s2
gather:
    dmain.sync wait=s1
    dma.gather vy, tab, vi, n, rb, rb, count, wait=s2, signal=s4
    muli t0, i0, RB
    li t1, y
    add t0, t0, t1
    muli t2, n, RB
    dma.st t0, vy, one, t2, t2, t2, wait=s4, signal=s1
    sub slot, one, slot
    addi i0, i0, CH * SHARE_CORES
    li t0, M
    blt i0, t0, chunk
done:
