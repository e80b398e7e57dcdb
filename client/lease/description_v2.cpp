// The v2 lease description's writer and its strict reader, field by field
// (schema/lease/description-v2.schema.json). About 510 lines because each
// field's rule (type, range, what it must agree with) sits next to the code
// that writes it.
#include "client/lease/description_v2.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <initializer_list>
#include <limits>
#include <utility>

#include "format/json.h"
#include "format/json_writer.h"

namespace exlr8 {

namespace {

constexpr std::int64_t kIntMaxV2 = std::numeric_limits<int>::max();
constexpr std::size_t kMaxText = 4096;

std::string DN(std::uint64_t v) { return std::to_string(v); }

std::string DescribeV2(const JsonValue& v) {
  switch (v.type()) {
    case JsonValue::Type::kString:
      return "\"" + EscapeForMessage(v.as_string(), 40) + "\"";
    case JsonValue::Type::kArray:
      return "an array";
    case JsonValue::Type::kObject:
      return "an object";
    default:
      return EscapeForMessage(v.Dump(), 40);
  }
}

// One object of the description at `path` ("" top, "memory", "proof.hashed",
// "memory.allocations[1]"): members are looked up in it, and errors name
// them by their full path and their value's offset.
class Obj {
 public:
  Obj(const JsonValue& v, std::string path, const std::string& prefix)
      : v_(v), path_(std::move(path)), prefix_(prefix) {}

  std::string Path(std::string_view field) const {
    return path_.empty() ? std::string(field) : path_ + "." + std::string(field);
  }
  Status At(const JsonValue& value, std::string_view field, const std::string& what) const {
    return CorruptionError(prefix_ + "'" + Path(field) + "' at byte " + DN(value.offset()) + ": " + what);
  }
  Result<const JsonValue*> Get(std::string_view field) const {
    const JsonValue* f = v_.Find(field);
    if (f == nullptr)
      return CorruptionError(prefix_ + (path_.empty() ? std::string("the description") : "'" + path_ + "'") +
                             " at byte " + DN(v_.offset()) + ": no '" + std::string(field) + "'");
    return f;
  }
  Result<std::int64_t> Int(std::string_view field, std::int64_t lo, std::int64_t hi) const {
    EXLR8_ASSIGN_OR_RETURN(const JsonValue* f, Get(field));
    const auto n = f->is_number() ? f->as_int64() : std::nullopt;
    if (!n || *n < lo || *n > hi)
      return At(
          *f, field,
          DescribeV2(*f) + " is not an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
    return *n;
  }
  Result<std::uint64_t> Uint(std::string_view field, std::uint64_t lo = 0,
                             std::uint64_t hi = std::numeric_limits<std::uint64_t>::max()) const {
    EXLR8_ASSIGN_OR_RETURN(const JsonValue* f, Get(field));
    const auto n = f->is_number() ? f->as_uint64() : std::nullopt;
    if (!n || *n < lo || *n > hi)
      return At(*f, field, DescribeV2(*f) + " is not an integer in [" + DN(lo) + ", " + DN(hi) + "]");
    return *n;
  }
  Result<double> Seconds(std::string_view field) const {
    EXLR8_ASSIGN_OR_RETURN(const JsonValue* f, Get(field));
    if (!f->is_number() || !std::isfinite(f->as_double()) || f->as_double() < 0)
      return At(*f, field, DescribeV2(*f) + " is not a finite number >= 0");
    return f->as_double();
  }
  Result<bool> Bool(std::string_view field) const {
    EXLR8_ASSIGN_OR_RETURN(const JsonValue* f, Get(field));
    if (!f->is_bool()) return At(*f, field, DescribeV2(*f) + " is not true or false");
    return f->as_bool();
  }
  Result<std::string> Text(std::string_view field) const {
    EXLR8_ASSIGN_OR_RETURN(const JsonValue* f, Get(field));
    if (!f->is_string() || f->as_string().empty() || f->as_string().size() > kMaxText)
      return At(*f, field, DescribeV2(*f) + " is not a string of 1 to " + DN(kMaxText) + " bytes");
    return f->as_string();
  }
  Result<Obj> Child(std::string_view field) const {
    EXLR8_ASSIGN_OR_RETURN(const JsonValue* f, Get(field));
    if (!f->is_object()) return At(*f, field, DescribeV2(*f) + ", not an object");
    return Obj(*f, Path(field), prefix_);
  }
  Status OnlyKnown(std::initializer_list<std::string_view> known) const {
    for (const JsonValue::Member& m : v_.as_object())
      if (std::find(known.begin(), known.end(), m.first) == known.end())
        return At(m.second, EscapeForMessage(m.first, 40), "unknown field");
    return Status::Ok();
  }
  const JsonValue& value() const { return v_; }

 private:
  const JsonValue& v_;
  std::string path_;
  const std::string& prefix_;
};

bool IsHex(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(),
                                   [](char c) { return std::isxdigit(static_cast<unsigned char>(c)) != 0; });
}

// "GPU-" or "MIG-" + 8-4-4-4-12 hex digits.
bool IsGpuUuid(std::string_view s) {
  if (s.size() != 40 || (s.substr(0, 4) != "GPU-" && s.substr(0, 4) != "MIG-")) return false;
  const std::size_t groups[] = {8, 4, 4, 4, 12};
  std::size_t at = 4;
  for (std::size_t g = 0; g < 5; ++g) {
    if (!IsHex(s.substr(at, groups[g]))) return false;
    at += groups[g];
    if (g < 4 && s[at++] != '-') return false;
  }
  return true;
}

// DDDD[DDDD]:BB:DD.F, hex, F 0..7.
bool IsPciBusId(std::string_view s) {
  const std::size_t colon = s.find(':');
  if (colon != 4 && colon != 8) return false;
  if (s.size() != colon + 8) return false;
  const std::string_view rest = s.substr(colon);
  return IsHex(s.substr(0, colon)) && rest[0] == ':' && IsHex(rest.substr(1, 2)) && rest[3] == ':' &&
         IsHex(rest.substr(4, 2)) && rest[6] == '.' && rest[7] >= '0' && rest[7] <= '7' && rest.size() == 8;
}

bool IsHandle(std::string_view s, LeaseMemoryKind kind) {
  if (s == "fd") return true;
  return kind == LeaseMemoryKind::kDevice && s.size() == 4 + 128 && s.substr(0, 4) == "ipc:" &&
         IsHex(s.substr(4));
}

std::uint64_t Align8V2(std::uint64_t v) { return (v + 7) & ~std::uint64_t{7}; }

}  // namespace

std::string_view LeaseMemoryKindName(LeaseMemoryKind k) {
  return k == LeaseMemoryKind::kHost ? "host" : "device";
}

std::optional<std::uint64_t> ImageTablesFileBytes(std::uint64_t tensors, std::uint64_t checks,
                                                  std::uint64_t strings, std::uint64_t offset_table_bytes) {
  if (tensors > kImageMaxTensors || checks > kImageMaxChecks || strings > kImageMaxStringBytes)
    return std::nullopt;
  const std::uint64_t head = Align8V2(kImageTablesHeaderBytes + tensors * kImageTensorEntryBytes +
                                      checks * kImageCheckEntryBytes + strings);
  if (offset_table_bytes > std::numeric_limits<std::uint64_t>::max() - head) return std::nullopt;
  return head + offset_table_bytes;
}

std::string WriteLeaseProof(const LeaseProof& p) {
  JsonWriter w(512);
  w.BeginObject().Field("commit", p.commit);
  w.Key("hashed")
      .BeginObject()
      .Field("regions", p.hashed_regions)
      .Field("bytes", p.hashed_bytes)
      .Field("mismatches", p.hashed_mismatches)
      .EndObject();
  w.Key("decoded")
      .BeginObject()
      .Field("halves", p.decoded_halves)
      .Field("of", p.decoded_of)
      .Field("seed", p.decoded_seed)
      .Field("every_layer_width_projection", p.every_layer_width_projection)
      .Field("tiles_bit_exact", p.tiles_bit_exact)
      .Field("max_block_error", p.max_block_error)
      .EndObject();
  w.Key("dense_decoded")
      .BeginObject()
      .Field("tensors", p.dense_decoded_tensors)
      .Field("mismatches", p.dense_decoded_mismatches)
      .EndObject();
  w.Key("seconds")
      .BeginObject()
      .Field("read", p.seconds_read)
      .Field("upload", p.seconds_upload)
      .Field("hash", p.seconds_hash)
      .Field("decode", p.seconds_decode)
      .EndObject();
  w.Key("mismatch");
  if (!p.mismatch) {
    w.Null();
  } else {
    const LeaseMismatch& m = *p.mismatch;
    w.BeginObject()
        .Field("tensor", m.tensor)
        .Field("offset", m.offset)
        .Field("layer", m.layer)
        .Field("expert", m.expert);
    w.Key("proj");
    if (m.proj) {
      w.String(ProjName(*m.proj));
    } else {
      w.Null();
    }
    w.Field("half", m.half).Field("name", m.name).EndObject();
  }
  w.EndObject();
  return std::move(w).Take();
}

std::string WriteLeaseDescriptionV2(const LeaseDescriptionV2& d) {
  JsonWriter w(1024);
  w.BeginObject()
      .Field("version", 2)
      .Field("repo", d.repo)
      .Field("commit", d.commit)
      .Field("manifest", d.manifest)
      .Field("tp", d.tp)
      .Field("rank", d.rank);
  w.Key("memory").BeginObject().Field("kind", LeaseMemoryKindName(d.memory_kind));
  if (d.device) {
    w.Key("device")
        .BeginObject()
        .Field("uuid", d.device->uuid)
        .Field("pci_bus_id", d.device->pci_bus_id)
        .Field("ordinal_in_holder", d.device->ordinal_in_holder)
        .EndObject();
  }
  w.Key("allocations").BeginArray();
  for (const LeaseAllocation& a : d.allocations)
    w.BeginObject().Field("bytes", a.bytes).Field("handle", a.handle).EndObject();
  w.EndArray().EndObject();
  w.Key("image")
      .BeginObject()
      .Field("allocation", d.image.allocation)
      .Field("header_offset", d.image.header_offset)
      .Field("bytes", d.image.bytes)
      .Field("offset_table", d.image.offset_table)
      .Field("offset_table_bytes", d.image.offset_table_bytes)
      .Field("layers", d.image.layers)
      .Field("experts", d.image.experts)
      .Field("halves", d.image.halves)
      .EndObject();
  w.Key("tables")
      .BeginObject()
      .Field("bytes", d.tables.bytes)
      .Field("tensors", d.tables.tensors)
      .Field("checks", d.tables.checks)
      .Field("strings", d.tables.strings)
      .EndObject();
  w.Key("proof").Raw(WriteLeaseProof(d.proof));
  w.Field("release_deadline_s", d.release_deadline_s).EndObject();
  return std::move(w).Take();
}

Result<LeaseDescriptionV2> ParseLeaseDescriptionV2(std::string_view text, std::string_view source) {
  const std::string prefix =
      source.empty() ? "lease description: " : "lease description from " + std::string(source) + ": ";
  if (text.size() > kMaxLeaseDescriptionV2Bytes)
    return CorruptionError(prefix + "larger than " + DN(kMaxLeaseDescriptionV2Bytes) + " bytes");
  JsonLimits limits;
  limits.max_depth = 4;  // top > memory > allocations > allocation
  limits.max_string_bytes = 1 << 16;
  limits.max_object_members = 16;
  limits.max_array_elements = kMaxLeaseAllocations + 1;  // one more, refused naming the field
  limits.max_elements = 1024;
  auto parsed = ParseJson(text, limits);
  if (!parsed.ok()) return CorruptionError(prefix + parsed.status().message());
  const JsonValue& v = *parsed;
  if (!v.is_object())
    return CorruptionError(prefix + "at byte " + DN(v.offset()) + ": " + DescribeV2(v) + ", not an object");
  const Obj top(v, "", prefix);
  EXLR8_ASSIGN_OR_RETURN(const JsonValue* version, top.Get("version"));
  if (!version->is_number() || version->as_uint64() != std::optional<std::uint64_t>(2))
    return top.At(*version, "version", "version " + DescribeV2(*version) + " is not 2");
  EXLR8_RETURN_IF_ERROR(top.OnlyKnown({"version", "repo", "commit", "manifest", "tp", "rank", "memory",
                                       "image", "tables", "proof", "release_deadline_s"}));
  LeaseDescriptionV2 d;
  EXLR8_ASSIGN_OR_RETURN(d.repo, top.Text("repo"));
  EXLR8_ASSIGN_OR_RETURN(d.commit, top.Text("commit"));
  EXLR8_ASSIGN_OR_RETURN(d.manifest, top.Text("manifest"));
  EXLR8_ASSIGN_OR_RETURN(const std::int64_t tp, top.Int("tp", 1, kIntMaxV2));
  EXLR8_ASSIGN_OR_RETURN(const std::int64_t rank, top.Int("rank", 0, tp - 1));
  d.tp = static_cast<int>(tp);
  d.rank = static_cast<int>(rank);

  // memory
  EXLR8_ASSIGN_OR_RETURN(const Obj memory, top.Child("memory"));
  EXLR8_RETURN_IF_ERROR(memory.OnlyKnown({"kind", "device", "allocations"}));
  EXLR8_ASSIGN_OR_RETURN(const JsonValue* kind, memory.Get("kind"));
  if (kind->is_string() && kind->as_string() == "device") {
    d.memory_kind = LeaseMemoryKind::kDevice;
  } else if (kind->is_string() && kind->as_string() == "host") {
    d.memory_kind = LeaseMemoryKind::kHost;
  } else {
    return memory.At(*kind, "kind", "unknown memory kind " + DescribeV2(*kind) + " (device or host)");
  }
  if (memory.value().Find("device") != nullptr || d.memory_kind == LeaseMemoryKind::kDevice) {
    EXLR8_ASSIGN_OR_RETURN(const Obj dev, memory.Child("device"));
    EXLR8_RETURN_IF_ERROR(dev.OnlyKnown({"uuid", "pci_bus_id", "ordinal_in_holder"}));
    LeaseGpu g;
    EXLR8_ASSIGN_OR_RETURN(g.uuid, dev.Text("uuid"));
    if (!IsGpuUuid(g.uuid))
      return dev.At(*dev.value().Find("uuid"), "uuid",
                    DescribeV2(*dev.value().Find("uuid")) +
                        " is not a GPU UUID (GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx)");
    EXLR8_ASSIGN_OR_RETURN(g.pci_bus_id, dev.Text("pci_bus_id"));
    if (!IsPciBusId(g.pci_bus_id))
      return dev.At(*dev.value().Find("pci_bus_id"), "pci_bus_id",
                    DescribeV2(*dev.value().Find("pci_bus_id")) + " is not a PCI bus id (0000:4E:00.0)");
    EXLR8_ASSIGN_OR_RETURN(const std::int64_t ordinal, dev.Int("ordinal_in_holder", 0, kIntMaxV2));
    g.ordinal_in_holder = static_cast<int>(ordinal);
    d.device = std::move(g);
  }
  EXLR8_ASSIGN_OR_RETURN(const JsonValue* allocations, memory.Get("allocations"));
  if (!allocations->is_array() || allocations->as_array().empty() ||
      allocations->as_array().size() > kMaxLeaseAllocations)
    return memory.At(
        *allocations, "allocations",
        DescribeV2(*allocations) + " is not an array of 1 to " + DN(kMaxLeaseAllocations) + " allocations");
  for (std::size_t i = 0; i < allocations->as_array().size(); ++i) {
    const JsonValue& item = allocations->as_array()[i];
    const std::string where = "memory.allocations[" + DN(i) + "]";
    if (!item.is_object())
      return CorruptionError(prefix + "'" + where + "' at byte " + DN(item.offset()) + ": " +
                             DescribeV2(item) + ", not an object");
    const Obj a(item, where, prefix);
    EXLR8_RETURN_IF_ERROR(a.OnlyKnown({"bytes", "handle"}));
    LeaseAllocation alloc;
    EXLR8_ASSIGN_OR_RETURN(alloc.bytes, a.Uint("bytes", 1, kMaxLeaseAllocationBytes));
    EXLR8_ASSIGN_OR_RETURN(const JsonValue* handle, a.Get("handle"));
    if (!handle->is_string() || !IsHandle(handle->as_string(), d.memory_kind))
      return a.At(*handle, "handle",
                  DescribeV2(*handle) + (d.memory_kind == LeaseMemoryKind::kHost
                                             ? " is not \"fd\" (host memory travels as a descriptor)"
                                             : " is neither \"fd\" nor \"ipc:\" and 128 hex digits"));
    alloc.handle = handle->as_string();
    d.allocations.push_back(std::move(alloc));
  }

  // image
  EXLR8_ASSIGN_OR_RETURN(const Obj image, top.Child("image"));
  EXLR8_RETURN_IF_ERROR(image.OnlyKnown({"allocation", "header_offset", "bytes", "offset_table",
                                         "offset_table_bytes", "layers", "experts", "halves"}));
  LeaseImageRef& im = d.image;
  EXLR8_ASSIGN_OR_RETURN(const std::uint64_t allocation,
                         image.Uint("allocation", 0, d.allocations.size() - 1));
  im.allocation = static_cast<std::uint32_t>(allocation);
  const std::uint64_t alloc_bytes = d.allocations[im.allocation].bytes;
  EXLR8_ASSIGN_OR_RETURN(im.header_offset, image.Uint("header_offset"));
  if (im.header_offset % kImageAlignment != 0)
    return image.At(*image.value().Find("header_offset"), "header_offset",
                    DN(im.header_offset) + " is not a multiple of 256");
  EXLR8_ASSIGN_OR_RETURN(im.bytes, image.Uint("bytes", kImageHeaderBytes));
  if (im.bytes % kImageAlignment != 0)
    return image.At(*image.value().Find("bytes"), "bytes", DN(im.bytes) + " is not a multiple of 256");
  if (im.header_offset > alloc_bytes || im.bytes > alloc_bytes - im.header_offset)
    return image.At(*image.value().Find("bytes"), "bytes",
                    "the image [" + DN(im.header_offset) + ", +" + DN(im.bytes) +
                        ") lies outside allocation " + DN(im.allocation) + " of " + DN(alloc_bytes) +
                        " bytes");
  EXLR8_ASSIGN_OR_RETURN(const std::uint64_t layers, image.Uint("layers", 0, kImageMaxLayers));
  EXLR8_ASSIGN_OR_RETURN(const std::uint64_t experts, image.Uint("experts", 0, kImageMaxExperts));
  EXLR8_ASSIGN_OR_RETURN(const std::uint64_t halves, image.Uint("halves", 0, kImageMaxHalves));
  im.layers = static_cast<std::uint32_t>(layers);
  im.experts = static_cast<std::uint32_t>(experts);
  im.halves = static_cast<std::uint32_t>(halves);
  EXLR8_ASSIGN_OR_RETURN(im.offset_table, image.Uint("offset_table", kImageHeaderBytes));
  if (im.offset_table % kImageAlignment != 0)
    return image.At(*image.value().Find("offset_table"), "offset_table",
                    DN(im.offset_table) + " is not a multiple of 256");
  EXLR8_ASSIGN_OR_RETURN(im.offset_table_bytes, image.Uint("offset_table_bytes"));
  const auto table = ImageOffsetTableBytes(layers, experts, halves);
  if (!table || *table != im.offset_table_bytes)
    return image.At(*image.value().Find("offset_table_bytes"), "offset_table_bytes",
                    DN(im.offset_table_bytes) + ", expected layers x (experts + 1) x 3 x halves x 8 = " +
                        (table ? DN(*table) : std::string("(overflow)")));
  if (im.offset_table > im.bytes || im.offset_table_bytes > im.bytes - im.offset_table)
    return image.At(*image.value().Find("offset_table"), "offset_table",
                    "the offset table [" + DN(im.offset_table) + ", +" + DN(im.offset_table_bytes) +
                        ") lies outside the image of " + DN(im.bytes) + " bytes");

  // tables
  EXLR8_ASSIGN_OR_RETURN(const Obj tables, top.Child("tables"));
  EXLR8_RETURN_IF_ERROR(tables.OnlyKnown({"bytes", "tensors", "checks", "strings"}));
  EXLR8_ASSIGN_OR_RETURN(d.tables.bytes, tables.Uint("bytes"));
  EXLR8_ASSIGN_OR_RETURN(d.tables.tensors, tables.Uint("tensors", 0, kImageMaxTensors));
  EXLR8_ASSIGN_OR_RETURN(d.tables.checks, tables.Uint("checks", 0, kImageMaxChecks));
  EXLR8_ASSIGN_OR_RETURN(d.tables.strings, tables.Uint("strings", 0, kImageMaxStringBytes));
  const auto file =
      ImageTablesFileBytes(d.tables.tensors, d.tables.checks, d.tables.strings, im.offset_table_bytes);
  if (!file || *file != d.tables.bytes)
    return tables.At(*tables.value().Find("bytes"), "bytes",
                     DN(d.tables.bytes) + ", but the counts and the offset table make " +
                         (file ? DN(*file) : std::string("(overflow)")));

  // proof
  EXLR8_ASSIGN_OR_RETURN(const Obj proof, top.Child("proof"));
  EXLR8_RETURN_IF_ERROR(
      proof.OnlyKnown({"commit", "hashed", "decoded", "dense_decoded", "seconds", "mismatch"}));
  LeaseProof& p = d.proof;
  EXLR8_ASSIGN_OR_RETURN(p.commit, proof.Text("commit"));
  if (p.commit != d.commit)
    return proof.At(*proof.value().Find("commit"), "commit",
                    DescribeV2(*proof.value().Find("commit")) + " is not the description's commit");
  EXLR8_ASSIGN_OR_RETURN(const Obj hashed, proof.Child("hashed"));
  EXLR8_RETURN_IF_ERROR(hashed.OnlyKnown({"regions", "bytes", "mismatches"}));
  EXLR8_ASSIGN_OR_RETURN(p.hashed_regions, hashed.Uint("regions"));
  EXLR8_ASSIGN_OR_RETURN(p.hashed_bytes, hashed.Uint("bytes"));
  EXLR8_ASSIGN_OR_RETURN(p.hashed_mismatches, hashed.Uint("mismatches", 0, p.hashed_regions));
  EXLR8_ASSIGN_OR_RETURN(const Obj decoded, proof.Child("decoded"));
  EXLR8_RETURN_IF_ERROR(decoded.OnlyKnown(
      {"halves", "of", "seed", "every_layer_width_projection", "tiles_bit_exact", "max_block_error"}));
  EXLR8_ASSIGN_OR_RETURN(p.decoded_of, decoded.Uint("of"));
  EXLR8_ASSIGN_OR_RETURN(p.decoded_halves, decoded.Uint("halves", 0, p.decoded_of));
  EXLR8_ASSIGN_OR_RETURN(p.decoded_seed, decoded.Uint("seed"));
  EXLR8_ASSIGN_OR_RETURN(p.every_layer_width_projection, decoded.Bool("every_layer_width_projection"));
  EXLR8_ASSIGN_OR_RETURN(p.tiles_bit_exact, decoded.Bool("tiles_bit_exact"));
  EXLR8_ASSIGN_OR_RETURN(p.max_block_error, decoded.Seconds("max_block_error"));
  EXLR8_ASSIGN_OR_RETURN(const Obj dense, proof.Child("dense_decoded"));
  EXLR8_RETURN_IF_ERROR(dense.OnlyKnown({"tensors", "mismatches"}));
  EXLR8_ASSIGN_OR_RETURN(p.dense_decoded_tensors, dense.Uint("tensors"));
  EXLR8_ASSIGN_OR_RETURN(p.dense_decoded_mismatches, dense.Uint("mismatches", 0, p.dense_decoded_tensors));
  EXLR8_ASSIGN_OR_RETURN(const Obj seconds, proof.Child("seconds"));
  EXLR8_RETURN_IF_ERROR(seconds.OnlyKnown({"read", "upload", "hash", "decode"}));
  EXLR8_ASSIGN_OR_RETURN(p.seconds_read, seconds.Seconds("read"));
  EXLR8_ASSIGN_OR_RETURN(p.seconds_upload, seconds.Seconds("upload"));
  EXLR8_ASSIGN_OR_RETURN(p.seconds_hash, seconds.Seconds("hash"));
  EXLR8_ASSIGN_OR_RETURN(p.seconds_decode, seconds.Seconds("decode"));
  EXLR8_ASSIGN_OR_RETURN(const JsonValue* mismatch, proof.Get("mismatch"));
  const bool clean = p.hashed_mismatches == 0 && p.dense_decoded_mismatches == 0 && p.tiles_bit_exact;
  if (mismatch->is_null()) {
    if (!clean)
      return proof.At(*mismatch, "mismatch", "null, but the proof reports a mismatch (name where it is)");
  } else {
    if (!mismatch->is_object())
      return proof.At(*mismatch, "mismatch", DescribeV2(*mismatch) + ", not an object or null");
    if (clean) return proof.At(*mismatch, "mismatch", "names a mismatch, but the proof reports none");
    const Obj m(*mismatch, "proof.mismatch", prefix);
    EXLR8_RETURN_IF_ERROR(m.OnlyKnown({"tensor", "offset", "layer", "expert", "proj", "half", "name"}));
    LeaseMismatch mm;
    if (d.tables.tensors == 0) return m.At(*mismatch, "tensor", "names a tensor, but the tables hold none");
    EXLR8_ASSIGN_OR_RETURN(mm.tensor, m.Uint("tensor", 0, d.tables.tensors - 1));
    EXLR8_ASSIGN_OR_RETURN(mm.offset, m.Uint("offset", 0, im.bytes - 1));
    // Optional identity: each present, null or in range.
    const auto nullable = [&](std::string_view field) -> Result<bool> {
      EXLR8_ASSIGN_OR_RETURN(const JsonValue* f, m.Get(field));
      return !f->is_null();
    };
    EXLR8_ASSIGN_OR_RETURN(const bool has_layer, nullable("layer"));
    if (has_layer) {
      EXLR8_ASSIGN_OR_RETURN(const std::uint64_t l, m.Uint("layer", 0, kImageMaxLayers));
      mm.layer = static_cast<std::uint32_t>(l);
    }
    EXLR8_ASSIGN_OR_RETURN(const bool has_expert, nullable("expert"));
    if (has_expert) {
      EXLR8_ASSIGN_OR_RETURN(const std::int64_t e, m.Int("expert", kSharedExpert, kImageMaxExperts));
      mm.expert = static_cast<int>(e);
    }
    EXLR8_ASSIGN_OR_RETURN(const bool has_proj, nullable("proj"));
    if (has_proj) {
      const JsonValue& pj = *mismatch->Find("proj");
      const auto pr = pj.is_string() ? ProjFromName(pj.as_string()) : std::nullopt;
      if (!pr) return m.At(pj, "proj", "unknown projection " + DescribeV2(pj) + " (gate, up, down or null)");
      mm.proj = *pr;
    }
    EXLR8_ASSIGN_OR_RETURN(const bool has_half, nullable("half"));
    if (has_half) {
      EXLR8_ASSIGN_OR_RETURN(const std::uint64_t h, m.Uint("half", 0, kImageMaxHalves));
      mm.half = static_cast<std::uint32_t>(h);
    }
    EXLR8_ASSIGN_OR_RETURN(const bool has_name, nullable("name"));
    if (has_name) {
      EXLR8_ASSIGN_OR_RETURN(mm.name, m.Text("name"));
    }
    p.mismatch = std::move(mm);
  }
  EXLR8_ASSIGN_OR_RETURN(const std::uint64_t deadline,
                         top.Uint("release_deadline_s", 1, kMaxLeaseReleaseDeadlineS));
  d.release_deadline_s = static_cast<std::uint32_t>(deadline);
  return d;
}

Status CheckLeaseImage(const LeaseDescriptionV2& d, const ImageHeader& h, const ImageTables& t) {
  const auto err = [](const std::string& what) {
    return CorruptionError("lease description and image disagree: " + what);
  };
  const LeaseImageRef& im = d.image;
  if (im.bytes != h.allocation_bytes || im.bytes != t.allocation_bytes)
    return err("image bytes " + DN(im.bytes) + " vs header " + DN(h.allocation_bytes) + ", tables " +
               DN(t.allocation_bytes));
  if (im.layers != h.layers || im.experts != h.experts || im.halves != h.halves_per_proj)
    return err("dimensions " + DN(im.layers) + "x" + DN(im.experts) + "x" + DN(im.halves) + " vs header " +
               DN(h.layers) + "x" + DN(h.experts) + "x" + DN(h.halves_per_proj));
  if (im.offset_table != h.offset_table.offset || im.offset_table_bytes != h.offset_table.bytes)
    return err("offset table at " + DN(im.offset_table) + " (" + DN(im.offset_table_bytes) +
               " bytes) vs header " + DN(h.offset_table.offset) + " (" + DN(h.offset_table.bytes) + ")");
  if (h.tp != static_cast<std::uint32_t>(d.tp) || h.rank != static_cast<std::uint32_t>(d.rank))
    return err("rank " + DN(static_cast<std::uint64_t>(d.rank)) + " of " +
               DN(static_cast<std::uint64_t>(d.tp)) + " vs header " + DN(h.rank) + " of " + DN(h.tp));
  if (h.commit != d.commit)
    return err("commit '" + EscapeForMessage(d.commit) + "' vs header '" + EscapeForMessage(h.commit) + "'");
  std::uint64_t strings = 0;
  for (const ImageTensor& e : t.tensors)
    if (!e.name.empty()) strings += e.name.size() + 1;
  if (d.tables.tensors != t.tensors.size() || d.tables.checks != t.checks.size() ||
      d.tables.strings != strings)
    return err("tables of " + DN(d.tables.tensors) + "/" + DN(d.tables.checks) + "/" + DN(d.tables.strings) +
               " tensors/checks/string bytes vs " + DN(t.tensors.size()) + "/" + DN(t.checks.size()) + "/" +
               DN(strings));
  return CheckImageAgreement(h, t);
}

}  // namespace exlr8
