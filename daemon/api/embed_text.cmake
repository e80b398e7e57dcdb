# Build-time script: embeds a text file (schema/openapi.json) into a C++
# header as a raw string literal, so that the binary serves it without files
# at run time.
#
#   cmake -DIN=<file> -DOUT=<header> -DNAME=<identifier> -P embed_text.cmake
#
# The header defines exlr8::<NAME> (a std::string_view of the file's bytes).
file(READ "${IN}" text)
set(delimiter "exlr8embed")
string(FIND "${text}" ")${delimiter}\"" found)
if(NOT found EQUAL -1)
  message(FATAL_ERROR "embed_text: ${IN} contains the delimiter )${delimiter}\"")
endif()
file(WRITE "${OUT}.tmp" "// Generated from ${IN} by embed_text.cmake: do not edit.\n#pragma once\n\n#include <string_view>\n\nnamespace exlr8 {\n\ninline constexpr std::string_view ${NAME} = R\"${delimiter}(${text})${delimiter}\";\n\n}  // namespace exlr8\n")
file(COPY_FILE "${OUT}.tmp" "${OUT}" ONLY_IF_DIFFERENT)
file(REMOVE "${OUT}.tmp")
