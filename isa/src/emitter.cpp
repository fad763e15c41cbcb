#include "tpusim/isa/emitter.h"

#include <algorithm>
#include <cstring>
#include <utility>

namespace tpusim::isa {

EmitterBase::EmitterBase(std::string name, std::string where, uint64_t base_pc)
    : name_(std::move(name)), where_(std::move(where)), base_pc_(base_pc) {}

Label EmitterBase::label() {
  labels_.push_back(-1);
  return Label{static_cast<int64_t>(labels_.size()) - 1};
}

uint64_t EmitterBase::declare_placed(TensorDecl t, const std::map<std::string, uint64_t>& fixed, uint64_t hbm_base,
                                     uint64_t align) {
  t.space = MemSpace::Hbm;
  if (auto it = fixed.find(t.name); it != fixed.end()) {
    t.addr = it->second;
  } else {
    uint64_t next = hbm_base;
    for (const TensorDecl& d : tensors_)
      if (d.space == MemSpace::Hbm) next = std::max(next, d.addr + d.bytes());
    align = std::max<uint64_t>(align, 1);
    t.addr = (next + align - 1) / align * align;
  }
  const uint64_t addr = t.addr;
  tensors_.push_back(std::move(t));
  return addr;
}

void EmitterBase::bind(Label l, Where at) {
  const Emitted here{Instr{}, at.file, at.line};
  if (l.id < 0 || l.id >= static_cast<int64_t>(labels_.size()))
    throw Error(where(here) + ": bind: a label this emitter did not make");
  if (labels_[size_t(l.id)] >= 0) throw Error(where(here) + ": bind: the label is already bound");
  labels_[size_t(l.id)] = static_cast<int64_t>(code_.size());
}

void EmitterBase::append(Op op, std::initializer_list<int64_t> fields, const Where& at) {
  Emitted e{Instr{op, {}}, at.file, at.line};
  size_t i = 0;
  for (int64_t v : fields) e.in.f[i++] = v;
  code_.push_back(e);
}

std::string EmitterBase::where(const Emitted& e) const {
  const char* slash = std::strrchr(e.file, '/');
  return where_ + " at " + (slash ? slash + 1 : e.file) + ":" + std::to_string(e.line);
}

Program EmitterBase::finish() const {
  Program p;
  p.name = name_;
  p.cores = cores_;
  p.code.reserve(code_.size());
  p.source.reserve(code_.size());
  for (const Emitted& e : code_) {
    Instr in = e.in;
    const InstrDesc& d = in.desc();
    for (int i = 0; i < d.num_operands; ++i) {
      if (d.operands[size_t(i)].kind != OperandKind::Target) continue;
      const int64_t id = in.f[size_t(i)];
      if (id < 0 || id >= static_cast<int64_t>(labels_.size()))
        throw Error(where(e) + ": " + d.mnemonic + ": a label this emitter did not make");
      if (labels_[size_t(id)] < 0) throw Error(where(e) + ": " + d.mnemonic + " to a label that is never bound");
      in.f[size_t(i)] = static_cast<int64_t>(base_pc_) + labels_[size_t(id)];
    }
    try {
      p.code.push_back(encode(in));
    } catch (const Error& err) {
      throw Error(where(e) + ": " + err.what());
    }
    p.source.push_back(where(e));
  }
  p.tensors = tensors_;
  try {
    validate_tensors(p);
  } catch (const Error& err) {
    throw Error(where_ + ": " + err.what());
  }
  return p;
}

}  // namespace tpusim::isa
