// The pipeline: import -> the check that every operator can be compiled -> shape inference (folding constants) ->
// dead-code removal -> GELU chains as one Gelu node -> sibling matmuls as one -> lowering -> residual Adds and
// activations into the GEMMs' epilogues -> memory planning -> codegen.
#include "tpusim/compiler/compiler.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <string_view>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "codegen.h"
#include "const_fold.h"
#include "kernel_plan.h"
#include "fuse_epilogue.h"
#include "fuse_gelu.h"
#include "fuse_siblings.h"
#include "lower.h"
#include "merge_casts.h"
#include "memory_plan.h"
#include "onnx_import.h"
#include "shape_inference.h"

namespace tpusim::compiler {

namespace {

// The pipeline after the import (which alone reads the model file's bytes).
isa::Program compile(ir::Graph g, const std::string& model_name, const Options& given) {
  auto hbm = given.target.symbols.find("HBM_BYTES");
  if (hbm == given.target.symbols.end() || hbm->second <= 0)
    throw Error("the target has no HBM_BYTES symbol (give the chip's symbols, e.g. from sim::kernel_symbols)");
  auto symbol = [&](const char* name) { return std::max<int64_t>(0, symbol_or(given.target.symbols, name, 0)); };
  // Intermediates kept in VMEM (Options::vmem_intermediates): the top half, out of the kernels' sight.
  Options opts = given;
  MemoryRegion local;
  if (given.vmem_intermediates && symbol("CORES") == 1 && symbol("VMEM_BYTES") >= kMinLocalVmem) {
    const int64_t vmem = symbol("VMEM_BYTES");
    local.bytes = static_cast<uint64_t>(vmem / 2) / kHbmAlign * kHbmAlign;
    local.base = isa::kLocalWindow + static_cast<uint64_t>(vmem) - local.bytes;
    opts.target.symbols["VMEM_BYTES"] = vmem - static_cast<int64_t>(local.bytes);
  }
  opts.vmem_intermediates = local.bytes > 0;  // from here on: whether they are kept there (the lowering reads it)

  check_operators(g);
  infer_shapes(g, opts.input_shapes);
  fold_constants(g);
  fuse_gelu(g);
  fuse_sibling_matmuls(g);
  KernelPlan plan = lower(g, opts);
  g = {};  // the plan holds what it needs (weights as its buffers' bytes): the graph's constants go now
  fuse_residual_adds(plan, opts.target.symbols);
  fuse_activations(plan, opts.target.symbols);
  merge_casts(plan, opts.target.symbols);
  // The shared memory (0 where the chip has none, or its shared level is a cache).
  const MemoryRegion shared{isa::kSharedWindow, static_cast<uint64_t>(symbol("SHARED_BYTES"))};
  plan_memory(plan, static_cast<uint64_t>(hbm->second), local, shared, model_name, symbol("CORES") > 1 ? 2 : 0);
  // The weight stream's ring: the part of the intermediates' VMEM they leave
  StreamRing ring;
  if (local.bytes > 0) {
    uint64_t top = local.base;
    for (const Buffer& b : plan.buffers)
      if (b.addr >= local.base && b.addr < local.base + local.bytes) top = std::max(top, b.addr + b.bytes());
    ring.begin = static_cast<int64_t>((top + kHbmAlign - 1) / kHbmAlign * kHbmAlign - isa::kLocalWindow);
    ring.end = static_cast<int64_t>(local.base + local.bytes - isa::kLocalWindow);
  }
  isa::Program p = emit_program(plan, opts.target.symbols, std::filesystem::path(model_name).stem().string(),
                                 opts.overlap_kernels, ring);
  p.timing_only = opts.timing_only;
  return p;
}

// A file's bytes, mapped rather than read: no copy of a model's weights (a GPT-2's file is 650 MB) before the
// import decodes them, and a timing-only compile touches only the pages that are not weights.
struct Mapped {
  void* p = MAP_FAILED;
  size_t n = 0;
  ~Mapped() {
    if (p != MAP_FAILED) munmap(p, n);
  }
};

}  // namespace

isa::Program compile_onnx(const std::string& bytes, const std::string& model_name, const Options& opts) {
  return compile(import_onnx(bytes, model_name, opts.timing_only), model_name, opts);
}

isa::Program compile_onnx_file(const std::string& path, const Options& opts) {
  if (std::filesystem::is_directory(path)) throw Error("cannot read model file '" + path + "': it is a directory");
  std::optional<ir::Graph> g;
  {  // the file's pages are released once the import has read them (the rest of the compile grows the peak)
    const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw Error("cannot open model file '" + path + "': " + std::strerror(errno));
    struct stat st {};
    Mapped m;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0) {
      m.n = static_cast<size_t>(st.st_size);
      m.p = mmap(nullptr, m.n, PROT_READ, MAP_PRIVATE, fd, 0);
    }
    close(fd);
    if (m.p != MAP_FAILED)
      g = import_onnx(std::string_view(static_cast<const char*>(m.p), m.n), path, opts.timing_only);
  }
  if (!g) {  // not a regular file (a pipe) or not mappable: read it, once
    std::ifstream in(path, std::ios::binary);
    if (!in) throw Error("cannot open model file '" + path + "': " + std::strerror(errno));
    std::string bytes{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    if (in.bad()) throw Error("cannot read model file '" + path + "'");
    g = import_onnx(bytes, path, opts.timing_only);
  }
  return compile(std::move(*g), path, opts);
}

}  // namespace tpusim::compiler
