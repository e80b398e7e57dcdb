// A valid lease description for the tests of client/lease/: two halves in
// an allocation laid out as the holder lays it out (256-byte aligned).
#pragma once

#include <string>

#include "client/lease/description.h"

namespace exlr8::testing {

inline LeaseDescription ValidLeaseDescription() {
  LeaseDescription d;
  d.repo = "org/glm";
  d.commit = "0123456789abcdef0123456789abcdef01234567";
  d.manifest = "home";
  d.tp = 4;
  d.rank = 1;
  d.device = 0;
  d.halves.push_back({{3, 7, Proj::kGate, 0, 2}, 256, 0, 8000});
  d.halves.push_back({{3, kSharedExpert, Proj::kDown, 5, 4}, 256, 8192, 100});
  d.bytes = 8100;
  d.data_bytes = 8292;  // the second half starts at the next 256-byte boundary
  d.data_handle = std::string(128, 'a');
  d.offsets_handle = std::string(64, '0') + std::string(64, 'f');
  return d;
}

}  // namespace exlr8::testing
