# cmake -DINPUT=file -DOUTPUT=file.cpp -DSYMBOL=name -DNAMESPACE=ns -P Exlr8EmbedBytes.cmake
# Writes a C++ source defining `const unsigned char SYMBOL[]` (64-byte
# aligned) with INPUT's bytes and `const std::size_t SYMBOL_size` in
# namespace NAMESPACE: how libexlr8client embeds its CUDA kernels' fatbin.
file(READ "${INPUT}" _hex HEX)
string(LENGTH "${_hex}" _len)
math(EXPR _bytes "${_len} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," _arr "${_hex}")
string(REGEX REPLACE "((0x[0-9a-f][0-9a-f],){16})" "\\1\n" _arr "${_arr}")
file(WRITE "${OUTPUT}.tmp"
  "// Generated from ${INPUT} by cmake/Exlr8EmbedBytes.cmake: do not edit.\n"
  "#include <cstddef>\n\nnamespace ${NAMESPACE} {\n\n"
  "extern const unsigned char ${SYMBOL}[];\nextern const std::size_t ${SYMBOL}_size;\n"
  "alignas(64) const unsigned char ${SYMBOL}[] = {\n${_arr}\n};\n"
  "const std::size_t ${SYMBOL}_size = ${_bytes};\n\n}  // namespace ${NAMESPACE}\n")
file(RENAME "${OUTPUT}.tmp" "${OUTPUT}")
