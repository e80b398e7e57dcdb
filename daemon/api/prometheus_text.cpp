#include "daemon/api/prometheus_text.h"

#include <cmath>
#include <cstdio>

namespace exlr8 {

void PrometheusText::Family(std::string_view name, std::string_view type, std::string_view help) {
  if (!families_.emplace(name).second) return;
  text_ += "# HELP ";
  text_ += name;
  text_ += ' ';
  for (char c : help) text_ += c == '\n' ? std::string("\\n") : c == '\\' ? std::string("\\\\") : std::string(1, c);
  text_ += "\n# TYPE ";
  text_ += name;
  text_ += ' ';
  text_ += type;
  text_ += '\n';
}

void PrometheusText::AppendSeries(std::string_view name, Labels labels) {
  text_ += name;
  if (labels.size() == 0) return;
  text_ += '{';
  bool first = true;
  for (const auto& [key, value] : labels) {
    if (!first) text_ += ',';
    first = false;
    text_ += key;
    text_ += "=\"";
    for (char c : value) {
      if (c == '\\') {
        text_ += "\\\\";
      } else if (c == '"') {
        text_ += "\\\"";
      } else if (c == '\n') {
        text_ += "\\n";
      } else {
        text_ += c;
      }
    }
    text_ += '"';
  }
  text_ += '}';
}

void PrometheusText::Sample(std::string_view name, Labels labels, std::uint64_t value) {
  AppendSeries(name, labels);
  text_ += ' ';
  text_ += std::to_string(value);
  text_ += '\n';
}

void PrometheusText::Sample(std::string_view name, Labels labels, double value) {
  AppendSeries(name, labels);
  char buf[64];
  if (std::isnan(value)) {
    std::snprintf(buf, sizeof buf, " NaN\n");
  } else if (std::isinf(value)) {
    std::snprintf(buf, sizeof buf, value > 0 ? " +Inf\n" : " -Inf\n");
  } else {
    std::snprintf(buf, sizeof buf, " %.17g\n", value);
  }
  text_ += buf;
}

}  // namespace exlr8
