// HBM timing: channels, banks and address interleaving (memory.h, HbmChannels), and the arithmetic that splits an
// access pattern over interleaved units, which VMEM's banks use too.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <utility>

#include "memory.h"
#include "params.h"

namespace tpusim::sim::detail {

void declare_hbm_params(std::vector<Param>& out) {
  ParamSection<HbmParams>(out, "hbm", &ChipConfig::hbm)
      .add(&HbmParams::size_mib, "size_mib", 32768, "MiB", "HBM capacity (allocated lazily by the simulator)", 1,
           uint64_t(1) << 20)
      .add(&HbmParams::bandwidth_gbs, "bandwidth_gbs", 1200.0, "GB/s",
           "HBM bandwidth of all channels together, 1e9 bytes per second, shared by all DMA transfers", 1e-3, 1e6)
      .add(&HbmParams::channels, "channels", 32, "channels",
           "independent channels, each with bandwidth_gbs / channels and its own queue of transfers", 1, 4096)
      .add(&HbmParams::banks, "banks", 16, "banks", "banks per channel (bank conflicts: see t_rc_ns)", 1, 4096)
      .add(&HbmParams::interleave_bytes, "interleave_bytes", 256, "bytes",
           "address interleaving: consecutive chunks of this many bytes go to consecutive channels, then banks", 1,
           uint64_t(1) << 30)
      .add(&HbmParams::t_rc_ns, "t_rc_ns", 45.0, "ns",
           "row cycle time: a bank opens one row (serves one interleave_bytes chunk) per t_rc_ns", 0.0, 1e6)
      .add(&HbmParams::channel_skew, "channel_skew", 1, "0/1/2",
           "1: chunk u goes to channel (u + u / channels) % channels, so that strides of a multiple of channels "
           "chunks still spread over the channels (a simple form of a controller's address hash); "
           "0: channel u % channels, bank (u / channels) % banks; 2: an address hash as controllers make it: each "
           "row of chunks (one per channel) gets a pseudo-random channel rotation and bank, repeating every 256 x "
           "banks rows, so that power-of-two strides spread over every channel and bank",
           0, 2)
      .add(&HbmParams::efficiency, "efficiency", 1.0, "fraction",
           "reads move at this fraction of bandwidth_gbs (a channel's bus is busy 1 / efficiency times as long for "
           "a byte): what a memory system sustains of its pins' rate in a long stream of reads (refresh, row "
           "switches, the controller's scheduling), measured rather than simulated",
           0.01, 1.0)
      .add(&HbmParams::write_efficiency, "write_efficiency", 1.0, "fraction",
           "writes move at this fraction of reads' rate (a channel's bus is busy 1 / write_efficiency times as "
           "long for a written byte as for a read one): what a memory system loses turning its bus around between "
           "reads and writes and writing back, measured rather than simulated",
           0.01, 1.0);
}

void declare_shared_params(std::vector<Param>& out) {
  ParamSection<SharedParams>(out, "shared", &ChipConfig::shared)
      .add(&SharedParams::size_kib, "size_kib", 0, "KiB",
           "capacity of the chip's shared on-chip memory (TPU v4's CMEM; a GPU's L2 as a scratchpad), which every "
           "core reaches by DMA with the `shared` flag or through the shared window (isa::kSharedWindow; the "
           "compiler places intermediates there); 0: none",
           0, uint64_t(1) << 30)
      .add(&SharedParams::bandwidth_gbs, "bandwidth_gbs", 1000.0, "GB/s",
           "bandwidth of all its banks together, shared by every core's transfers", 1e-3, 1e7)
      .add(&SharedParams::latency, "latency", 50, "cycles",
           "cycles from the start of a transfer to its first byte (in place of dma.latency)", 0, 1000000)
      .add(&SharedParams::banks, "banks", 16, "banks", "independent banks, each with bandwidth_gbs / banks", 1, 4096)
      .add(&SharedParams::interleave_bytes, "interleave_bytes", 256, "bytes",
           "consecutive chunks of this many bytes go to consecutive banks (and, as a cache, its line size)", 1,
           uint64_t(1) << 30)
      .add(&SharedParams::cache, "cache", 0, "0/1",
           "1: the shared level is a cache in front of HBM, as a GPU's L2, instead of a scratchpad: every core's "
           "HBM reads and writes go through it; the lines it holds are read at its bandwidth and latency, the "
           "others from HBM (which it then holds); writes go to HBM and are held too (least recently used lines "
           "make room). Not addressable: dma `shared` is an error",
           0, 1)
      .add(&SharedParams::ways, "ways", 16, "ways", "associativity of the cache (shared.cache = 1)", 1, 1024)
      .add(&SharedParams::write_back, "write_back", 0, "0/1",
           "with shared.cache = 1: 1, a store completes when its bytes are in the cache (its banks, its latency), "
           "and their HBM write is booked on the channels at once and drains behind it, taking HBM's time from "
           "later transfers; a run ends when HBM has taken every write (a GPU's write-back L2 in steady state, "
           "where every line written is written back to HBM once); 0, a store completes when HBM has its bytes "
           "(write-through)",
           0, 1)
      .add(&SharedParams::hash, "hash", 0, "0/1",
           "1: each row of chunks (banks x interleave_bytes) gets a pseudo-random rotation of the banks, as an "
           "address hash (hbm.channel_skew = 2), so that power-of-two strides spread over every bank, and, as a "
           "cache, each block of `sets` consecutive lines is rotated over the sets by a hash of the block, so that a "
           "stream fills every set evenly and strided rows spread over every set; 0: chunk u in bank u % banks, "
           "line l in set l % sets",
           0, 1);
}

ChannelSpec ChannelSpec::hbm(const ChipConfig& c) {
  return {c.hbm.bandwidth_gbs, c.chip.clock_mhz, c.hbm.t_rc_ns, c.hbm.channels, c.hbm.banks, c.hbm.channel_skew,
          c.hbm.interleave_bytes, c.hbm.efficiency, c.hbm.write_efficiency};
}

ChannelSpec ChannelSpec::shared(const ChipConfig& c) {
  return {c.shared.bandwidth_gbs, c.chip.clock_mhz, 0.0, c.shared.banks, 1, c.shared.hash ? 2 : 0,
          c.shared.interleave_bytes, 1.0, 1.0};
}

namespace {

// Calls add(unit, bytes * mult) for the bytes of [a, a + n) of each unit (x / grain) % units, for a and n less
// than the period p = grain * units: from a's unit on, one call per unit the range touches.
template <class Add>
void share_part(uint64_t grain, uint64_t units, uint64_t a, uint64_t n, uint64_t mult, Add& add) {
  uint64_t unit = a / grain, off = a % grain;
  while (n) {  // fewer than units + 1 steps
    const uint64_t take = std::min(n, grain - off);
    add(unit, take * mult);
    n -= take;
    off = 0;
    if (++unit == units) unit = 0;
  }
}

// count_interleaved's arithmetic, reporting each unit's share through add() and the bytes of whole periods (p =
// grain * units: every unit the same), per unit, through uniform.
template <class Add>
void share_rows(uint64_t units, uint64_t grain, const Rows& r, uint64_t& uniform, Add&& add) {
  if (!r.rows || !r.rowbytes || !units) return;
  const uint64_t p = grain * units;
  if (r.rows == 1 || r.stride == static_cast<int64_t>(r.rowbytes)) {
    const uint64_t n = r.bytes();
    uniform += (n / p) * grain;
    return share_part(grain, units, r.base % p, n % p, 1, add);
  }
  // Row i starts at (base + i * s) mod p, s = stride mod p: the starts repeat every q = p / gcd(s, p) rows.
  const auto sp = static_cast<__int128>(p);
  const auto s = static_cast<uint64_t>(((static_cast<__int128>(r.stride) % sp) + sp) % sp);
  const uint64_t q = p / std::gcd(s, p);
  const uint64_t distinct = std::min(r.rows, q);
  const uint64_t steps_per_row = std::min(units, r.rowbytes % p / grain + 2);
  if (distinct > (uint64_t(1) << 16) / steps_per_row) {  // too irregular to count cheaply: spread evenly
    const uint64_t total = r.bytes();
    uniform += total / units;
    for (uint64_t u = 0; u < total % units; ++u) add(u, 1);
    return;
  }
  const uint64_t periods = r.rowbytes / p * grain, rest = r.rowbytes % p;  // a row's whole periods, the rest
  const uint64_t rounds = r.rows / q, extra = r.rows % q;
  uint64_t a = r.base % p;
  for (uint64_t i = 0; i < distinct; ++i) {
    const uint64_t mult = rounds + (i < extra ? 1 : 0);  // rows i, i + q, i + 2q, ... (1 if rows < q)
    uniform += periods * mult;
    share_part(grain, units, a, rest, mult, add);
    a = a >= p - s ? a - (p - s) : a + s;  // (a + s) mod p, both below p
  }
}

}  // namespace

void count_interleaved(std::vector<uint64_t>& counts, uint64_t grain, const Rows& r) {
  uint64_t uniform = 0;
  share_rows(counts.size(), grain, r, uniform, [&](uint64_t u, uint64_t n) { counts[u] += n; });
  if (uniform)
    for (uint64_t& c : counts) c += uniform;
}

// Derived timing, computed here only: a channel moves bandwidth_gbs / channels bytes per cycle, i.e.
// (bandwidth in kB/s) / (channels * clock in kHz), kept as a ratio of integers (25.6 GB/s at 500 MHz over 4
// channels is 12.8 bytes per cycle, which a double does not hold exactly); tRC in cycles is rounded up.
HbmChannels::HbmChannels(const ChannelSpec& cfg)
    : channels_(static_cast<uint64_t>(cfg.channels)),
      banks_(static_cast<uint64_t>(cfg.banks)),
      grain_(cfg.interleave_bytes),
      per_s_(static_cast<unsigned __int128>(std::max(1LL, std::llround(cfg.bandwidth_gbs * cfg.efficiency * 1e6)))),
      per_s_write_(static_cast<unsigned __int128>(
          std::max(1LL, std::llround(cfg.bandwidth_gbs * cfg.efficiency * cfg.write_efficiency * 1e6)))),
      khz_(static_cast<unsigned __int128>(std::max<long long>(1, std::llround(cfg.clock_mhz * 1e3)))),
      t_rc_(static_cast<uint64_t>(std::ceil(cfg.t_rc_ns * cfg.clock_mhz / 1e3 - 1e-9))),
      free_(channels_, 0),
      // The (channel, bank) of chunk u repeats every channels * lcm(channels, banks) chunks with the skew (the
      // rotation u / channels repeats every channels rows of chunks, the bank every banks), every channels *
      // kHashRows * banks with the hash, else every channels * banks.
      slots_(channels_ * (cfg.channel_skew == 2   ? kHashRows * banks_
                          : cfg.channel_skew == 1 ? std::lcm(channels_, banks_)
                                                  : banks_)),
      per_unit_(channels_ * banks_, 0),
      chan_bytes_(channels_, 0),
      chan_bank_limit_(channels_, 0) {
  slot_unit_.resize(slots_);
  for (uint64_t u = 0; u < slots_; ++u) {
    const uint64_t hi = u / channels_;  // the row of chunks (one chunk per channel)
    uint64_t channel = (u % channels_ + (cfg.channel_skew == 1 ? hi : 0)) % channels_, bank = hi % banks_;
    if (cfg.channel_skew == 2) {  // a fixed pseudo-random rotation and bank per row of chunks (splitmix64)
      uint64_t z = hi + 0x9e3779b97f4a7c15ull;
      z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
      z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
      z ^= z >> 31;
      channel = (u % channels_ + z % channels_) % channels_;
      bank = (z / channels_) % banks_;
    }
    slot_unit_[u] = static_cast<uint32_t>(channel + bank * channels_);
  }
}

void HbmChannels::reset() {  // the pattern cache stays valid
  std::fill(free_.begin(), free_.end(), 0);
  last_end_ = 0;
}

uint64_t HbmChannels::channel_cycles(uint64_t bytes, bool write) const {
  uint64_t x;
  const unsigned __int128 rate = write ? per_s_write_ : per_s_;
  const auto k = static_cast<uint64_t>(khz_) * channels_, per_s = static_cast<uint64_t>(rate);
  if (!__builtin_mul_overflow(bytes, k, &x) && x <= UINT64_MAX - per_s) return (x + per_s - 1) / per_s;
  return static_cast<uint64_t>((static_cast<unsigned __int128>(bytes) * khz_ * channels_ + rate - 1) / rate);
}

uint64_t HbmChannels::transfer(uint64_t data_start, const Rows& row_pattern, bool write) {
  // A transfer that repeats one row (stride 0: a DMA broadcasting a vector) opens each DRAM row it touches once;
  // the repeats are row-buffer hits, paid at channel bandwidth only: banks see one row, channels `rep` of them.
  const bool repeat = row_pattern.stride == 0 && row_pattern.rows > 1;
  const uint64_t rep = repeat ? row_pattern.rows : 1;
  const Rows r = repeat ? Rows{row_pattern.base, 1, row_pattern.rowbytes, 0} : row_pattern;
  // Bytes per (channel, bank): the shares of whole periods (every slot the same, so every unit the same: each
  // owns slots / units slots), plus the rest, collected sparsely so that small transfers cost little.
  // Kernels repeat their access patterns (tiles of one matrix): the shares of the last few patterns are kept,
  // keyed by the pattern with its base taken modulo the period.
  const Rows key{r.base % (grain_ * slots_), r.rows, r.rowbytes, r.stride};
  auto same = [&](const Pattern& p) {
    return p.key.base == key.base && p.key.rows == key.rows && p.key.rowbytes == key.rowbytes &&
           p.key.stride == key.stride;
  };
  auto hit = std::find_if(cache_.begin(), cache_.end(), same);
  if (hit == cache_.end()) {  // a new entry, or the oldest one's (whose shares' memory is reused)
    hit = cache_.size() < kCachedPatterns ? cache_.emplace(cache_.end())
                                          : cache_.begin() + static_cast<ptrdiff_t>(next_evict_++ % kCachedPatterns);
    Pattern& p = *hit;
    p.key = key, p.uniform = 0, p.shares.clear();
    share_rows(slots_, grain_, key, p.uniform, [&](uint64_t slot, uint64_t n) {
      uint64_t& b = per_unit_[slot_unit_[slot]];
      if (!b) p.shares.push_back({slot_unit_[slot], 0});
      b += n;
    });
    for (auto& [u, n] : p.shares) n = std::exchange(per_unit_[u], 0);
  }
  const uint64_t uniform = hit->uniform;
  touched_.clear();
  for (const auto& [u, n] : hit->shares) {
    per_unit_[u] = n;
    touched_.push_back(u);
  }
  if (uniform) {  // at least a whole period: every unit is touched
    touched_.clear();
    const uint64_t each = uniform * (slots_ / per_unit_.size());
    for (uint32_t u = 0; u < per_unit_.size(); ++u) {
      per_unit_[u] += each;
      touched_.push_back(u);
    }
  }
  const uint64_t chunk_cycles = channel_cycles(grain_, write);
  for (uint32_t u : touched_) {
    const uint64_t n = per_unit_[u], c = u % channels_;
    per_unit_[u] = 0;
    chan_bytes_[c] += n * rep;
    if (n > grain_)  // (chunks - 1) * tRC + one chunk; a single chunk never limits more than its channel does
      chan_bank_limit_[c] = std::max(chan_bank_limit_[c], ((n + grain_ - 1) / grain_ - 1) * t_rc_ + chunk_cycles);
  }
  // The channel's data bus carries the bytes after the transfers booked before; the banks' row cycles bound the
  // transfer's own end (from its start on that channel) but leave the bus free for other transfers' banks.
  uint64_t end = data_start;
  for (uint32_t u : touched_) {
    const uint64_t c = u % channels_;
    if (!chan_bytes_[c]) continue;  // done already
    const uint64_t start = std::max(data_start, free_[c]);
    free_[c] = start + channel_cycles(chan_bytes_[c], write);
    end = std::max({end, free_[c], start + chan_bank_limit_[c]});
    chan_bytes_[c] = chan_bank_limit_[c] = 0;
  }
  last_end_ = std::max(last_end_, end);
  return end;
}

uint64_t HbmChannels::busy_until() const { return last_end_; }

}  // namespace tpusim::sim::detail
