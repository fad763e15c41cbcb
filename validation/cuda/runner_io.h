// The CUDA reference runner's host side that needs no GPU (README.md): the corpus (one case per CSV line), the
// deterministic inputs, bf16 and fp8 E4M3 rounding, .npy files, the per-op result CSVs (the NVIDIA goldens' format)
// and meta.json. Built and tested on every machine; the runner (runner.cpp) and its GPU test use it.
#pragma once

#include <cstdint>
#include <map>
#include <ostream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace tpusim::cuda_ref {

// ---- The corpus -----------------------------------------------------------------------------------------------
// One case per line: `op,dtype,dim,dim,...` with the dims OpSpec lists for the op; '#' starts a comment line;
// blank lines are ignored. Ops: gemm (bfloat16, fp8, int8: m,n,k), conv (bfloat16: n,h,w,c,k,r,s,stride,pad),
// softmax and layernorm (bfloat16: rows,cols), gelu and add (bfloat16: elements), causal_attention (bfloat16:
// batch_size,seq_len,heads,kv_heads,head_dim).
struct OpSpec {
  std::string op;
  std::vector<std::string> dtypes;  // accepted dtypes
  std::vector<std::string> dims;    // the dims' names, as the result CSV's columns
  std::vector<std::string> tags;    // the dims' short names in a case's name
  bool dtype_column;                // whether the result CSV starts with a dtype column (the goldens' attention has none)
};
const std::vector<OpSpec>& op_specs();
const OpSpec& op_spec(const std::string& op);  // throws std::invalid_argument for an unknown op

struct Case {
  std::string op, dtype;
  std::vector<int64_t> dims;  // in OpSpec::dims order
  int line = 0;               // in the corpus file

  int64_t dim(const std::string& name) const;  // throws std::logic_error for a name the op lacks
  // A name for files: op_dtype then each dim as tag+value, e.g. gemm_bfloat16_m1_n4096_k8192.
  std::string name() const;
};

// Thrown for a malformed corpus; what() is `FILE:LINE: problem`.
struct CorpusError : std::runtime_error {
  using std::runtime_error::runtime_error;
};
// Parses corpus text (`source` names it in errors). Checks each line: a known op, an accepted dtype, the right
// number of positive integer dims, per-op constraints (gemm fp8: k and n multiples of 16; int8: multiples of 4;
// causal_attention: kv_heads divides heads, head_dim 32, 64, 128 or 256; conv: an output of at least 1x1), and
// no case twice.
std::vector<Case> parse_corpus(const std::string& text, const std::string& source);
std::vector<Case> read_corpus(const std::string& path);

// The bytes of the .npy data the runner writes for a case: every input and the output, bf16 and fp8 values as
// float32, int8 as int8, int32 as int32 (headers not counted).
int64_t case_tensor_bytes(const Case& c);

// ---- Deterministic inputs ------------------------------------------------------------------------------------
// SplitMix64 (Steele, Lea, Flood 2014): a fixed sequence for a seed on every machine.
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t next();
  double uniform();  // in [0, 1), 53 bits
 private:
  uint64_t state_;
};
// The seed of a tensor: FNV-1a (64-bit) of "CASE_NAME.TENSOR", so every tensor has its own stream and a case's
// inputs do not depend on the other cases in the corpus.
uint64_t tensor_seed(const std::string& case_name, const std::string& tensor);

// ---- Number formats --------------------------------------------------------------------------------------------
uint16_t float_to_bf16(float x);  // round to nearest even; NaN stays NaN
float bf16_to_float(uint16_t h);
// FP8 E4M3 ("fn": no infinities, 0x7F/0xFF are NaN, largest finite 448): round to nearest even, saturating to
// +-448 (NVIDIA's __NV_SATFINITE).
uint8_t float_to_e4m3(float x);
float e4m3_to_float(uint8_t b);

// The fixed parameters of the cases, written to meta.json (the GPU test reads the fp8 scales from their .npy files).
constexpr float kFp8ScaleX = 0.5f, kFp8ScaleW = 0.25f;  // per-tensor dequantisation scales of the fp8 GEMM
constexpr float kLayerNormEps = 1e-5f;

// n values uniform in [lo, hi), each rounded to bf16 / e4m3; uniform ints in [lo, hi].
std::vector<uint16_t> random_bf16(size_t n, float lo, float hi, uint64_t seed);
std::vector<uint8_t> random_e4m3(size_t n, float lo, float hi, uint64_t seed);
std::vector<int8_t> random_int8(size_t n, int lo, int hi, uint64_t seed);

// ---- .npy files ----------------------------------------------------------------------------------------------
// A tensor on the host as .npy holds it: dtype '<f4', '|i1' or '<i4', C order.
struct NpyArray {
  std::string descr;  // "<f4", "|i1", "<i4"
  std::vector<int64_t> shape;
  std::vector<uint8_t> data;
  int64_t elements() const;
  std::vector<double> as_double() const;
};
// Writes format version 1.0 (header padded with spaces to a multiple of 64 bytes, as numpy does). Throws
// std::runtime_error naming the file when it cannot be written completely.
void write_npy(const std::string& path, const std::string& descr, const std::vector<int64_t>& shape,
               const void* data, size_t bytes);
void write_npy_f32(const std::string& path, const std::vector<int64_t>& shape, const std::vector<float>& v);
void write_npy_bf16_as_f32(const std::string& path, const std::vector<int64_t>& shape, const std::vector<uint16_t>& v);
void write_npy_e4m3_as_f32(const std::string& path, const std::vector<int64_t>& shape, const std::vector<uint8_t>& v);
void write_npy_i8(const std::string& path, const std::vector<int64_t>& shape, const std::vector<int8_t>& v);
void write_npy_i32(const std::string& path, const std::vector<int64_t>& shape, const std::vector<int32_t>& v);
// Reads what write_npy writes (versions 1.0 and 2.0, the three dtypes, C order); throws std::runtime_error.
NpyArray read_npy(const std::string& path);

// ---- Results -------------------------------------------------------------------------------------------------
struct CaseResult {
  Case c;
  bool ok = false;
  std::string error;        // when !ok
  double median_us = 0, min_us = 0, max_us = 0;
  int repeats = 0;
  std::string algorithm;    // what the library chose (cuBLASLt/cuDNN), or the kernel's name
  bool npy = false;         // whether its tensors were written as .npy
};
double median(std::vector<double> v);  // of a non-empty list; the mean of the middle two for an even count

// The header of an op's result CSV: [dtype,] dims..., latency_us (gemm: dtype,m,n,k,latency_us;
// causal_attention: batch_size,seq_len,heads,kv_heads,head_dim,latency_us, as in the NVIDIA goldens).
std::string results_header(const std::string& op);
// One line per successful case of `op`, in the order given; the latency with 4 decimals, as in the goldens.
void write_results_csv(std::ostream& os, const std::string& op, const std::vector<CaseResult>& results);
// DIR/<op>.csv for every op with a successful case. Returns the files written.
std::vector<std::string> write_results(const std::string& dir, const std::vector<CaseResult>& results);

// meta.json: `fields` are (key, value already in JSON) pairs written in order, then "cases": every case with its
// name, op, dtype, dims, status and timings.
std::string json_string(const std::string& s);  // a quoted, escaped JSON string
void write_meta_json(std::ostream& os, const std::vector<std::pair<std::string, std::string>>& fields,
                     const std::vector<CaseResult>& results);

}  // namespace tpusim::cuda_ref
