# colmean.s: y[c] = cast(f32(sum over r < ROWS of x[r][c]) * SCALE, DDT) for c < COLS: a global average pool's
# mean over an image's pixels (x [ROWS, COLS] bf16: ROWS pixels of COLS channels; SCALE the f32 bits of 1 / ROWS),
# on the vector unit, where a matrix unit would load a weight tile for every COLS / mxu.cols columns to stream one
# row through it.
#
# Defines: ROWS, COLS, DDT (the output's type, DT_*: bf16 or f32), SCALE (f32 bits, 0 = none), VMEM_BYTES.
# Schedule: the columns in chunks of CC (all of them where ROWS x COLS fits VMEM's quarter), one chunk at a time:
# dmain loads its ROWS x CC bf16 elements (rows COLS apart in x) packed into VMEM; the vector unit casts them to
# f32, then halves the rows until one is left: of n rows, the last floor(n / 2) are added onto the first floor(n /
# 2) (one vpu.add over that many rows of CC contiguous f32 elements), leaving ceil(n / 2); it casts that row times
# SCALE to DDT (one vpu.cast) and dmaout stores it. The sums are f32 in that fixed order: row r's element
# reaches row 0 through the halvings, the same order for every column, whatever CC. Semaphores: s1 the chunk's x
# loaded, s2 its mean cast, s3 the y buffer free (its store done), s4 the x buffer free (its cast to f32 done); no
# fence (the weight stream's background loads go on past the kernel).
.name "colmean"
.default DDT, DT_BF16
.default SCALE, 0
.if ROWS < 1 || COLS < 1
.error "colmean.s: ROWS and COLS must be positive"
.endif
.if DDT != DT_BF16 && DDT != DT_F32
.error "colmean.s: DDT must be DT_BF16 or DT_F32"
.endif
.set DE, sizeof(DDT)
# a chunk's bytes per column: ROWS bf16, ROWS f32, one DDT (each region 64-aligned: 192 bytes of slack)
.set CC_VMEM, (VMEM_BYTES - 192) / (6 * ROWS + DE)
.if CC_VMEM < 1
.error "colmean.s: one column of ROWS rows does not fit VMEM"
.endif
.set CC, min(COLS, CC_VMEM)
.set VX, 0
.set VF, align(ROWS * CC * 2, 64)
.set VY, VF + align(ROWS * CC * 4, 64)

.input x, DT_BF16, [ROWS, COLS]
.output y, DDT, [COLS]

.reg c0, r1
.reg nc, r2
.reg one, r3
.reg t0, r4
.reg t1, r5
.reg t2, r6
.reg n, r7
.reg h, r8
.reg vb, r9
.reg cnt, r10
.reg scale, r11
.reg vx, r12
.reg vf, r13
.reg vy, r14
.reg rows, r15

    sem.set s1, 0
    sem.set s2, 0
    sem.set s3, 1
    sem.set s4, 1
    li one, 1
    li scale, SCALE
    li rows, ROWS
    li vx, VX
    li vf, VF
    li vy, VY
    li c0, 0
chunk:
    li t0, COLS
    sub nc, t0, c0
    li t0, CC
    min nc, nc, t0
    # x[:, c0 .. c0 + nc] packed: ROWS rows of nc bf16, COLS * 2 bytes apart in x
    muli t0, c0, 2
    li t1, x
    add t0, t0, t1
    muli t2, nc, 2
    li t1, COLS * 2
    dma.ld vx, t0, rows, t2, t1, t2, wait=s4, signal=s1
    mul cnt, nc, rows
    vpu.cast vf, vx, cnt, r0, DT_BF16, DT_F32, wait=s1, signal=s4
    li n, ROWS
half:
    bge one, n, summed
    shr h, n, one
    # rows [n - h, n) onto rows [0, h)
    sub t0, n, h
    mul t0, t0, nc
    muli t0, t0, 4
    add vb, vf, t0
    mul cnt, h, nc
    vpu.add vf, vf, vb, cnt, DT_F32
    sub n, n, h
    jmp half
summed:
    vpu.cast vy, vf, nc, scale, DT_F32, DDT, scale_en=(SCALE != 0), wait=s3, signal=s2
    muli t0, c0, DE
    li t1, y
    add t0, t0, t1
    muli t2, nc, DE
    dma.st t0, vy, one, t2, t2, t2, wait=s2, signal=s3
    add c0, c0, nc
    li t0, COLS
    blt c0, t0, chunk
    halt
