// NumPy .npy files in and out (docs/architecture.md, decision 7): the format the runtime and the CLI use for tensors.
//
// Reads format versions 1.0, 2.0 and 3.0 with dtypes int8 ('|i1', '<i1'), int32 ('<i4') and float32 ('<f4'),
// C order only. Writes version 1.0 (2.0 when the header would not fit), in the same dtypes; bf16 and f8e4m3 tensors are
// written as float32 (numpy has neither type), which is exact. Every problem with a file is a runtime::Error whose
// what() is one line starting with the file's path.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "tpusim/isa/isa.h"

namespace tpusim::runtime {

// Base of every error the runtime library reports; what() is one line.
struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// A tensor in host memory: row-major (C order), elements little-endian, data.size() == elements() *
// isa::dtype_size(dtype). An empty shape is a 0-d array (one element).
struct HostTensor {
  isa::DType dtype = isa::DType::F32;
  std::vector<int64_t> shape;
  std::vector<uint8_t> data;

  int64_t elements() const;  // product of shape (1 for a 0-d array)
};

// Reads a .npy file. Throws Error (naming the file) for a missing or unreadable file, a malformed or truncated
// one, Fortran order, big-endian data or an unsupported dtype.
HostTensor read_npy(const std::string& path);

// Writes a .npy file (bf16 and f8e4m3 as float32). Throws Error if t is inconsistent (data size does not match shape and
// dtype, negative dimension) or the file cannot be written.
void write_npy(const std::string& path, const HostTensor& t);

// The file name (no folder) that holds the tensor `name` in a folder of .npy files (`tpusim run --output-dir`):
// the name with every byte outside [A-Za-z0-9_.-], and a leading '.', written as %XX (two hex digits), then
// ".npy". So any name a model or program gives ("/fc/Relu_output_0" -> "%2Ffc%2FRelu_output_0.npy", "../x" ->
// "%2E.%2Fx.npy") names one file inside the folder, and two names never share one. A name whose file name would
// pass 200 bytes keeps its first 160 encoded bytes, then "~" and 16 hex digits of a hash of the whole name.
std::string npy_file_name(const std::string& name);

}  // namespace tpusim::runtime
