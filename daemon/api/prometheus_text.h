// PrometheusText: writes the Prometheus text exposition format (version
// 0.0.4), which `GET /metrics` of `exlr8d serve` answers with.
//
// Each family gets its # HELP and # TYPE lines once, followed by all of its
// samples, whatever order they were added in: the format wants a family's
// lines together, and callers naturally loop over objects (filesets, jobs)
// and add a sample of several families for each. Label values are escaped
// (backslash, double quote, newline) as the format requires, so a revision
// name cannot break a line. Integers are written exactly (a byte count above
// 2^53 stays exact).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace exlr8 {

class PrometheusText {
 public:
  using Labels = std::initializer_list<std::pair<std::string_view, std::string_view>>;

  // "gauge" or "counter". Declaring a family twice is harmless. Families
  // are written in the order they were first declared.
  void Family(std::string_view name, std::string_view type, std::string_view help);
  // Family(name, ...) should come first: a sample of an undeclared family
  // gets a group of its own, without HELP and TYPE.
  void Sample(std::string_view name, Labels labels, std::uint64_t value);
  void Sample(std::string_view name, Labels labels, double value);

  std::string text() const;
  static constexpr const char* kContentType = "text/plain; version=0.0.4; charset=utf-8";

 private:
  // The lines of one family: HELP and TYPE, then its samples.
  std::string& GroupOf(std::string_view name);
  static void AppendSeries(std::string& out, std::string_view name, Labels labels);

  std::vector<std::string> groups_;  // in declaration order
  std::map<std::string, std::size_t, std::less<>> index_;  // family -> groups_ index
};

}  // namespace exlr8
