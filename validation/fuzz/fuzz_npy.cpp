// Fuzzes the .npy reader: any file either reads into a consistent HostTensor (data size = elements x dtype size)
// or ends in one runtime::Error (never a crash, hang, other exception or undefined behaviour); what reads, written
// back and read again, is the same tensor.
#include <cstdint>
#include <string>

#include "fuzz_common.h"
#include "tpusim/runtime/npy.h"

using namespace tpusim;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = fuzz::write_scratch(data, size, ".npy");
  runtime::HostTensor t;
  try {
    t = runtime::read_npy(path);
  } catch (const runtime::Error&) {
    return 0;
  }
  for (int64_t d : t.shape)
    if (d < 0) fuzz::property_failed("read_npy returned a negative dimension");
  if (t.data.size() != static_cast<uint64_t>(t.elements()) * isa::dtype_size(t.dtype))
    fuzz::property_failed("read_npy returned data whose size does not match its shape and dtype");
  runtime::HostTensor back;
  try {
    runtime::write_npy(path, t);
    back = runtime::read_npy(path);
  } catch (const runtime::Error& e) {
    fuzz::property_failed(std::string("a tensor read_npy returned does not write and read back: ") + e.what());
  }
  if (back.dtype != t.dtype || back.shape != t.shape || back.data != t.data)
    fuzz::property_failed("read_npy(write_npy(t)) != t");
  return 0;
}
