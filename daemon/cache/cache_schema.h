// The cache index's schema: the numbered migrations of schema/NNN_*.sql,
// embedded at build time (daemon/base/embed_schema.cmake).
#pragma once

#include <span>

#include "daemon/base/migrations.h"

namespace exlr8 {

// The cache index's migrations built into this binary, versions 1..N.
std::span<const Migration> BuiltinMigrations();

}  // namespace exlr8
