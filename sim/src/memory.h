// The chip's memories: HBM (allocated lazily, in pages), VMEM and the accumulator memory (allocated fully), and
// the timing of their shared resources: HBM channels (HbmChannels, hbm.cpp) and VMEM bank ports (VmemPorts,
// vmem.cpp). Accesses are unchecked here; callers check ranges first with check_rows(), also in timing-only mode.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tpusim/sim/config.h"

namespace tpusim::sim::detail {

// HBM of up to a few tens of GiB, backed by 1 MiB pages allocated on first write; never-written bytes read as 0.
class Hbm {
 public:
  explicit Hbm(uint64_t bytes);
  uint64_t size() const { return size_; }
  void read(uint64_t addr, void* dst, uint64_t n) const;
  void write(uint64_t addr, const void* src, uint64_t n);

 private:
  static constexpr uint64_t kPageBytes = uint64_t(1) << 20;
  uint64_t size_;
  std::vector<std::unique_ptr<uint8_t[]>> pages_;
};

// An access pattern: rows i < rows of rowbytes bytes at base + i*stride (addresses already checked).
struct Rows {
  uint64_t base = 0, rows = 0, rowbytes = 0;
  int64_t stride = 0;
  uint64_t bytes() const { return rows * rowbytes; }
};

// Address interleaving: the byte at address x belongs to unit (x / grain) % counts.size(). Adds to counts[u] the
// bytes of `r` that belong to unit u, arithmetically: whole periods of grain * units bytes at once, and rows by
// the period of their start addresses, so the cost does not grow with the bytes moved. Access patterns that would
// need more than about 2^16 steps (odd strides over huge periods) are spread evenly instead.
void count_interleaved(std::vector<uint64_t>& counts, uint64_t grain, const Rows& r);

// HBM timing (hbm.cpp). Channel c serves its share of a transfer at hbm.bandwidth_gbs / hbm.channels, one
// transfer after another (its next free cycle); a transfer's data ends when its last channel is done. Address x
// is in chunk u = x / hbm.interleave_bytes, bank (u / channels) % banks of channel (u + u / channels) % channels
// (hbm.channel_skew = 1) or u % channels (0); with hbm.channel_skew = 2 each row of chunks u / channels gets a
// pseudo-random rotation of the channels and a pseudo-random bank (hbm.cpp), as a controller's address hash.
// Bank conflicts, per transfer: every interleave_bytes chunk a bank serves opens a row (row-buffer hits are not
// modelled) and a bank opens one row per hbm.t_rc_ns, so a bank holding n chunks of a transfer needs at least
// (n - 1) * tRC + (one chunk at the channel's rate) cycles from the transfer's start on its channel: that bounds
// the transfer's end, not the channel's data bus, which serves the next transfer's bytes (other banks) as soon as
// this one's bytes have passed, as a controller interleaves requests to other banks during a row cycle. Bank
// state does not carry over between transfers.
// What HbmChannels needs of a memory: HBM's [hbm] parameters, or the shared level's [shared] (banks as
// channels of one bank each, no row cycle).
struct ChannelSpec {
  double bandwidth_gbs, clock_mhz, t_rc_ns;
  int channels, banks, channel_skew;
  uint64_t interleave_bytes;
  double efficiency;        // reads at this fraction of bandwidth_gbs
  double write_efficiency;  // writes at this fraction of reads' rate
  static ChannelSpec hbm(const ChipConfig& cfg);
  static ChannelSpec shared(const ChipConfig& cfg);
};

class HbmChannels {
 public:
  explicit HbmChannels(const ChannelSpec& spec);
  // Books the transfer's bytes on the channels from cycle `data_start`; returns the cycle its data is done. A
  // write's bytes take 1 / write_efficiency times a read's cycles on a channel.
  uint64_t transfer(uint64_t data_start, const Rows& r, bool write = false);
  void reset();  // all channels free (before a run)
  // The cycle the last channel is free: every booked transfer done.
  uint64_t busy_until() const;

 private:
  // ceil(bytes / a channel's bytes per cycle), exactly (a write's at write_efficiency)
  uint64_t channel_cycles(uint64_t bytes, bool write) const;
  const uint64_t channels_, banks_, grain_;
  // A channel's bandwidth in kB/s * channels (reads: times efficiency; writes: times both efficiencies), and the
  // clock in kHz.
  unsigned __int128 per_s_, per_s_write_, khz_;
  uint64_t t_rc_;                  // hbm.t_rc_ns in cycles, rounded up
  std::vector<uint64_t> free_;     // per channel: first free cycle
  uint64_t last_end_ = 0;          // the latest end of a transfer booked since reset()
  static constexpr uint64_t kHashRows = 256;  // channel_skew 2: rows of chunks per bank in the hash's period
  const uint64_t slots_;             // chunks in the address map's period
  std::vector<uint32_t> slot_unit_;  // per slot: its unit, channel + bank * channels
  // Scratch, all zero between transfers: bytes per unit, the units touched, bytes and bank limit per channel.
  std::vector<uint64_t> per_unit_;
  std::vector<uint32_t> touched_;
  std::vector<uint64_t> chan_bytes_, chan_bank_limit_;
  // Recent access patterns (base modulo the period) and their bytes per unit.
  struct Pattern {
    Rows key;
    uint64_t uniform;  // bytes in every slot (whole periods)
    std::vector<std::pair<uint32_t, uint64_t>> shares;
  };
  static constexpr size_t kCachedPatterns = 64;
  std::vector<Pattern> cache_;
  size_t next_evict_ = 0;
};

// VMEM bank ports (vmem.cpp): vmem.banks banks, interleaved every vmem.interleave_bytes, each with one port that
// moves vmem.port_bytes_per_cycle. Every client (DMA, vector unit, matrix unit) books the bytes it moves on the
// banks they fall in, from the cycle it can start; a bank serves a booking in its free cycles from then on, so a
// booking made for a later cycle (a matrix unit's next stream, booked when it is issued) does not hold back one
// that can run before it, as a port's arbiter serves whichever request is ready. Clients conflict when together
// they need more bytes per cycle than the ports give.
class VmemPorts {
 public:
  using Demand = std::vector<uint64_t>;  // bytes per bank
  explicit VmemPorts(const ChipConfig& cfg);
  Demand demand() const { return Demand(banks_, 0); }
  void add(Demand& d, const Rows& r) const { count_interleaved(d, grain_, r); }
  // Cycles the busiest bank of `d` needs.
  uint64_t cycles(const Demand& d) const;
  // Books each bank's share in that bank's free cycles from `earliest` on; returns the cycle the last share is
  // done (`earliest` if d is empty). Bookings that end by `now`, the current cycle, are forgotten: bookings start
  // at now or later, but for a DMA's VMEM side, booked when its transfer ends and backdated to its data.
  uint64_t reserve(uint64_t now, uint64_t earliest, const Demand& d);
  void reset();  // all banks free (before a run)

 private:
  // Books `cycles` free cycles of bank b from `earliest`; returns the cycle after the last.
  uint64_t book(uint64_t b, uint64_t earliest, uint64_t cycles);
  const uint64_t banks_, grain_, port_;
  // Per bank: its busy cycles as sorted, disjoint, non-adjacent [begin, end) intervals.
  std::vector<std::vector<std::pair<uint64_t, uint64_t>>> busy_;
};

// Zero-filled bytes whose host pages the operating system commits only when first written (an anonymous
// mapping): a 4 GiB VMEM costs the host only the pages a run writes, none in a timing-only run.
class LazyBytes {
 public:
  explicit LazyBytes(uint64_t n);
  ~LazyBytes();
  LazyBytes(const LazyBytes&) = delete;
  LazyBytes& operator=(const LazyBytes&) = delete;
  uint8_t* data() { return p_; }
  const uint8_t* data() const { return p_; }
  uint64_t size() const { return n_; }

 private:
  uint8_t* p_ = nullptr;
  uint64_t n_;
};

// The tags of the shared level when it is a cache (shared.cache = 1): `ways`-way set-associative over lines of
// `line` bytes, least recently used replacement, sets chosen by the line address modulo the set count (or, with
// the hash, each block of that many lines rotated over the sets by a hash of the block). Only
// tags: the data stays in HBM (a cache changes when bytes arrive, never which bytes). reset() empties it in O(1)
// (a generation count), as every core's DMA queues reset the shared timing before a run.
class CacheTags {
 public:
  // hash: each line's set is a hash of its line number (shared.hash = 1), else line % sets. Lines of addresses
  // below `memory` (HBM's size); throws Error where a tag (the line's block number, below) would not fit 32 bits.
  CacheTags(uint64_t bytes, uint64_t line, int ways, bool hash = false, uint64_t memory = 0);
  bool enabled() const { return sets_ > 0; }
  uint64_t line() const { return line_; }
  // Looks up line number `l` (address / line) and makes it the set's most recently used, inserting it (evicting
  // the least recently used) if absent. Returns whether it was present.
  bool access(uint64_t l);
  void reset();

 private:
  // A set's tags are kept in order of use, the most recent first: a hit moves its tag to the front, a miss puts
  // the new tag there and drops the last (the least recently used) when the set is full. The same choices as
  // last-use times would make, with a set's tags alone to read (16 ways of 4 bytes: one host cache line; the
  // lookup is most of a GEMM's simulation time on h200-like). A tag is the line's block number, l / sets (the
  // set and the block give the line, with the hash too).
  struct Set {
    uint32_t generation = 0;  // `valid` counts when generation == generation_ (else the set is empty)
    uint32_t valid = 0;
  };
  uint64_t line_, sets_ = 0, ways_;
  uint64_t sets_inverse_ = 0;  // UINT64_MAX / sets_: l / sets_ by a multiplication (access)
  bool hash_ = false;
  uint32_t generation_ = 1;
  std::vector<uint32_t> store_;  // sets_ x ways_ tags from tags_ on (aligned to 64 bytes), most recently used first
  uint32_t* tags_ = nullptr;
  std::vector<Set> set_;
};

// The memories one chip's cores share: HBM and the [shared] level, with their timing.
struct ChipMemories {
  explicit ChipMemories(const ChipConfig& cfg);
  Hbm hbm;
  HbmChannels hbm_channels;
  Hbm shared;  // shared.size_kib (0: none), paged like HBM
  HbmChannels shared_channels;
  CacheTags cache;  // shared.cache = 1: the shared level's tags
};

// One core's view of the memories: its own VMEM, accumulators and VMEM ports, and the chip's shared ones.
struct Memories {
  Memories(const ChipConfig& cfg, ChipMemories& chip);
  Hbm& hbm;
  HbmChannels& hbm_channels;
  Hbm& shared;
  HbmChannels& shared_channels;
  CacheTags& cache;
  LazyBytes vmem;  // VMEM's bytes, then the accumulators' (ChipConfig::local_bytes())
  // The accumulators: core.mxus * acc_rows x mxu.cols 32-bit words (i32 or f32 bits), row-major, stored right
  // after VMEM's bytes, where the vector unit and mxu.mm address them (isa.def).
  struct Words {
    uint32_t* p;
    uint32_t* data() const { return p; }
  } acc;
  uint64_t acc_cols;
  VmemPorts vmem_ports;
  // Before a run: every resource free (the chip's shared ones too: every core resets), and the cache empty
  // unless `warm_cache` (RunOptions::warm_cache) keeps the lines the last run left.
  void reset_timing(bool warm_cache) {
    hbm_channels.reset();
    shared_channels.reset();
    if (!warm_cache) cache.reset();
    vmem_ports.reset();
  }
};

// Parameter declarations of [hbm] (hbm.cpp) and [vmem] (vmem.cpp), called by declare_memory_params.
struct Param;
void declare_hbm_params(std::vector<Param>& out);
void declare_vmem_params(std::vector<Param>& out);
void declare_shared_params(std::vector<Param>& out);  // [shared] (hbm.cpp: its timing is HbmChannels')

// Checks that rows i < `rows` of `rowbytes` bytes at `base + i*stride` all lie in [0, size). Returns "" or the
// error, e.g. "HBM read [0x1000, 0x2000) outside 1024 MiB" (`what` is "HBM read", `size_text` "1024 MiB").
std::string check_rows(const char* what, uint64_t size, const std::string& size_text, int64_t base, int64_t rows,
                       int64_t rowbytes, int64_t stride);

std::string hex(uint64_t v);

}  // namespace tpusim::sim::detail
