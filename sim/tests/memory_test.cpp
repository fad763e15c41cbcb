// The memory system's timing, exact cycles with their arithmetic. small_config() (test_util.h) is the edge preset
// shrunk: HBM 16 GB/s at 500 MHz = 32 bytes per cycle over edge's 4 channels = 8 bytes per cycle per channel;
// interleaving 64 bytes (address x: chunk u = x / 64, bank (u / 4) % 8, channel (u + u / 4) % 4, or u % 4 with
// hbm.channel_skew=0, which the conflict tests set); tRC 60 ns = 30 cycles;
// dma.latency 10; one engine per DMA queue; VMEM 8 banks, 64-byte grains, 64 bytes per cycle per port; VPU 8
// elements per cycle, latency 2. A program's cycles = last completion + 1 (the halt); a unit starts an
// instruction the cycle after its dispatch.
#include <gtest/gtest.h>

#include <algorithm>
#include <list>
#include <random>

#include "memory.h"
#include "test_util.h"

namespace tpusim::sim::test {
namespace {

constexpr int64_t kI8 = static_cast<int64_t>(isa::DType::I8), kI32 = static_cast<int64_t>(isa::DType::I32);
const int kDmaIn = static_cast<int>(isa::Unit::DmaIn);

// One dma.ld of `rows` rows of 64 bytes, `hstride` apart in HBM, to VMEM 0: 4 li (cycles 0-3), dispatched at 4,
// starts at 5, data from 15.
uint64_t strided_load_cycles(Chip& chip, int64_t rows, int64_t hstride) {
  ProgramBuilder b;
  b.li(3, rows).li(4, 64).li(5, hstride).li(6, 64);
  b.op(Op::DMALD, {0, 0, 3, 4, 5, 6});
  return chip.run(b.build()).stats.cycles;
}

// CacheTags: 2 sets x 2 ways of 64-byte lines (256 bytes); line l goes to set l % 2.
TEST(Memory, CacheTagsKeepTheMostRecentlyUsedLines) {
  detail::CacheTags c(256, 64, 2);
  EXPECT_FALSE(c.access(0));  // set 0: {0}
  EXPECT_FALSE(c.access(2));  // set 0: {0, 2}
  EXPECT_TRUE(c.access(0));   // 0 is now the most recent
  EXPECT_FALSE(c.access(4));  // evicts 2, the least recently used
  EXPECT_TRUE(c.access(0));
  EXPECT_FALSE(c.access(2));  // 2 was evicted; evicts 4
  EXPECT_FALSE(c.access(1));  // set 1 is independent
  EXPECT_TRUE(c.access(2));
  EXPECT_FALSE(c.access(4));
  c.reset();                  // empty again
  EXPECT_FALSE(c.access(0));
  EXPECT_FALSE(c.access(1));
}

// CacheTags with the hash: 16 sets x 4 ways (64 lines). Each block of 16 consecutive lines is rotated over the sets,
// so a stream of exactly 64 lines puts 4 in every set and is all held when read again; a stream of 80 puts 5 in
// every set, and reading it again in the same order hits nothing (each set's least recently used line is always
// the next one wanted), as an L2 that spreads a stream evenly thrashes once the stream exceeds it. (A hash of each
// line on its own would fill some sets past 4 and leave others short: some of the 64 would miss, some of the 80
// would hit.) 32 lines 16 apart, one per block, all fall in set 0 without the hash, and reading them again hits
// none of them; with it their blocks' rotations spread them over the sets, and some are held.
TEST(Memory, CacheTagsHashSpreadsAStreamEvenlyOverTheSets) {
  auto hits = [](detail::CacheTags& c, uint64_t lines, uint64_t stride) {
    int n = 0;
    for (uint64_t l = 0; l < lines; ++l) n += c.access(l * stride);
    return n;
  };
  detail::CacheTags c(64 * 64, 64, 4, true);
  EXPECT_EQ(hits(c, 64, 1), 0);
  EXPECT_EQ(hits(c, 64, 1), 64);
  c.reset();
  EXPECT_EQ(hits(c, 80, 1), 0);
  EXPECT_EQ(hits(c, 80, 1), 0);
  detail::CacheTags plain(64 * 64, 64, 4, false), hashed(64 * 64, 64, 4, true);
  hits(plain, 32, 16), hits(hashed, 32, 16);
  EXPECT_EQ(hits(plain, 32, 16), 0);
  EXPECT_GT(hits(hashed, 32, 16), 0);
}

// CacheTags against a plain least-recently-used model written apart from it (each set a list, most recent first;
// the set of line l: l % sets, or with the hash l's block number mixed by splitmix64's finalizer added to it): the
// same hits on a million random accesses over lines up to 2^36 (tags of 32 bits are block numbers, l / sets, and
// place a line by multiplication rather than division), with sets that are not a power of two, as h200-like's 25,600.
TEST(Memory, CacheTagsAreLeastRecentlyUsedAgainstAListModel) {
  for (bool hash : {false, true}) {
    const uint64_t line = 128, ways = 16, sets = 25, hbm = uint64_t(1) << 43;
    detail::CacheTags c(sets * ways * line, line, static_cast<int>(ways), hash, hbm);
    std::vector<std::list<uint64_t>> model(sets);
    auto set_of = [&](uint64_t l) {
      if (!hash) return l % sets;
      uint64_t h = l / sets;
      h ^= h >> 30, h *= 0xbf58476d1ce4e5b9ULL;
      h ^= h >> 27, h *= 0x94d049bb133111ebULL;
      h ^= h >> 31;
      return (l % sets + h % sets) % sets;
    };
    std::mt19937_64 rng(7);
    uint64_t hits = 0, agree = 0, n = 1000000;
    for (uint64_t i = 0; i < n; ++i) {
      // mostly a few hundred lines (so that sets fill, hit and evict), sometimes anywhere below 2^36
      const uint64_t l = rng() % 8 ? rng() % 600 + (uint64_t(1) << 35) : rng() % (uint64_t(1) << 36);
      auto& s = model[set_of(l)];
      auto it = std::find(s.begin(), s.end(), l);
      const bool want = it != s.end();
      if (want) s.erase(it);
      s.push_front(l);
      if (s.size() > ways) s.pop_back();
      if (i == n / 2) {  // an empty cache again, in both
        c.reset();
        for (auto& m : model) m.clear();
        continue;
      }
      hits += want, agree += c.access(l) == want;
    }
    EXPECT_EQ(agree, n - 1) << "hash " << hash;
    EXPECT_GT(hits, n / 4) << "hash " << hash;  // the stream hits and misses both, often (about 48% hits)
    EXPECT_LT(hits, n - n / 4) << "hash " << hash;
  }
  // Tags of 32 bits: 2^32 lines per set at most, so too few sets for HBM's lines is an error that says so.
  try {
    detail::CacheTags tiny(1024, 1, 1024, false, uint64_t(1) << 40);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("too few for 1048576 MiB of HBM"), std::string::npos) << e.what();
  }
}

TEST(Memory, SingleTransferUsesEveryChannel) {
  Chip chip(small_config());
  ProgramBuilder b;
  b.li(1, 1).li(2, 4096);
  b.op(Op::DMALD, {0, 0, 1, 2, 0, 0});
  RunResult r = chip.run(b.build());
  // 4096 contiguous bytes = 64 chunks, 16 per channel = 1024 bytes at 8 bytes per cycle = 128 cycles (the same as
  // 4096 / 32 over the whole HBM). Each channel's 16 chunks fall in its 8 banks, 2 each: (2 - 1) * 30 + 64 / 8 =
  // 38 cycles < 128, no bank limit. Dispatched 2, starts 3, data [13, 141); halt: 142.
  EXPECT_EQ(r.stats.cycles, 142u);
  EXPECT_EQ(r.stats.units[kDmaIn].busy_cycles, 138u);  // [3, 141)
}

TEST(Memory, RowsOnOneChannelAreFourTimesSlower) {
  Chip chip(small_config({"hbm.channel_skew=0"}));
  // 4 rows of 64 bytes 256 bytes apart: chunks 0, 4, 8, 12, all on channel 0 (banks 0-3): 256 bytes at 8 bytes
  // per cycle = 32 cycles instead of 8. Data [15, 47); halt: 48.
  EXPECT_EQ(strided_load_cycles(chip, 4, 256), 48u);
  // The same rows 64 bytes apart (contiguous) spread over the 4 channels: data [15, 23); halt: 24.
  EXPECT_EQ(strided_load_cycles(chip, 4, 64), 24u);
  // A stride of 3 chunks (192 bytes) visits channels 0, 3, 2, 1, 0, 3, 2, 1: 8 rows = 2 per channel = 128 bytes =
  // 16 cycles. Data [15, 31); halt: 32.
  EXPECT_EQ(strided_load_cycles(chip, 8, 192), 32u);
}

TEST(Memory, RowsOnOneBankWaitForTheRowCycle) {
  Chip chip(small_config({"hbm.channel_skew=0"}));
  // 4 rows 2048 bytes apart (= 4 channels x 8 banks x 64 bytes): all in channel 0, bank 0. The channel needs
  // 256 / 8 = 32 cycles, the bank (4 - 1) * tRC 30 + 64 / 8 = 98. Data [15, 113); halt: 114.
  EXPECT_EQ(strided_load_cycles(chip, 4, 2048), 114u);
  // 64 rows 4096 bytes apart (a multiple of the 2048-byte period: counted once, times 64): 63 * 30 + 8 = 1898
  // cycles. Data [15, 1913); halt: 1914.
  EXPECT_EQ(strided_load_cycles(chip, 64, 4096), 1914u);
}

TEST(Memory, BroadcastLoadReadsItsRowOnce) {
  Chip chip(small_config({"hbm.channel_skew=0"}));
  // 64 repeats (hstride 0) of one 64-byte row: HBM serves the row once, 64 bytes at 8 bytes per cycle on
  // channel 0 = 8 cycles (not 64 * 64 bytes = 512 cycles on that one channel); VMEM takes the 64 rows (4096
  // bytes, 64 apart: all 8 banks) in 4096 / (8 * 64) = 8 cycles too. Data [15, 23); halt: 24.
  EXPECT_EQ(strided_load_cycles(chip, 64, 0), 24u);
  EXPECT_EQ(strided_load_cycles(chip, 1, 0), 24u);
}

TEST(Memory, ChannelSkewSpreadsPowerOfTwoStrides) {
  Chip chip(small_config());
  // 4 rows 256 bytes apart: chunks 0, 4, 8, 12 go to channels (u + u / 4) % 4 = 0, 1, 2, 3: 8 cycles, as if
  // contiguous. Data [15, 23); halt: 24.
  EXPECT_EQ(strided_load_cycles(chip, 4, 256), 24u);
  // 4 rows 1024 bytes apart (16 chunks = 4 x 4): chunks 0, 16, 32, 48 go to channels 0, 4 % 4, 8 % 4, 12 % 4 =
  // all 0, banks 0, 4, 0, 4: the channel needs 32 cycles, banks 0 and 4 two chunks each: 30 + 8 = 38.
  // Data [15, 53); halt: 54.
  EXPECT_EQ(strided_load_cycles(chip, 4, 1024), 54u);
}

TEST(Memory, TwoConcurrentStreamsShareTheBandwidth) {
  // Two dma.ld of B = 4096 bytes (128 cycles each at 32 bytes per cycle) to different VMEM addresses.
  ProgramBuilder b;
  b.li(1, 1).li(2, 4096).li(7, 4096);
  b.op(Op::DMALD, {0, 0, 1, 2, 0, 0});  // dispatched 3, starts 4, data [14, 142)
  b.op(Op::DMALD, {7, 7, 1, 2, 0, 0});  // dispatched 4
  Chip two(small_config({"dma.engines=2"})), one(small_config());  // both before the first run (SystemC)
  // Two engines: the second starts at 5, its latency overlaps the first's data, but every channel is busy until
  // 142: data [142, 270) = 2B / bandwidth after the first byte, not B / bandwidth. Halt: 271.
  RunResult r = two.run(b.build());
  EXPECT_EQ(r.stats.cycles, 271u);
  EXPECT_EQ(r.stats.units[kDmaIn].busy_cycles, 266u);  // [4, 270): busy while anything is in flight
  // One engine: the second starts when the first completes (142); data [152, 280); halt: 281.
  EXPECT_EQ(one.run(b.build()).stats.cycles, 281u);
}

TEST(Memory, EnginesOverlapLatencyOfSmallTransfers) {
  // Four dma.ld of 256 bytes (8 data cycles each) at addresses 0, 256, 512, 768, dispatched at 5, 6, 7, 8.
  ProgramBuilder b;
  b.li(1, 1).li(2, 256).li(3, 256).li(4, 512).li(5, 768);
  for (int a : {0, 3, 4, 5}) b.op(Op::DMALD, {a, a, 1, 2, 0, 0});
  Chip one(small_config()), four(small_config({"dma.engines=4"}));
  // One engine: each takes 10 + 8 = 18 cycles after the previous one: [6, 24), [24, 42), [42, 60), [60, 78);
  // halt: 79.
  EXPECT_EQ(one.run(b.build()).stats.cycles, 79u);
  // Four engines: starts 6, 7, 8, 9; data from 16, 17, 18, 19 but the channels are busy: [16, 24), [24, 32),
  // [32, 40), [40, 48); completions in order; halt: 49.
  EXPECT_EQ(four.run(b.build()).stats.cycles, 49u);
}

TEST(Memory, SyncsTakeNoEngine) {
  // dma.ld A (256 bytes), dmain.sync, dma.ld B (256 bytes), with two engines. The sync moves nothing: it is in
  // flight until A completes, but takes no engine, so B starts beside A. A: dispatched 3, starts 4, data [14, 22);
  // the sync starts 5; B starts 6, data from 16, but the channels are busy until 22: [22, 30); halt: 31. (When a
  // sync took an engine, B started only when A and the sync retired, at 22: data [32, 40), halt 41; a tile's
  // loads with a sync before and after them then held a chip of 4 engines to one tile in flight.)
  ProgramBuilder b;
  b.li(1, 1).li(2, 256).li(3, 256);
  b.op(Op::DMALD, {0, 0, 1, 2, 0, 0});
  b.op(Op::DMAINSYNC, {});
  b.op(Op::DMALD, {3, 3, 1, 2, 0, 0});
  Chip two(small_config({"dma.engines=2"}));
  EXPECT_EQ(two.run(b.build()).stats.cycles, 31u);
}

// VMEM's bank ports serve a request in the free cycles from when it can start, around bookings made for later
// cycles (a matrix unit books its next stream's reads when the mm is issued, often for cycles ahead): 8 banks of
// 64-byte grains at 64 bytes per cycle, so 64 x c bytes at address 0 are c cycles of bank 0.
TEST(Memory, VmemPortsServeARequestBeforeALaterBooking) {
  detail::VmemPorts ports(small_config());
  auto bank0 = [&](uint64_t cycles) {
    detail::VmemPorts::Demand d = ports.demand();
    d[0] = 64 * cycles;
    return d;
  };
  EXPECT_EQ(ports.reserve(0, 100, bank0(10)), 110u);  // a stream booked for [100, 110)
  EXPECT_EQ(ports.reserve(5, 5, bank0(5)), 10u);      // [5, 10): before it, not after it (115)
  // 100 cycles from 10: [10, 100), then around [100, 110), the last 10 in [110, 120).
  EXPECT_EQ(ports.reserve(10, 10, bank0(100)), 120u);
  EXPECT_EQ(ports.reserve(10, 50, bank0(1)), 121u);   // bank 0 is busy from 5 to 120
  detail::VmemPorts::Demand other = ports.demand();
  other[1] = 64 * 3;
  EXPECT_EQ(ports.reserve(10, 50, other), 53u);       // bank 1 is free
  // Every other cycle busy from 130 to 150: 2 cycles from 130 (a DMA's VMEM side, booked at 148 backdated to its
  // data) take [131, 132) and [133, 134).
  for (uint64_t t = 130; t < 150; t += 2) ports.reserve(t, t, bank0(1));
  EXPECT_EQ(ports.reserve(148, 130, bank0(2)), 134u);
  // Many bookings later (those that ended are forgotten as time goes on), a bank still serves from its gaps.
  for (uint64_t t = 150; t < 400; t += 2) ports.reserve(t, t, bank0(1));
  EXPECT_EQ(ports.reserve(398, 397, bank0(2)), 400u);  // [397, 398) and [399, 400): 398 is booked
  EXPECT_EQ(ports.reserve(400, 400, bank0(7)), 407u);
}

TEST(Memory, VectorUnitLimitedByVmemPorts) {
  // Ports of 4 bytes per cycle. vpu.add of 64 i32 at va = vb = vd = 0: three 256-byte ranges, each over banks 0-3
  // (64 bytes each), so banks 0-3 move 192 bytes = 48 cycles. Dispatched 1, starts 2: VMEM [2, 50), result at
  // 50 + latency 2 = 52 (the lanes alone need 2 + 64 / 8 = 10); halt: 53.
  Chip chip(small_config({"vmem.port_bytes_per_cycle=4"}));
  ProgramBuilder b;
  b.li(1, 64);
  b.op(Op::VADD, {0, 0, 0, 1, kI32});
  EXPECT_EQ(chip.run(b.build()).stats.cycles, 53u);
}

TEST(Memory, DmaWaitsForVmemPortsHeldByTheVectorUnit) {
  Chip chip(small_config({"vmem.port_bytes_per_cycle=4"}));
  ProgramBuilder b;
  b.li(1, 64).li(3, 4).li(4, 64).li(5, 64);
  b.op(Op::VADD, {0, 0, 0, 1, kI32});   // dispatched 4, starts 5: banks 0-3 booked [5, 53), result at 55
  b.op(Op::DMALD, {0, 0, 3, 4, 5, 4});  // dispatched 5, starts 6, HBM data [16, 24)
  // At 24 the load books its 64 bytes on each of banks 0-3 (16 cycles at 4 bytes per cycle, backdated to
  // max(16, 24 - 16) = 16), but they are held until 53: [53, 69). Completion 69; halt: 70.
  // Alone it would complete at max(24, 16 + 16) = 32: slow ports limit a DMA too.
  EXPECT_EQ(chip.run(b.build()).stats.cycles, 70u);
}

TEST(Memory, MatrixUnitReadsHavePriorityAtTheVmemPorts) {
  // Ports of 4 bytes per cycle. An mxu.mm streams 64 rows of 4 i8 at stride 4 from VMEM 0: 256 bytes on banks
  // 0-3, booked from its stream start, 16 cycles per bank. A dma.ld of 256 bytes issued right after it books its
  // VMEM side on banks 0-3 too (destination 0) and must wait for the array's reads, or on banks 4-7
  // (destination 256) and need not: its transfer ends later in the first case. The mm itself is not delayed.
  Chip chip(small_config({"vmem.port_bytes_per_cycle=4"}));  // one chip per process: both programs run on it
  auto run = [&chip](int64_t dma_dst) {
    ProgramBuilder b;
    b.li(1, 4).li(2, 64).li(3, 0).li(4, 4).li(5, 256).li(6, 1).li(7, dma_dst);
    b.op(Op::MXULW, {3, 1, 1, 4, kI8});
    b.op(Op::MXUMM, {3, 2, 3, 4, kI8, 0});
    b.op(Op::DMALD, {7, 3, 6, 5, 5, 5});
    return chip.run(b.build(), RunOptions{false, true, 0});
  };
  RunResult same_banks = run(0), other_banks = run(256);
  auto end_of = [](const RunResult& r, isa::Unit unit, const char* mnemonic) {
    for (const auto& e : r.trace)
      if (e.unit == unit && e.kind == "busy" && e.name.rfind(mnemonic, 0) == 0) return e.start + e.duration;
    return uint64_t{0};
  };
  EXPECT_GT(end_of(same_banks, isa::Unit::DmaIn, "dma.ld"), end_of(other_banks, isa::Unit::DmaIn, "dma.ld"));
  EXPECT_EQ(end_of(same_banks, isa::Unit::Mxu, "mxu.mm"), end_of(other_banks, isa::Unit::Mxu, "mxu.mm"));
  EXPECT_GT(end_of(same_banks, isa::Unit::Mxu, "mxu.mm"), 0u);
  EXPECT_EQ(same_banks.stats.cycles, other_banks.stats.cycles);  // the array's drain ends both programs
}

}  // namespace
}  // namespace tpusim::sim::test
