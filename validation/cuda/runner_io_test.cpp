// The CUDA runner's host side (runner_io.h), without a GPU: corpus parsing and its errors, case names, the
// generator's fixed sequence, bf16 and E4M3 rounding on known values, .npy bytes, the result CSVs (the goldens'
// headers) and meta.json.
#include "runner_io.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

namespace fs = std::filesystem;
using namespace tpusim::cuda_ref;

namespace {

TEST(Corpus, ParsesEveryOpWithCommentsAndBlankLines) {
  auto cases = parse_corpus(
      "# a comment\n"
      "\n"
      "gemm,bfloat16,1,4096,8192\n"
      "gemm, fp8 ,16,32,64\r\n"
      "gemm,int8,32,64,128\n"
      "conv,bfloat16,2,8,8,16,32,3,3,1,0\n"
      "softmax,bfloat16,7,100\n"
      "layernorm,bfloat16,5,768\n"
      "gelu,bfloat16,1001\n"
      "add,bfloat16,64\n"
      "causal_attention,bfloat16,1,4096,32,8,128\n",
      "c.csv");
  ASSERT_EQ(cases.size(), 9u);
  EXPECT_EQ(cases[0].op, "gemm");
  EXPECT_EQ(cases[0].dtype, "bfloat16");
  EXPECT_EQ(cases[0].dims, (std::vector<int64_t>{1, 4096, 8192}));
  EXPECT_EQ(cases[0].line, 3);
  EXPECT_EQ(cases[0].dim("k"), 8192);
  EXPECT_EQ(cases[1].dtype, "fp8");  // spaces and \r are trimmed
  EXPECT_EQ(cases[3].dim("pad"), 0);
  EXPECT_EQ(cases[0].name(), "gemm_bfloat16_m1_n4096_k8192");
  EXPECT_EQ(cases[3].name(), "conv_bfloat16_n2_h8_w8_c16_k32_r3_s3_st1_p0");
  EXPECT_EQ(cases[8].name(), "causal_attention_bfloat16_b1_s4096_h32_kv8_d128");
  EXPECT_EQ(cases[8].dim("kv_heads"), 8);
  EXPECT_THROW(cases[0].dim("rows"), std::logic_error);
}

std::string corpus_error(const std::string& text) {
  try {
    parse_corpus(text, "c.csv");
  } catch (const CorpusError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(Corpus, ErrorsNameTheLine) {
  EXPECT_EQ(corpus_error("# x\nmatmul,bfloat16,1,2,3\n"),
            "c.csv:2: unknown op 'matmul' (known: gemm, conv, softmax, layernorm, gelu, add, causal_attention)");
  EXPECT_EQ(corpus_error("gemm,float16,1,2,3\n"), "c.csv:1: gemm: dtype must be one of bfloat16, fp8, int8, got 'float16'");
  EXPECT_EQ(corpus_error("gemm,bfloat16,1,2\n"), "c.csv:1: gemm expects 3 dims after the dtype (m,n,k), got 2");
  EXPECT_EQ(corpus_error("gemm,bfloat16,1,2,3,\n"), "c.csv:1: gemm expects 3 dims after the dtype (m,n,k), got 4");
  EXPECT_EQ(corpus_error("gemm,bfloat16,1,0,3\n"), "c.csv:1: gemm: n must be a positive integer, got '0'");
  EXPECT_EQ(corpus_error("gemm,bfloat16,1,-2,3\n"), "c.csv:1: gemm: n must be a positive integer, got '-2'");
  EXPECT_EQ(corpus_error("gelu,bfloat16,1e3\n"), "c.csv:1: gelu: elements must be a positive integer, got '1e3'");
  EXPECT_EQ(corpus_error("gemm,fp8,16,32,40\n"), "c.csv:1: gemm fp8 needs k and n to be multiples of 16");
  EXPECT_EQ(corpus_error("gemm,int8,3,6,8\n"), "c.csv:1: gemm int8 needs k and n to be multiples of 4");
  EXPECT_EQ(corpus_error("causal_attention,bfloat16,1,16,6,4,64\n"), "c.csv:1: kv_heads (4) must divide heads (6)");
  EXPECT_EQ(corpus_error("causal_attention,bfloat16,1,16,4,4,96\n"), "c.csv:1: head_dim must be 32, 64, 128 or 256");
  EXPECT_EQ(corpus_error("conv,bfloat16,1,2,2,8,8,5,5,1,1\n"), "c.csv:1: conv: the filter is larger than the padded input");
  EXPECT_EQ(corpus_error("add,bfloat16,64\n\nadd,bfloat16, 64\n"), "c.csv:3: the same case as line 1");
  EXPECT_EQ(corpus_error("gemm,int8,4,8,8\n"), "(no error)");
}

TEST(Corpus, TensorBytes) {
  auto cs = parse_corpus(
      "gemm,bfloat16,2,3,4\ngemm,fp8,16,16,16\ngemm,int8,4,8,8\nconv,bfloat16,1,5,5,2,3,3,3,2,1\n"
      "softmax,bfloat16,2,5\nlayernorm,bfloat16,2,5\ngelu,bfloat16,7\nadd,bfloat16,7\n"
      "causal_attention,bfloat16,2,5,4,2,32\n",
      "c");
  EXPECT_EQ(case_tensor_bytes(cs[0]), 4 * (8 + 12 + 6));            // x, w, y as float32
  EXPECT_EQ(case_tensor_bytes(cs[1]), 4 * (256 * 3) + 8);            // and the two scales
  EXPECT_EQ(case_tensor_bytes(cs[2]), 32 + 64 + 4 * 32);             // int8 inputs, int32 output
  EXPECT_EQ(case_tensor_bytes(cs[3]), 4 * (50 + 54 + 3 * 3 * 3));    // output 3x3 ((5 + 2 - 3) / 2 + 1)
  EXPECT_EQ(case_tensor_bytes(cs[4]), 4 * 20);
  EXPECT_EQ(case_tensor_bytes(cs[5]), 4 * (20 + 10));                // x, y, gamma, beta
  EXPECT_EQ(case_tensor_bytes(cs[6]), 4 * 14);
  EXPECT_EQ(case_tensor_bytes(cs[7]), 4 * 21);
  EXPECT_EQ(case_tensor_bytes(cs[8]), 4 * (2 * 2 * 4 * 5 * 32 + 2 * 2 * 2 * 5 * 32));  // q, y; k, v
}

// The corpus the runner ships parses (no typo waits for a GPU to be found).
TEST(Corpus, TheDefaultCorpusParses) {
  auto cases = read_corpus(TPUSIM_CUDA_DEFAULT_CORPUS);
  EXPECT_GE(cases.size(), 30u);
  int64_t golden_gemm = 0;
  for (const auto& c : cases)
    golden_gemm += c.op == "gemm" && c.dtype == "bfloat16" && c.dims == std::vector<int64_t>{8192, 8192, 8192};
  EXPECT_EQ(golden_gemm, 1);
}

TEST(Inputs, SplitMix64KnownSequence) {
  // The first outputs of SplitMix64 seeded with 0 (the reference implementation's well-known values).
  SplitMix64 g(0);
  EXPECT_EQ(g.next(), 0xE220A8397B1DCDAFull);
  EXPECT_EQ(g.next(), 0x6E789E6AA1B965F4ull);
  EXPECT_EQ(g.next(), 0x06C45D188009454Full);
}

TEST(Inputs, SeedsAndRanges) {
  // tensor_seed is FNV-1a 64 of "CASE.TENSOR"; FNV-1a 64 of "a" is 0xAF63DC4C8601EC8C (the FNV test vectors), so
  // tensor_seed("", "") hashes "." and tensor_seed("a", "") hashes "a.": check the first against the definition.
  EXPECT_EQ(tensor_seed("", ""), (0xCBF29CE484222325ull ^ '.') * 0x100000001B3ull);
  EXPECT_NE(tensor_seed("gemm_bfloat16_m1_n1_k1", "x"), tensor_seed("gemm_bfloat16_m1_n1_k1", "w"));
  auto a = random_bf16(1000, -1, 1, 42), b = random_bf16(1000, -1, 1, 42), c = random_bf16(1000, -1, 1, 43);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  for (auto x : a) {
    float f = bf16_to_float(x);
    EXPECT_GE(f, -1.0f);
    EXPECT_LE(f, 1.0f);  // a value just below 1 may round up to 1.0 in bf16
  }
  auto i8 = random_int8(100000, -128, 127, 7);
  int lo = 0, hi = 0;
  for (auto x : i8) lo = std::min<int>(lo, x), hi = std::max<int>(hi, x);
  EXPECT_EQ(lo, -128);
  EXPECT_EQ(hi, 127);
  for (auto x : random_e4m3(1000, -2, 2, 9)) {
    float f = e4m3_to_float(x);
    EXPECT_LE(std::fabs(f), 2.0f);
  }
}

TEST(Formats, Bf16) {
  EXPECT_EQ(float_to_bf16(1.0f), 0x3F80);
  EXPECT_EQ(float_to_bf16(-1.5f), 0xBFC0);
  EXPECT_EQ(float_to_bf16(1.00390625f), 0x3F80);  // 1 + 2^-8: the tie goes to the even 0x3F80
  EXPECT_EQ(float_to_bf16(1.01171875f), 0x3F82);  // 1 + 3 * 2^-8: the tie goes to the even 0x3F82
  EXPECT_EQ(float_to_bf16(std::nextafter(1.00390625f, 2.0f)), 0x3F81);
  EXPECT_EQ(bf16_to_float(0x4049), 3.140625f);
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
}

TEST(Formats, E4M3) {
  EXPECT_EQ(float_to_e4m3(0.0f), 0x00);
  EXPECT_EQ(float_to_e4m3(1.0f), 0x38);    // exponent 7 (bias 7), mantissa 0
  EXPECT_EQ(float_to_e4m3(-2.0f), 0xC0);
  EXPECT_EQ(float_to_e4m3(448.0f), 0x7E);  // the largest finite
  EXPECT_EQ(float_to_e4m3(1000.0f), 0x7E); // saturates
  EXPECT_EQ(float_to_e4m3(-1e9f), 0xFE);
  EXPECT_EQ(float_to_e4m3(0.001953125f), 0x01);  // 2^-9: the smallest subnormal (1/8 * 2^-6)
  EXPECT_EQ(float_to_e4m3(1.0625f), 0x38);  // halfway between 1 (0x38) and 1.125 (0x39): to even
  EXPECT_EQ(float_to_e4m3(1.1875f), 0x3A);  // halfway between 1.125 (0x39) and 1.25 (0x3A): to even
  EXPECT_EQ(float_to_e4m3(0.3f), 0x2A);     // 0.3125 (0.28125 is further)
  EXPECT_EQ(float_to_e4m3(std::nanf("")), 0x7F);
  EXPECT_EQ(e4m3_to_float(0x2A), 0.3125f);
  EXPECT_EQ(e4m3_to_float(0x7E), 448.0f);
  EXPECT_EQ(e4m3_to_float(0x08), 0.015625f);  // 2^-6: the smallest normal
  EXPECT_EQ(e4m3_to_float(0x07), 0.013671875f);  // 7/8 * 2^-6: the largest subnormal
  EXPECT_TRUE(std::isnan(e4m3_to_float(0xFF)));
  for (int b = 0; b < 256; ++b) {
    if ((b & 0x7F) == 0x7F) continue;
    float f = e4m3_to_float(static_cast<uint8_t>(b));
    EXPECT_EQ(float_to_e4m3(f), b) << "code " << b;
  }
}

class TempDir : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("tpusim_cuda_io_test_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string read(const std::string& name) {
    std::ifstream in(dir_ / name, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  fs::path dir_;
};

TEST_F(TempDir, NpyBytesAndRoundTrip) {
  std::string p = (dir_ / "a.npy").string();
  write_npy_f32(p, {2, 3}, {1, 2, 3, 4, 5, 6.5f});
  std::string bytes = read("a.npy");
  // numpy's own layout (np.save writes these same 128 header bytes): magic, version 1.0, header length
  // (little-endian), the dict padded with spaces and ended by '\n' so that the data starts at a multiple of 64.
  std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
  ASSERT_EQ(bytes.size(), 128u + 24u);  // 10 + 60 + 1 = 71 bytes of header, padded to 128
  EXPECT_EQ(bytes.substr(0, 8), std::string("\x93NUMPY\x01\x00", 8));
  EXPECT_EQ(static_cast<unsigned char>(bytes[8]), 118);  // 128 - 10
  EXPECT_EQ(bytes[9], 0);
  EXPECT_EQ(bytes.substr(10, dict.size()), dict);
  EXPECT_EQ(bytes.substr(10 + dict.size(), 128 - 11 - dict.size()), std::string(128 - 11 - dict.size(), ' '));
  EXPECT_EQ(bytes[127], '\n');
  NpyArray a = read_npy(p);
  EXPECT_EQ(a.descr, "<f4");
  EXPECT_EQ(a.shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(a.as_double(), (std::vector<double>{1, 2, 3, 4, 5, 6.5}));

  write_npy_i8((dir_ / "b.npy").string(), {4}, {-128, -1, 0, 127});
  EXPECT_NE(read("b.npy").find("'descr': '|i1', 'fortran_order': False, 'shape': (4,), }"), std::string::npos);
  a = read_npy((dir_ / "b.npy").string());
  EXPECT_EQ(a.as_double(), (std::vector<double>{-128, -1, 0, 127}));

  write_npy_i32((dir_ / "c.npy").string(), {}, {-7});  // a 0-d array
  EXPECT_NE(read("c.npy").find("'shape': (), }"), std::string::npos);
  a = read_npy((dir_ / "c.npy").string());
  EXPECT_TRUE(a.shape.empty());
  EXPECT_EQ(a.as_double(), (std::vector<double>{-7}));

  write_npy_bf16_as_f32((dir_ / "d.npy").string(), {1}, {0x4049});
  EXPECT_EQ(read_npy((dir_ / "d.npy").string()).as_double(), (std::vector<double>{3.140625}));
  write_npy_e4m3_as_f32((dir_ / "e.npy").string(), {2}, {0x2A, 0xC0});
  EXPECT_EQ(read_npy((dir_ / "e.npy").string()).as_double(), (std::vector<double>{0.3125, -2}));

  EXPECT_THROW(write_npy_f32(p, {2, 2}, {1, 2, 3}), std::invalid_argument);
  EXPECT_THROW(write_npy_f32((dir_ / "no/such/dir.npy").string(), {1}, {1}), std::runtime_error);
  EXPECT_THROW(read_npy((dir_ / "missing.npy").string()), std::runtime_error);
}

CaseResult result(const std::string& line, double us, bool ok = true) {
  CaseResult r;
  r.c = parse_corpus(line, "x").at(0);
  r.ok = ok;
  r.median_us = us;
  r.min_us = us - 1;
  r.max_us = us + 1;
  r.repeats = 5;
  r.algorithm = "algo \"1\"";
  if (!ok) r.error = "boom\nline two";
  return r;
}

TEST_F(TempDir, ResultCsvsInTheGoldensFormat) {
  EXPECT_EQ(results_header("gemm"), "dtype,m,n,k,latency_us");
  EXPECT_EQ(results_header("causal_attention"), "batch_size,seq_len,heads,kv_heads,head_dim,latency_us");
  EXPECT_EQ(results_header("conv"), "dtype,n,h,w,c,k,r,s,stride,pad,latency_us");
  EXPECT_EQ(results_header("softmax"), "dtype,rows,cols,latency_us");
  EXPECT_EQ(results_header("gelu"), "dtype,elements,latency_us");
  std::vector<CaseResult> rs = {result("gemm,bfloat16,1,4096,8192", 22.62399),
                                result("causal_attention,bfloat16,1,4096,32,8,128", 334.43731),
                                result("gemm,fp8,16,32,64", 12.5), result("gemm,int8,4,8,8", 3, false),
                                result("add,bfloat16,64", 2.00006)};
  auto files = write_results(dir_.string(), rs);
  ASSERT_EQ(files.size(), 3u);  // gemm, add, causal_attention: the ops with a successful case
  EXPECT_EQ(read("gemm.csv"), "dtype,m,n,k,latency_us\nbfloat16,1,4096,8192,22.6240\nfp8,16,32,64,12.5000\n");
  EXPECT_EQ(read("causal_attention.csv"), "batch_size,seq_len,heads,kv_heads,head_dim,latency_us\n1,4096,32,8,128,334.4373\n");
  EXPECT_EQ(read("add.csv"), "dtype,elements,latency_us\nbfloat16,64,2.0001\n");
  EXPECT_FALSE(fs::exists(dir_ / "softmax.csv"));
}

TEST(Meta, JsonEscapingAndCases) {
  EXPECT_EQ(json_string("a\"b\\c\nd\x01"), "\"a\\\"b\\\\c\\nd\\u0001\"");
  std::ostringstream os;
  write_meta_json(os, {{"gpu", json_string("NVIDIA H200")}, {"repeats", "20"}},
                  {result("gemm,int8,4,8,8", 3.25), result("gelu,bfloat16,10", 1, false)});
  EXPECT_EQ(os.str(),
            "{\n"
            "  \"gpu\": \"NVIDIA H200\",\n"
            "  \"repeats\": 20,\n"
            "  \"cases\": [\n"
            "    {\"name\": \"gemm_int8_m4_n8_k8\", \"op\": \"gemm\", \"dtype\": \"int8\", \"dims\": {\"m\": 4, \"n\": 8, "
            "\"k\": 8}, \"status\": \"ok\", \"median_us\": 3.2500, \"min_us\": 2.2500, \"max_us\": 4.2500, \"repeats\": 5, "
            "\"algorithm\": \"algo \\\"1\\\"\", \"npy\": false},\n"
            "    {\"name\": \"gelu_bfloat16_e10\", \"op\": \"gelu\", \"dtype\": \"bfloat16\", \"dims\": {\"elements\": 10}, "
            "\"status\": \"failed\", \"error\": \"boom\\nline two\"}\n"
            "  ]\n"
            "}\n");
}

TEST(Results, Median) {
  EXPECT_EQ(median({3}), 3);
  EXPECT_EQ(median({5, 1, 3}), 3);
  EXPECT_EQ(median({4, 1, 3, 2}), 2.5);
  EXPECT_THROW(median({}), std::invalid_argument);
}

}  // namespace
