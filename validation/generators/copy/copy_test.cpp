// The copy-kernel generator (tpusim/kernels/copy.h) against a host reference: random HBM contents, the moves
// applied with memmove one after the other on a host copy, every byte compared. Each test elaborates one chip.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <stdexcept>

#include "tests/generated_kernel.h"
#include "tpusim/isa/assembler.h"
#include "tpusim/kernels/copy.h"
#include "tpusim/sim/chip.h"
#include "tpusim/sim/config.h"

namespace tpusim {
namespace {

using kernels::Move;

std::map<std::string, int64_t> symbols(const sim::ChipConfig& cfg) {
  std::map<std::string, int64_t> s;
  for (const auto& [k, v] : sim::kernel_symbols(cfg)) s[k] = v;
  return s;
}

void reference(std::vector<uint8_t>& mem, const std::vector<Move>& moves) {
  for (const Move& m : moves)
    for (uint64_t i = 0; i < m.rows && m.rowbytes; ++i)
      std::memmove(mem.data() + m.dst + static_cast<int64_t>(i) * m.dst_stride,
                   mem.data() + m.src + static_cast<int64_t>(i) * m.src_stride, m.rowbytes);
}

struct Copier {
  explicit Copier(const std::string& preset, const std::vector<std::string>& sets = {})
      : cfg(sim::load_config(preset, sets)), chip(std::make_unique<sim::Chip>(cfg)), syms(symbols(cfg)) {}

  // Fills HBM [0, bytes) with random data, runs the moves, compares with the reference; returns the program.
  // `cores` > 1: the kernel shared among that many cores.
  isa::Program check(const std::vector<Move>& moves, size_t bytes, uint32_t seed, int64_t cores = 1) {
    std::vector<uint8_t> mem(bytes);
    std::mt19937 rng(seed);
    for (auto& b : mem) b = static_cast<uint8_t>(rng());
    chip->write_hbm(0, mem.data(), mem.size());
    isa::Program p = kernels::copy_kernel(moves, syms, 0, "copy", cores);
    EXPECT_EQ(p.cores, static_cast<uint32_t>(cores));
    last = chip->run(p);
    reference(mem, moves);
    std::vector<uint8_t> got(bytes);
    chip->read_hbm(0, got.data(), got.size());
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < bytes; ++i)
      if (got[i] != mem[i] && bad++ == 0) first = i;
    EXPECT_EQ(bad, 0u) << "first wrong byte at " << first << ": got " << int(got[first]) << ", expected "
                       << int(mem[first]);
    return p;
  }

  sim::ChipConfig cfg;
  std::unique_ptr<sim::Chip> chip;
  std::map<std::string, int64_t> syms;
  sim::RunResult last;
};

// (1) NCHW -> NHWC of a [2,3,5,7] bf16 tensor, one 2-byte move per element, in destination order.
TEST(Copy, TransposeNchwToNhwcAsElementMoves) {
  Copier c("v4-like");
  const uint64_t N = 2, C = 3, H = 5, W = 7, E = 2, dst = 4096;
  std::vector<Move> moves;
  for (uint64_t n = 0; n < N; ++n)
    for (uint64_t h = 0; h < H; ++h)
      for (uint64_t w = 0; w < W; ++w)
        for (uint64_t ch = 0; ch < C; ++ch)
          moves.push_back({(((n * C + ch) * H + h) * W + w) * E, dst + (((n * H + h) * W + w) * C + ch) * E, 1, E});
  isa::Program p = c.check(moves, 8192, 1);
  std::printf("transpose: %zu moves, %zu instructions, %llu cycles\n", moves.size(), p.code.size(),
              static_cast<unsigned long long>(c.last.stats.cycles));
  EXPECT_LT(p.code.size(), moves.size());
}

// (2) im2col of a zero-padded image: fill the padded buffer from one pattern row (src_stride 0), copy the image
// into its interior, overwrite a band of it (overlapping destinations: the later move wins), then build the 3x3
// im2col matrix from the padded buffer the kernel itself wrote (read after write).
constexpr uint64_t kIm2colH = 30, kIm2colW = 40, kIm2colBytes = 32768 + 9 * kIm2colH * kIm2colW * 2 + 4096;
std::vector<Move> pad_then_im2col() {
  const uint64_t H = kIm2colH, W = kIm2colW, E = 2, PW = (W + 2) * E;
  const uint64_t img = 0, band = 8192, pattern = 12288, pad = 16384, col = 32768;
  std::vector<Move> moves;
  moves.push_back({pattern, pad, H + 2, PW, 0, static_cast<int64_t>(PW)});                           // fill
  moves.push_back({img, pad + PW + E, H, W * E, static_cast<int64_t>(W * E), static_cast<int64_t>(PW)});  // interior
  moves.push_back({band, pad + 5 * PW + 3 * E, 4, 20 * E, 20 * E, static_cast<int64_t>(PW)});        // overwrite
  for (uint64_t kh = 0; kh < 3; ++kh)
    for (uint64_t kw = 0; kw < 3; ++kw)
      moves.push_back({pad + kh * PW + kw * E, col + (kh * 3 + kw) * H * W * E, H, W * E, static_cast<int64_t>(PW),
                       static_cast<int64_t>(W * E)});
  return moves;
}

TEST(Copy, PadThenIm2colInOrder) {
  Copier c("v4-like");
  const uint64_t H = kIm2colH, W = kIm2colW, E = 2, PW = (W + 2) * E;
  const std::vector<Move> moves = pad_then_im2col();
  isa::Program p = c.check(moves, kIm2colBytes, 2);
  // The fill loads its pattern row once and stores it H + 2 times (VMEM stride 0).
  EXPECT_EQ(c.last.stats.hbm_bytes_read, PW + H * W * E + 4 * 20 * E + 9 * H * W * E);
  EXPECT_EQ(c.last.stats.hbm_bytes_written, (H + 2) * PW + H * W * E + 4 * 20 * E + 9 * H * W * E);
  std::printf("im2col: %zu moves, %zu instructions, %llu cycles\n", moves.size(), p.code.size(),
              static_cast<unsigned long long>(c.last.stats.cycles));
}

// (3) On a chip with 256 KiB of VMEM (32 KiB slots): a 40 MiB move, rows wider than a slot, and many rows.
TEST(Copy, MovesLargerThanVmemAndRowsWiderThanASlot) {
  Copier c("v4-like", {"vmem.size_kib=256"});
  const uint64_t MiB = 1 << 20;
  std::vector<Move> moves;
  moves.push_back({0, 41 * MiB, 1, 40 * MiB});                                // 40 MiB, contiguous
  moves.push_back({81 * MiB + 5, 82 * MiB + 3, 3, 100001, 100013, 100200});     // 3 rows of ~98 KiB, strided
  moves.push_back({88 * MiB, 95 * MiB + 1999 * 3000, 2000, 3000, 3001, -3000});  // negative dst stride
  moves.push_back({41 * MiB + 7, 102 * MiB, 1, 70000});                          // reads what move 0 wrote
  isa::Program p = c.check(moves, 103 * MiB, 3);
  std::printf("large: %zu instructions, %llu cycles\n", p.code.size(),
              static_cast<unsigned long long>(c.last.stats.cycles));
}

constexpr uint64_t kArena = 16384;
std::vector<Move> random_moves(std::mt19937& rng);

// (4) A read-after-write chain: each move reads what the one before wrote, some within one group's reach; then
// random moves in a small arena (many overlaps of every kind), over several runs of one chip. 2 KiB of VMEM (slots
// of 256 bytes) spread them over many groups, rows wider than a slot included.
TEST(Copy, ReadAfterWriteChainsAndRandomOverlaps) {
  Copier c("edge", {"vmem.size_kib=2"});
  std::vector<Move> chain;
  uint64_t at = 0;
  for (int i = 0; i < 12; ++i) {
    const uint64_t next = at + 1000 + 37 * static_cast<uint64_t>(i);
    chain.push_back({at, next, 4, 200, 250, 250});  // reads rows the previous move wrote
    at = next;
  }
  chain.push_back({chain[3].dst + 10, 0, 1, 100});  // back to the start
  isa::Program p = c.check(chain, 32768, 4);
  std::printf("chain: %zu moves, %zu instructions\n", chain.size(), p.code.size());

  std::mt19937 rng(42);
  for (int run = 0; run < 10; ++run) c.check(random_moves(rng), kArena, 100 + run);
}

// 60 random moves in a 16 KiB arena: overlaps of every kind between moves, none within one.
std::vector<Move> random_moves(std::mt19937& rng) {
  auto pick = [&](uint64_t lo, uint64_t hi) { return std::uniform_int_distribution<uint64_t>(lo, hi)(rng); };
  {
    const uint64_t arena = kArena;
    std::vector<Move> moves;
    while (moves.size() < 60) {
      Move m;
      m.rows = pick(1, 6);
      m.rowbytes = pick(0, 3) ? pick(1, 64) : pick(1, 600);
      m.src_stride = static_cast<int64_t>(pick(0, 1) ? m.rowbytes + pick(0, 40) : pick(0, 3) * m.rowbytes);
      m.dst_stride = static_cast<int64_t>(m.rowbytes + pick(0, 40));
      const uint64_t sspan = (m.rows - 1) * m.src_stride + m.rowbytes, dspan = (m.rows - 1) * m.dst_stride + m.rowbytes;
      m.src = pick(0, arena - sspan);
      m.dst = pick(0, arena - dspan);
      std::vector<bool> d(arena);
      for (uint64_t i = 0; i < m.rows; ++i)
        for (uint64_t b = 0; b < m.rowbytes; ++b) d[m.dst + i * m.dst_stride + b] = true;
      bool self = false;
      for (uint64_t i = 0; i < m.rows; ++i)
        for (uint64_t b = 0; b < m.rowbytes; ++b) self |= d[m.src + i * m.src_stride + b];
      if (!self) moves.push_back(m);
    }
    return moves;
  }
}

// (5) 5000 tiny moves: a [50, 100] bf16 transpose element by element. Merging (runs of rows in arithmetic
// progression) and grouping (one store for a slot's worth of pieces) keep the program far below 2 instructions per
// move. A random permutation of 2-byte elements cannot merge; it must still work.
TEST(Copy, ThousandsOfTinyMoves) {
  Copier c("v4-like");
  const uint64_t R = 50, C = 100, E = 2, dst = 16384;
  std::vector<Move> moves;
  for (uint64_t j = 0; j < C; ++j)
    for (uint64_t i = 0; i < R; ++i) moves.push_back({(i * C + j) * E, dst + (j * R + i) * E, 1, E});
  isa::Program p = c.check(moves, 32768, 5);
  std::printf("tiny transpose: %zu moves, %zu instructions (%.3f per move), %llu cycles\n", moves.size(),
              p.code.size(), double(p.code.size()) / double(moves.size()),
              static_cast<unsigned long long>(c.last.stats.cycles));
  EXPECT_LT(p.code.size(), moves.size() / 4);

  std::vector<uint64_t> perm(10000);
  for (uint64_t i = 0; i < perm.size(); ++i) perm[i] = i;
  std::shuffle(perm.begin(), perm.end(), std::mt19937(7));
  std::vector<Move> scattered;
  for (uint64_t i = 0; i < perm.size(); ++i) scattered.push_back({perm[i] * E, 32768 + i * E, 1, E});
  isa::Program q = c.check(scattered, 65536, 6);
  std::printf("scattered: %zu moves, %zu instructions (%.3f per move), %llu cycles\n", scattered.size(),
              q.code.size(), double(q.code.size()) / double(scattered.size()),
              static_cast<unsigned long long>(c.last.stats.cycles));
}

// (6) One large contiguous move of B bytes on v4-like. Every byte crosses HBM twice (loaded into VMEM, stored
// back), and loads and stores share HBM's bandwidth, so the bound is 2 * B / (bytes per cycle) plus one transfer
// latency (the first load's data starts dma.latency cycles in; the last store's latency hides behind the store
// before it). B = 64 MiB at 1200e9 / 1050e6 = 1142.86 bytes per cycle: 117441 + 100 = 117541 cycles.
TEST(Copy, LargeContiguousMoveRunsAtHalfTheHbmBandwidth) {
  Copier c("v4-like");
  const uint64_t B = 64ull << 20;
  isa::Program p = kernels::copy_kernel({{0, 1ull << 30, 1, B}}, c.syms);
  sim::RunOptions o;
  o.functional = false;
  const sim::RunResult r = c.chip->run(p, o);
  const double expect = 2.0 * double(B) / c.cfg.hbm_bytes_per_cycle() + double(c.cfg.dma.latency);
  std::printf("64 MiB copy: %llu cycles, expected %.0f (%.2f%%), %zu instructions\n",
              static_cast<unsigned long long>(r.stats.cycles), expect, 100.0 * double(r.stats.cycles) / expect,
              p.code.size());
  EXPECT_EQ(r.stats.hbm_bytes_read, B);
  EXPECT_EQ(r.stats.hbm_bytes_written, B);
  EXPECT_GE(double(r.stats.cycles), 2.0 * double(B) / c.cfg.hbm_bytes_per_cycle());
  EXPECT_LE(double(r.stats.cycles), expect * 1.10);
}

// Shared among cores: the pad-then-im2col list (its fill, interior and band overwrite conflict, and the taps read
// what they wrote: three phases) on 5 cores, and random overlapping moves on 3 and 7 cores (many phases, 256-byte
// slots), every byte as the moves in order leave it.
TEST(Copy, SharedAmongCoresKeepsTheOrderOfDependentMoves) {
  Copier c("edge", {"vmem.size_kib=2", "chip.cores=7"});
  c.check(pad_then_im2col(), kIm2colBytes, 2, 5);
  std::mt19937 rng(7);
  for (int run = 0; run < 6; ++run) c.check(random_moves(rng), kArena, 200 + run, run % 2 ? 3 : 7);
  // The phases of the im2col list: the fill; the interior (it overwrites the fill); the band (it overwrites the
  // interior); the taps (they read the padded buffer), independent of each other: 4.
  const std::string src = kernels::copy_source(pad_then_im2col(), c.syms, "copy", 5);
  EXPECT_NE(src.find("in 4 phases"), std::string::npos) << src.substr(0, 200);
}

// The kernel is built through the typed emitter; copy_source is its text, which the assembler turns back into the
// same program (code, cores, name), on one core and shared among 5 (with branches); placed at base 100, only the
// branch targets move, by 100. Each instruction's source line names the generator's line in copy.cpp.
// Moves within VMEM (both sides in the local window, isa::kLocalWindow: a one-core chip's intermediates), as many
// as a DMA queue keeps in flight and of rows of at least 64 bytes, run as one dma.ld each, nothing staged: on v5e
// (8 engines) a 3 x 3 convolution's padding done as 3 moves (a fill from a pattern row, the interior's rows, and a
// copy reading what the second wrote), every byte as memmove one after the other gives, no HBM byte moved, in fewer
// cycles than the same moves staged (the kernel made with DMA_ENGINES = 2, fewer than the moves); 9 moves, and a
// move of 32-byte rows, are staged.
TEST(Copy, FewMovesWithinVmemRunDirect) {
  sim::ChipConfig cfg = sim::load_config("v5e");
  sim::Chip chip(cfg);
  std::map<std::string, int64_t> syms = symbols(cfg);
  const uint64_t L = isa::kLocalWindow, base = 1 << 20, bytes = 1 << 20;
  const std::vector<Move> moves = {
      {L + base + 409600, L + base + 458752, 58, 128, 0, 7424},               // a pattern row down a column
      {L + base, L + base + 458752 + 7424 + 128, 56, 7168, 7168, 7424},       // 56 rows of 56 x 64 channels
      {L + base + 458752 + 7424 + 128, L + base + 901120, 30, 256, 7424, 512}};  // reads what the second wrote
  auto run = [&](const std::vector<Move>& ms, const std::map<std::string, int64_t>& s) {
    std::vector<uint8_t> mem(bytes);
    std::mt19937 rng(5);
    for (auto& b : mem) b = static_cast<uint8_t>(rng());
    chip.write_vmem(base, mem.data(), mem.size());
    const isa::Program p = kernels::copy_kernel(ms, s);
    const sim::RunResult r = chip.run(p);
    std::vector<Move> host = ms;  // (offsets in the buffer)
    for (Move& m : host) m.src -= L + base, m.dst -= L + base;
    reference(mem, host);
    std::vector<uint8_t> got(bytes);
    chip.read_vmem(base, got.data(), got.size());
    EXPECT_EQ(got, mem);
    EXPECT_EQ(r.stats.hbm_bytes_read + r.stats.hbm_bytes_written, 0u);
    return std::make_pair(r.stats.cycles, kernels::copy_source(ms, s).substr(0, 200));
  };
  const auto [direct, said] = run(moves, syms);
  EXPECT_NE(said.find("direct transfers within VMEM"), std::string::npos) << said;
  EXPECT_TRUE(kernels::copy_direct(moves, syms));  // (what the compiler asks: Overlap::skip passes such a copy)
  std::map<std::string, int64_t> two = syms;
  two["DMA_ENGINES"] = 2;
  const auto [staged, staged_said] = run(moves, two);
  EXPECT_EQ(staged_said.find("direct"), std::string::npos) << staged_said;
  EXPECT_FALSE(kernels::copy_direct(moves, two));
  EXPECT_FALSE(kernels::copy_direct(moves, syms, 2));  // shared among cores
  std::printf("3 moves within VMEM on v5e: %llu cycles direct, %llu staged\n",
              static_cast<unsigned long long>(direct), static_cast<unsigned long long>(staged));
  EXPECT_LT(direct, staged);
  std::vector<Move> nine;
  for (uint64_t i = 0; i < 9; ++i)
    nine.push_back({L + base + i * 4096, L + base + 65536 + i * 8192, 4, 512, 512, 1024});
  EXPECT_EQ(run(nine, syms).second.find("direct"), std::string::npos);
  EXPECT_FALSE(kernels::copy_direct(nine, syms));
  const std::vector<Move> narrow = {{L + base, L + base + 65536, 64, 32, 64, 32}};
  EXPECT_EQ(run(narrow, syms).second.find("direct"), std::string::npos);
  EXPECT_FALSE(kernels::copy_direct(narrow, syms));
  EXPECT_FALSE(kernels::copy_direct({{base, L + base, 1, 4096, 0, 0}}, syms));  // from HBM
}

TEST(Copy, SourceAssemblesBackIntoTheKernel) {
  const std::map<std::string, int64_t> syms = symbols(sim::load_config("edge", {"vmem.size_kib=2", "chip.cores=7"}));
  for (int64_t cores : {1, 5}) {
    const isa::Program p = kernels::copy_kernel(pad_then_im2col(), syms, 0, "im2col", cores);
    const isa::Program q = isa::assemble(kernels::copy_source(pad_then_im2col(), syms, "im2col", cores), "c.s");
    EXPECT_EQ(p.code, q.code) << cores;
    EXPECT_EQ(p.cores, uint32_t(cores));
    EXPECT_EQ(q.cores, uint32_t(cores));
    EXPECT_EQ(p.name, "im2col");
    EXPECT_EQ(q.name, "im2col");
    ASSERT_FALSE(p.source.empty());
    EXPECT_EQ(p.source[0].rfind("<copy>/im2col at copy.cpp:", 0), 0u) << p.source[0];
    const isa::Program at100 = kernels::copy_kernel(pad_then_im2col(), syms, 100, "im2col", cores);
    EXPECT_EQ(testing::expect_moved_by(p, at100, 100) > 0, cores > 1);
  }
}

// One large contiguous move on h200-like, whose one core moves 128 bytes per cycle through its VMEM ports (32
// banks x 4 bytes) while HBM gives about 2623: on 132 cores, each moves a 1/132 byte range, the copy is bound by
// HBM instead and runs more than 5x faster (estimates: 2 x 4 MiB / 128 = 65,536 cycles on one core; 2 x 4 MiB /
// 2623 = 3,198 plus two 900-cycle latencies on all).
TEST(Copy, SharedAmongCoresMovesAtTheChipsBandwidth) {
  Copier c("h200-like");
  const uint64_t MiB = 1 << 20;
  const std::vector<Move> moves{{0, 5 * MiB, 1, 4 * MiB}};
  c.check(moves, 10 * MiB, 9);
  const uint64_t one = c.last.stats.cycles;
  c.check(moves, 10 * MiB, 9, 132);
  const uint64_t all = c.last.stats.cycles;
  std::printf("4 MiB: one core %llu cycles, 132 cores %llu\n", static_cast<unsigned long long>(one),
              static_cast<unsigned long long>(all));
  EXPECT_LT(all * 5, one);
  EXPECT_NEAR(kernels::copy_estimate(moves, c.syms, 1), 65536.0 + 1800.0, 1.0);
}

TEST(Copy, RejectsBadMoves) {
  const std::map<std::string, int64_t> s{{"VMEM_BYTES", 1 << 20}};
  EXPECT_THROW(kernels::copy_source({{0, 100, 2, 10, 10, 5}}, s), std::invalid_argument);   // dst rows overlap
  EXPECT_THROW(kernels::copy_source({{0, 5, 1, 10}}, s), std::invalid_argument);            // src overlaps dst
  EXPECT_THROW(kernels::copy_source({{0, 100, 1, uint64_t(-8)}}, s), std::invalid_argument);  // negative size
  EXPECT_THROW(kernels::copy_source({{0, 1000, 3, 8, -100, 8}}, s), std::invalid_argument);   // below address 0
  EXPECT_THROW(kernels::copy_source({{0, 100, 1ull << 40, 1ull << 30, 0, 1ll << 30}}, s), std::invalid_argument);
  EXPECT_NO_THROW(kernels::copy_source({{0, 100, 0, 10}, {0, 100, 10, 0}}, s));  // empty moves are skipped
}

// A copy kernel's code grows with its moves (a few instructions each, not a loop): more than kMaxMergedMoves moves
// after merging are refused with the count and the limit, before any code is made (a 534-byte model found by
// fuzz_onnx, a MaxPool of stride 63 on 650 images, asked for 1,956,541 and took 3 GB to compile before). Moves of
// one row, 16 bytes apart, of 8 and 4 bytes in turn, never merge; the limit itself is accepted by the estimate.
TEST(Copy, RefusesMoreMovesThanTheLimit) {
  const std::map<std::string, int64_t> s{{"VMEM_BYTES", 1 << 20}};
  std::vector<kernels::Move> moves;
  auto move = [](uint64_t i) { return kernels::Move{16 * i, (uint64_t{1} << 30) + 16 * i, 1, 8 - 4 * (i % 2)}; };
  for (uint64_t i = 0; i < kernels::kMaxMergedMoves; ++i) moves.push_back(move(i));
  EXPECT_NO_THROW(kernels::copy_estimate(moves, s, 1));
  moves.push_back(move(kernels::kMaxMergedMoves));
  try {
    kernels::copy_source(moves, s);
    ADD_FAILURE() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), ("524289 moves after merging, more than the 524288 a copy kernel takes (its code "
                            "has a few instructions per move)"));
  }
}

}  // namespace
}  // namespace tpusim
