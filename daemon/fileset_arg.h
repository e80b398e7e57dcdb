// The fileset a command of exlr8d names with --repo and --revision or
// --commit (pin, unpin, verify).
#pragma once

#include "client/cli/args.h"
#include "daemon/cache/cache.h"
#include "format/status.h"

namespace exlr8 {

// --repo (required) and --revision REV (default main: the commit it resolved
// to when last pulled) or --commit SHA (7 to 40 hex digits, a unique
// prefix). NotFound when the cache has no such fileset; InvalidArgument for
// a bad or ambiguous argument.
Result<FilesetInfo> FindFilesetArg(Cache& cache, const Args& args);

}  // namespace exlr8
