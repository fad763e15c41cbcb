#include "codegen.h"

#include <algorithm>
#include <stdexcept>

#include "tpusim/compiler/compiler.h"
#include "tpusim/kernels/copy.h"
#include "tpusim/kernels/kernels.h"
#include "tpusim/kernels/rowwise.h"

namespace tpusim::compiler {
namespace {

isa::TensorKind kind_of(Buffer::Kind k) {
  switch (k) {
    case Buffer::Kind::Input: return isa::TensorKind::Input;
    case Buffer::Kind::Output: return isa::TensorKind::Output;
    default: return isa::TensorKind::Const;
  }
}

// True if the fragment waits for every unit (sem.set or fence) before it issues any unit instruction.
bool starts_with_sync(const isa::Program& frag) {
  for (isa::Word w : frag.code) {
    isa::Instr in = isa::decode(w);
    if (in.op == isa::Op::SEMSET || in.op == isa::Op::FENCE) return true;
    bool branch = in.op == isa::Op::JMP || in.op == isa::Op::BEQ || in.op == isa::Op::BNE ||
                  in.op == isa::Op::BLT || in.op == isa::Op::BGE;
    if (branch || in.op == isa::Op::HALT || in.desc().unit != isa::Unit::Core) return false;
  }
  return false;
}

isa::Program assemble_call(const KernelPlan& plan, const KernelCall& call,
                           const std::map<std::string, int64_t>& symbols, uint64_t base_pc) {
  auto at = [&](int buf, uint64_t off) { return plan.buffers[buf].addr + off; };
  try {
    if (call.kind == KernelCall::Kind::Copy) {
      std::vector<kernels::Move> moves;
      moves.reserve(call.moves.size());
      for (const BufferMove& m : call.moves)
        moves.push_back(kernels::Move{at(m.src, m.src_off), at(m.dst, m.dst_off), m.rows, m.rowbytes, m.src_stride,
                                      m.dst_stride});
      return kernels::copy_kernel(moves, symbols, base_pc, "copy");
    }
    if (call.kind == KernelCall::Kind::Rowwise) {
      kernels::rowwise::Program rows = call.rows;
      for (size_t i = 0; i < rows.inputs.size(); ++i) rows.inputs[i].addr = at(call.row_inputs[i], call.row_input_offs[i]);
      for (size_t i = 0; i < rows.outputs.size(); ++i)
        rows.outputs[i].addr = at(call.row_outputs[i], call.row_output_offs[i]);
      return kernels::rowwise::kernel(rows, symbols, base_pc, "rowwise");
    }
    std::map<std::string, int64_t> defines = symbols;
    for (const auto& [key, value] : call.params) defines[key] = value;
    std::map<std::string, uint64_t> addr;
    for (const auto& [tensor, b] : call.tensors) {
      auto off = call.offsets.find(tensor);
      addr[tensor] = at(b, off == call.offsets.end() ? 0 : off->second);
    }
    isa::Program frag = kernels::assemble(call.kernel, defines, addr, base_pc);
    for (const isa::TensorDecl& t : frag.tensors)
      if (t.kind == isa::TensorKind::Const)
        throw Error(call.label + ": kernel " + call.kernel + " declares constant '" + t.name +
                    "', which the compiler cannot place yet");
    return frag;
  } catch (const isa::Error& e) {
    throw Error(call.label + ": " + call.kernel + ": " + e.what());
  } catch (const std::invalid_argument& e) {
    throw Error(call.label + ": " + call.kernel + ": " + e.what());
  }
}

// HBM bytes a generated call reads and writes (Library calls carry theirs from the lowering).
double call_bytes(const KernelPlan& plan, const KernelCall& call) {
  if (call.kind == KernelCall::Kind::Copy) {
    double b = 0;
    for (const BufferMove& m : call.moves) {
      const double moved = static_cast<double>(m.rows) * static_cast<double>(m.rowbytes);
      b += moved + (m.src_stride == 0 ? static_cast<double>(m.rowbytes) : moved);
    }
    return b;
  }
  if (call.kind == KernelCall::Kind::Rowwise) {
    const auto& r = call.rows;
    double b = 0;
    for (const kernels::rowwise::Input& in : r.inputs) {
      const int64_t rows = in.period > 0 ? std::min(in.period, r.rows) : r.rows;
      b += static_cast<double>(rows * (in.per_row ? 1 : r.cols) * isa::dtype_size(in.dtype));
    }
    for (size_t i = 0; i < r.outputs.size(); ++i) {
      const Buffer& buf = plan.buffers[call.row_outputs[i]];
      b += static_cast<double>(std::min<uint64_t>(buf.bytes() - buf.extra_bytes,
                                                  static_cast<uint64_t>(r.rows * r.cols) * isa::dtype_size(buf.dtype)));
    }
    return b;
  }
  return call.bytes;
}

}  // namespace

isa::Program emit_program(const KernelPlan& plan, const std::map<std::string, int64_t>& symbols,
                          const std::string& program_name) {
  isa::Program p;
  p.name = program_name;
  for (Buffer::Kind kind : {Buffer::Kind::Input, Buffer::Kind::Output, Buffer::Kind::Const})
    for (const Buffer& b : plan.buffers) {
      if (b.kind != kind) continue;
      isa::TensorDecl t{.name = b.name, .kind = kind_of(kind), .dtype = b.dtype, .shape = b.shape, .addr = b.addr};
      if (kind == Buffer::Kind::Const) {
        t.const_offset = p.const_data.size();
        p.const_data.insert(p.const_data.end(), b.data.begin(), b.data.end());
      }
      p.tensors.push_back(std::move(t));
    }

  int node = -1;  // the "node" region of the previous call, which a call with the same label extends
  for (size_t c = 0; c < plan.calls.size(); ++c) {
    const KernelCall& call = plan.calls[c];
    const auto call_begin = static_cast<uint32_t>(p.code.size());
    isa::Program frag = assemble_call(plan, call, symbols, p.code.size());
    if (c > 0 && !starts_with_sync(frag)) {
      p.code.push_back(isa::encode(isa::Instr{.op = isa::Op::FENCE}));
      p.source.push_back(call.label + ": fence before " + call.kernel);
      frag = assemble_call(plan, call, symbols, p.code.size());
    }
    const uint64_t end = p.code.size() + frag.code.size();
    if (node < 0 || p.regions[node].name != call.label) {
      node = static_cast<int>(p.regions.size());
      p.regions.push_back(isa::Region{isa::kRegionNode, call.label, call_begin, 0});
    }
    p.regions[node].end = static_cast<uint32_t>(end);
    p.regions[node].flops += call.flops;
    p.regions[node].bytes += call_bytes(plan, call);
    const auto frag_begin = static_cast<uint32_t>(p.code.size());
    p.regions.push_back(isa::Region{isa::kRegionKernel, call.kernel, frag_begin, static_cast<uint32_t>(end)});
    for (isa::Region r : frag.regions) {  // the kernel's own regions, if it marks any
      r.begin += frag_begin, r.end += frag_begin;
      p.regions.push_back(std::move(r));
    }
    for (size_t i = 0; i < frag.code.size(); ++i) {
      isa::Word w = frag.code[i];
      if (c + 1 < plan.calls.size() && isa::decode(w).op == isa::Op::HALT) {
        isa::Instr jump{.op = isa::Op::JMP};
        jump.f[0] = static_cast<int64_t>(end);
        w = isa::encode(jump);
      }
      p.code.push_back(w);
      p.source.push_back(call.label + ": " + (i < frag.source.size() ? frag.source[i] : call.kernel));
    }
  }
  return p;
}

}  // namespace tpusim::compiler
