// The lease description (client/lease/description.h): what the holder
// writes reads back the same, and a description a lessee cannot trust is
// refused with the field and where it is.
#include "client/lease/description.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "tests/client/lease/lease_test_util.h"

namespace exlr8 {
namespace {

using ::exlr8::testing::ValidLeaseDescription;
using ::testing::HasSubstr;

void ExpectSame(const LeaseDescription& a, const LeaseDescription& b) {
  EXPECT_EQ(a.repo, b.repo);
  EXPECT_EQ(a.commit, b.commit);
  EXPECT_EQ(a.manifest, b.manifest);
  EXPECT_EQ(a.tp, b.tp);
  EXPECT_EQ(a.rank, b.rank);
  EXPECT_EQ(a.device, b.device);
  EXPECT_EQ(a.bytes, b.bytes);
  EXPECT_EQ(a.data_handle, b.data_handle);
  EXPECT_EQ(a.offsets_handle, b.offsets_handle);
  ASSERT_EQ(a.halves.size(), b.halves.size());
  for (std::size_t i = 0; i < a.halves.size(); ++i) {
    EXPECT_EQ(a.halves[i].tag.What(), b.halves[i].tag.What()) << i;
    EXPECT_EQ(a.halves[i].hidden, b.halves[i].hidden) << i;
    EXPECT_EQ(a.halves[i].offset, b.halves[i].offset) << i;
    EXPECT_EQ(a.halves[i].length, b.halves[i].length) << i;
  }
}

TEST(LeaseDescription, WhatTheHolderWritesReadsBackTheSame) {
  const LeaseDescription d = ValidLeaseDescription();
  const std::string text = WriteLeaseDescription(d);
  auto back = ParseLeaseDescription(text);
  ASSERT_TRUE(back.ok()) << back.status().ToString() << "\n" << text;
  ExpectSame(*back, d);
}

TEST(LeaseDescription, TheWrittenLayoutIsTheProtocols) {
  LeaseDescription d = ValidLeaseDescription();
  d.halves.resize(1);
  d.bytes = 8192;
  EXPECT_EQ(WriteLeaseDescription(d),
            R"({"version":1,"repo":"org/glm","commit":"0123456789abcdef0123456789abcdef01234567",)"
            R"("manifest":"home","tp":4,"rank":1,"device":0,"bytes":8192,"halves_count":1,)"
            R"("data_handle":")" +
                std::string(128, 'a') + R"(","offsets_handle":")" + d.offsets_handle +
                R"(","halves":[{"layer":3,"expert":7,"proj":"gate","half":0,"k":2,"hidden":256,)"
                R"("offset":0,"length":8192}]})");
}

TEST(LeaseDescription, SyntaxErrorsNameTheSourceAndTheByte) {
  auto r = ParseLeaseDescription("{not json", "/run/lease.sock");
  EXPECT_EQ(r.status().code(), StatusCode::kCorruption);
  EXPECT_THAT(r.status().message(), HasSubstr("lease description from /run/lease.sock"));
  EXPECT_THAT(r.status().message(), HasSubstr("at byte 1"));
}

}  // namespace
}  // namespace exlr8
