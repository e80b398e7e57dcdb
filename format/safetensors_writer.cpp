#include "format/safetensors_writer.h"

#include <algorithm>
#include <charconv>
#include <cstring>
#include <limits>
#include <set>

#include "format/json.h"  // AppendJsonString
#include "format/safetensors.h"

namespace exlr8 {

namespace {

// Named apart from safetensors.cpp's kU64Max: the two files may share a
// unity translation unit.
constexpr std::uint64_t kMaxU64 = std::numeric_limits<std::uint64_t>::max();

bool IsPowerOfTwo(std::uint64_t v) { return v != 0 && (v & (v - 1)) == 0; }

void AppendUInt(std::string& out, std::uint64_t v) {
  char buf[24];
  auto [p, ec] = std::to_chars(buf, buf + sizeof buf, v);
  (void)ec;
  out.append(buf, p);
}

struct RawEntry {
  const std::string* name;  // nullptr for padding
  std::uint64_t pad_index;
  DType dtype;
  const std::vector<std::uint64_t>* shape;
  std::uint64_t begin;
  std::uint64_t end;
};

void AppendEntry(std::string& json, const RawEntry& e) {
  if (json.size() > 1) json += ", ";
  if (e.name != nullptr) {
    AppendJsonString(json, *e.name);
  } else {
    json += "\"__pad.";
    AppendUInt(json, e.pad_index);
    json += '"';
  }
  json += ": {\"dtype\": \"";
  json += DTypeName(e.dtype);
  json += "\", \"shape\": [";
  if (e.shape != nullptr) {
    for (std::size_t i = 0; i < e.shape->size(); ++i) {
      if (i) json += ", ";
      AppendUInt(json, (*e.shape)[i]);
    }
  } else {
    AppendUInt(json, e.end - e.begin);  // padding: U8 [gap]
  }
  json += "], \"data_offsets\": [";
  AppendUInt(json, e.begin);
  json += ", ";
  AppendUInt(json, e.end);
  json += "]}";
}

}  // namespace

SafetensorsBuilder::SafetensorsBuilder(SafetensorsWriteOptions options) : options_(std::move(options)) {}

Status SafetensorsBuilder::Add(std::string name, DType dtype, std::vector<std::uint64_t> shape, bool aligned) {
  if (name.empty()) return InvalidArgumentError("safetensors writer: empty tensor name");
  if (IsPaddingName(name) || name == "__metadata__")
    return InvalidArgumentError("safetensors writer: tensor name '" + name + "' is reserved");
  if (shape.size() > kMaxTensorRank)
    return InvalidArgumentError("safetensors writer: tensor '" + name + "' has rank " +
                                std::to_string(shape.size()) + ", more than " + std::to_string(kMaxTensorRank));
  if (tensors_.size() >= kMaxSafetensorsTensors)
    return ResourceExhaustedError("safetensors writer: more than " + std::to_string(kMaxSafetensorsTensors) +
                                  " tensors");
  std::uint64_t bytes = DTypeSize(dtype);
  for (std::uint64_t d : shape) {
    if (d != 0 && bytes > kMaxU64 / d)
      return InvalidArgumentError("safetensors writer: tensor '" + name + "' byte size overflows 64 bits");
    bytes *= d;
  }
  if (!names_.insert(name).second)
    return InvalidArgumentError("safetensors writer: duplicate tensor name '" + name + "'");
  tensors_.push_back(Entry{std::move(name), dtype, std::move(shape), bytes, aligned});
  return Status::Ok();
}

Result<SafetensorsLayout> SafetensorsBuilder::Layout() const {
  const std::uint64_t align = options_.alignment;
  if (!IsPowerOfTwo(align))
    return InvalidArgumentError("safetensors writer: alignment " + std::to_string(align) +
                                " is not a power of two");
  {
    std::set<std::string_view> keys;
    for (const auto& [k, v] : options_.metadata)
      if (!keys.insert(k).second)
        return InvalidArgumentError("safetensors writer: duplicate metadata key '" + k + "'");
  }

  // data layout (relative offsets do not depend on the header length)
  std::vector<RawEntry> raw;
  raw.reserve(tensors_.size() * 2);
  SafetensorsLayout layout;
  layout.tensors.reserve(tensors_.size());
  std::uint64_t cursor = 0;
  std::uint64_t pad_count = 0;
  if (options_.leading_padding > 0) {
    raw.push_back(RawEntry{nullptr, pad_count++, DType::kU8, nullptr, 0, options_.leading_padding});
    cursor = options_.leading_padding;
  }
  for (const Entry& t : tensors_) {
    if (t.aligned && align > 1 && cursor % align != 0) {
      const std::uint64_t gap = align - cursor % align;
      if (cursor > kMaxU64 - gap) return ResourceExhaustedError("safetensors writer: data size overflows");
      raw.push_back(RawEntry{nullptr, pad_count++, DType::kU8, nullptr, cursor, cursor + gap});
      cursor += gap;
    }
    if (cursor > kMaxU64 - t.bytes) return ResourceExhaustedError("safetensors writer: data size overflows");
    raw.push_back(RawEntry{&t.name, 0, t.dtype, &t.shape, cursor, cursor + t.bytes});
    layout.tensors.push_back(PlacedTensor{t.name, t.dtype, t.shape, cursor, cursor + t.bytes, 0});
    cursor += t.bytes;
  }
  layout.padding_entries = pad_count;

  // header JSON
  std::string json;
  json.reserve(64 + raw.size() * 96);
  json += '{';
  if (!options_.metadata.empty()) {
    json += "\"__metadata__\": {";
    bool first = true;
    for (const auto& [k, v] : options_.metadata) {
      if (!first) json += ", ";
      first = false;
      AppendJsonString(json, k);
      json += ": ";
      AppendJsonString(json, v);
    }
    json += '}';
  }
  for (const RawEntry& e : raw) AppendEntry(json, e);
  json += '}';

  // pad with spaces so the data start is aligned
  const std::uint64_t start_align = std::max<std::uint64_t>(8, align);
  std::uint64_t data_start = 8 + json.size();
  if (data_start % start_align != 0) data_start += start_align - data_start % start_align;
  const std::uint64_t n = data_start - 8;
  if (n > kMaxSafetensorsHeaderBytes)
    return ResourceExhaustedError("safetensors writer: header of " + std::to_string(n) + " bytes exceeds the cap of " +
                                  std::to_string(kMaxSafetensorsHeaderBytes));
  json.resize(n, ' ');
  if (cursor > kMaxU64 - data_start) return ResourceExhaustedError("safetensors writer: file size overflows");

  layout.head.resize(data_start);
  StoreLE64(layout.head.data(), n);
  std::memcpy(layout.head.data() + 8, json.data(), json.size());
  layout.data_start = data_start;
  layout.file_size = data_start + cursor;
  for (PlacedTensor& t : layout.tensors) t.absolute_offset = data_start + t.begin;
  return layout;
}

Result<std::vector<std::byte>> SerializeSafetensors(std::span<const TensorBytes> tensors,
                                                    const SafetensorsWriteOptions& options) {
  SafetensorsBuilder builder(options);
  for (const TensorBytes& t : tensors) EXLR8_RETURN_IF_ERROR(builder.Add(t.name, t.dtype, t.shape, t.aligned));
  EXLR8_ASSIGN_OR_RETURN(SafetensorsLayout layout, builder.Layout());
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    if (tensors[i].bytes.size() != layout.tensors[i].byte_size())
      return InvalidArgumentError("safetensors writer: tensor '" + tensors[i].name + "' has " +
                                  std::to_string(tensors[i].bytes.size()) + " bytes, expected " +
                                  std::to_string(layout.tensors[i].byte_size()) + " (shape x " +
                                  std::string(DTypeName(tensors[i].dtype)) + ")");
  }
  if (layout.file_size > std::numeric_limits<std::size_t>::max())
    return ResourceExhaustedError("safetensors writer: file too large for memory");
  std::vector<std::byte> out(layout.file_size);  // padding bytes stay zero
  std::memcpy(out.data(), layout.head.data(), layout.head.size());
  for (std::size_t i = 0; i < tensors.size(); ++i)
    if (!tensors[i].bytes.empty())
      std::memcpy(out.data() + layout.tensors[i].absolute_offset, tensors[i].bytes.data(), tensors[i].bytes.size());
  return out;
}

}  // namespace exlr8
