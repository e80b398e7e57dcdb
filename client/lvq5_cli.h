// What `exlr8 verify`, `decode` and `synth` share for LVQ5 sealed files
// (format/lvq5/): the commands take an EXLR8 release directory or an LVQ5
// file and tell them apart by the file's first bytes.
#pragma once

#include <string>
#include <vector>

namespace exlr8 {

// Whether `path` is a regular file whose first 3 bytes are "LVQ" (any
// version, so that LVQ1-LVQ4 files reach the reader's clear refusal).
bool IsLvqFile(const std::string& path);

// Whether the command's positional argument (the first argument not an
// option or an option's value, of those in `value_options`) is an LVQ file.
bool ArgsNameLvqFile(const std::vector<std::string>& args, const std::vector<std::string>& value_options);

int RunLvq5Verify(const std::vector<std::string>& args);
int RunLvq5Decode(const std::vector<std::string>& args);
int RunLvq5Synth(const std::vector<std::string>& args);

}  // namespace exlr8
