#include "tpusim/runtime/runtime.h"

#include <cstring>
#include <filesystem>
#include <random>
#include <sstream>

#include "tpusim/compiler/compiler.h"
#include "tpusim/isa/assembler.h"
#include "tpusim/isa/numerics.h"
#include "tpusim/kernels/kernels.h"

namespace tpusim::runtime {
namespace {

std::string shape_text(const std::vector<int64_t>& shape) {
  std::ostringstream s;
  s << "[";
  for (size_t i = 0; i < shape.size(); ++i) s << (i ? ", " : "") << shape[i];
  s << "]";
  return s.str();
}

std::vector<const isa::TensorDecl*> of_kind(const isa::Program& p, isa::TensorKind kind) {
  std::vector<const isa::TensorDecl*> out;
  for (const auto& t : p.tensors)
    if (t.kind == kind) out.push_back(&t);
  return out;
}

// The bytes to place in HBM for input `decl` from host tensor `t`, or an error saying what does not match.
std::vector<uint8_t> input_bytes(const isa::TensorDecl& decl, const HostTensor& t) {
  bool f32_for_bf16 = decl.dtype == isa::DType::BF16 && t.dtype == isa::DType::F32;
  if ((t.dtype != decl.dtype && !f32_for_bf16) || t.shape != decl.shape)
    throw Error("input '" + decl.name + "': expected " + isa::dtype_name(decl.dtype) + " " + shape_text(decl.shape) +
                ", got " + isa::dtype_name(t.dtype) + " " + shape_text(t.shape));
  if (!f32_for_bf16) return t.data;
  std::vector<uint8_t> out(decl.bytes());
  for (int64_t i = 0; i < t.elements(); ++i) {
    float f;
    std::memcpy(&f, t.data.data() + 4 * i, 4);
    uint16_t h = isa::bf16_from_f32(f);
    std::memcpy(out.data() + 2 * i, &h, 2);
  }
  return out;
}

void write_tensor(sim::Chip& chip, const isa::TensorDecl& d, const uint8_t* bytes) {
  if (d.space == isa::MemSpace::Vmem)
    chip.write_vmem(d.addr, bytes, d.bytes());
  else
    chip.write_hbm(d.addr, bytes, d.bytes());
}

void read_tensor(const sim::Chip& chip, const isa::TensorDecl& d, uint8_t* bytes) {
  if (d.space == isa::MemSpace::Vmem)
    chip.read_vmem(d.addr, bytes, d.bytes());
  else
    chip.read_hbm(d.addr, bytes, d.bytes());
}

}  // namespace

std::vector<const isa::TensorDecl*> Executable::inputs() const { return of_kind(program_, isa::TensorKind::Input); }
std::vector<const isa::TensorDecl*> Executable::outputs() const { return of_kind(program_, isa::TensorKind::Output); }

std::string describe(const isa::TensorDecl& d) {
  return d.name + ": " + isa::dtype_name(d.dtype) + " " + shape_text(d.shape);
}

struct Client::Impl {
  explicit Impl(const sim::ChipConfig& cfg) : chip(cfg) {}
  sim::Chip chip;

  std::map<std::string, int64_t> symbols() const {
    std::map<std::string, int64_t> s;
    for (const auto& [k, v] : sim::kernel_symbols(chip.config())) s[k] = v;
    return s;
  }
};

Client::Client(const sim::ChipConfig& cfg) : impl_(std::make_unique<Impl>(cfg)) {}
Client::~Client() = default;
const sim::ChipConfig& Client::config() const { return impl_->chip.config(); }

Executable Client::assemble_file(const std::string& path, const std::map<std::string, int64_t>& defines) const {
  isa::AsmOptions opts;
  opts.defines = impl_->symbols();
  for (const auto& [k, v] : defines) opts.defines[k] = v;
  opts.include = kernels::include_resolver();
  return Executable(isa::assemble_file(path, opts));
}

Executable Client::compile_onnx_file(const std::string& path,
                                     const std::map<std::string, std::vector<int64_t>>& input_shapes) const {
  compiler::Options opts;
  opts.target.symbols = impl_->symbols();
  opts.input_shapes = input_shapes;
  return Executable(compiler::compile_onnx_file(path, opts));
}

Executable Client::load_file(const std::string& path, const std::map<std::string, int64_t>& defines,
                             const std::map<std::string, std::vector<int64_t>>& input_shapes) const {
  std::string ext = std::filesystem::path(path).extension().string();
  if (ext == ".s" || ext == ".asm") return assemble_file(path, defines);
  if (ext == ".onnx") return compile_onnx_file(path, input_shapes);
  return Executable(isa::load_program(path));
}

void Client::check_fits(const Executable& exe) const {
  const isa::Program& p = exe.program();
  uint64_t hbm = config().hbm_bytes();
  if (p.hbm_footprint() > hbm)
    throw Error("program '" + p.name + "' needs " + std::to_string(p.hbm_footprint()) + " bytes of HBM, the chip has " +
                std::to_string(hbm));
  uint64_t vmem = config().vmem_bytes();
  if (p.footprint(isa::MemSpace::Vmem) > vmem)
    throw Error("program '" + p.name + "' keeps tensors in VMEM up to byte " +
                std::to_string(p.footprint(isa::MemSpace::Vmem)) + ", the chip has " + std::to_string(vmem));
}

ExecuteResult Client::execute(const Executable& exe, const std::map<std::string, HostTensor>& inputs,
                              const ExecuteOptions& opts) {
  const isa::Program& p = exe.program();
  sim::Chip& chip = impl_->chip;
  check_fits(exe);
  for (const auto& [name, t] : inputs) {
    const isa::TensorDecl* d = p.find(name);
    if (!d || d->kind != isa::TensorKind::Input) {
      std::string known;
      for (const auto* i : exe.inputs()) known += (known.empty() ? "" : ", ") + i->name;
      throw Error("program '" + p.name + "' has no input '" + name + "' (its inputs: " + known + ")");
    }
  }
  for (const auto* d : exe.inputs()) {
    auto it = inputs.find(d->name);
    if (it == inputs.end()) throw Error("missing input '" + d->name + "' (" + describe(*d) + ")");
    if (opts.functional) {
      std::vector<uint8_t> bytes = input_bytes(*d, it->second);
      write_tensor(chip, *d, bytes.data());
    } else {
      input_bytes(*d, it->second);  // still check it
    }
  }
  if (opts.functional)
    for (const auto& t : p.tensors)
      if (t.kind == isa::TensorKind::Const) chip.write_hbm(t.addr, p.const_data.data() + t.const_offset, t.bytes());

  ExecuteResult r;
  r.run = chip.run(p, sim::RunOptions{opts.functional, opts.trace, opts.max_cycles});
  if (opts.functional) {
    for (const auto* d : exe.outputs()) {
      HostTensor t{d->dtype, d->shape, std::vector<uint8_t>(d->bytes())};
      read_tensor(chip, *d, t.data.data());
      r.outputs.emplace(d->name, std::move(t));
    }
  }
  return r;
}

HostTensor random_tensor(const isa::TensorDecl& d, uint64_t seed) {
  HostTensor t{d.dtype, d.shape, std::vector<uint8_t>(d.bytes())};
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> small(-128, 127);
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  for (int64_t i = 0; i < t.elements(); ++i) {
    switch (d.dtype) {
      case isa::DType::I8: t.data[i] = static_cast<uint8_t>(static_cast<int8_t>(small(rng))); break;
      case isa::DType::I32: {
        int32_t v = small(rng);
        std::memcpy(t.data.data() + 4 * i, &v, 4);
        break;
      }
      case isa::DType::BF16: {
        uint16_t h = isa::bf16_from_f32(unit(rng));
        std::memcpy(t.data.data() + 2 * i, &h, 2);
        break;
      }
      case isa::DType::F32: {
        float f = unit(rng);
        std::memcpy(t.data.data() + 4 * i, &f, 4);
        break;
      }
    }
  }
  return t;
}

}  // namespace tpusim::runtime
