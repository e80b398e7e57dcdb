// `exlr8 synth OUT [geometry options] --seed S [--index-only]`: writes a
// synthetic EXLR8 v2 release (format/release_writer.h) into directory OUT
// through DirectoryReleaseSink (client/file_sink.h).
//
// `--help` prints every option (SynthUsage()). Output: one summary line on
// stdout (files, logical and stored bytes, seconds) unless --quiet.
#pragma once

#include <string>
#include <vector>

#include "format/release_writer.h"
#include "format/status.h"

namespace exlr8 {

// `args` are the words after "synth". Returns the process exit status of
// client/cli/cli.h (0 success or --help, 2 bad arguments, 4 I/O error, 6 out of
// space); errors are printed by ReportError("exlr8 synth", ...).
// Also declared in client/commands.h (called by client/main.cpp).
int RunSynth(const std::vector<std::string>& args);

// The --help text.
std::string SynthUsage();

// Parses the options (everything but the positional OUT) into SynthOptions.
// InvalidArgument naming the option on any bad value. Exposed for tests.
Result<SynthOptions> ParseSynthOptions(const std::vector<std::string>& args);

// "3-77", "0,1,2", "0,3-5", "none" (empty) -> layer numbers (0..999).
Result<std::vector<int>> ParseLayerList(std::string_view text);

}  // namespace exlr8
