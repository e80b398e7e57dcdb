#include "client/cli/args.h"

#include <cctype>
#include <iostream>
#include <charconv>
#include <limits>

#include "client/cli/suggest.h"

namespace exlr8 {

namespace {

// " (did you mean '--repo'?)" for a misspelt option, from every option the
// command takes.
std::string Suggestion(const std::string& typed, const std::set<std::string>& value_options,
                       const std::set<std::string>& flags) {
  std::vector<std::string> names;
  for (const std::string& n : value_options) names.push_back("--" + n);
  for (const std::string& n : flags) names.push_back("--" + n);
  const std::string option = typed.substr(0, typed.find('='));
  return DidYouMean(option.starts_with("--") ? option : "-" + option, names);
}

}  // namespace

Result<Args> Args::Parse(const std::vector<std::string>& argv, const std::set<std::string>& value_options,
                         const std::set<std::string>& flags) {
  Args a;
  bool only_positional = false;
  for (std::size_t i = 0; i < argv.size(); ++i) {
    const std::string& s = argv[i];
    if (only_positional || s.size() < 3 || !s.starts_with("--")) {
      if (s == "--") {
        only_positional = true;
        continue;
      }
      if (!only_positional && s == "-h" && flags.contains("help")) {
        a.values_["help"] = "1";
        continue;
      }
      if (!only_positional && s.size() > 1 && s[0] == '-' && s != "-")
        return InvalidArgumentError("unknown option '" + s + "'" + Suggestion(s, value_options, flags));
      a.positional_.push_back(s);
      continue;
    }
    std::string name = s.substr(2);
    std::optional<std::string> value;
    if (auto eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name.resize(eq);
    }
    if (flags.contains(name)) {
      if (value) return InvalidArgumentError("option --" + name + " takes no value");
      a.values_[name] = "1";
    } else if (value_options.contains(name)) {
      if (!value) {
        if (i + 1 >= argv.size()) return InvalidArgumentError("option --" + name + " needs a value");
        value = argv[++i];
      }
      a.values_[name] = *value;
      a.all_values_.emplace_back(name, *value);
    } else {
      return InvalidArgumentError("unknown option '--" + name + "'" + Suggestion(s, value_options, flags));
    }
  }
  return a;
}

bool Args::Has(std::string_view name) const { return values_.find(name) != values_.end(); }

std::optional<std::string> Args::Get(std::string_view name) const {
  auto it = values_.find(name);
  if (it == values_.end()) return std::nullopt;
  return it->second;
}

std::vector<std::string> Args::GetAll(std::string_view name) const {
  std::vector<std::string> out;
  for (const auto& [key, value] : all_values_)
    if (key == name) out.push_back(value);
  return out;
}

std::string Args::GetOr(std::string_view name, std::string fallback) const {
  auto v = Get(name);
  return v ? *v : fallback;
}

Result<std::string> Args::Require(std::string_view name) const {
  auto v = Get(name);
  if (!v && name == "repo")
    return InvalidArgumentError("missing the repository: give ORG/NAME (or --repo ORG/NAME)");
  if (!v) return InvalidArgumentError("missing --" + std::string(name));
  return *v;
}

Status Args::TakeRepositoryArgument() {
  if (positional_.empty()) return Status::Ok();
  std::string repo = positional_.front();
  positional_.erase(positional_.begin());
  if (auto given = Get("repo"); given && *given != repo)
    return InvalidArgumentError("the repository is named twice, as '" + repo + "' and as --repo '" + *given +
                                "'; give one");
  if (repo.empty()) return InvalidArgumentError("the repository (ORG/NAME) must not be empty");
  values_["repo"] = repo;
  return Status::Ok();
}

Result<std::int64_t> Args::GetInt(std::string_view name, std::int64_t fallback, std::int64_t min,
                                  std::int64_t max) const {
  auto v = Get(name);
  if (!v) return fallback;
  std::int64_t x = 0;
  auto [p, ec] = std::from_chars(v->data(), v->data() + v->size(), x);
  if (ec != std::errc() || p != v->data() + v->size())
    return InvalidArgumentError("--" + std::string(name) + ": '" + *v + "' is not an integer");
  if (x < min || x > max)
    return InvalidArgumentError("--" + std::string(name) + ": " + *v + " is outside [" + std::to_string(min) +
                                ", " + std::to_string(max) + "]");
  return x;
}

std::optional<int> ParseCommandLine(std::string_view prog, std::string_view usage,
                                    const std::vector<std::string>& argv, const std::set<std::string>& value_options,
                                    std::set<std::string> flags, std::size_t positionals, Args* out) {
  flags.insert("help");
  auto args = Args::Parse(argv, value_options, flags);
  if (!args.ok()) {
    std::cerr << prog << ": error: " << args.status().message() << " (see --help)\n";
    return 2;
  }
  if (args->Flag("help")) {
    std::cout << usage;
    return 0;
  }
  if (positionals == kRepositoryArgument) {
    // One word at most, ORG/NAME; a second is a value whose --name was
    // forgotten.
    if (args->positional().size() > 1) {
      std::cerr << prog << ": error: unexpected argument '" << args->positional()[1]
                << "' (the repository is '" << args->positional()[0]
                << "'; an option's value needs its --name)\n";
      std::cerr << usage;
      return 2;
    }
    if (Status s = args->TakeRepositoryArgument(); !s.ok()) {
      std::cerr << prog << ": error: " << s.message() << "\n";
      return 2;
    }
    positionals = 0;
  }
  if (args->positional().size() != positionals) {
    // A stray word (a value whose --name was forgotten) is named in the
    // error, not answered with the usage alone.
    if (args->positional().size() > positionals)
      std::cerr << prog << ": error: unexpected argument '" << args->positional()[positionals]
                << "' (an option's value needs its --name)\n";
    else
      std::cerr << prog << ": error: missing argument\n";
    std::cerr << usage;
    return 2;
  }
  *out = std::move(*args);
  return std::nullopt;
}

Result<std::optional<std::uint64_t>> Args::GetBytes(std::string_view name) const {
  const std::optional<std::string> v = Get(name);
  if (!v) return std::optional<std::uint64_t>();
  Result<std::uint64_t> n = ParseByteCount(*v);
  if (!n.ok()) return InvalidArgumentError("--" + std::string(name) + ": " + n.status().message());
  return std::optional<std::uint64_t>(*n);
}

Result<std::uint64_t> ParseByteCount(std::string_view text) {
  std::uint64_t n = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
  if (ec != std::errc() || p == text.data()) return InvalidArgumentError("'" + std::string(text) + "' is not a byte count");
  std::string unit(p, text.data() + text.size());
  for (auto& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (!unit.empty() && unit.back() == 'B') unit.pop_back();
  std::uint64_t mult = 1;
  if (unit.empty()) mult = 1;
  else if (unit == "K") mult = 1000ull;
  else if (unit == "M") mult = 1000ull * 1000;
  else if (unit == "G") mult = 1000ull * 1000 * 1000;
  else if (unit == "T") mult = 1000ull * 1000 * 1000 * 1000;
  else if (unit == "KI") mult = 1ull << 10;
  else if (unit == "MI") mult = 1ull << 20;
  else if (unit == "GI") mult = 1ull << 30;
  else if (unit == "TI") mult = 1ull << 40;
  else return InvalidArgumentError("'" + std::string(text) + "': unknown unit");
  if (n > std::numeric_limits<std::uint64_t>::max() / mult) return InvalidArgumentError("'" + std::string(text) + "' overflows");
  return n * mult;
}

}  // namespace exlr8
