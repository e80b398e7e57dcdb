// The REST routes of the GPU holders `exlr8d serve` starts (stage_manager.h):
//
//   POST   /v1/stages       {"repo":"org/name","manifest":"home","tp":4,"rank":1,
//                            "revision":"main","device":0,"check":"64",
//                            "release_wait_s":30} (revision, device, check and
//                            release_wait_s optional) -> 202 {"stage":{...}}:
//                            an exlr8d-stage starts; poll until "state" is
//                            "holding", then connect to "lease"
//   GET    /v1/stages       {"stages":[...]} newest first
//   GET    /v1/stages/{id}  {"stage":{...}}: state (starting, reading, staging,
//                            holding, releasing, released, failed, died), pid,
//                            lease, error, exit_status, and what the holder
//                            reported ("holder": bytes, halves, device, the
//                            pids of its lessees, ...)
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
