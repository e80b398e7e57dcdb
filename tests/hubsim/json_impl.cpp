// The one translation unit that compiles Boost.JSON (header-only use).
#include <boost/json/src.hpp>
