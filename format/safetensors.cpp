#include "format/safetensors.h"

#include <algorithm>
#include <limits>

#include "format/json.h"

namespace exlr8 {

namespace {

constexpr std::uint64_t kU64Max = std::numeric_limits<std::uint64_t>::max();

// Every valid entry is an object of three fields whose arrays hold at most
// kMaxTensorRank + 2 numbers: 1 + 1 + (1 + rank) + 3 values. Capping the
// JSON element count at that many per allowed entry bounds the memory a
// hostile header can make the parser allocate.
constexpr std::size_t kMaxValuesPerEntry = 6 + kMaxTensorRank;


// Builds "<file>: <what> at byte <offset>: <message>".
class ErrorBuilder {
 public:
  explicit ErrorBuilder(std::string_view file_name) : file_(file_name) {}

  Status Corrupt(std::string_view what, std::size_t offset, std::string_view message) const {
    std::string m(file_);
    m += ": ";
    if (!what.empty()) {
      m += what;
      m += " ";
    }
    m += "at byte ";
    m += std::to_string(offset);
    m += ": ";
    m += message;
    return CorruptionError(std::move(m));
  }

  Status Tensor(std::string_view name, std::size_t offset, std::string_view message) const {
    return Corrupt("tensor '" + EscapeForMessage(name) + "'", offset, message);
  }

 private:
  std::string_view file_;
};

// One validated entry, padding included, before sorting.
struct Entry {
  TensorInfo info;
  std::size_t offsets_at = 0;  // file offset of its data_offsets value
};

Status ParseEntry(const ErrorBuilder& err, const std::string& name, const JsonValue& value,
                  std::optional<std::uint64_t> data_size, Entry& entry) {
  if (name.empty()) return err.Corrupt("tensor ''", value.offset(), "empty tensor name");
  if (!value.is_object())
    return err.Tensor(name, value.offset(), "entry is not an object");
  const JsonValue* dtype = nullptr;
  const JsonValue* shape = nullptr;
  const JsonValue* offsets = nullptr;
  for (const auto& [key, field] : value.as_object()) {
    if (key == "dtype") {
      dtype = &field;
    } else if (key == "shape") {
      shape = &field;
    } else if (key == "data_offsets") {
      offsets = &field;
    } else {
      return err.Tensor(name, field.offset(), "unknown field \"" + EscapeForMessage(key) + "\"");
    }
  }
  if (!dtype) return err.Tensor(name, value.offset(), "missing field \"dtype\"");
  if (!shape) return err.Tensor(name, value.offset(), "missing field \"shape\"");
  if (!offsets) return err.Tensor(name, value.offset(), "missing field \"data_offsets\"");

  TensorInfo& t = entry.info;
  t.name = name;

  // dtype
  if (!dtype->is_string()) return err.Tensor(name, dtype->offset(), "dtype is not a string");
  const std::optional<DType> dt = DTypeFromName(dtype->as_string());
  if (!dt)
    return err.Tensor(name, dtype->offset(),
                      "unknown dtype \"" + EscapeForMessage(dtype->as_string()) + "\"");
  t.dtype = *dt;

  // shape
  if (!shape->is_array()) return err.Tensor(name, shape->offset(), "shape is not an array");
  const auto& dims = shape->as_array();
  if (dims.size() > kMaxTensorRank)
    return err.Tensor(name, shape->offset(),
                      "shape has rank " + std::to_string(dims.size()) + ", more than the cap of " +
                          std::to_string(kMaxTensorRank));
  t.shape.reserve(dims.size());
  for (std::size_t i = 0; i < dims.size(); ++i) {
    const std::optional<std::uint64_t> d = dims[i].as_uint64();
    if (!d)
      return err.Tensor(name, dims[i].offset(),
                        "shape[" + std::to_string(i) + "] is not a non-negative integer");
    t.shape.push_back(*d);
  }

  // data_offsets
  entry.offsets_at = offsets->offset();
  if (!offsets->is_array() || offsets->as_array().size() != 2)
    return err.Tensor(name, offsets->offset(), "data_offsets is not an array of two integers");
  const auto& pair = offsets->as_array();
  const std::optional<std::uint64_t> begin = pair[0].as_uint64();
  const std::optional<std::uint64_t> end = pair[1].as_uint64();
  if (!begin) return err.Tensor(name, pair[0].offset(), "data_offsets[0] is not a non-negative integer");
  if (!end) return err.Tensor(name, pair[1].offset(), "data_offsets[1] is not a non-negative integer");
  auto range = [&] { return "data_offsets [" + std::to_string(*begin) + ", " + std::to_string(*end) + "]"; };
  if (*begin > *end) return err.Tensor(name, offsets->offset(), range() + " are reversed");
  if (data_size && *end > *data_size)
    return err.Tensor(name, offsets->offset(),
                      range() + " run past the end of the data section (" +
                          std::to_string(*data_size) + " bytes)");
  t.begin = *begin;
  t.end = *end;

  // size == product(shape) * dtype size
  std::uint64_t expected = DTypeSize(t.dtype);
  for (std::uint64_t d : t.shape) {
    if (d != 0 && expected > kU64Max / d)
      return err.Tensor(name, shape->offset(),
                        "byte size of shape " + ShapeToString(t.shape) + " x " +
                            std::string(DTypeName(t.dtype)) + " overflows 64 bits");
    expected *= d;
  }
  if (t.byte_size() != expected)
    return err.Tensor(name, offsets->offset(),
                      range() + " length " + std::to_string(t.byte_size()) +
                          ", expected " + std::to_string(expected) + " (shape " +
                          ShapeToString(t.shape) + " x " + std::string(DTypeName(t.dtype)) + ")");
  return Status::Ok();
}

Status ParseMetadata(const ErrorBuilder& err, const JsonValue& value,
                     std::map<std::string, std::string, std::less<>>& out) {
  if (!value.is_object()) return err.Corrupt("__metadata__", value.offset(), "is not an object");
  for (const auto& [key, v] : value.as_object()) {
    if (!v.is_string())
      return err.Corrupt("__metadata__ key \"" + EscapeForMessage(key) + "\"", v.offset(),
                         "value is not a string");
    out.emplace(key, v.as_string());
  }
  return Status::Ok();
}

}  // namespace

std::uint64_t TensorInfo::num_elements() const {
  std::uint64_t n = 1;
  for (std::uint64_t d : shape) n *= d;
  return n;
}

const TensorInfo* SafetensorsHeader::Find(std::string_view name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : &tensors_[it->second];
}

Result<std::uint64_t> SafetensorsHeaderSize(std::span<const std::byte> first_bytes,
                                            std::optional<std::uint64_t> file_size,
                                            std::string_view file_name) {
  const ErrorBuilder err(file_name);
  if (file_size && *file_size < 8)
    return err.Corrupt("", 0,
                       "file is " + std::to_string(*file_size) +
                           " bytes, too short for the 8-byte header length");
  if (first_bytes.size() < 8)
    return NeedMoreError(std::string(file_name) + ": need 8 bytes for the header length, have " +
                         std::to_string(first_bytes.size()));
  const std::uint64_t n = LoadLE64(first_bytes.data());
  if (n > kMaxSafetensorsHeaderBytes)
    return err.Corrupt("header length", 0,
                       std::to_string(n) + " exceeds the cap of " +
                           std::to_string(kMaxSafetensorsHeaderBytes) + " bytes");
  if (file_size && n > *file_size - 8)
    return err.Corrupt("header length", 0,
                       std::to_string(n) + " runs past the end of the file (" +
                           std::to_string(*file_size) + " bytes)");
  return 8 + n;
}

Result<SafetensorsHeader> ParseSafetensorsHeader(std::span<const std::byte> bytes,
                                                 std::optional<std::uint64_t> file_size,
                                                 std::string_view file_name) {
  const ErrorBuilder err(file_name);
  EXLR8_ASSIGN_OR_RETURN(const std::uint64_t header_size,
                         SafetensorsHeaderSize(bytes, file_size, file_name));
  if (bytes.size() < header_size)
    return NeedMoreError(std::string(file_name) + ": need " + std::to_string(header_size) +
                         " bytes for the header, have " + std::to_string(bytes.size()));
  const std::uint64_t n = header_size - 8;
  std::optional<std::uint64_t> data_size;
  if (file_size) data_size = *file_size - header_size;

  // JSON
  const std::string_view text(reinterpret_cast<const char*>(bytes.data()) + 8,
                              static_cast<std::size_t>(n));
  JsonLimits limits;
  limits.max_depth = 4;  // header object > entry > shape array; one spare
  limits.max_elements = (kMaxSafetensorsTensors + 1) * kMaxValuesPerEntry;
  limits.max_string_bytes = 1 << 20;
  limits.max_object_members = kMaxSafetensorsTensors + 1;  // + __metadata__
  // No array of a header is longer than a shape of the highest rank
  // allowed, so a huge shape (14M values, 1.5 GB) is refused while parsing,
  // not parsed whole before its rank is refused.
  limits.max_array_elements = std::max<std::size_t>(kMaxTensorRank, 2) + 1;
  Result<JsonValue> parsed = ParseJsonAt(text, 8, limits);
  if (!parsed.ok())
    return Status(parsed.status().code(),
                  std::string(file_name) + ": invalid header JSON " + parsed.status().message());
  const JsonValue& root = *parsed;
  if (!root.is_object()) return err.Corrupt("header", root.offset(), "is not a JSON object");

  // entries
  const auto& members = root.as_object();
  const bool has_metadata = root.Find("__metadata__") != nullptr;
  const std::size_t entry_count = members.size() - (has_metadata ? 1 : 0);
  if (entry_count > kMaxSafetensorsTensors)
    return err.Corrupt("header", root.offset(),
                       std::to_string(entry_count) + " entries exceed the cap of " +
                           std::to_string(kMaxSafetensorsTensors));

  SafetensorsHeader header;
  header.json_length_ = n;
  std::vector<Entry> entries;
  entries.reserve(entry_count);
  for (const auto& [name, value] : members) {
    if (name == "__metadata__") {
      EXLR8_RETURN_IF_ERROR(ParseMetadata(err, value, header.metadata_));
      continue;
    }
    Entry& e = entries.emplace_back();
    EXLR8_RETURN_IF_ERROR(ParseEntry(err, name, value, data_size, e));
  }

  // overlap: sorted by (begin, end), each must start at or after the
  // furthest end so far (an empty tensor inside another counts as overlap)
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.info.begin != b.info.begin ? a.info.begin < b.info.begin : a.info.end < b.info.end;
  });
  const Entry* furthest = nullptr;
  for (const Entry& e : entries) {
    if (furthest && e.info.begin < furthest->info.end)
      return err.Tensor(e.info.name, e.offsets_at,
                        "data_offsets [" + std::to_string(e.info.begin) + ", " +
                            std::to_string(e.info.end) + "] overlap tensor '" +
                            EscapeForMessage(furthest->info.name) + "' [" +
                            std::to_string(furthest->info.begin) + ", " +
                            std::to_string(furthest->info.end) + "]");
    if (!furthest || e.info.end > furthest->info.end) furthest = &e;
  }
  header.data_end_ = furthest ? furthest->info.end : 0;

  // publish, padding hidden
  header.tensors_.reserve(entries.size());
  header.by_name_.reserve(entries.size());
  for (Entry& e : entries) {
    if (IsPaddingName(e.info.name)) {
      ++header.padding_entries_;
      continue;
    }
    header.by_name_.emplace(e.info.name, header.tensors_.size());
    header.tensors_.push_back(std::move(e.info));
  }
  return header;
}

std::string ShapeToString(const std::vector<std::uint64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ",";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

}  // namespace exlr8
