#include "daemon/stage/lease_server.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <optional>
#include <string>
#include <thread>

#include "daemon/base/mutex.h"
#include "daemon/base/posix.h"

namespace exlr8 {

namespace {
// Whether a holder answers on `addr`.
bool SomeoneAnswers(const sockaddr_un& addr) {
  UniqueFd probe(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  return probe.valid() && ::connect(probe.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr) == 0;
}
}  // namespace

Status CheckCanHoldAt(const std::filesystem::path& path) {
  EXLR8_ASSIGN_OR_RETURN(sockaddr_un addr, UnixSocketAddress(path));
  if (SomeoneAnswers(addr)) return FailedPreconditionError("another holder answers on " + path.string());
  return Status::Ok();
}

struct LeaseServer::Rep {
  // The peer's pid and uid (SO_PEERCRED); pid 0 and no uid when unknown.
  struct Peer {
    pid_t pid = 0;
    std::optional<uid_t> uid;
  };
  static Peer PeerOf(int fd) {
    ucred cred{};
    socklen_t len = sizeof cred;
    if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) return {};
    return {cred.pid, cred.uid};
  }

  struct Lessee {
    UniqueFd fd;
    Peer peer;
  };
  // A connection still being sent the description: written to as the
  // socket takes it, never blocking the loop, so that a client reading
  // slowly holds up neither the other clients nor a stop.
  struct Pending {
    UniqueFd fd;
    std::size_t sent = 0;  // v2: the descriptors went with the first byte
    Clock::TimePoint deadline;
    Peer peer;
  };

  std::filesystem::path path;
  std::string description;  // v2: with its "\n"
  bool v2 = false;
  std::vector<UniqueFd> fds;  // v2: sent with each description's first byte
  UniqueFd listener;          // reset by the loop thread once it stops accepting
  int control[2] = {-1, -1};  // 'a': stop accepting, 'x': stop
  std::thread thread;
  std::atomic<std::uint64_t> served{0};
  mutable Mutex mu;
  CondVar stopped_accepting;  // signalled when `accepting` turns false
  CondVar lessees_changed;    // signalled when a lessee leaves
  // Written by the loop thread only; read by the others under mu.
  bool accepting EXLR8_GUARDED_BY(mu) = true;
  std::vector<Lessee> lessees EXLR8_GUARDED_BY(mu);
  std::vector<Pending> pending;  // the loop thread's own
  std::chrono::milliseconds send_deadline{0};
  Clock* clock = nullptr;  // of the send deadlines; outlives the server
  LeaseServer::LesseesChanged on_lessees;

  // On the loop thread, after a change, outside mu.
  void Announce() {
    if (!on_lessees) return;
    std::vector<pid_t> pids;
    {
      MutexLock l(&mu);
      for (const Lessee& x : lessees) pids.push_back(x.peer.pid);
    }
    on_lessees(pids);
  }

  void Accept() {
    UniqueFd client(::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
    if (!client.valid()) return;
    const Peer peer = PeerOf(client.get());
    {
      // Bounded, so that connections left open cannot use up the holder's
      // descriptors, and per user: the one over a bound is closed
      // unanswered.
      MutexLock l(&mu);
      const std::size_t open = lessees.size() + pending.size();
      if (open >= LeaseServer::kMaxLessees) return;
      const bool exempt = peer.uid && (*peer.uid == 0 || *peer.uid == ::geteuid());
      if (!exempt) {
        if (open + LeaseServer::kReservedLessees >= LeaseServer::kMaxLessees) return;
        std::size_t mine = 0;
        for (const Lessee& x : lessees) mine += x.peer.uid == peer.uid ? 1 : 0;
        for (const Pending& p : pending) mine += p.peer.uid == peer.uid ? 1 : 0;
        if (mine >= LeaseServer::kMaxLesseesPerUser) return;
      }
    }
    pending.push_back({std::move(client), 0, clock->Deadline(send_deadline), peer});
    if (SendSome(pending.back())) FinishSending(pending.size() - 1);
  }

  // Sends what the socket takes now; true once the description is out. A
  // failed send closes the connection (the client went away).
  bool SendSome(Pending& p) {
    while (p.sent < description.size()) {
      const ssize_t n = p.sent == 0 && v2 ? SendFirst(p.fd.get())
                                          : ::send(p.fd.get(), description.data() + p.sent,
                                                   description.size() - p.sent, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n > 0) {
        p.sent += static_cast<std::size_t>(n);
      } else if (n < 0 && errno == EINTR) {
        continue;
      } else {
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return false;
        p.fd.Reset();
        return false;
      }
    }
    return true;
  }

  // v2: the description's first bytes with every descriptor, in one
  // SCM_RIGHTS message (the kernel attaches them to the first byte sent).
  ssize_t SendFirst(int fd) {
    std::vector<char> control(CMSG_SPACE(sizeof(int) * fds.size()));
    iovec iov{description.data(), description.size()};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.data();
    msg.msg_controllen = control.size();
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
    for (std::size_t i = 0; i < fds.size(); ++i) {
      const int f = fds[i].get();
      std::memcpy(CMSG_DATA(c) + i * sizeof(int), &f, sizeof(int));
    }
    return ::sendmsg(fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
  }

  // pending[i] has its description: it becomes a lessee.
  void FinishSending(std::size_t i) {
    UniqueFd client = std::move(pending[i].fd);
    const Peer peer = pending[i].peer;
    pending.erase(pending.begin() + static_cast<std::ptrdiff_t>(i));
    served.fetch_add(1);
    // v1: end of stream for the reader; the connection stays open until
    // the lessee lets go. v2 keeps its side open for the release line.
    if (!v2) (void)::shutdown(client.get(), SHUT_WR);
    {
      MutexLock l(&mu);
      lessees.push_back({std::move(client), peer});
    }
    Announce();
  }

  // Poll timeout: until the first pending send's deadline (-1: none), the
  // clock's time left taken as real milliseconds, so that a test's clock
  // moved past a deadline is seen within that time.
  int PollTimeoutMs() const {
    if (pending.empty()) return -1;
    Clock::TimePoint first = Clock::TimePoint::max();
    for (const Pending& p : pending) first = std::min(first, p.deadline);
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(first - clock->Now()).count();
    return static_cast<int>(std::clamp<long long>(ms + 1, 0, 60'000));
  }

  void Loop() {
    std::vector<pollfd> fds;
    for (;;) {
      fds.clear();
      bool taking = false;
      std::size_t lessee_count = 0;
      {
        MutexLock l(&mu);
        taking = accepting;
        fds.push_back({control[0], POLLIN, 0});
        fds.push_back({taking ? listener.get() : -1, POLLIN, 0});  // a negative fd is ignored
        for (const Lessee& x : lessees) fds.push_back({x.fd.get(), POLLIN, 0});
        lessee_count = lessees.size();
      }
      for (const Pending& p : pending) fds.push_back({p.fd.get(), POLLOUT, 0});
      if (::poll(fds.data(), fds.size(), PollTimeoutMs()) < 0) {
        if (errno == EINTR) continue;
        return;
      }
      if (fds[0].revents != 0) {
        char c = 0;
        if (::read(control[0], &c, 1) != 1 || c == 'x') return;
        listener.Reset();
        ::unlink(path.c_str());
        pending.clear();  // not lessees yet: they hold nothing
        {
          MutexLock l(&mu);
          accepting = false;
        }
        stopped_accepting.SignalAll();
        continue;
      }
      // A lessee that closed, or died: end of stream or an error. Anything
      // it sends is read and dropped.
      std::vector<int> gone;
      for (std::size_t i = 2; i < 2 + lessee_count; ++i) {
        if (fds[i].revents == 0) continue;
        char buf[256];
        const ssize_t n = ::recv(fds[i].fd, buf, sizeof buf, MSG_DONTWAIT);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) gone.push_back(fds[i].fd);
      }
      if (!gone.empty()) {
        {
          MutexLock l(&mu);
          std::erase_if(lessees, [&](const Lessee& x) {
            return std::find(gone.begin(), gone.end(), x.fd.get()) != gone.end();
          });
        }
        lessees_changed.SignalAll();
        Announce();
      }
      // Pending sends, in reverse so that finishing one keeps the others'
      // indices; one past its deadline, or whose client went, is closed.
      const auto now = clock->Now();
      for (std::size_t i = pending.size(); i-- > 0;) {
        Pending& p = pending[i];
        if (fds[2 + lessee_count + i].revents != 0 && SendSome(p)) {
          FinishSending(i);
        } else if (!p.fd.valid() || now >= p.deadline) {
          pending.erase(pending.begin() + static_cast<std::ptrdiff_t>(i));
        }
      }
      if (taking && fds[1].revents != 0) Accept();
    }
  }

  void Send(char c) { (void)!::write(control[1], &c, 1); }
};

LeaseServer::LeaseServer(std::unique_ptr<Rep> rep) : rep_(std::move(rep)) {}
LeaseServer::~LeaseServer() { Stop(); }

Result<std::unique_ptr<LeaseServer>> LeaseServer::Start(const std::filesystem::path& path,
                                                        std::string description, LesseesChanged on_lessees,
                                                        std::chrono::milliseconds send_deadline,
                                                        Clock& clock) {
  return Listen(std::make_unique<Rep>(), path, std::move(description), std::move(on_lessees), send_deadline,
                clock);
}

Result<std::unique_ptr<LeaseServer>> LeaseServer::StartV2(const std::filesystem::path& path,
                                                          std::string description, std::span<const int> fds,
                                                          LesseesChanged on_lessees,
                                                          std::chrono::milliseconds send_deadline,
                                                          Clock& clock) {
  if (description.find('\n') != std::string::npos)
    return InvalidArgumentError("a v2 lease description is one line: it holds a \"\\n\"");
  if (Result<LeaseDescriptionV2> d = ParseLeaseV2Opening(description, fds.size(), "the holder"); !d.ok())
    return InvalidArgumentError(d.status().message());
  auto rep = std::make_unique<Rep>();
  rep->v2 = true;
  for (int fd : fds) {
    UniqueFd dup(::fcntl(fd, F_DUPFD_CLOEXEC, 0));
    if (!dup.valid()) return ErrnoStatus(errno, "duplicate lease descriptor " + std::to_string(fd));
    rep->fds.push_back(std::move(dup));
  }
  description += '\n';
  return Listen(std::move(rep), path, std::move(description), std::move(on_lessees), send_deadline, clock);
}

Result<std::unique_ptr<LeaseServer>> LeaseServer::Listen(std::unique_ptr<Rep> rep,
                                                         const std::filesystem::path& path,
                                                         std::string description, LesseesChanged on_lessees,
                                                         std::chrono::milliseconds send_deadline,
                                                         Clock& clock) {
  rep->send_deadline = send_deadline;
  rep->clock = &clock;
  rep->path = path;
  rep->description = std::move(description);
  rep->on_lessees = std::move(on_lessees);
  EXLR8_ASSIGN_OR_RETURN(sockaddr_un addr, UnixSocketAddress(path));
  rep->listener = UniqueFd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!rep->listener.valid()) return ErrnoStatus(errno, "socket");
  // A stale socket file (a killed holder) is replaced; a live holder is not.
  if (SomeoneAnswers(addr)) return FailedPreconditionError("another holder answers on " + path.string());
  ::unlink(path.c_str());
  // The file bind creates takes the socket's mode (less the umask): 0660
  // from the start, so that no one outside the group connects before the
  // chmod (a connection made then would outlive it and get the handles).
  if (::fchmod(rep->listener.get(), 0660) != 0)
    return ErrnoStatus(errno, "chmod the socket for " + path.string());
  if (::bind(rep->listener.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0)
    return ErrnoStatus(errno, "bind " + path.string());
  (void)::chmod(path.c_str(), 0660);  // the group's bits back, if a umask took them
  if (::listen(rep->listener.get(), 16) != 0) return ErrnoStatus(errno, "listen " + path.string());
  if (::pipe2(rep->control, O_CLOEXEC) != 0) return ErrnoStatus(errno, "pipe");
  Rep* r = rep.get();
  rep->thread = std::thread([r] {
    r->Loop();
    {
      MutexLock l(&r->mu);
      r->accepting = false;  // whatever ended the loop, nobody waits for it in vain
    }
    r->stopped_accepting.SignalAll();
  });
  return std::unique_ptr<LeaseServer>(new LeaseServer(std::move(rep)));
}

void LeaseServer::StopAccepting() {
  if (!rep_->thread.joinable()) return;
  {
    MutexLock l(&rep_->mu);
    if (!rep_->accepting) return;
  }
  rep_->Send('a');
  MutexLock l(&rep_->mu);
  while (rep_->accepting) rep_->stopped_accepting.Wait(&rep_->mu);
}

void LeaseServer::Stop() {
  if (!rep_->thread.joinable()) return;
  rep_->Send('x');
  rep_->thread.join();
  ::close(rep_->control[0]);
  ::close(rep_->control[1]);
  rep_->listener.Reset();
  ::unlink(rep_->path.c_str());
  MutexLock l(&rep_->mu);
  rep_->lessees.clear();
  rep_->lessees_changed.SignalAll();
}

Status LeaseServer::AnnounceRelease(std::chrono::milliseconds deadline) {
  if (!rep_->v2) return FailedPreconditionError("lease protocol v1 has no release message");
  StopAccepting();
  const long long ms = std::max<long long>(0, deadline.count());
  const auto seconds =
      static_cast<std::uint32_t>(std::min<long long>((ms + 999) / 1000, kMaxLeaseReleaseDeadlineS));
  const std::string line = WriteLeaseReleaseLine(seconds) + "\n";
  MutexLock l(&rep_->mu);
  // Under mu, so that the loop thread closes none of them meanwhile. The
  // line is small and the lessee's socket holds only the description
  // before it: it goes whole or not at all.
  for (const Rep::Lessee& x : rep_->lessees)
    (void)::send(x.fd.get(), line.data(), line.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  return Status::Ok();
}

Result<std::vector<pid_t>> LeaseServer::RequestRelease(std::chrono::milliseconds deadline) {
  const Clock::TimePoint end = rep_->clock->Deadline(deadline);
  EXLR8_RETURN_IF_ERROR(AnnounceRelease(deadline));
  MutexLock l(&rep_->mu);
  while (!rep_->lessees.empty())
    if (!rep_->clock->WaitUntil(&rep_->lessees_changed, &rep_->mu, end)) break;
  std::vector<pid_t> out;
  for (const Rep::Lessee& x : rep_->lessees) out.push_back(x.peer.pid);
  return out;
}

std::uint64_t LeaseServer::served() const { return rep_->served.load(); }

std::vector<pid_t> LeaseServer::Lessees() const {
  MutexLock l(&rep_->mu);
  std::vector<pid_t> out;
  for (const Rep::Lessee& x : rep_->lessees) out.push_back(x.peer.pid);
  return out;
}

}  // namespace exlr8
