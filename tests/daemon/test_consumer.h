// Helpers for tests of the fetch path against the fake hub:
// TestConsumer, a RangeConsumer that records deliveries per request and
// counts violations of the consumer contract (bytes in order, contiguous,
// never twice, complete before OnComplete, one end per request), and quick
// hub / fetcher options.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <memory>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "daemon/hub/range_fetcher.h"
#include "tests/daemon/hub_test_server.h"

namespace exlr8::testing {

class TestConsumer : public RangeConsumer {
 public:
  struct Want {
    std::string path;
    std::uint64_t offset;
    std::uint64_t length;
    std::string label;
  };
  std::vector<Want> wants;
  std::size_t next = 0;
  std::map<std::uint64_t, std::string> got;
  std::map<std::uint64_t, int> completes, resets;
  std::map<std::uint64_t, Status> failed;
  std::set<std::uint64_t> accepted;
  std::function<RangeVerdict(std::uint64_t, const std::string&)> verdict;
  std::function<Status(std::uint64_t, std::uint64_t)> data_hook;
  int violations = 0;
  int outstanding = 0;
  int max_outstanding = 0;

  void Add(const std::string& path, std::uint64_t offset, std::uint64_t length, std::string label = "") {
    wants.push_back({path, offset, length, std::move(label)});
  }

  bool NextRequest(RangeRequest* out) override {
    if (next >= wants.size()) return false;
    const Want& w = wants[next];
    out->path = w.path;
    out->offset = w.offset;
    out->length = w.length;
    out->label = w.label.empty() ? "req " + std::to_string(next) : w.label;
    out->id = next++;
    max_outstanding = std::max(max_outstanding, ++outstanding);
    return true;
  }
  Status OnData(std::uint64_t id, std::uint64_t offset, std::span<const std::byte> bytes) override {
    std::string& g = got[id];
    const Want& w = wants[id];
    if (offset != w.offset + g.size()) ++violations;
    if (g.size() + bytes.size() > w.length) ++violations;
    if (bytes.empty()) ++violations;
    g.append(reinterpret_cast<const char*>(bytes.data()), bytes.size());
    if (data_hook) return data_hook(id, g.size());
    return Status::Ok();
  }
  RangeVerdict OnComplete(std::uint64_t id) override {
    ++completes[id];
    if (got[id].size() != wants[id].length) ++violations;
    RangeVerdict v = verdict ? verdict(id, got[id]) : RangeVerdict::Accept();
    if (v.kind == RangeVerdict::Kind::kAccept) {
      accepted.insert(id);
      --outstanding;
    }
    return v;
  }
  void OnReset(std::uint64_t id) override {
    got[id].clear();
    ++resets[id];
  }
  void OnFailed(std::uint64_t id, const Status& status) override {
    if (failed.count(id) != 0 || accepted.count(id) != 0) ++violations;
    failed[id] = status;
    --outstanding;
  }

  // Every accepted range equals the blob's bytes.
  void ExpectBytes(const std::map<std::string, std::string>& blobs) const {
    for (std::uint64_t id : accepted) {
      const Want& w = wants[id];
      const std::string& blob = blobs.at(w.path);
      ASSERT_TRUE(got.at(id) == blob.substr(w.offset, w.length)) << "range " << id << " differs";
    }
  }
};

// Hub options for `hub`: no environment, fast retries.
inline HubOptions TestHubOptions(const FakeHub& hub) {
  HubOptions o;
  o.endpoint = hub.endpoint();
  o.token_from_environment = false;
  o.use_env_proxy = false;
  o.retry_base = std::chrono::milliseconds(5);
  o.stall_timeout = std::chrono::seconds(3);
  return o;
}

// Fetcher options with fast, few retries.
inline RangeFetcherOptions FastOptions() {
  RangeFetcherOptions o;
  o.retry_base = std::chrono::milliseconds(5);
  o.retry_cap = std::chrono::milliseconds(50);
  o.max_attempts = 4;
  return o;
}

inline std::unique_ptr<HubClient> OpenHub(const FakeHub& hub, HubOptions o) {
  auto c = HubClient::Open(std::move(o), hub.repo, "main");
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return c.ok() ? std::move(c).value() : nullptr;
}
inline std::unique_ptr<HubClient> OpenHub(const FakeHub& hub) { return OpenHub(hub, TestHubOptions(hub)); }

}  // namespace exlr8::testing
