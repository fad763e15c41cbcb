# Every directive and expression form, for the fuzzer to start from.
.name "all \"directives\"\x01"
.include "inc.s"
.default DT, DT_BF16
.set E, sizeof(DT) * INC
.equ F, (E << 3) | 5 ^ 2 & 0xff
.if defined(NOPE) || F >= 10 && !(E == 3)
.set G, cdiv(F, 3) % 7
.elif F != 0
.set G, -min(F, 2)
.else
.error "unreachable"
.endif
.input a, DT, [4, 8]
.input v, f32, [16] @ vmem 0x100
.const w, i8, [3]
.data "0a0b0c"
.const k, i32, [2] @ 0x9000
.data "01000000ff000000"
.output c, f32, [4, 4] @ 0x40000
.reg acc, r7
.region node, "n0", flops=12, bytes=3.5e3
top:
  li acc, f32(-0.25)
  li r2, a
  li r3, align(E * 100, 64)
.region kernel, "k0"
  dma.ld r1, r2, r3, r4, r5, r6, signal=s1
  mxu.lw r1, r2, r3, r4, bf16, trans, wait=s1
  mxu.mm r1, r2, r3, r4, i8, accumulate, wait=s2
  vpu.add r1, r2, r3, r4, f32, wait=s3, signal=s4
.endregion
  sem.set s4, 0
  blt acc, r0, top
.endregion
  halt
