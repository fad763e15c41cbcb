#include "tpusim/runtime/executable.h"

#include <cstdio>

namespace tpusim::runtime {
namespace {
std::vector<const isa::TensorDecl*> of_kind(const isa::Program& p, isa::TensorKind kind) {
  std::vector<const isa::TensorDecl*> out;
  for (const auto& t : p.tensors)
    if (t.kind == kind) out.push_back(&t);
  return out;
}
}  // namespace

uint64_t fnv1a64(const uint8_t* bytes, size_t n) {
  uint64_t h = 14695981039346656037ull;
  for (size_t i = 0; i < n; ++i) {
    h ^= bytes[i];
    h *= 1099511628211ull;
  }
  return h;
}

Executable::Executable(isa::Program program) : program_(std::make_shared<const isa::Program>(std::move(program))) {
  std::vector<uint8_t> bytes = isa::serialize(*program_);
  fingerprint_ = fnv1a64(bytes.data(), bytes.size());
}

std::vector<const isa::TensorDecl*> Executable::inputs() const { return of_kind(*program_, isa::TensorKind::Input); }
std::vector<const isa::TensorDecl*> Executable::outputs() const { return of_kind(*program_, isa::TensorKind::Output); }

std::string Executable::fingerprint_hex() const {
  char s[17];
  std::snprintf(s, sizeof s, "%016llx", static_cast<unsigned long long>(fingerprint_));
  return s;
}

StatusOr<Executable> Executable::deserialize(const std::vector<uint8_t>& bytes) {
  try {
    return Executable(isa::deserialize(bytes));
  } catch (const std::exception& e) {
    return Status(StatusCode::kInvalidArgument, e.what());
  }
}

}  // namespace tpusim::runtime
