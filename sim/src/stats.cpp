// The stats file: RunStats as JSON, keys in a fixed order.
#include <nlohmann/json.hpp>

#include "tpusim/sim/chip.h"

namespace tpusim::sim {

std::string RunStats::to_json(const ChipConfig& cfg) const {
  nlohmann::ordered_json j;
  j["chip"] = cfg.chip.name;
  j["clock_mhz"] = cfg.chip.clock_mhz;
  j["cycles"] = cycles;
  j["seconds"] = seconds;
  nlohmann::ordered_json u = nlohmann::ordered_json::object();
  for (int i = 0; i < isa::kNumUnits; ++i) {
    const UnitStats& s = units[i];
    u[isa::unit_name(static_cast<isa::Unit>(i))] = {
        {"instructions", s.instructions},         {"busy_cycles", s.busy_cycles},
        {"wait_sem_cycles", s.wait_sem_cycles},   {"wait_queue_cycles", s.wait_queue_cycles},
        {"utilization", s.utilization},
    };
  }
  j["units"] = std::move(u);
  j["mxu"] = {{"macs", mxu_macs}, {"mac_utilization", mxu_mac_utilization}};
  j["hbm"] = {{"bytes_read", hbm_bytes_read}, {"bytes_written", hbm_bytes_written}};
  return j.dump(2);
}

}  // namespace tpusim::sim
