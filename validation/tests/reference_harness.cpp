#include "reference_harness.h"

#include "tpusim/sim/config.h"

namespace tpusim::reftest {

Machines* machines(const std::vector<std::string>& sets) {
  static std::unique_ptr<Machines> m;
  if (m) return m->sets == sets ? m.get() : nullptr;
  m = std::make_unique<Machines>();
  m->sets = sets;
  m->cfg = sim::load_config("edge", sets);
  m->chip = std::make_unique<sim::Chip>(m->cfg);
  ref::Config rc{m->cfg.mxu.rows,    m->cfg.mxu.cols,  m->cfg.mxu.acc_rows,  m->cfg.vmem_bytes(),
                 m->cfg.hbm_bytes(),   m->cfg.chip.cores, m->cfg.core.mxus,    m->cfg.shared_bytes(),
                 m->cfg.mxu.fp8_rate};
  m->fp64 = std::make_unique<ref::Reference>(rc, ref::Options{ref::FloatSums::Fp64});
  m->isaf32 = std::make_unique<ref::Reference>(rc, ref::Options{ref::FloatSums::IsaF32});
  return m.get();
}

}  // namespace tpusim::reftest
