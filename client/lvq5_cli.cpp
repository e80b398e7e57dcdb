#include "client/lvq5_cli.h"

#include <algorithm>
#include <filesystem>
#include <fstream>

namespace exlr8 {

bool IsLvqFile(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return false;
  std::ifstream in(path, std::ios::binary);
  char magic[3] = {};
  return in.read(magic, 3) && magic[0] == 'L' && magic[1] == 'V' && magic[2] == 'Q';
}

bool ArgsNameLvqFile(const std::vector<std::string>& args, const std::vector<std::string>& value_options) {
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a.rfind("--", 0) == 0) {
      const std::string name = a.substr(2);
      if (name.find('=') == std::string::npos &&
          std::find(value_options.begin(), value_options.end(), name) != value_options.end())
        ++i;  // skip the option's value
      continue;
    }
    return IsLvqFile(a);
  }
  return false;
}

}  // namespace exlr8
