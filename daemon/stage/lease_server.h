// The holder's side of the lease socket (client/lease/lease_client.h has
// the protocol, and the lessee's side): each
// connection gets the lease description, then the holder shuts down its
// writing side, so the lessee reads to end of stream, and keeps the
// connection open. A lessee is a process whose connection is open: it holds
// it while it uses the staged memory and closes it (or exits) when done, so
// the holder knows whom it would pull the memory from, and waits for them
// before it releases (exlr8d-stage, on SIGTERM).
//
// No CUDA here: the description is text, so this part is tested everywhere.
// Threads: Start, StopAccepting, Stop, served and Lessees from any thread;
// the server's own thread runs the socket loop and `on_lessees`.
#pragma once

#include <sys/types.h>
#include <sys/un.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "client/lease/lease_client.h"
#include "daemon/base/clock.h"
#include "format/status.h"

namespace exlr8 {

// What Start would refuse of `path`, checked without binding it: too long
// a path (InvalidArgument), a live holder answering there
// (FailedPrecondition). A holder checks this before the long read and
// upload, so a bad --hold fails in a second, not after staging.
Status CheckCanHoldAt(const std::filesystem::path& path);

class LeaseServer {
 public:
  // Serves `description` on a Unix socket at `path` (mode 0660, never more,
  // not even before the bind is done; a stale socket file is replaced, a
  // live holder's is not: FailedPrecondition).
  // One thread.
  // `on_lessees` (optional) is called on the server's thread with the
  // lessees' pids (as Lessees()) each time one connects or lets go.
  // The description is sent as each client's socket takes it, so a client
  // that reads slowly or not at all holds up no one else; one that has not
  // taken all of it within `send_deadline` (measured on `clock`, which
  // must outlive the server) is closed.
  using LesseesChanged = std::function<void(const std::vector<pid_t>&)>;
  static Result<std::unique_ptr<LeaseServer>> Start(
      const std::filesystem::path& path, std::string description, LesseesChanged on_lessees = {},
      std::chrono::milliseconds send_deadline = std::chrono::seconds(30), Clock& clock = Clock::Real());
  ~LeaseServer();  // Stop()
  LeaseServer(const LeaseServer&) = delete;
  LeaseServer& operator=(const LeaseServer&) = delete;

  // Takes no new connections (the socket file goes); lessees stay.
  void StopAccepting();
  // StopAccepting, then closes every lessee's connection and joins the
  // thread. Idempotent.
  void Stop();

  // Connections held open at once (lessees and those still being sent the
  // description); one more is closed unanswered. Of them, a user other than
  // root and the holder's own (SO_PEERCRED) holds at most
  // kMaxLesseesPerUser, and the last kReservedLessees are root's and the
  // holder's user's: one member of the socket's group cannot lock the
  // others out, nor hold the release off alone.
  static constexpr std::size_t kMaxLessees = kMaxLeaseLessees;
  static constexpr std::size_t kMaxLesseesPerUser = 64;
  static constexpr std::size_t kReservedLessees = 16;

  // Descriptions handed out in full.
  std::uint64_t served() const;
  // The processes holding a connection open now, by pid (SO_PEERCRED; 0
  // when unknown), in the order they connected.
  std::vector<pid_t> Lessees() const;

  struct Rep;

 private:
  explicit LeaseServer(std::unique_ptr<Rep> rep);
  std::unique_ptr<Rep> rep_;
};

}  // namespace exlr8
