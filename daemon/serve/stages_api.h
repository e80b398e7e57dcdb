// The REST routes of the holders `exlr8d serve` starts (stage_manager.h):
//
//   POST   /v1/stages       {"repo":"org/name","manifest":"home","tp":4,"rank":1,
//                            "revision":"main","memory":"device","lease":"v2",
//                            "device":0,"check":"sample","release_wait_s":30}
//                            (all but repo, manifest, tp and rank optional;
//                            memory "device" or "host", lease "v2" or "v1",
//                            deprecated, device memory only; check: v2
//                            "sample" or "all", v1 a count or "all", host
//                            memory "none") -> 202 {"stage":{...}}: an
//                            exlr8d-stage starts; poll until "state" is
//                            "holding", then connect to "lease"
//   GET    /v1/stages       {"stages":[...]} newest first
//   GET    /v1/stages/{id}  {"stage":{...}}: state (starting, reading, staging,
//                            hashing, decoding, holding, releasing, released,
//                            failed, died), pid, memory, lease_version, check
//                            (the default filled in), lease (the socket),
//                            held (once holding: bytes, regions for lease v2,
//                            gpu_uuid for v2 in device memory; else null),
//                            error, exit_status, and what the holder reported
//                            ("holder": bytes, device, the pids of its
//                            lessees, ...)
//   DELETE /v1/stages/{id}  a live holder is told to release (202; again:
//                            release now, lessees or not); a finished stage's
//                            record is removed (200, "forgotten":true)
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "daemon/api/api_server.h"
#include "daemon/serve/stage_manager.h"

namespace exlr8 {

std::string StageJson(const StageInfo& stage);

// InvalidArgument naming the field.
Result<StageRequest> ParseStageRequest(std::string_view body);

// The response for a /v1/stages request; nullopt for any other path.
std::optional<ApiResponse> HandleStages(StageManager& stages, const ApiRequest& request);

}  // namespace exlr8
