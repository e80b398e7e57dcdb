// The C API's names and version: exlr8_client_version, and the text of
// each enumeration's values (exlr8_status_name, exlr8_dtype_name, ...).
#include "exlr8/exlr8client.h"

#include "client/exlr8client/c_api_errors.h"
#include "client/lease/image_layout.h"
#include "format/dtype.h"

namespace {

constexpr const char* kDTypeNames[] = {"BOOL", "U8",  "I8",  "F8_E4M3", "F8_E5M2", "I16", "U16", "F16",
                                       "BF16", "I32", "U32", "F32",     "F64",     "I64", "U64"};
static_assert(sizeof(kDTypeNames) / sizeof(kDTypeNames[0]) == exlr8::kDTypeCount,
              "exlr8_dtype_name must name every DType");
static_assert(EXLR8_PLAIN_TETRA48 == static_cast<int>(exlr8::ImagePlainFormat::kTetra48) &&
                  EXLR8_PLAIN_INT4G128 == static_cast<int>(exlr8::ImagePlainFormat::kInt4G128) &&
                  EXLR8_PLAIN_F16 == static_cast<int>(exlr8::ImagePlainFormat::kF16) &&
                  EXLR8_PLAIN_QUANT == static_cast<int>(exlr8::ImagePlainFormat::kQuant) &&
                  EXLR8_PLAIN_QUANT == exlr8::kImagePlainFormatMax,
              "exlr8_plain_format must be IMAGE.md's plain tensor formats");

}  // namespace

extern "C" {

const char* exlr8_client_version(void) {
#define EXLR8_STR2(x) #x
#define EXLR8_STR(x) EXLR8_STR2(x)
  return EXLR8_STR(EXLR8_CLIENT_VERSION_MAJOR) "." EXLR8_STR(EXLR8_CLIENT_VERSION_MINOR) "." EXLR8_STR(
      EXLR8_CLIENT_VERSION_PATCH);
#undef EXLR8_STR
#undef EXLR8_STR2
}

int exlr8_client_version_number(void) { return EXLR8_CLIENT_VERSION; }

const char* exlr8_last_error_message(void) { return exlr8::capi::LastError(); }

const char* exlr8_status_name(exlr8_status status) {
  switch (status) {
    case EXLR8_OK:
      return "OK";
    case EXLR8_INVALID_ARGUMENT:
      return "INVALID_ARGUMENT";
    case EXLR8_NOT_FOUND:
      return "NOT_FOUND";
    case EXLR8_CORRUPTION:
      return "CORRUPTION";
    case EXLR8_IO_ERROR:
      return "IO_ERROR";
    case EXLR8_RESOURCE_EXHAUSTED:
      return "RESOURCE_EXHAUSTED";
    case EXLR8_UNAVAILABLE:
      return "UNAVAILABLE";
    case EXLR8_PERMISSION_DENIED:
      return "PERMISSION_DENIED";
    case EXLR8_FAILED_PRECONDITION:
      return "FAILED_PRECONDITION";
    case EXLR8_CANCELLED:
      return "CANCELLED";
    case EXLR8_UNIMPLEMENTED:
      return "UNIMPLEMENTED";
    case EXLR8_INTERNAL:
      return "INTERNAL";
  }
  return "UNKNOWN";
}

const char* exlr8_dtype_name(uint32_t dtype) { return dtype < exlr8::kDTypeCount ? kDTypeNames[dtype] : "?"; }

const char* exlr8_tensor_kind_name(uint32_t kind) {
  switch (kind) {
    case EXLR8_TENSOR_HALF_RECORD:
      return "half record";
    case EXLR8_TENSOR_SIGNS_IN:
      return "signs.in";
    case EXLR8_TENSOR_SIGNS_OUT:
      return "signs.out";
    case EXLR8_TENSOR_DENSE_DATA:
      return "dense data";
    case EXLR8_TENSOR_PLAIN:
      return "plain tensor";
    default:
      return "?";
  }
}

const char* exlr8_proj_name(uint32_t proj) {
  switch (proj) {
    case EXLR8_PROJ_GATE:
      return "gate";
    case EXLR8_PROJ_UP:
      return "up";
    case EXLR8_PROJ_DOWN:
      return "down";
    default:
      return "?";
  }
}

const char* exlr8_memory_kind_name(uint32_t kind) {
  switch (kind) {
    case EXLR8_MEMORY_ANY:
      return "any";
    case EXLR8_MEMORY_DEVICE:
      return "device";
    case EXLR8_MEMORY_HOST:
      return "host";
    default:
      return "?";
  }
}

const char* exlr8_dense_format_name(uint32_t format) {
  switch (format) {
    case EXLR8_DENSE_TRELLIS:
      return "TRELLIS";
    case EXLR8_DENSE_INT4:
      return "INT4";
    case EXLR8_DENSE_MXFP8:
      return "MXFP8";
    case EXLR8_DENSE_FP8_BLOCK:
      return "FP8_BLOCK";
    case EXLR8_DENSE_FP8_ROW:
      return "FP8_ROW";
    case EXLR8_DENSE_BF16:
      return "BF16";
    case EXLR8_DENSE_FP32:
      return "FP32";
    default:
      return "?";
  }
}

}  // extern "C"
