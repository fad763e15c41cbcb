#include "ops.h"

#include <stdexcept>

namespace tpusim::compiler {

void OpTable::add(OpDef def) {
  if (!def.infer) throw std::logic_error("operator '" + def.name + "' has no shape function");
  if (def.row_wise() && def.rowwise == nullptr && def.no_lowering == nullptr)
    throw std::logic_error("row-wise operator '" + def.name + "' has no rowwise function and no reason why");
  const std::string name = def.name;
  if (!ops_.emplace(name, std::move(def)).second)
    throw std::logic_error("operator '" + name + "' is registered twice");
}

const OpDef* OpTable::find(const std::string& name) const {
  auto it = ops_.find(name);
  return it == ops_.end() ? nullptr : &it->second;
}

const OpTable& op_registry() {
  static const OpTable table = [] {
    OpTable t;
    add_matmul_ops(t);
    add_conv_ops(t);
    add_data_ops(t);
    add_elementwise_ops(t);
    add_normalize_ops(t);
    add_resize_ops(t);
    return t;
  }();
  return table;
}

}  // namespace tpusim::compiler
