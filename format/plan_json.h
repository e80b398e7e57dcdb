// The plan as JSON, the shape documented in schema/plan.schema.json:
//
// {"schema":"exlr8-plan/1","manifest":"home","tp":4,"rank":1,
//  "files":[{"path":"experts/exlr8-layer-003.k3.safetensors","size":2969600,"whole":false,
//            "index":"experts/exlr8-layer-003.index.safetensors",
//            "ranges":[{"offset":0,"length":20480,"what":"header"},
//                      {"offset":24576,"length":12288,"xxh64":"0123456789abcdef",
//                       "what":"L3 e0 gate h1 K3","tail":[[58720,256],[74848,8]]}, ...],
//            "requests":[[0,20480],[24576,12288], ...]},
//           {"path":"config.json","size":133,"whole":true,"git_sha1":"...","requests":[[0,133]]}, ...],
//  "bytes":N, "totals":{...}, "warnings":[...]}
//
// Written directly (no DOM) so that a 230,000-range plan serializes in
// well under a second.
#pragma once

#include <string>

#include "format/plan.h"

namespace exlr8 {

std::string PlanToJson(const Plan& plan);

}  // namespace exlr8
