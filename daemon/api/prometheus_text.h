// PrometheusText: writes the Prometheus text exposition format (version
// 0.0.4), which `GET /metrics` of `exlr8d serve` answers with.
//
// Each family gets its # HELP and # TYPE lines once, before its first
// sample; label values are escaped (backslash, double quote, newline) as the
// format requires, so a revision name cannot break a line. Integers are
// written exactly (a byte count above 2^53 stays exact).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <set>
#include <string>
#include <string_view>
#include <utility>

namespace exlr8 {

class PrometheusText {
 public:
  using Labels = std::initializer_list<std::pair<std::string_view, std::string_view>>;

  // "gauge" or "counter". Declaring a family twice is harmless.
  void Family(std::string_view name, std::string_view type, std::string_view help);
  void Sample(std::string_view name, Labels labels, std::uint64_t value);
  void Sample(std::string_view name, Labels labels, double value);

  const std::string& text() const { return text_; }
  static constexpr const char* kContentType = "text/plain; version=0.0.4; charset=utf-8";

 private:
  void AppendSeries(std::string_view name, Labels labels);

  std::string text_;
  std::set<std::string, std::less<>> families_;
};

}  // namespace exlr8
