#include "daemon/stage/lease_server.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>

#include "daemon/cache/posix.h"

namespace exlr8 {

namespace {

Status WriteAll(int fd, std::string_view data) {
  while (!data.empty()) {
    const ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return ErrnoStatus(errno, "write the lease description");
    data.remove_prefix(static_cast<std::size_t>(n));
  }
  return Status::Ok();
}

pid_t PeerPid(int fd) {
  ucred cred{};
  socklen_t len = sizeof cred;
  return ::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0 ? cred.pid : 0;
}

}  // namespace

Result<sockaddr_un> UnixSocketAddress(const std::filesystem::path& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.native().size() + 1 > sizeof addr.sun_path)
    return InvalidArgumentError("socket path " + path.string() + " is longer than " +
                                std::to_string(sizeof addr.sun_path - 1) + " bytes");
  std::memcpy(addr.sun_path, path.c_str(), path.native().size() + 1);
  return addr;
}

struct LeaseServer::Rep {
  struct Lessee {
    UniqueFd fd;
    pid_t pid = 0;
  };

  std::filesystem::path path;
  std::string description;
  UniqueFd listener;  // reset by the loop thread once it stops accepting
  int control[2] = {-1, -1};  // 'a': stop accepting, 'x': stop
  std::thread thread;
  std::atomic<std::uint64_t> served{0};
  mutable std::mutex mu;
  std::condition_variable stopped_accepting;
  bool accepting = true;        // guarded by mu (written by the loop thread only)
  std::vector<Lessee> lessees;  // guarded by mu (written by the loop thread only)
  LeaseServer::LesseesChanged on_lessees;

  // On the loop thread, after a change, outside mu.
  void Announce() {
    if (!on_lessees) return;
    std::vector<pid_t> pids;
    {
      std::lock_guard<std::mutex> l(mu);
      for (const Lessee& x : lessees) pids.push_back(x.pid);
    }
    on_lessees(pids);
  }

  void Accept() {
    UniqueFd client(::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC));
    if (!client.valid()) return;
    {
      // Bounded, so that connections left open cannot use up the holder's
      // descriptors: the one over the bound is closed unanswered.
      std::lock_guard<std::mutex> l(mu);
      if (lessees.size() >= LeaseServer::kMaxLessees) return;
    }
    // A client that never reads must not hold the holder: bounded send.
    timeval tv{10, 0};
    (void)::setsockopt(client.get(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    if (!WriteAll(client.get(), description).ok()) return;
    served.fetch_add(1);
    // End of stream for the reader; the connection stays open until the
    // lessee lets go.
    (void)::shutdown(client.get(), SHUT_WR);
    const pid_t pid = PeerPid(client.get());
    {
      std::lock_guard<std::mutex> l(mu);
      lessees.push_back({std::move(client), pid});
    }
    Announce();
  }

  void Loop() {
    std::vector<pollfd> fds;
    for (;;) {
      fds.clear();
      bool taking = false;
      {
        std::lock_guard<std::mutex> l(mu);
        taking = accepting;
        fds.push_back({control[0], POLLIN, 0});
        fds.push_back({taking ? listener.get() : -1, POLLIN, 0});  // a negative fd is ignored
        for (const Lessee& x : lessees) fds.push_back({x.fd.get(), POLLIN, 0});
      }
      if (::poll(fds.data(), fds.size(), -1) < 0) {
        if (errno == EINTR) continue;
        return;
      }
      if (fds[0].revents != 0) {
        char c = 0;
        if (::read(control[0], &c, 1) != 1 || c == 'x') return;
        listener.Reset();
        ::unlink(path.c_str());
        {
          std::lock_guard<std::mutex> l(mu);
          accepting = false;
        }
        stopped_accepting.notify_all();
        continue;
      }
      // A lessee that closed, or died: end of stream or an error. Anything
      // it sends is read and dropped.
      std::vector<int> gone;
      for (std::size_t i = 2; i < fds.size(); ++i) {
        if (fds[i].revents == 0) continue;
        char buf[256];
        const ssize_t n = ::recv(fds[i].fd, buf, sizeof buf, MSG_DONTWAIT);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) gone.push_back(fds[i].fd);
      }
      if (!gone.empty()) {
        {
          std::lock_guard<std::mutex> l(mu);
          std::erase_if(lessees, [&](const Lessee& x) {
            return std::find(gone.begin(), gone.end(), x.fd.get()) != gone.end();
          });
        }
        Announce();
      }
      if (taking && fds[1].revents != 0) Accept();
    }
  }

  void Send(char c) { (void)!::write(control[1], &c, 1); }
};

LeaseServer::LeaseServer(std::unique_ptr<Rep> rep) : rep_(std::move(rep)) {}
LeaseServer::~LeaseServer() { Stop(); }

Result<std::unique_ptr<LeaseServer>> LeaseServer::Start(const std::filesystem::path& path, std::string description,
                                                        LesseesChanged on_lessees) {
  auto rep = std::make_unique<Rep>();
  rep->path = path;
  rep->description = std::move(description);
  rep->on_lessees = std::move(on_lessees);
  EXLR8_ASSIGN_OR_RETURN(sockaddr_un addr, UnixSocketAddress(path));
  rep->listener = UniqueFd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!rep->listener.valid()) return ErrnoStatus(errno, "socket");
  // A stale socket file (a killed holder) is replaced; a live holder is not.
  {
    UniqueFd probe(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (::connect(probe.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr) == 0)
      return FailedPreconditionError("another holder answers on " + path.string());
    ::unlink(path.c_str());
  }
  if (::bind(rep->listener.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0)
    return ErrnoStatus(errno, "bind " + path.string());
  (void)::chmod(path.c_str(), 0660);
  if (::listen(rep->listener.get(), 16) != 0) return ErrnoStatus(errno, "listen " + path.string());
  if (::pipe2(rep->control, O_CLOEXEC) != 0) return ErrnoStatus(errno, "pipe");
  Rep* r = rep.get();
  rep->thread = std::thread([r] {
    r->Loop();
    {
      std::lock_guard<std::mutex> l(r->mu);
      r->accepting = false;  // whatever ended the loop, nobody waits for it in vain
    }
    r->stopped_accepting.notify_all();
  });
  return std::unique_ptr<LeaseServer>(new LeaseServer(std::move(rep)));
}

void LeaseServer::StopAccepting() {
  if (!rep_->thread.joinable()) return;
  {
    std::lock_guard<std::mutex> l(rep_->mu);
    if (!rep_->accepting) return;
  }
  rep_->Send('a');
  std::unique_lock<std::mutex> l(rep_->mu);
  rep_->stopped_accepting.wait(l, [this] { return !rep_->accepting; });
}

void LeaseServer::Stop() {
  if (!rep_->thread.joinable()) return;
  rep_->Send('x');
  rep_->thread.join();
  ::close(rep_->control[0]);
  ::close(rep_->control[1]);
  rep_->listener.Reset();
  ::unlink(rep_->path.c_str());
  std::lock_guard<std::mutex> l(rep_->mu);
  rep_->lessees.clear();
}

std::uint64_t LeaseServer::served() const { return rep_->served.load(); }

std::vector<pid_t> LeaseServer::Lessees() const {
  std::lock_guard<std::mutex> l(rep_->mu);
  std::vector<pid_t> out;
  for (const Rep::Lessee& x : rep_->lessees) out.push_back(x.pid);
  return out;
}

}  // namespace exlr8
