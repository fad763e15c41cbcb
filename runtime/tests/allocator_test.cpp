// The HBM allocator: first fit from the top, fixed reservations, and out-of-memory messages that name the live set.
#include "tpusim/runtime/allocator.h"

#include <gtest/gtest.h>

using tpusim::runtime::HbmAllocator;
using tpusim::runtime::StatusCode;

TEST(Allocator, PlacesFromTheTopAndReusesFreedGaps) {
  HbmAllocator a("hbm", 4096, 512);
  uint64_t x = a.allocate(1000, "x").value();  // 1024 bytes, aligned, at the top
  EXPECT_EQ(x, 4096u - 1024u);
  uint64_t y = a.allocate(512, "y").value();
  EXPECT_EQ(y, 4096u - 1024u - 512u);
  a.free(x);
  EXPECT_EQ(a.allocate(100, "z").value(), 4096u - 512u);  // the highest gap that fits
  EXPECT_EQ(a.stats().live_count, 2u);
  EXPECT_EQ(a.stats().live_bytes, 612u);
  EXPECT_EQ(a.stats().peak_bytes, 1512u);
}

TEST(Allocator, OutOfMemoryNamesTheRequestAndWhatIsLive) {
  HbmAllocator a("device 0 HBM", 4096, 512);
  ASSERT_TRUE(a.allocate(2048, "big").ok());
  ASSERT_TRUE(a.allocate(1024, "mid").ok());
  auto r = a.allocate(2000, "huge");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kOutOfMemory);
  const std::string& m = r.status().message();
  EXPECT_NE(m.find("allocating 2000 bytes for 'huge'"), std::string::npos) << m;
  EXPECT_NE(m.find("live: 2 allocations, 3072 bytes"), std::string::npos) << m;
  EXPECT_NE(m.find("largest: 'big' 2048 bytes"), std::string::npos) << m;
}

TEST(Allocator, ReservationsFailOnOverlapAndFree) {
  HbmAllocator a("hbm", 8192, 512);
  EXPECT_EQ(a.allocate(512, "buf").value(), 7680u);
  ASSERT_TRUE(a.reserve(0, 4096, "program").ok());
  EXPECT_EQ(a.allocate(4096, "too big").status().code(), StatusCode::kOutOfMemory);  // the gap is 3584 bytes
  EXPECT_EQ(a.allocate(3584, "mid").value(), 4096u);
  a.free(0);
  auto s = a.reserve(0, 5000, "program");
  EXPECT_EQ(s.code(), StatusCode::kOutOfMemory);
  EXPECT_NE(s.message().find("in use by 'mid' [4096, 7680)"), std::string::npos) << s.message();
  EXPECT_EQ(a.reserve(8000, 500, "past the end").code(), StatusCode::kOutOfMemory);
  EXPECT_TRUE(a.reserve(0, 4096, "program").ok());
  EXPECT_EQ(a.stats().live_count, 3u);
}
