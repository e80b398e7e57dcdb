// A small command-line parser shared by `exlr8` and `exlr8d` subcommands.
//
// Accepts `--name value`, `--name=value`, boolean `--flag`, and positional
// arguments; `-h` is `--help` where "help" is a flag. Unknown options are
// errors (a typo must not be ignored) that name the nearest known option.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "format/status.h"

namespace exlr8 {

class Args {
 public:
  // `value_options`: options that take a value ("--tp"); `flags`: options
  // that do not ("--json"). Names without the leading dashes.
  static Result<Args> Parse(const std::vector<std::string>& argv, const std::set<std::string>& value_options,
                            const std::set<std::string>& flags);

  const std::vector<std::string>& positional() const { return positional_; }
  bool Has(std::string_view name) const;
  bool Flag(std::string_view name) const { return Has(name); }
  // The value of `--name`: the last one when given more than once.
  std::optional<std::string> Get(std::string_view name) const;
  // Every value of a repeatable `--name`, in the order given.
  std::vector<std::string> GetAll(std::string_view name) const;
  std::string GetOr(std::string_view name, std::string fallback) const;
  // Integer option: InvalidArgument naming the option if malformed or
  // outside [min, max]; `fallback` if absent.
  Result<std::int64_t> GetInt(std::string_view name, std::int64_t fallback, std::int64_t min,
                              std::int64_t max) const;
  // Byte-count option ("10G", "512MiB": ParseByteCount): InvalidArgument
  // naming the option if malformed; nullopt if absent.
  Result<std::optional<std::uint64_t>> GetBytes(std::string_view name) const;
  // Required option: InvalidArgument "missing --name" if absent ("repo":
  // the message names both ways to give the repository).
  Result<std::string> Require(std::string_view name) const;
  // Makes the one positional argument the value of --repo: InvalidArgument
  // naming both when --repo is also given with another value. Used by
  // ParseCommandLine for kRepositoryArgument.
  Status TakeRepositoryArgument();

 private:
  std::vector<std::string> positional_;
  std::map<std::string, std::string, std::less<>> values_;
  std::vector<std::pair<std::string, std::string>> all_values_;  // every value option, in order
};

// `positionals` of ParseCommandLine for a command that names a repository:
// ORG/NAME may be given as its one positional argument (as `hf download`
// takes it) or as --repo ORG/NAME; after parsing, Get("repo") holds it.
inline constexpr std::size_t kRepositoryArgument = static_cast<std::size_t>(-1);

// The common start of every subcommand: parses `argv`; `--help` prints
// `usage` to stdout; a parse error or a positional count other than
// `positionals` prints the error (or `usage`) to stderr. Returns the exit
// status to end with, or nullopt (and fills `*out`) when the command should
// go on. "help" must not be among `flags` (it is added).
std::optional<int> ParseCommandLine(std::string_view prog, std::string_view usage,
                                    const std::vector<std::string>& argv, const std::set<std::string>& value_options,
                                    std::set<std::string> flags, std::size_t positionals, Args* out);

// Parses "123", "10G", "512MiB" style byte counts (K/M/G/T = 10^3.., Ki/Mi/Gi/Ti = 2^10..).
Result<std::uint64_t> ParseByteCount(std::string_view text);

}  // namespace exlr8
