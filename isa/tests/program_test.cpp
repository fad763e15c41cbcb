// The .tpub binary format: round trips, and corrupt input that must end in isa::Error, never a crash.
#include "tpusim/isa/program.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <limits>
#include <random>

#include "tpusim/isa/assembler.h"

namespace tpusim::isa {
namespace {

Program small_program() {
  return assemble(
      ".name \"small\"\n"
      ".input X, bf16, [2, 3] @ 0x1000\n"
      ".const W, i8, [2, 2] @ 0x2000\n"
      ".data \"01020304\"\n"
      ".output Y, f32, [2] @ 0x3000\n"
      "li r1, X\n"
      "dma.ld r2, r1, r3, r4, r5, r6, signal=s1\n"
      "halt\n",
      "small.s");
}

std::string error_of(const std::vector<uint8_t>& bytes) {
  try {
    deserialize(bytes);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

void put_u32(std::vector<uint8_t>& b, size_t at, uint32_t v) {
  for (int i = 0; i < 4; ++i) b[at + i] = static_cast<uint8_t>(v >> (8 * i));
}

// Offset of the payload of the first section with `id`, walking the section headers.
size_t payload_of(const std::vector<uint8_t>& b, uint32_t id) {
  size_t at = 12;
  while (at + 12 <= b.size()) {
    uint32_t sid;
    uint64_t len;
    std::memcpy(&sid, &b[at], 4);  // the tests run on little-endian hosts, like the format
    std::memcpy(&len, &b[at + 4], 8);
    if (sid == id) return at + 12;
    at += 12 + len;
  }
  return 0;
}

TEST(Program, Helpers) {
  Program p = small_program();
  EXPECT_STREQ(tensor_kind_name(TensorKind::Const), "const");
  EXPECT_EQ(p.find("X")->elements(), 6);
  EXPECT_EQ(p.find("X")->bytes(), 12u);
  EXPECT_EQ(p.find("nope"), nullptr);
  EXPECT_EQ(p.hbm_footprint(), 0x3008u);
  EXPECT_EQ(Program{}.hbm_footprint(), 0u);
}

TEST(ProgramFormat, RoundTrip) {
  Program p = small_program();
  ASSERT_EQ(p.source.size(), 3u);
  std::vector<uint8_t> bytes = serialize(p);
  ASSERT_EQ(std::string(bytes.begin(), bytes.begin() + 4), "TPUB");
  EXPECT_EQ(deserialize(bytes), p);
  p.source.clear();  // without the optional source section
  EXPECT_EQ(deserialize(serialize(p)), p);
  EXPECT_EQ(deserialize(serialize(Program{})), Program{});
}

TEST(ProgramFormat, RegionsRoundTrip) {
  Program p = small_program();
  p.regions = {{"node", "fc1", 0, 3, 2.0 * 64 * 128 * 256, 1.0 / 3}, {"kernel", "gemm.s", 1, 3}};
  std::vector<uint8_t> bytes = serialize(p);
  EXPECT_EQ(deserialize(bytes), p);
  EXPECT_EQ(deserialize(bytes).regions[0].flops, 4194304.0);
  EXPECT_EQ(deserialize(bytes).regions[0].bytes, 1.0 / 3);  // bit for bit
  // Each region ends in its flops and bytes as little-endian IEEE 754 doubles.
  const size_t end = payload_of(bytes, 6) + 4 + (4 + 4 + 4 + 3 + 4 + 4) + 8 + 8;  // past region 0
  double flops, nbytes;
  std::memcpy(&flops, &bytes[end - 16], 8);
  std::memcpy(&nbytes, &bytes[end - 8], 8);
  EXPECT_EQ(flops, 4194304.0);
  EXPECT_EQ(nbytes, 1.0 / 3);
  // A program without regions has no regions section: files stay as they were before regions existed.
  EXPECT_EQ(payload_of(serialize(small_program()), 6), 0u);
  EXPECT_NE(payload_of(bytes, 6), 0u);
}

TEST(ProgramFormat, IdealBytesRoundTripInTheirOwnSection) {
  Program p = small_program();
  p.regions = {{"node", "fc1", 0, 3, 4096, 3000}, {"kernel", "gemm.s", 1, 3}};
  const std::vector<uint8_t> without = serialize(p);  // regions, no ideal bytes: no section 9
  EXPECT_EQ(payload_of(without, 9), 0u);
  p.regions[0].ideal_bytes = 1.0 / 3;
  p.ideal_bytes = 2.5e9;
  const std::vector<uint8_t> bytes = serialize(p);
  EXPECT_EQ(deserialize(bytes), p);
  EXPECT_EQ(deserialize(bytes).regions[0].ideal_bytes, 1.0 / 3);  // bit for bit
  EXPECT_EQ(deserialize(bytes).ideal_bytes, 2.5e9);
  // Section 9: f64 the program's, u32 the region count, then an f64 per region. The other sections keep the
  // layout they had without it, so that older files still load and older readers skip it.
  const size_t at = payload_of(bytes, 9);
  ASSERT_NE(at, 0u);
  double program = 0, first = 0, second = -1;
  uint32_t count = 0;
  std::memcpy(&program, &bytes[at], 8);
  std::memcpy(&count, &bytes[at + 8], 4);
  std::memcpy(&first, &bytes[at + 12], 8);
  std::memcpy(&second, &bytes[at + 20], 8);
  EXPECT_EQ(program, 2.5e9);
  EXPECT_EQ(count, 2u);
  EXPECT_EQ(first, 1.0 / 3);
  EXPECT_EQ(second, 0.0);
  EXPECT_EQ(std::vector<uint8_t>(bytes.begin() + 12, bytes.begin() + static_cast<std::ptrdiff_t>(at) - 12),
            std::vector<uint8_t>(without.begin() + 12, without.end()));
  // A program ideal alone (no regions) has the section too, with a count of 0.
  Program q = small_program();
  q.ideal_bytes = 7;
  EXPECT_EQ(deserialize(serialize(q)), q);

  // Errors: a count that is not the regions', a value that is not a finite count >= 0, the section twice.
  std::vector<uint8_t> bad = bytes;  // one region value: the count says 1, the section holds 1 (it is the last)
  put_u32(bad, at + 8, 1);
  put_u32(bad, at - 8, 8 + 4 + 8);
  bad.resize(bad.size() - 8);
  EXPECT_NE(error_of(bad).find("section 9 (ideal bytes) has 1 region values for 2 regions"), std::string::npos)
      << error_of(bad);
  bad = bytes;
  const double minus = -1;
  std::memcpy(&bad[at], &minus, 8);
  EXPECT_EQ(error_of(bad), "program: byte " + std::to_string(at) + ": the program's ideal bytes -1 are not a finite "
                           "count >= 0");
  bad = bytes;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  std::memcpy(&bad[at + 12], &nan, 8);
  EXPECT_NE(error_of(bad).find("region 0 (node 'fc1', [0, 3)): ideal_bytes nan is not a finite count >= 0"),
            std::string::npos)
      << error_of(bad);
  bad = bytes;
  bad.insert(bad.end(), bytes.begin() + static_cast<std::ptrdiff_t>(at) - 12, bytes.end());  // section 9 again
  put_u32(bad, 8, static_cast<uint32_t>(bad[8]) + 1);
  EXPECT_NE(error_of(bad).find("duplicate section 9 (ideal bytes)"), std::string::npos) << error_of(bad);
}

TEST(ProgramFormat, BadRegionsAreErrors) {
  auto error_with = [](std::vector<Region> regions) {
    Program p = small_program();  // 3 instructions
    p.regions = std::move(regions);
    std::vector<uint8_t> bytes = serialize(p);
    std::string e = error_of(bytes);
    std::string at = "program: byte " + std::to_string(payload_of(bytes, 6) - 12) + ": ";
    EXPECT_EQ(e.rfind(at, 0), 0u) << e;
    return e.substr(std::min(e.size(), at.size()));
  };
  EXPECT_EQ(error_with({{"node", "a", 1, 4}}), "region 0 (node 'a', [1, 4)) ends past the code (3 instructions)");
  EXPECT_EQ(error_with({{"node", "a", 2, 2}}), "region 0 (node 'a', [2, 2)) holds no instructions");
  EXPECT_EQ(error_with({{"node", "a", 2, 1}}), "region 0 (node 'a', [2, 1)) holds no instructions");
  EXPECT_EQ(error_with({{"node", "a", 0, 2}, {"node", "b", 1, 3}}),
            "region 1 (node 'b', [1, 3)) overlaps region 0 (node 'a', [0, 2)) without nesting in it");
  EXPECT_EQ(error_with({{"node", "a", 1, 2}, {"node", "b", 0, 1}}),
            "region 1 (node 'b', [0, 1)) begins before the region listed before it (regions are listed by begin)");
  EXPECT_EQ(error_with({{"kernel", "in", 0, 1}, {"node", "out", 0, 3}}),
            "region 1 (node 'out', [0, 3)) overlaps region 0 (kernel 'in', [0, 1)) without nesting in it");
  EXPECT_EQ(error_with({{"no de", "a", 0, 1}}), "region 0 (no de 'a', [0, 1)): the kind is not an identifier");
  EXPECT_EQ(error_with({{"node", "a", 0, 1, -1}}),
            "region 0 (node 'a', [0, 1)): flops -1 is not a finite count >= 0");
  EXPECT_EQ(error_with({{"node", "a", 0, 1, 0, std::numeric_limits<double>::quiet_NaN()}}),
            "region 0 (node 'a', [0, 1)): bytes nan is not a finite count >= 0");
  EXPECT_EQ(error_with({{"node", "a", 0, 1, std::numeric_limits<double>::infinity()}}),
            "region 0 (node 'a', [0, 1)): flops inf is not a finite count >= 0");
  // A truncated region record: cut in its bytes field.
  Program p = small_program();
  p.regions = {{"node", "a", 0, 1}};
  std::vector<uint8_t> bytes = serialize(p);
  size_t len_at = payload_of(bytes, 6) - 8;
  bytes[len_at] -= 4;  // the regions section is the last: cut its last 4 bytes, and its length with them
  bytes.resize(bytes.size() - 4);
  EXPECT_NE(error_of(bytes).find("section 6 (regions) truncated: region bytes needs 8 bytes, 4 left"),
            std::string::npos)
      << error_of(bytes);
  // A region count the section cannot hold (a record is at least 4 + 4 + 4 + 4 + 8 + 8 bytes).
  bytes = serialize(p);
  put_u32(bytes, payload_of(bytes, 6), 2);
  EXPECT_NE(error_of(bytes).find("region count 2 needs at least 64 bytes, 37 left"), std::string::npos)
      << error_of(bytes);
}

TEST(ProgramFormat, SkipsUnknownSections) {
  std::vector<uint8_t> bytes = serialize(small_program());
  put_u32(bytes, 8, bytes[8] + 1);                                               // one more section...
  const uint8_t extra[] = {99, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0, 'a', 'b', 'c'};  // ...id 99, 3 bytes
  bytes.insert(bytes.end(), std::begin(extra), std::end(extra));
  EXPECT_EQ(deserialize(bytes), small_program());
}

TEST(ProgramFormat, EveryTruncationIsAnError) {
  Program with_regions = small_program();
  with_regions.regions = {{"node", "fc1", 0, 3, 1e6, 4096}, {"kernel", "gemm.s", 1, 3}};
  for (const Program& p : {small_program(), with_regions}) {
    std::vector<uint8_t> bytes = serialize(p);
    for (size_t n = 0; n < bytes.size(); ++n) {
      std::vector<uint8_t> cut(bytes.begin(), bytes.begin() + n);
      EXPECT_THROW(deserialize(cut), Error) << "truncated to " << n << " bytes";
    }
  }
}

TEST(ProgramFormat, TruncatedSectionNamesOffsetAndSizes) {
  std::vector<uint8_t> bytes = serialize(small_program());
  size_t tensors = payload_of(bytes, 2);
  ASSERT_GT(tensors, 0u);
  bytes.resize(tensors + 40);
  uint64_t len;
  std::memcpy(&len, &bytes[tensors - 8], 8);
  EXPECT_EQ(error_of(bytes), "program: byte " + std::to_string(tensors - 12) +
                                 ": section 2 (tensors) truncated: needs " + std::to_string(len) + " bytes, 40 left");
}

TEST(ProgramFormat, BadMagicAndVersion) {
  std::vector<uint8_t> bytes = serialize(small_program());
  std::vector<uint8_t> bad = bytes;
  bad[0] = 'X';
  EXPECT_EQ(error_of(bad), "program: byte 0: not a tpusim program (bad magic)");
  bad = bytes;
  put_u32(bad, 4, 7);
  EXPECT_EQ(error_of(bad), "program: byte 4: unsupported program version 7 (this build reads 4)");
}

TEST(ProgramFormat, VmemTensorsKeepTheirSpace) {
  // `@ vmem ADDR` places a tensor in VMEM: its symbol is its VMEM address, HBM placement ignores it, and the
  // space survives the binary format and the disassembly.
  Program p = assemble(".input a, i8, [4, 4] @ vmem 0x100\n.input b, i8, [4]\n.output c, i32, [4, 4] @ vmem 0x200\n"
                       "li r1, a\nli r2, c\n", "v.s");
  ASSERT_EQ(p.tensors.size(), 3u);
  EXPECT_EQ(p.tensors[0].space, MemSpace::Vmem);
  EXPECT_EQ(p.tensors[0].addr, 0x100u);
  EXPECT_EQ(p.tensors[1].space, MemSpace::Hbm);
  EXPECT_EQ(p.tensors[1].addr, 0u);  // auto-placed HBM tensors start at hbm_base: VMEM tensors take no HBM
  EXPECT_EQ(p.footprint(MemSpace::Vmem), 0x200u + 64);
  EXPECT_EQ(p.hbm_footprint(), 4u);
  EXPECT_EQ(decode(p.code[0]).f[1], 0x100);
  EXPECT_EQ(decode(p.code[1]).f[1], 0x200);
  Program q = deserialize(serialize(p));
  q.source = p.source;
  EXPECT_EQ(q, p);
  Program r = assemble(disassemble(p), "d.s");
  r.source = p.source;
  EXPECT_EQ(r, p);
  try {
    assemble(".const w, i8, [2] @ vmem 0x100\n.data \"0102\"\n", "w.s");
    ADD_FAILURE() << "a const tensor in VMEM was accepted";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "w.s:1:21: a const tensor lives in HBM, not VMEM");
  }
}

TEST(ProgramFormat, UndecodableInstruction) {
  std::vector<uint8_t> bytes = serialize(small_program());
  size_t code = payload_of(bytes, 1);
  bytes[code + 8 * 2] = 0x7f;  // instruction 2 (halt) gets an unknown opcode
  std::string msg = error_of(bytes);
  EXPECT_EQ(msg.rfind("program: byte " + std::to_string(code + 16) + ": instruction 2: unknown opcode 0x7f", 0), 0u)
      << msg;
  bytes[code + 16] = static_cast<uint8_t>(Op::HALT);
  bytes[code + 23] = 0x80;  // a stray bit in halt
  EXPECT_NE(error_of(bytes).find("instruction 2: halt: bits set outside every field"), std::string::npos);
}

TEST(ProgramFormat, ConstOutsideTheData) {
  Program p = small_program();
  p.tensors[1].const_offset = 1;  // 4 bytes at offset 1 of 4
  std::string msg = error_of(serialize(p));
  EXPECT_NE(msg.find("const tensor 'W' (4 bytes at offset 1) lies outside the constant data (4 bytes)"),
            std::string::npos)
      << msg;
  p.tensors[1].const_offset = ~0ull;  // must not wrap around
  EXPECT_THROW(deserialize(serialize(p)), Error);
}

// Found by fuzz_tpub (validation/fuzz): an output with a constant offset loaded, and its disassembly, which has no
// way to say it, assembled into a different program.
TEST(ProgramFormat, ConstOffsetOnlyOnConstTensors) {
  Program p = small_program();
  p.tensors[2].const_offset = 4128768;  // output Y
  EXPECT_NE(error_of(serialize(p)).find("output 'Y': a constant offset (4128768) on a tensor that is not const"),
            std::string::npos)
      << error_of(serialize(p));
  p.tensors[2].const_offset = 0;
  p.tensors[0].const_offset = 1;  // input X
  EXPECT_NE(error_of(serialize(p)).find("input 'X': a constant offset (1) on a tensor that is not const"), std::string::npos)
      << error_of(serialize(p));
}

// Found by fuzz_tpub: the loader and the assembler had different limits on a tensor's size and address, so the
// disassembly of a loaded program did not assemble. Both now apply check_tensor (kMaxTensorBytes, kMaxAddress).
TEST(ProgramFormat, TensorSizeLimitIsTheAssemblers) {
  Program p = small_program();
  p.tensors[0].dtype = DType::I8;
  p.tensors[0].addr = 0;
  p.tensors[0].shape = {4, int64_t(kMaxTensorBytes / 4)};  // exactly the limit: loads, and its disassembly assembles
  p.tensors[1].addr = p.tensors[2].addr = 0;  // (the others move out of its way)
  p.tensors[1].addr = kMaxTensorBytes, p.tensors[2].addr = kMaxTensorBytes + (1 << 20);
  Program loaded = deserialize(serialize(p));
  Program back = assemble(disassemble(loaded), "d.s");
  back.source = loaded.source;
  EXPECT_EQ(back, loaded);
  p.tensors[0].shape = {6, 36011204832919552};  // the fuzzer's: 6 x 2^55 = 3 x 2^56 elements
  EXPECT_NE(error_of(serialize(p)).find("input 'X': more than 1 TiB (the limit for one tensor)"), std::string::npos)
      << error_of(serialize(p));
  EXPECT_THROW(assemble(".input X, i8, [6, 36011204832919552]\n", "x.s"), Error);
}

// Found by fuzz_tpub: an address past 2^63 - 1 loaded, and the disassembly's `@ 0xfffffffc00001000` did not
// assemble (the assembler's addresses are non-negative 64-bit integers). Addresses now stay below kMaxAddress.
TEST(ProgramFormat, AddressesStayBelow2To63) {
  Program p = small_program();
  p.tensors[2].addr = 0xfffffffc00001000ull;  // output Y
  EXPECT_NE(error_of(serialize(p)).find("output 'Y': [18446744056529686528, +"), std::string::npos)
      << error_of(serialize(p));
  p.tensors[2].addr = kMaxAddress - 4096;  // the highest page below the limit: loads, and the disassembly assembles
  Program loaded = deserialize(serialize(p));
  Program back = assemble(disassemble(loaded), "d.s");
  back.source = loaded.source;
  EXPECT_EQ(back, loaded);
}

TEST(ProgramFormat, OtherCorruptions) {
  std::vector<uint8_t> bytes = serialize(small_program());
  std::vector<uint8_t> bad = bytes;
  bad.push_back(0);
  EXPECT_EQ(error_of(bad), "program: byte " + std::to_string(bytes.size()) + ": header: 1 unexpected bytes at the end");
  bad = bytes;
  size_t tensors = payload_of(bad, 2);
  put_u32(bad, tensors, 0xffffffff);  // absurd tensor count: rejected without allocating
  EXPECT_NE(error_of(bad).find("tensor count 4294967295 needs at least"), std::string::npos) << error_of(bad);
  bad = bytes;
  put_u32(bad, payload_of(bad, 4) - 12, 2);  // the name section claims to be a second tensors section
  EXPECT_NE(error_of(bad).find("duplicate section 2 (tensors)"), std::string::npos) << error_of(bad);
}

// A tensor of the newest type (f8e4m3, code 4) saves and loads (the format is unchanged, so files written before
// it still load: every other test here); a code past the last type is refused, naming the tensor and the code.
TEST(ProgramFormat, F8E4M3TensorsRoundTripAndUnknownTypesAreRefused) {
  Program p = assemble(".input X, f8e4m3, [2, 3] @ 0x1000\n.output Y, f32, [2] @ 0x3000\nhalt\n", "f8.s");
  std::vector<uint8_t> bytes = serialize(p);
  Program back = deserialize(bytes);
  EXPECT_EQ(back, p);
  ASSERT_NE(back.find("X"), nullptr);
  EXPECT_EQ(back.find("X")->dtype, DType::F8E4M3);
  // The first tensor's dtype byte: the tensors section's count (4), the name's length (4) and name (1), kind (1).
  const size_t at = payload_of(bytes, 2) + 4 + 4 + 1 + 1;
  ASSERT_EQ(bytes.at(at), 4);
  for (int code : {5, 7, 255}) {
    std::vector<uint8_t> bad = bytes;
    bad[at] = static_cast<uint8_t>(code);
    EXPECT_NE(error_of(bad).find("tensor 'X': unknown data type " + std::to_string(code)), std::string::npos)
        << error_of(bad);
  }
}

// Random byte flips: each corrupt program either loads (then it is valid) or throws isa::Error.
TEST(ProgramFormat, RandomCorruptionNeverCrashes) {
  std::vector<uint8_t> bytes = serialize(small_program());
  std::mt19937 rng(1234);
  int loaded = 0;
  for (int iter = 0; iter < 20000; ++iter) {
    std::vector<uint8_t> bad = bytes;
    for (int flips = 1 + rng() % 3; flips > 0; --flips)
      bad[rng() % bad.size()] ^= static_cast<uint8_t>(1 + rng() % 255);
    try {
      Program p = deserialize(bad);
      EXPECT_EQ(deserialize(serialize(p)), p);
      ++loaded;
    } catch (const Error&) {
    }
  }
  EXPECT_LT(loaded, 20000);
}

TEST(ProgramFile, SaveLoadAndErrors) {
  namespace fs = std::filesystem;
  fs::path dir = fs::temp_directory_path() / ("tpusim_program_test_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::string path = (dir / "p.tpub").string();
  save_program(small_program(), path);
  EXPECT_EQ(load_program(path), small_program());
  try {
    load_program((dir / "x.tpub").string());
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "cannot open '" + (dir / "x.tpub").string() + "': No such file or directory");
  }
  std::vector<uint8_t> junk = {'n', 'o', 'p', 'e', 0, 0};
  std::FILE* f = std::fopen(path.c_str(), "wb");
  std::fwrite(junk.data(), 1, junk.size(), f);
  std::fclose(f);
  try {
    load_program(path);
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), path + ": program: byte 0: not a tpusim program (bad magic)");
  }
  EXPECT_THROW(save_program(small_program(), (dir / "no" / "such" / "dir.tpub").string()), Error);
  fs::remove_all(dir);
}

// Every tensor the loader accepts can be written back as assembly: no address past kMaxAddress, no tensor past
// kMaxTensorBytes, no constant offset on a non-const tensor, no two tensors overlapping (issue 13, finding 5).
TEST(ProgramFormat, LoaderRefusesTensorsTheAssemblerCannotWrite) {
  auto refused = [](TensorDecl t, TensorDecl other = {}) {
    Program p;
    p.tensors.push_back(t);
    if (!other.name.empty()) p.tensors.push_back(other);
    std::string e = error_of(serialize(p));
    EXPECT_NE(e.find("program: byte "), std::string::npos) << e;
    return e.substr(e.find(": ", e.find("byte ")) + 2);
  };
  TensorDecl far{"a", TensorKind::Input, DType::F32, {4}, uint64_t{1} << 63};
  EXPECT_EQ(refused(far), "input 'a': [9223372036854775808, +16) passes address 281474976710656 (2^48, the limit)");
  TensorDecl huge{"a", TensorKind::Input, DType::F32, {int64_t{1} << 38}};  // 2^40 bytes: exactly the limit, fine
  EXPECT_EQ(error_of(serialize(Program{"p", {}, {huge}, {}, {}, {}})), "(no error)");
  huge.shape = {(int64_t{1} << 38) + 1};
  EXPECT_EQ(refused(huge), "input 'a': more than 1 TiB (the limit for one tensor)");
  TensorDecl offset{"a", TensorKind::Input, DType::F32, {4}, 0, 8};
  EXPECT_EQ(refused(offset), "input 'a': a constant offset (8) on a tensor that is not const");
  TensorDecl a{"a", TensorKind::Input, DType::F32, {4}, 0x100}, y{"y", TensorKind::Output, DType::F32, {4}, 0x10c};
  EXPECT_EQ(refused(a, y), "output 'y' [268, 284) overlaps input 'a' [256, 272) in hbm");
  y.addr = 0x110;  // adjacent, not overlapping
  EXPECT_EQ(error_of(serialize(Program{"p", {}, {a, y}, {}, {}, {}})), "(no error)");
  y.space = MemSpace::Vmem;  // another memory: never overlapping
  y.addr = 0x100;
  EXPECT_EQ(error_of(serialize(Program{"p", {}, {a, y}, {}, {}, {}})), "(no error)");
}

TEST(ProgramFormat, SaveRefusesWhatLoadWouldRefuse) {
  Program p;
  p.tensors = {TensorDecl{"x", TensorKind::Input, DType::F32, {4}}, TensorDecl{"x", TensorKind::Output, DType::F32, {4}, 64}};
  auto path = std::filesystem::temp_directory_path() / ("dup_" + std::to_string(getpid()) + ".tpub");
  try {
    save_program(p, path.string());
    ADD_FAILURE() << "saved a program with two tensors named 'x'";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "duplicate tensor 'x'");
  }
  EXPECT_FALSE(std::filesystem::exists(path));
}

TEST(ProgramFormat, OtherVersionNamesBothVersions) {
  std::vector<uint8_t> bytes = serialize(small_program());
  put_u32(bytes, 4, kProgramVersion - 1);
  EXPECT_EQ(error_of(bytes), "program: byte 4: unsupported program version " + std::to_string(kProgramVersion - 1) +
                                 " (this build reads " + std::to_string(kProgramVersion) + ")");
}

TEST(Printable, EscapesBinaryAndCutsLongText) {
  EXPECT_EQ(printable("ab\n\x01\x7f\\"), "ab\\n\\x01\\x7f\\\\");
  EXPECT_EQ(printable(std::string(1 << 20, 'x')), std::string(64, 'x') + "... (1048576 bytes)");
  EXPECT_EQ(printable("abc", 2), "ab... (3 bytes)");
}

}  // namespace
}  // namespace tpusim::isa
