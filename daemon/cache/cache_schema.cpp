#include "daemon/cache/cache_schema.h"

#include "daemon/cache/schema_sql.h"

namespace exlr8 {

std::span<const Migration> BuiltinMigrations() { return cache_schema::kMigrations; }

}  // namespace exlr8
