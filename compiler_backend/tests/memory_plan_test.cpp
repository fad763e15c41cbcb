// HBM memory planning (memory_plan.h): declared tensors first, each aligned; intermediates placed first-fit and
// their space reused once their last reader has run; a plan beyond the chip's HBM is a clear error.
#include <random>

#include <gtest/gtest.h>

#include "memory_plan.h"
#include "tpusim/compiler/compiler.h"

namespace tpusim::compiler {
namespace {

Buffer buffer(const std::string& name, Buffer::Kind kind, int64_t bytes) {
  Buffer b;
  b.name = name, b.kind = kind, b.dtype = isa::DType::I8, b.shape = {bytes};
  return b;
}

// A call that touches the given buffers.
KernelCall call(std::initializer_list<int> bufs) {
  KernelCall c;
  int i = 0;
  for (int b : bufs) c.tensors["t" + std::to_string(i++)] = b;
  return c;
}

// Three declared tensors and four intermediates: a lives in calls 0..1, b in 1..2, c in 2..3, d in 3..3.
KernelPlan four_calls() {
  KernelPlan p;
  p.buffers = {buffer("x", Buffer::Kind::Input, 100),     buffer("y", Buffer::Kind::Output, 5000),
               buffer("w", Buffer::Kind::Const, 4096),    buffer("a", Buffer::Kind::Temp, 10000),
               buffer("b", Buffer::Kind::Temp, 3000),     buffer("c", Buffer::Kind::Temp, 9000),
               buffer("d", Buffer::Kind::Temp, 20000)};
  p.calls = {call({0, 3}), call({3, 4, 2}), call({4, 5}), call({5, 6, 1})};
  return p;
}

TEST(MemoryPlan, DeclaredTensorsFirstThenTempsReusedAfterTheirLastReader) {
  KernelPlan p = four_calls();
  const uint64_t total = plan_memory(p, 1 << 20, {}, {}, "m");
  // Declared, in kind order (inputs, outputs, constants), each on a 4096-byte boundary: x [0, 100), y at 4096
  // (5000 bytes, next at 12288), w at 12288 (ends 16384). Temps from 16384, sizes rounded up to 4096:
  //   call 0: a (12288 bytes) at 16384.  call 1: b (4096) at 28672; a's last call: freed.
  //   call 2: c (12288 bytes) first fit: a's old block [16384, 28672) fits exactly -> 16384; then b is freed,
  //           and its block [28672, 32768) merges with the free space above it.
  //   call 3: d (20480 bytes) -> 28672. The highest end: 28672 + 20000 = 48672.
  EXPECT_EQ(p.buffers[0].addr, 0u);
  EXPECT_EQ(p.buffers[1].addr, 4096u);
  EXPECT_EQ(p.buffers[2].addr, 12288u);
  EXPECT_EQ(p.buffers[3].addr, 16384u);
  EXPECT_EQ(p.buffers[4].addr, 28672u);
  EXPECT_EQ(p.buffers[5].addr, 16384u);  // reuses a's space: a's last reader (call 1) has run
  EXPECT_EQ(p.buffers[6].addr, 28672u);  // b's space, merged with the free space above it
  EXPECT_EQ(total, 48672u);
}

// The same plan with reuse_after = 2 (a chip of several cores): a buffer's bytes are placed again only from the
// second call after its last one. a (last call 1) is free only from call 4 on (after call 3's buffers are
// placed): c (first named by call 2) goes above b, at 32768 (b: [28672, 32768)), and d (call 3) past c, at
// 32768 + 12288 = 45056, ending at 65056.
TEST(MemoryPlan, ReuseAfterKeepsFreedBytesFromTheNextCalls) {
  KernelPlan p = four_calls();
  const uint64_t total = plan_memory(p, 1 << 20, {}, {}, "m", 2);
  EXPECT_EQ(p.buffers[3].addr, 16384u);
  EXPECT_EQ(p.buffers[4].addr, 28672u);
  EXPECT_EQ(p.buffers[5].addr, 32768u);  // not a's: a's last reader is call 1, and call 2 comes right after it
  EXPECT_EQ(p.buffers[6].addr, 45056u);
  EXPECT_EQ(total, 65056u);
  // no two buffers alive at once, or within two calls of one another's lives, share a byte
  for (size_t i = 3; i < p.buffers.size(); ++i)
    for (size_t j = i + 1; j < p.buffers.size(); ++j) {
      const Buffer &u = p.buffers[i], &v = p.buffers[j];
      EXPECT_TRUE(u.addr + u.bytes() <= v.addr || v.addr + v.bytes() <= u.addr) << u.name << " " << v.name;
    }
}

TEST(MemoryPlan, TempsAliveTogetherNeverOverlap) {
  // Random plans: every pair of intermediates whose live ranges share a call must have disjoint bytes, every
  // address is aligned and above the declared tensors, and the total is the end of the highest buffer.
  std::mt19937 rng(7);
  auto uni = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  for (int rep = 0; rep < 200; ++rep) {
    KernelPlan p;
    const int declared = uni(1, 4), temps = uni(1, 12), calls = uni(1, 10);
    for (int i = 0; i < declared; ++i) p.buffers.push_back(buffer("in" + std::to_string(i), Buffer::Kind::Input, uni(1, 9000)));
    for (int i = 0; i < temps; ++i) p.buffers.push_back(buffer("t" + std::to_string(i), Buffer::Kind::Temp, uni(1, 30000)));
    std::vector<int> first(temps), last(temps);
    for (int i = 0; i < temps; ++i) {
      first[i] = uni(0, calls - 1), last[i] = uni(first[i], calls - 1);
    }
    p.calls.resize(calls);
    for (int i = 0; i < temps; ++i) {
      p.calls[first[i]].tensors["t" + std::to_string(i)] = declared + i;
      p.calls[last[i]].tensors["t" + std::to_string(i)] = declared + i;
    }
    // Every other plan has a shared memory (possibly too small for any intermediate).
    // Every other plan has a shared memory, every third a part of VMEM (either possibly too small for any).
    const uint64_t shared = rep % 2 ? static_cast<uint64_t>(uni(0, 60000)) : 0;
    const uint64_t local = rep % 3 ? 0 : static_cast<uint64_t>(uni(0, 40000));
    const uint64_t local_base = isa::kLocalWindow + (uint64_t{1} << 20);
    const uint64_t total = plan_memory(p, uint64_t(1) << 40, {local_base, local}, {isa::kSharedWindow, shared}, "m");
    uint64_t declared_end = 0, highest = 0;
    for (int i = 0; i < declared; ++i) declared_end = p.buffers[i].addr + p.buffers[i].bytes();
    for (const Buffer& b : p.buffers) {
      EXPECT_EQ(b.addr % kHbmAlign, 0u);
      if (b.addr >= isa::kSharedWindow)  // in the shared memory: within it
        EXPECT_LE(b.addr + b.bytes(), isa::kSharedWindow + shared);
      else if (b.addr >= isa::kLocalWindow)  // in VMEM: within the part given
        EXPECT_TRUE(b.addr >= local_base && b.addr + b.bytes() <= local_base + local) << b.addr;
      else
        highest = std::max(highest, b.addr + b.bytes());
    }
    EXPECT_EQ(total, highest);
    for (int i = 0; i < temps; ++i) {
      const Buffer& a = p.buffers[declared + i];
      EXPECT_GE(a.addr, declared_end);
      for (int j = i + 1; j < temps; ++j) {
        const Buffer& b = p.buffers[declared + j];
        const bool alive_together = first[i] <= last[j] && first[j] <= last[i];
        const bool overlap = a.addr < b.addr + b.bytes() && b.addr < a.addr + a.bytes();
        EXPECT_FALSE(alive_together && overlap) << "rep " << rep << ": temps " << i << " and " << j;
      }
    }
  }
}

TEST(MemoryPlan, IntermediatesGoOnChipWhereTheyFit) {
  KernelPlan p;
  p.buffers = {buffer("x", Buffer::Kind::Input, 100),   buffer("a", Buffer::Kind::Temp, 10000),
               buffer("b", Buffer::Kind::Temp, 3000),   buffer("c", Buffer::Kind::Temp, 9000),
               buffer("d", Buffer::Kind::Temp, 20000)};
  // a lives in calls 0..1, b in 1..2, c in 2..3, d in 3..3; 16384 bytes of shared memory. Sizes rounded up to
  // 4096: a 12288, b 4096, c 12288, d 20480.
  //   call 0: a at shared offset 0.  call 1: b at 12288 (ends at 16384: fits); a's last call: freed.
  //   call 2: c in a's old block, offset 0.  call 3: d (20480) fits nowhere below 16384: HBM, after x (4096).
  p.calls = {call({0, 1}), call({1, 2}), call({2, 3}), call({3, 4})};
  const uint64_t W = isa::kSharedWindow;
  EXPECT_EQ(plan_memory(p, 1 << 20, {}, {isa::kSharedWindow, 16384}, "m"), 4096u + 20000u);  // HBM: x, then d
  EXPECT_EQ(p.buffers[0].addr, 0u);
  EXPECT_EQ(p.buffers[1].addr, W);
  EXPECT_EQ(p.buffers[2].addr, W + 12288);
  EXPECT_EQ(p.buffers[3].addr, W);
  EXPECT_EQ(p.buffers[4].addr, 4096u);
  // With 4096 bytes of VMEM as well, taken first: a (12288) does not fit it (shared, 0); b does (VMEM, 0); then
  // c: VMEM is b's (shared, 0); d: HBM as before.
  const uint64_t L = isa::kLocalWindow + 8192;
  EXPECT_EQ(plan_memory(p, 1 << 20, {L, 4096}, {W, 16384}, "m"), 4096u + 20000u);
  EXPECT_EQ(p.buffers[1].addr, W);
  EXPECT_EQ(p.buffers[2].addr, L);
  EXPECT_EQ(p.buffers[3].addr, W);
  EXPECT_EQ(p.buffers[4].addr, 4096u);
  // Without a shared memory the same plan is all HBM: a at 4096, b at 16384, c at 4096, d at 16384.
  EXPECT_EQ(plan_memory(p, 1 << 20, {}, {}, "m"), 16384u + 20000u);
  EXPECT_EQ(p.buffers[4].addr, 16384u);
}

TEST(MemoryPlan, BeyondTheChipsHbmIsAnError) {
  KernelPlan p;
  p.buffers = {buffer("x", Buffer::Kind::Input, 4096), buffer("t", Buffer::Kind::Temp, 8192)};
  p.calls = {call({0, 1})};
  EXPECT_EQ(plan_memory(p, 12288, {}, {}, "net"), 12288u);  // exactly full: fine
  try {
    plan_memory(p, 12287, {}, {}, "net");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "net: model needs 12288 bytes of HBM, the chip has 12287");
  }
}

}  // namespace
}  // namespace tpusim::compiler
