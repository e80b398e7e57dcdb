#include "daemon/api/prometheus_text.h"

#include <cmath>
#include <cstdio>

namespace exlr8 {

void PrometheusText::Family(std::string_view name, std::string_view type, std::string_view help) {
  if (index_.count(name) != 0) return;
  index_.emplace(std::string(name), groups_.size());
  std::string& g = groups_.emplace_back();
  g += "# HELP ";
  g += name;
  g += ' ';
  for (char c : help) g += c == '\n' ? std::string("\\n") : c == '\\' ? std::string("\\\\") : std::string(1, c);
  g += "\n# TYPE ";
  g += name;
  g += ' ';
  g += type;
  g += '\n';
}

std::string& PrometheusText::GroupOf(std::string_view name) {
  auto it = index_.find(name);
  if (it == index_.end()) {
    it = index_.emplace(std::string(name), groups_.size()).first;
    groups_.emplace_back();
  }
  return groups_[it->second];
}

std::string PrometheusText::text() const {
  std::string out;
  for (const std::string& g : groups_) out += g;
  return out;
}

void PrometheusText::AppendSeries(std::string& out, std::string_view name, Labels labels) {
  out += name;
  if (labels.size() == 0) return;
  out += '{';
  bool first = true;
  for (const auto& [key, value] : labels) {
    if (!first) out += ',';
    first = false;
    out += key;
    out += "=\"";
    for (char c : value) {
      if (c == '\\') {
        out += "\\\\";
      } else if (c == '"') {
        out += "\\\"";
      } else if (c == '\n') {
        out += "\\n";
      } else {
        out += c;
      }
    }
    out += '"';
  }
  out += '}';
}

void PrometheusText::Sample(std::string_view name, Labels labels, std::uint64_t value) {
  std::string& g = GroupOf(name);
  AppendSeries(g, name, labels);
  g += ' ';
  g += std::to_string(value);
  g += '\n';
}

void PrometheusText::Sample(std::string_view name, Labels labels, double value) {
  std::string& g = GroupOf(name);
  AppendSeries(g, name, labels);
  char buf[64];
  if (std::isnan(value)) {
    std::snprintf(buf, sizeof buf, " NaN\n");
  } else if (std::isinf(value)) {
    std::snprintf(buf, sizeof buf, value > 0 ? " +Inf\n" : " -Inf\n");
  } else {
    std::snprintf(buf, sizeof buf, " %.17g\n", value);
  }
  g += buf;
}

}  // namespace exlr8
