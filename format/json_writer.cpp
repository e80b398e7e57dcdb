#include "format/json_writer.h"

#include <cassert>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "format/json.h"

namespace exlr8 {

void JsonWriter::BeforeValue() {
  if (key_pending_) {
    key_pending_ = false;
    return;
  }
  assert((open_.empty() && out_.empty()) || (!open_.empty() && open_.back() == '['));
  if (!first_.empty()) {
    if (!first_.back()) out_.push_back(',');
    first_.back() = false;
  }
}

JsonWriter& JsonWriter::Key(std::string_view key) {
  assert(!open_.empty() && open_.back() == '{' && !key_pending_);
  if (!first_.back()) out_.push_back(',');
  first_.back() = false;
  AppendJsonString(out_, key);
  out_.push_back(':');
  key_pending_ = true;
  return *this;
}

JsonWriter& JsonWriter::BeginObject() {
  BeforeValue();
  out_.push_back('{');
  open_.push_back('{');
  first_.push_back(true);
  return *this;
}

JsonWriter& JsonWriter::EndObject() {
  assert(!open_.empty() && open_.back() == '{' && !key_pending_);
  out_.push_back('}');
  open_.pop_back();
  first_.pop_back();
  return *this;
}

JsonWriter& JsonWriter::BeginArray() {
  BeforeValue();
  out_.push_back('[');
  open_.push_back('[');
  first_.push_back(true);
  return *this;
}

JsonWriter& JsonWriter::EndArray() {
  assert(!open_.empty() && open_.back() == '[');
  out_.push_back(']');
  open_.pop_back();
  first_.pop_back();
  return *this;
}

JsonWriter& JsonWriter::String(std::string_view s) {
  BeforeValue();
  AppendJsonString(out_, s);
  return *this;
}

JsonWriter& JsonWriter::Int(std::int64_t v) {
  BeforeValue();
  char buf[24];
  out_.append(buf, std::to_chars(buf, buf + sizeof buf, v).ptr);
  return *this;
}

JsonWriter& JsonWriter::Uint(std::uint64_t v) {
  BeforeValue();
  char buf[24];
  out_.append(buf, std::to_chars(buf, buf + sizeof buf, v).ptr);
  return *this;
}

JsonWriter& JsonWriter::Double(double v) {
  if (!std::isfinite(v)) return Null();
  BeforeValue();
  char buf[32];
  out_.append(buf, std::to_chars(buf, buf + sizeof buf, v).ptr);  // shortest round-trip form
  return *this;
}

JsonWriter& JsonWriter::Fixed(double v, int decimals) {
  if (!std::isfinite(v)) return Null();
  BeforeValue();
  // %.*f of a finite double has at most 309 integer digits.
  char buf[400];
  const int n = std::snprintf(buf, sizeof buf, "%.*f", decimals < 0 ? 0 : decimals > 17 ? 17 : decimals, v);
  out_.append(buf, n > 0 ? static_cast<std::size_t>(n) : 0);
  return *this;
}

JsonWriter& JsonWriter::Bool(bool v) {
  BeforeValue();
  out_ += v ? "true" : "false";
  return *this;
}

JsonWriter& JsonWriter::Null() {
  BeforeValue();
  out_ += "null";
  return *this;
}

JsonWriter& JsonWriter::Raw(std::string_view json) {
  BeforeValue();
  out_.append(json);
  return *this;
}

std::string JsonWriter::Take() && {
  assert(open_.empty() && !key_pending_);
  return std::move(out_);
}

}  // namespace exlr8
