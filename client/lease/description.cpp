#include "client/lease/description.h"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <optional>
#include <tuple>
#include <utility>

#include "format/json.h"

namespace exlr8 {

namespace {

constexpr std::int64_t kIntMax = std::numeric_limits<int>::max();

// Builds the errors of one parse: "lease description[ from SOURCE]: ...".
class Errors {
 public:
  explicit Errors(std::string_view source)
      : prefix_(source.empty() ? "lease description: "
                               : "lease description from " + std::string(source) + ": ") {}
  Status operator()(const std::string& what) const { return CorruptionError(prefix_ + what); }

 private:
  std::string prefix_;
};

// What a value is, for a message: numbers and short strings as they are,
// containers by their kind.
std::string Describe(const JsonValue& v) {
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

// One object of the description (the top level, or halves[i]) and where it
// is: fields are looked up in it and errors name them with their offsets.
class Fields {
 public:
  Fields(const JsonValue& object, std::string where, const Errors& errors)
      : object_(object), where_(std::move(where)), errors_(errors) {}

  // Corruption naming the field and its value's offset.
  Status At(const JsonValue& value, std::string_view field, const std::string& what) const {
    return errors_(where_ + "'" + std::string(field) + "' at byte " + std::to_string(value.offset()) + ": " +
                   what);
  }
  // Corruption naming this object and its offset.
  Status Here(const std::string& what) const {
    return errors_((where_.empty() ? std::string() : where_) + "at byte " + std::to_string(object_.offset()) +
                   ": " + what);
  }

  Result<const JsonValue*> Get(std::string_view field, std::string_view kind) const {
    const JsonValue* v = object_.Find(field);
    if (v != nullptr) return v;
    if (where_.empty())
      return errors_("no '" + std::string(field) + "' " + std::string(kind) + " (in the object at byte " +
                     std::to_string(object_.offset()) + ")");
    const char c = field.empty() ? 'x' : field[0];
    const bool vowel = c == 'a' || c == 'e' || c == 'i' || c == 'o' || c == 'u';
    return Here(std::string("a half without ") + (vowel ? "an " : "a ") + std::string(field));
  }

  // An integer literal in [lo, hi].
  Result<std::int64_t> Int(std::string_view field, std::int64_t lo, std::int64_t hi) const {
    EXLR8_ASSIGN_OR_RETURN(const JsonValue* v, Get(field, "integer"));
    const auto n = v->is_number() ? v->as_int64() : std::nullopt;
    if (!n || *n < lo || *n > hi)
      return At(
          *v, field,
          Describe(*v) + " is not an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
    return *n;
  }

  // An unsigned integer literal, at least `lo`.
  Result<std::uint64_t> Uint(std::string_view field, std::uint64_t lo = 0) const {
    EXLR8_ASSIGN_OR_RETURN(const JsonValue* v, Get(field, "integer"));
    const auto n = v->is_number() ? v->as_uint64() : std::nullopt;
    if (!n || *n < lo)
      return At(*v, field, Describe(*v) + " is not an integer in [" + std::to_string(lo) + ", 2^64)");
    return *n;
  }

  // A string of 1..max_bytes bytes.
  Result<std::string> Text(std::string_view field, std::size_t max_bytes) const {
    EXLR8_ASSIGN_OR_RETURN(const JsonValue* v, Get(field, "string"));
    if (!v->is_string() || v->as_string().empty() || v->as_string().size() > max_bytes)
      return At(*v, field, Describe(*v) + " is not a string of 1 to " + std::to_string(max_bytes) + " bytes");
    return v->as_string();
  }

  // An IPC handle: kLeaseHandleHexDigits hex digits.
  Result<std::string> Handle(std::string_view field) const {
    EXLR8_ASSIGN_OR_RETURN(const JsonValue* v, Get(field, "string"));
    bool hex = v->is_string() && v->as_string().size() == kLeaseHandleHexDigits;
    if (hex)
      for (char c : v->as_string()) hex = hex && std::isxdigit(static_cast<unsigned char>(c)) != 0;
    if (!hex)
      return At(
          *v, field,
          Describe(*v) + " is not an IPC handle of " + std::to_string(kLeaseHandleHexDigits) + " hex digits");
    return v->as_string();
  }

  // Refuses a member that is none of `known`.
  Status OnlyKnown(std::initializer_list<std::string_view> known) const {
    for (const JsonValue::Member& m : object_.as_object()) {
      if (std::find(known.begin(), known.end(), m.first) == known.end())
        return At(m.second, EscapeForMessage(m.first, 40), "unknown field");
    }
    return Status::Ok();
  }

 private:
  const JsonValue& object_;
  std::string where_;  // "" at the top level, "halves[i] " in a half
  const Errors& errors_;
};

std::string HalfWhere(std::size_t i) { return "halves[" + std::to_string(i) + "] "; }

}  // namespace

std::string WriteLeaseDescription(const LeaseDescription& d) {
  std::string o = "{\"version\":1,\"repo\":";
  AppendJsonString(o, d.repo);
  o += ",\"commit\":";
  AppendJsonString(o, d.commit);
  o += ",\"manifest\":";
  AppendJsonString(o, d.manifest);
  o += ",\"tp\":" + std::to_string(d.tp) + ",\"rank\":" + std::to_string(d.rank) +
       ",\"device\":" + std::to_string(d.device) + ",\"bytes\":" + std::to_string(d.bytes) +
       ",\"data_bytes\":" + std::to_string(d.data_bytes) +
       ",\"halves_count\":" + std::to_string(d.halves.size()) + ",\"data_handle\":";
  AppendJsonString(o, d.data_handle);
  o += ",\"offsets_handle\":";
  AppendJsonString(o, d.offsets_handle);
  o += ",\"halves\":[";
  for (std::size_t i = 0; i < d.halves.size(); ++i) {
    const LeasedHalf& h = d.halves[i];
    o += (i ? ",{\"layer\":" : "{\"layer\":") + std::to_string(h.tag.layer) +
         ",\"expert\":" + std::to_string(h.tag.expert) + ",\"proj\":\"" + std::string(ProjName(h.tag.proj)) +
         "\",\"half\":" + std::to_string(h.tag.half) + ",\"k\":" + std::to_string(h.tag.k) +
         ",\"hidden\":" + std::to_string(h.hidden) + ",\"offset\":" + std::to_string(h.offset) +
         ",\"length\":" + std::to_string(h.length) + "}";
  }
  return o + "]}";
}

Result<LeaseDescription> ParseLeaseDescription(std::string_view text, std::string_view source) {
  const Errors error(source);
  if (text.size() > kMaxLeaseDescriptionBytes)
    return error("larger than " + std::to_string(kMaxLeaseDescriptionBytes) + " bytes");
  // An object of halves objects: three levels, each bounded, so that the
  // parse builds no more than the description can hold.
  JsonLimits limits;
  limits.max_depth = 3;
  limits.max_string_bytes = std::size_t{1} << 20;  // longer than any field takes: refused naming it
  limits.max_object_members = 16;
  limits.max_array_elements = kMaxLeaseHalves;
  limits.max_elements = 16 * kMaxLeaseHalves + 64;
  auto parsed = ParseJson(text, limits);
  if (!parsed.ok()) return error(parsed.status().message());
  const JsonValue& v = *parsed;
  if (!v.is_object())
    return error("at byte " + std::to_string(v.offset()) + ": " + Describe(v) + ", not an object");
  const Fields top(v, "", error);

  LeaseDescription out;
  EXLR8_ASSIGN_OR_RETURN(const JsonValue* version, top.Get("version", "integer"));
  if (!version->is_number() || version->as_uint64() != std::optional<std::uint64_t>(1))
    return top.At(*version, "version", "version " + Describe(*version) + " is unknown");
  EXLR8_RETURN_IF_ERROR(
      top.OnlyKnown({"version", "repo", "commit", "manifest", "tp", "rank", "device", "bytes", "data_bytes",
                     "halves_count", "data_handle", "offsets_handle", "halves"}));
  EXLR8_ASSIGN_OR_RETURN(out.repo, top.Text("repo", kMaxLeaseTextBytes));
  EXLR8_ASSIGN_OR_RETURN(out.commit, top.Text("commit", kMaxLeaseTextBytes));
  EXLR8_ASSIGN_OR_RETURN(out.manifest, top.Text("manifest", kMaxLeaseTextBytes));
  EXLR8_ASSIGN_OR_RETURN(const std::int64_t tp, top.Int("tp", 1, kIntMax));
  EXLR8_ASSIGN_OR_RETURN(const std::int64_t rank, top.Int("rank", 0, tp - 1));
  EXLR8_ASSIGN_OR_RETURN(const std::int64_t device, top.Int("device", 0, kIntMax));
  out.tp = static_cast<int>(tp);
  out.rank = static_cast<int>(rank);
  out.device = static_cast<int>(device);
  EXLR8_ASSIGN_OR_RETURN(out.bytes, top.Uint("bytes"));

  // Each half's own fields; the checks across halves follow.
  const JsonValue* halves = v.Find("halves");
  if (halves == nullptr || !halves->is_array())
    return halves == nullptr ? error("no 'halves' array") : top.At(*halves, "halves", "not an array");
  const std::vector<JsonValue>& items = halves->as_array();
  if (items.size() > kMaxLeaseHalves)
    return top.At(*halves, "halves", "more than " + std::to_string(kMaxLeaseHalves) + " halves");
  out.halves.reserve(items.size());
  for (std::size_t i = 0; i < items.size(); ++i) {
    const JsonValue& h = items[i];
    if (!h.is_object())
      return error(HalfWhere(i) + "at byte " + std::to_string(h.offset()) + ": " + Describe(h) +
                   ", not an object");
    const Fields f(h, HalfWhere(i), error);
    LeasedHalf lh;
    EXLR8_ASSIGN_OR_RETURN(const std::int64_t layer, f.Int("layer", 0, kIntMax));
    EXLR8_ASSIGN_OR_RETURN(const std::int64_t expert, f.Int("expert", kSharedExpert, kIntMax));
    EXLR8_ASSIGN_OR_RETURN(const JsonValue* proj, f.Get("proj", "string"));
    const std::optional<Proj> p = proj->is_string() ? ProjFromName(proj->as_string()) : std::nullopt;
    if (!p) return f.At(*proj, "proj", "unknown projection " + Describe(*proj) + " (gate, up or down)");
    EXLR8_ASSIGN_OR_RETURN(const std::int64_t half,
                           f.Int("half", 0, std::numeric_limits<std::uint32_t>::max()));
    EXLR8_ASSIGN_OR_RETURN(const std::int64_t k, f.Int("k", 1, kIntMax));
    lh.tag.layer = static_cast<int>(layer);
    lh.tag.expert = static_cast<int>(expert);
    lh.tag.proj = *p;
    lh.tag.half = static_cast<std::uint32_t>(half);
    lh.tag.k = static_cast<int>(k);
    EXLR8_ASSIGN_OR_RETURN(lh.hidden, f.Uint("hidden", 1));
    EXLR8_ASSIGN_OR_RETURN(lh.offset, f.Uint("offset"));
    EXLR8_ASSIGN_OR_RETURN(lh.length, f.Uint("length", 1));
    EXLR8_RETURN_IF_ERROR(
        f.OnlyKnown({"layer", "expert", "proj", "half", "k", "hidden", "offset", "length"}));
    out.halves.push_back(lh);
  }

  EXLR8_ASSIGN_OR_RETURN(const std::uint64_t count, top.Uint("halves_count"));
  if (count != out.halves.size())
    return top.At(
        *v.Find("halves_count"), "halves_count",
        std::to_string(count) + ", but 'halves' holds " + std::to_string(out.halves.size()) + " halves");
  // A holder older than data_bytes sends none; it allocated exactly to the
  // end of its last half (UploadHalves), which is then the allocation's size.
  const bool sized = v.Find("data_bytes") != nullptr;
  if (sized) {
    EXLR8_ASSIGN_OR_RETURN(out.data_bytes, top.Uint("data_bytes"));
  }
  EXLR8_ASSIGN_OR_RETURN(out.data_handle, top.Handle("data_handle"));
  EXLR8_ASSIGN_OR_RETURN(out.offsets_handle, top.Handle("offsets_handle"));

  // Across halves: inside the allocation, adding up to `bytes`, no overlap,
  // no half twice.
  std::uint64_t payload = 0;
  for (std::size_t i = 0; i < out.halves.size(); ++i) {
    const LeasedHalf& h = out.halves[i];
    const Fields f(items[i], HalfWhere(i), error);
    const JsonValue& length = *items[i].Find("length");
    if (h.length > std::numeric_limits<std::uint64_t>::max() - h.offset)
      return f.At(
          length, "length",
          "offset " + std::to_string(h.offset) + " + length " + std::to_string(h.length) + " overflows");
    if (!sized) out.data_bytes = std::max(out.data_bytes, h.offset + h.length);
    if (h.offset + h.length > out.data_bytes)
      return f.At(length, "length",
                  "offset " + std::to_string(h.offset) + " + length " + std::to_string(h.length) + " = " +
                      std::to_string(h.offset + h.length) + " lies outside the allocation of " +
                      std::to_string(out.data_bytes) + " bytes");
    // Wraps only where halves overlap, which is refused below before
    // `payload` is compared.
    payload += h.length;
  }
  std::vector<std::uint32_t> order(out.halves.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = static_cast<std::uint32_t>(i);
  std::sort(order.begin(), order.end(), [&](std::uint32_t a, std::uint32_t b) {
    return std::pair(out.halves[a].offset, a) < std::pair(out.halves[b].offset, b);
  });
  for (std::size_t j = 1; j < order.size(); ++j) {
    const LeasedHalf& prev = out.halves[order[j - 1]];
    const std::uint32_t i = order[j];
    if (out.halves[i].offset < prev.offset + prev.length)
      return Fields(items[i], HalfWhere(i), error)
          .At(*items[i].Find("offset"), "offset",
              std::to_string(out.halves[i].offset) + " overlaps halves[" + std::to_string(order[j - 1]) +
                  "] (" + std::to_string(prev.offset) + " + " + std::to_string(prev.length) + ")");
  }
  const auto key = [&](std::uint32_t i) {
    const HalfTag& t = out.halves[i].tag;
    return std::tuple(t.layer, t.expert, t.proj, t.half, i);
  };
  std::sort(order.begin(), order.end(), [&](std::uint32_t a, std::uint32_t b) { return key(a) < key(b); });
  for (std::size_t j = 1; j < order.size(); ++j) {
    const HalfTag& a = out.halves[order[j - 1]].tag;
    const HalfTag& b = out.halves[order[j]].tag;
    if (a.layer == b.layer && a.expert == b.expert && a.proj == b.proj && a.half == b.half)
      return Fields(items[order[j]], HalfWhere(order[j]), error)
          .Here("the same half as halves[" + std::to_string(order[j - 1]) + "] (" + b.What() + ")");
  }
  if (payload != out.bytes)
    return top.At(
        *v.Find("bytes"), "bytes",
        std::to_string(out.bytes) + ", but the halves' lengths add up to " + std::to_string(payload));
  return out;
}

}  // namespace exlr8
