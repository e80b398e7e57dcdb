// The holder's side of the lease socket, in one of two protocols:
//   v1 (Start; client/lease/lease_client.h has the lessee's side): each
//   connection gets the lease description, then the holder shuts down its
//   writing side, so the lessee reads to end of stream, and keeps the
//   connection open.
//   v2 (StartV2; schema/lease/PROTOCOL.md, the lessee's side is
//   client/lease/host_lease.h): each connection gets the v2 description as
//   one line with the descriptors it names in one SCM_RIGHTS message on its
//   first byte; the connection stays open both ways, and RequestRelease
//   sends every lessee the release line.
// In both, a lessee is a process whose connection is open: it holds it while it uses the staged memory and
// closes it (or exits) when done, so the holder knows whom it would pull the memory from, and waits for them
// before it releases (exlr8d-stage, on SIGTERM).
//
// No CUDA here: the description is text and the descriptors are files, so
// this part is tested everywhere.
// Threads: Start, StopAccepting, RequestRelease, Stop, served and Lessees
// from any thread;
// the server's own thread runs the socket loop and `on_lessees`.
#pragma once

#include <sys/types.h>
#include <sys/un.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "client/lease/lease_client.h"
#include "client/lease/lease_v2_framing.h"
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
  // Serves the v2 `description` (WriteLeaseDescriptionV2's text, no "\n")
  // with `fds` (LeaseV2FdCount(description) of them: the "fd"
  // allocations' in allocation order, then the tables' memfd), as Start
  // does otherwise. The server keeps its own duplicates of `fds` (the
  // caller keeps and closes its own) and sends them to every lessee.
  // InvalidArgument for a description ParseLeaseV2Opening refuses with
  // that many descriptors (a lessee would refuse it too).
  static Result<std::unique_ptr<LeaseServer>> StartV2(
      const std::filesystem::path& path, std::string description, std::span<const int> fds,
      LesseesChanged on_lessees = {}, std::chrono::milliseconds send_deadline = std::chrono::seconds(30),
      Clock& clock = Clock::Real());
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

  // v2: takes no new connections (StopAccepting), sends every lessee the
  // release line ({"type":"release","deadline_s":D}, D = `deadline` in
  // whole seconds rounded up, at most 3600), then waits until every lessee
  // has closed its connection (or died) or `deadline` has passed on the
  // server's clock. Returns the pids of the lessees still connected (empty:
  // all let go); their connections stay open until Stop. A lessee whose
  // socket takes no more bytes does not get the line, and is waited for the
  // same. FailedPrecondition on a v1 server (v1 has no release message).
  Result<std::vector<pid_t>> RequestRelease(std::chrono::milliseconds deadline);
  // The first half of RequestRelease: StopAccepting and the release line
  // with D from `deadline`, without waiting; for a holder that waits its
  // own way (exlr8d-stage also lets a second signal end the wait).
  Status AnnounceRelease(std::chrono::milliseconds deadline);

  // Descriptions handed out in full.
  std::uint64_t served() const;
  // The processes holding a connection open now, by pid (SO_PEERCRED; 0
  // when unknown), in the order they connected.
  std::vector<pid_t> Lessees() const;

  struct Rep;

 private:
  explicit LeaseServer(std::unique_ptr<Rep> rep);
  static Result<std::unique_ptr<LeaseServer>> Listen(std::unique_ptr<Rep> rep,
                                                     const std::filesystem::path& path,
                                                     std::string description, LesseesChanged on_lessees,
                                                     std::chrono::milliseconds send_deadline, Clock& clock);
  std::unique_ptr<Rep> rep_;
};

}  // namespace exlr8
