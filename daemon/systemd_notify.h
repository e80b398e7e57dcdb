// systemd's readiness protocol (sd_notify(3)) without libsystemd: one
// datagram to the Unix socket named by $NOTIFY_SOCKET. Units of Type=notify
// (exlr8d-serve, exlr8d-stage@) are "started" only once the program said
// READY=1, so a unit ordered After= them finds the socket answering.
#pragma once

#include <string_view>

#include "format/status.h"

namespace exlr8 {

// Sends `state` ("READY=1", "STOPPING=1", "STATUS=...") when $NOTIFY_SOCKET
// is set (a path, or '@' for the abstract namespace); OK and nothing sent
// when it is not (not run by systemd).
Status NotifySystemd(std::string_view state);

}  // namespace exlr8
