// .npy reading and writing: round trips, files numpy wrote, files numpy reads, and every malformed case.
#include "tpusim/runtime/npy.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "tpusim/isa/numerics.h"

#ifndef TPUSIM_TEST_PYTHON
#define TPUSIM_TEST_PYTHON "/usr/bin/python3"
#endif

namespace {

namespace fs = std::filesystem;
using tpusim::isa::DType;
using tpusim::runtime::Error;
using tpusim::runtime::HostTensor;
using tpusim::runtime::read_npy;
using tpusim::runtime::write_npy;

template <class T>
HostTensor make(DType dtype, std::vector<int64_t> shape, const std::vector<T>& values) {
  HostTensor t;
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.data.resize(values.size() * sizeof(T));
  if (!values.empty()) std::memcpy(t.data.data(), values.data(), t.data.size());
  return t;
}

template <class T>
std::vector<T> values_of(const HostTensor& t) {
  std::vector<T> v(t.data.size() / sizeof(T));
  if (!v.empty()) std::memcpy(v.data(), t.data.data(), v.size() * sizeof(T));
  return v;
}

bool have_numpy() {
  static const bool ok = std::system(TPUSIM_TEST_PYTHON " -c 'import numpy' >/dev/null 2>&1") == 0;
  return ok;
}

class Npy : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() /
           ("tpusim_npy_" + std::to_string(::getpid()) + "_" + info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  void write_bytes(const std::string& name, const std::string& bytes) const {
    std::ofstream f(path(name), std::ios::binary | std::ios::trunc);
    f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  std::string read_bytes(const std::string& name) const {
    std::ifstream f(path(name), std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
  }
  // Runs a Python script (with numpy imported as np, and the test's directory as the working directory);
  // returns its exit status.
  int python(const std::string& code) const {
    std::ofstream(path("script.py")) << "import numpy as np\nimport os\nos.chdir(" << '\'' << dir_.string()
                                     << "')\n" << code;
    std::string cmd = std::string(TPUSIM_TEST_PYTHON) + " '" + path("script.py") + "'";
    return std::system(cmd.c_str());
  }

  fs::path dir_;
};

// A .npy file with the given header dict text (padded as numpy does), format version and data.
std::string npy(const std::string& dict, const std::string& data = "", int major = 1, int minor = 0) {
  size_t prefix = major == 1 ? 10 : 12;
  std::string h = dict;
  while ((prefix + h.size() + 1) % 64) h += ' ';
  h += '\n';
  std::string out = "\x93NUMPY";
  out += static_cast<char>(major);
  out += static_cast<char>(minor);
  for (size_t i = 0; i < prefix - 8; ++i) out += static_cast<char>((h.size() >> (8 * i)) & 0xff);
  return out + h + data;
}

// ---- round trips ----

TEST_F(Npy, RoundTripInt8) {
  std::vector<int8_t> v = {-128, -1, 0, 1, 2, 3, 100, 127, -7, 42, 5, -99};
  write_npy(path("a.npy"), make(DType::I8, {3, 4}, v));
  HostTensor t = read_npy(path("a.npy"));
  EXPECT_EQ(t.dtype, DType::I8);
  EXPECT_EQ(t.shape, (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(values_of<int8_t>(t), v);
}

TEST_F(Npy, RoundTripInt32) {
  std::vector<int32_t> v = {std::numeric_limits<int32_t>::min(), -1, 0, 1, 65536, std::numeric_limits<int32_t>::max()};
  write_npy(path("a.npy"), make(DType::I32, {2, 1, 3}, v));
  HostTensor t = read_npy(path("a.npy"));
  EXPECT_EQ(t.dtype, DType::I32);
  EXPECT_EQ(t.shape, (std::vector<int64_t>{2, 1, 3}));
  EXPECT_EQ(values_of<int32_t>(t), v);
}

TEST_F(Npy, RoundTripFloat32BitExact) {
  std::vector<float> v = {0.0f, -0.0f, 1.5f, -3.25e-3f, std::numeric_limits<float>::infinity(),
                          -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::denorm_min(),
                          tpusim::isa::f32_from_bits(0x7fc01234u)};  // a NaN with a payload
  HostTensor in = make(DType::F32, {8}, v);
  write_npy(path("a.npy"), in);
  HostTensor t = read_npy(path("a.npy"));
  EXPECT_EQ(t.dtype, DType::F32);
  EXPECT_EQ(t.shape, (std::vector<int64_t>{8}));
  EXPECT_EQ(t.data, in.data);
}

TEST_F(Npy, Bf16IsWrittenAsExactFloat32) {
  std::vector<uint16_t> h = {0x3f80, 0xc0a0, 0x7f80, 0xff80, 0x0001, 0x8000, 0x7fc1, 0x4049};
  write_npy(path("a.npy"), make(DType::BF16, {2, 4}, h));
  HostTensor t = read_npy(path("a.npy"));
  EXPECT_EQ(t.dtype, DType::F32);
  EXPECT_EQ(t.shape, (std::vector<int64_t>{2, 4}));
  std::vector<float> f = values_of<float>(t);
  ASSERT_EQ(f.size(), h.size());
  for (size_t i = 0; i < h.size(); ++i) {
    EXPECT_EQ(tpusim::isa::bits_from_f32(f[i]), uint32_t{h[i]} << 16) << i;
  }
}

// f8e4m3 likewise (numpy has no fp8 type): each pattern's value, exactly, as the format defines it: 1.0
// (0.0111.000), -2.5 (1.1000.010), 448 (0.1111.110), the least subnormal 2^-9 (0.0000.001), -0, NaN (0.1111.111).
TEST_F(Npy, F8E4M3IsWrittenAsExactFloat32) {
  std::vector<uint8_t> b = {0x38, 0xc2, 0x7e, 0x01, 0x80, 0x7f};
  write_npy(path("f8.npy"), make(DType::F8E4M3, {6}, b));
  HostTensor t = read_npy(path("f8.npy"));
  EXPECT_EQ(t.dtype, DType::F32);
  std::vector<float> f = values_of<float>(t);
  ASSERT_EQ(f.size(), 6u);
  EXPECT_EQ(f[0], 1.0f);
  EXPECT_EQ(f[1], -2.5f);
  EXPECT_EQ(f[2], 448.0f);
  EXPECT_EQ(f[3], 0x1p-9f);
  EXPECT_EQ(tpusim::isa::bits_from_f32(f[4]), 0x80000000u);
  EXPECT_TRUE(std::isnan(f[5]));
}

TEST_F(Npy, ZeroDimensionalAndEmptyArrays) {
  write_npy(path("s.npy"), make(DType::F32, {}, std::vector<float>{2.5f}));
  HostTensor s = read_npy(path("s.npy"));
  EXPECT_TRUE(s.shape.empty());
  EXPECT_EQ(s.elements(), 1);
  EXPECT_EQ(values_of<float>(s), std::vector<float>{2.5f});

  write_npy(path("e.npy"), make(DType::I32, {0, 5}, std::vector<int32_t>{}));
  HostTensor e = read_npy(path("e.npy"));
  EXPECT_EQ(e.shape, (std::vector<int64_t>{0, 5}));
  EXPECT_EQ(e.elements(), 0);
  EXPECT_TRUE(e.data.empty());
}

TEST_F(Npy, WritesVersion1WithDataAligned) {
  write_npy(path("a.npy"), make(DType::I32, {3}, std::vector<int32_t>{1, 2, 3}));
  std::string b = read_bytes("a.npy");
  ASSERT_GE(b.size(), 10u);
  EXPECT_EQ(b.substr(0, 8), std::string("\x93NUMPY\x01\x00", 8));
  size_t hlen = static_cast<unsigned char>(b[8]) | static_cast<unsigned char>(b[9]) << 8;
  EXPECT_EQ((10 + hlen) % 64, 0u);
  EXPECT_EQ(b.size(), 10 + hlen + 12);
  EXPECT_EQ(b[10 + hlen - 1], '\n');
  EXPECT_NE(b.find("{'descr': '<i4', 'fortran_order': False, 'shape': (3,), }"), std::string::npos);
}

TEST_F(Npy, WriteRejectsInconsistentTensors) {
  HostTensor bad = make(DType::F32, {2, 3}, std::vector<float>(5));
  try {
    write_npy(path("a.npy"), bad);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind(path("a.npy") + ": ", 0), 0u) << e.what();
    EXPECT_NE(std::string(e.what()).find("needs 24"), std::string::npos) << e.what();
  }
  EXPECT_THROW(write_npy(path("b.npy"), make(DType::F32, {-1, 3}, std::vector<float>{})), Error);
  EXPECT_THROW(write_npy(path("no/such/dir/c.npy"), make(DType::F32, {1}, std::vector<float>{1})), Error);
}

TEST(HostTensor, Elements) {
  HostTensor t;
  EXPECT_EQ(t.elements(), 1);
  t.shape = {2, 3, 4};
  EXPECT_EQ(t.elements(), 24);
  t.shape = {7, 0};
  EXPECT_EQ(t.elements(), 0);
}

// ---- interoperability with numpy ----

TEST_F(Npy, ReadsFilesNumpyWrote) {
  if (!have_numpy()) GTEST_FAIL() << TPUSIM_TEST_PYTHON << " cannot import numpy (run scripts/setup.sh)";
  ASSERT_EQ(python(R"(
np.save('i8.npy', np.arange(-6, 6, dtype=np.int8).reshape(3, 4))
np.save('i4.npy', (np.arange(10, dtype=np.int32) * 123457 - 600000).reshape(2, 5))
np.save('f4.npy', np.arange(24, dtype=np.float32).reshape(2, 3, 4) / np.float32(7))
np.save('scalar.npy', np.float32(-2.5))
np.save('empty.npy', np.zeros((0, 3), dtype=np.float32))
a = np.arange(12, dtype=np.float32).reshape(3, 4) / np.float32(3)
for v in [(1, 0), (2, 0), (3, 0)]:
    with open('v%d.npy' % v[0], 'wb') as f:
        np.lib.format.write_array(f, a, version=v)
)"),
            0);
  HostTensor i8 = read_npy(path("i8.npy"));
  EXPECT_EQ(i8.dtype, DType::I8);
  EXPECT_EQ(i8.shape, (std::vector<int64_t>{3, 4}));
  std::vector<int8_t> vi8 = values_of<int8_t>(i8);
  for (int i = 0; i < 12; ++i) EXPECT_EQ(vi8[i], i - 6);

  HostTensor i4 = read_npy(path("i4.npy"));
  EXPECT_EQ(i4.dtype, DType::I32);
  EXPECT_EQ(i4.shape, (std::vector<int64_t>{2, 5}));
  std::vector<int32_t> vi4 = values_of<int32_t>(i4);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(vi4[i], i * 123457 - 600000);

  HostTensor f4 = read_npy(path("f4.npy"));
  EXPECT_EQ(f4.dtype, DType::F32);
  EXPECT_EQ(f4.shape, (std::vector<int64_t>{2, 3, 4}));
  std::vector<float> vf4 = values_of<float>(f4);
  for (int i = 0; i < 24; ++i) EXPECT_EQ(vf4[i], static_cast<float>(i) / 7.0f) << i;

  HostTensor s = read_npy(path("scalar.npy"));
  EXPECT_TRUE(s.shape.empty());
  EXPECT_EQ(values_of<float>(s), std::vector<float>{-2.5f});

  HostTensor e = read_npy(path("empty.npy"));
  EXPECT_EQ(e.shape, (std::vector<int64_t>{0, 3}));
  EXPECT_TRUE(e.data.empty());

  for (const char* name : {"v1.npy", "v2.npy", "v3.npy"}) {
    HostTensor v = read_npy(path(name));
    EXPECT_EQ(v.shape, (std::vector<int64_t>{3, 4})) << name;
    std::vector<float> vv = values_of<float>(v);
    for (int i = 0; i < 12; ++i) EXPECT_EQ(vv[i], static_cast<float>(i) / 3.0f) << name << " " << i;
  }
}

// ONNX models take token ids as int64; the chip's integer inputs are int32: values are narrowed, range-checked.
TEST_F(Npy, Int64IsReadAsInt32) {
  if (!have_numpy()) GTEST_FAIL() << TPUSIM_TEST_PYTHON << " cannot import numpy (run scripts/setup.sh)";
  ASSERT_EQ(python("np.save('i64.npy', np.array([[-2147483648, -1, 0], [1, 30521, 2147483647]], dtype=np.int64))"), 0);
  HostTensor t = read_npy(path("i64.npy"));
  EXPECT_EQ(t.dtype, DType::I32);
  EXPECT_EQ(t.shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(values_of<int32_t>(t), (std::vector<int32_t>{INT32_MIN, -1, 0, 1, 30521, INT32_MAX}));
}

TEST_F(Npy, RejectsWhatNumpyWritesButWeDoNotSupport) {
  if (!have_numpy()) GTEST_FAIL() << TPUSIM_TEST_PYTHON << " cannot import numpy (run scripts/setup.sh)";
  ASSERT_EQ(python(R"(
np.save('f8.npy', np.zeros((2, 2)))
np.save('i64big.npy', np.array([1, 2**31], dtype=np.int64))
np.save('u8.npy', np.zeros(3, dtype=np.uint8))
np.save('f2.npy', np.zeros(3, dtype=np.float16))
np.save('b.npy', np.zeros(3, dtype=bool))
np.save('be.npy', np.zeros(3, dtype='>f4'))
np.save('fortran.npy', np.arange(6, dtype=np.float32).reshape(2, 3).T)
np.save('struct.npy', np.zeros(2, dtype=[('a', '<f4'), ('b', '<i4')]))
)"),
            0);
  auto message = [&](const std::string& name) -> std::string {
    try {
      read_npy(path(name));
    } catch (const Error& e) {
      return e.what();
    }
    return "(no error)";
  };
  EXPECT_EQ(message("f8.npy"), path("f8.npy") + ": dtype float64 is not supported (use float32, int32, int64 or int8)");
  EXPECT_EQ(message("i64big.npy"), path("i64big.npy") + ": int64 element 1 = 2147483648 does not fit the int32 "
                                   "the chip uses for integer inputs");
  EXPECT_EQ(message("u8.npy"), path("u8.npy") + ": dtype uint8 is not supported (use float32, int32, int64 or int8)");
  EXPECT_EQ(message("f2.npy"), path("f2.npy") + ": dtype float16 is not supported (use float32, int32, int64 or int8)");
  EXPECT_EQ(message("b.npy"), path("b.npy") + ": dtype bool is not supported (use float32, int32, int64 or int8)");
  EXPECT_NE(message("be.npy").find("big-endian"), std::string::npos) << message("be.npy");
  EXPECT_NE(message("fortran.npy").find("Fortran"), std::string::npos) << message("fortran.npy");
  EXPECT_NE(message("struct.npy").find("structured"), std::string::npos) << message("struct.npy");
}

TEST_F(Npy, NumpyReadsFilesWeWrote) {
  if (!have_numpy()) GTEST_FAIL() << TPUSIM_TEST_PYTHON << " cannot import numpy (run scripts/setup.sh)";
  write_npy(path("i8.npy"), make(DType::I8, {2, 3}, std::vector<int8_t>{-128, -1, 0, 1, 2, 127}));
  write_npy(path("i4.npy"), make(DType::I32, {3}, std::vector<int32_t>{-2147483647 - 1, 0, 2147483647}));
  write_npy(path("f4.npy"), make(DType::F32, {2, 2}, std::vector<float>{0.5f, -1.25f, 3e38f, 1e-40f}));
  write_npy(path("bf.npy"), make(DType::BF16, {2}, std::vector<uint16_t>{0x3fc0, 0xc2f7}));
  write_npy(path("s.npy"), make(DType::I32, {}, std::vector<int32_t>{7}));
  write_npy(path("e.npy"), make(DType::F32, {4, 0}, std::vector<float>{}));
  EXPECT_EQ(python(R"(
def check(name, dtype, expected):
    a = np.load(name)
    e = np.array(expected, dtype=dtype)
    assert a.dtype == e.dtype, (name, a.dtype)
    assert a.shape == e.shape, (name, a.shape)
    assert a.tobytes() == e.tobytes(), (name, a, e)
check('i8.npy', np.int8, [[-128, -1, 0], [1, 2, 127]])
check('i4.npy', np.int32, [-2147483648, 0, 2147483647])
check('f4.npy', np.float32, [[0.5, -1.25], [3e38, 1e-40]])
check('bf.npy', np.float32, [1.5, -123.5])
check('s.npy', np.int32, 7)
check('e.npy', np.float32, np.zeros((4, 0)))
)"),
            0);
}

// ---- malformed files: each is one clear line naming the file, never a crash ----

struct Bad {
  const char* name;
  std::string bytes;
  const char* expect;  // part of the message
};

TEST_F(Npy, MalformedFilesAreClearErrors) {
  const std::string f12(48, '\0');  // 12 float32 zeros
  std::string nested = "{'descr': '<f4', 'fortran_order': False, 'shape': " + std::string(200, '(') +
                       std::string(200, ')') + "}";
  std::vector<Bad> cases = {
      {"empty", "", "empty file"},
      {"short", "abc", "not a .npy file"},
      {"magic", std::string("\x93NUMPZ\x01\x00\x02\x00{}", 12), "does not start with"},
      {"text", "hello, this is not a numpy file at all", "does not start with"},
      {"version4", npy("{'descr': '<f4', 'fortran_order': False, 'shape': (12,), }", f12, 4, 0), "version 4.0"},
      {"version11", npy("{'descr': '<f4', 'fortran_order': False, 'shape': (12,), }", f12, 1, 1), "version 1.1"},
      {"prefix", std::string("\x93NUMPY\x02\x00\x10", 9), "truncated .npy header"},
      {"hlen", std::string("\x93NUMPY\x01\x00\xff\x7f{'descr'", 17), "truncated .npy header"},
      {"notdict", npy("hello"), "malformed .npy header"},
      {"unclosed", npy("{'descr': '<f4', 'fortran_order': False, 'shape': (12,"), "malformed .npy header"},
      {"unterminated", npy("{'descr': '<f4, 'fortran_order': False}"), "malformed .npy header"},
      {"noshape", npy("{'descr': '<f4', 'fortran_order': False}"), "no 'shape'"},
      {"nodescr", npy("{'shape': (1,), 'fortran_order': False}"), "no 'descr'"},
      {"extra", npy("{'descr': '<f4', 'fortran_order': False, 'shape': (12,), 'x': 1}", f12), "unexpected key"},
      {"twice", npy("{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (12,)}", f12),
       "appears twice"},
      {"shapeint", npy("{'descr': '<f4', 'fortran_order': False, 'shape': 12}", f12), "'shape' is not a tuple"},
      {"negative", npy("{'descr': '<f4', 'fortran_order': False, 'shape': (-1, 12)}", f12), "non-negative"},
      {"shapestr", npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 'a')}", f12), "non-negative"},
      {"overflow",
       npy("{'descr': '<f4', 'fortran_order': False, 'shape': (4611686018427387904, 4611686018427387904)}", f12),
       "too large"},
      {"bigint", npy("{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999999,)}", f12),
       "integer too large"},
      {"descrint", npy("{'descr': 5, 'fortran_order': False, 'shape': (12,)}", f12), "'descr' is not a string"},
      {"structured", npy("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (12,)}", f12), "structured"},
      {"fortran", npy("{'descr': '<f4', 'fortran_order': True, 'shape': (3, 4)}", f12), "Fortran"},
      {"fortranint", npy("{'descr': '<f4', 'fortran_order': 1, 'shape': (12,)}", f12), "'fortran_order'"},
      {"bigendian", npy("{'descr': '>f4', 'fortran_order': False, 'shape': (12,)}", f12), "big-endian"},
      {"bigendian32", npy("{'descr': '>i4', 'fortran_order': False, 'shape': (12,)}", f12), "big-endian"},
      {"float64", npy("{'descr': '<f8', 'fortran_order': False, 'shape': (6,)}", f12),
       "dtype float64 is not supported (use float32, int32, int64 or int8)"},
      {"int16", npy("{'descr': '<i2', 'fortran_order': False, 'shape': (24,)}", f12), "dtype int16 is not supported"},
      {"pipef4", npy("{'descr': '|f4', 'fortran_order': False, 'shape': (12,)}", f12), "malformed dtype"},
      {"weird", npy("{'descr': 'zz', 'fortran_order': False, 'shape': (12,)}", f12), "dtype 'zz' is not supported"},
      {"truncated", npy("{'descr': '<f4', 'fortran_order': False, 'shape': (13,), }", f12), "truncated data"},
      {"trailing", npy("{'descr': '<f4', 'fortran_order': False, 'shape': (11,), }", f12), "unexpected bytes"},
      {"garbage", npy("{'descr': '<f4', 'fortran_order': False, 'shape': (12,), } x", f12), "malformed .npy header"},
      {"nested", npy(nested, f12), "nesting too deep"},
  };
  for (const Bad& c : cases) {
    std::string p = path(std::string(c.name) + ".npy");
    write_bytes(std::string(c.name) + ".npy", c.bytes);
    try {
      HostTensor t = read_npy(p);
      ADD_FAILURE() << c.name << ": no error";
    } catch (const Error& e) {
      std::string m = e.what();
      EXPECT_EQ(m.rfind(p + ": ", 0), 0u) << c.name << ": " << m;
      EXPECT_NE(m.find(c.expect), std::string::npos) << c.name << ": " << m;
      EXPECT_EQ(m.find('\n'), std::string::npos) << c.name << ": " << m;
    }
  }
}

TEST_F(Npy, MissingFileAndDirectory) {
  try {
    read_npy(path("nope.npy"));
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), path("nope.npy") + ": no such file");
  }
  fs::create_directories(path("d.npy"));
  EXPECT_THROW(read_npy(path("d.npy")), Error);
}

TEST_F(Npy, EveryTruncationIsAnError) {
  write_npy(path("a.npy"), make(DType::F32, {3, 5}, std::vector<float>(15, 1.0f)));
  std::string full = read_bytes("a.npy");
  for (size_t n = 0; n < full.size(); ++n) {
    write_bytes("t.npy", full.substr(0, n));
    EXPECT_THROW(read_npy(path("t.npy")), Error) << "truncated to " << n << " bytes";
  }
}

TEST_F(Npy, CorruptHeadersNeverCrash) {
  write_npy(path("a.npy"), make(DType::I32, {2, 3}, std::vector<int32_t>{1, 2, 3, 4, 5, 6}));
  std::string full = read_bytes("a.npy");
  const char replacements[] = {'\0', '\xff', '(', ')', '\'', '"', '9', ',', '-', '{', '}', ' ', 'L', '['};
  int errors = 0, reads = 0;
  for (size_t pos = 0; pos < 64; ++pos) {
    for (char r : replacements) {
      std::string b = full;
      b[pos] = r;
      write_bytes("c.npy", b);
      try {
        HostTensor t = read_npy(path("c.npy"));
        EXPECT_EQ(t.data.size(), static_cast<size_t>(t.elements()) * 4);
        ++reads;
      } catch (const Error&) {
        ++errors;
      } catch (const std::exception& e) {
        ADD_FAILURE() << "byte " << pos << " = " << int(r) << ": unexpected exception " << e.what();
      }
    }
  }
  EXPECT_GT(errors, 0);
  EXPECT_GT(reads, 0);
}

// Output names come from models and programs, which may be anyone's: each maps to one file name that stays in its
// folder (no '/', never "." or ".."), and different names to different files (issue 13, finding 1).
TEST(NpyFileName, KeepsNamesInTheFolderAndApart) {
  EXPECT_EQ(tpusim::runtime::npy_file_name("logits"), "logits.npy");
  EXPECT_EQ(tpusim::runtime::npy_file_name("/fc/Relu_output_0"), "%2Ffc%2FRelu_output_0.npy");
  EXPECT_EQ(tpusim::runtime::npy_file_name("../x"), "%2E.%2Fx.npy");
  EXPECT_EQ(tpusim::runtime::npy_file_name("."), "%2E.npy");
  EXPECT_EQ(tpusim::runtime::npy_file_name("a%2Fb"), "a%252Fb.npy");  // '%' itself is escaped: "a/b" and "a%2Fb" stay apart
  EXPECT_NE(tpusim::runtime::npy_file_name("a/b"), tpusim::runtime::npy_file_name("a%2Fb"));
  std::string a(300, 'a'), b = a;
  b.back() = 'b';
  EXPECT_LE(tpusim::runtime::npy_file_name(a).size(), 200u);
  EXPECT_NE(tpusim::runtime::npy_file_name(a), tpusim::runtime::npy_file_name(b));  // long names differ by their hash
  for (const std::string& n : {std::string("\x01/\xff"), a, std::string("..")})
    EXPECT_EQ(tpusim::runtime::npy_file_name(n).find('/'), std::string::npos) << n;
}

}  // namespace
