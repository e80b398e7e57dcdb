// `exlr8d list`, `pin`, `unpin` and `gc` as an operator runs them, and the
// systemd units' command lines run as systemd would expand them, against a
// real hub simulator and a real cache.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "daemon/base/posix.h"
#include "daemon/cache/cache.h"
#include "daemon/cache/process_pin.h"
#include "format/json.h"
#include "format/units.h"
#include "tests/daemon/cache_test_util.h"
#include "tests/daemon/child_process.h"
#include "tests/daemon/dead_hub_util.h"
#include "tests/daemon/lease_test_util.h"
#include "tests/daemon/pull_test_util.h"
#include "tests/daemon/shell_util.h"

namespace exlr8 {
namespace {

using ::exlr8::testing::FillUp;
using ::exlr8::testing::TempDir;
using ::exlr8::testing::TmpfsMount;
using ::testing::HasSubstr;
using ::testing::Not;

JsonValue ListJson(const fs::path& cache) {
  const ShellRun r = Shell(Exlr8d() + " list --json --cache " + Quote(cache.string()));
  EXPECT_EQ(r.status, 0) << r.out;
  auto v = ParseJson(r.out);
  EXPECT_TRUE(v.ok()) << r.out;
  return v.ok() ? *v : JsonValue();
}

std::vector<std::string> Pins(const JsonValue& list, std::size_t i = 0) {
  std::vector<std::string> out;
  const JsonValue* sets = list.Find("filesets");
  if (sets == nullptr || sets->as_array().size() <= i) return out;
  for (const JsonValue& p : sets->as_array()[i].Find("pins")->as_array()) out.push_back(p.as_string());
  return out;
}

TEST(CacheCommandsTest, ListPinUnpinAndGcKeepsWhatIsPinned) {
  auto sim = StartSim(TinyRelease());
  TempDir cache;
  auto s = Pull(cache.path(), Options(*sim, "home", 3, 2));
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  const std::string c = " --cache " + Quote(cache.path().string());

  JsonValue list = ListJson(cache.path());
  ASSERT_EQ(list.Find("filesets")->as_array().size(), 1u);
  const JsonValue& set = list.Find("filesets")->as_array()[0];
  EXPECT_EQ(set.Find("repo")->as_string(), "exlr8/test");
  EXPECT_EQ(set.Find("revision")->as_string(), "main");
  EXPECT_EQ(set.Find("commit")->as_string(), s->commit);
  EXPECT_EQ(*set.Find("bytes_cached")->as_uint64(), s->bytes_planned);
  EXPECT_GT(*set.Find("bytes_total")->as_uint64(), s->bytes_planned);
  EXPECT_TRUE(Pins(list).empty());
  const JsonValue* latest = set.Find("latest_pull");
  ASSERT_TRUE(latest != nullptr && latest->is_object());
  EXPECT_EQ(latest->Find("state")->as_string(), "done");
  EXPECT_EQ(*latest->Find("tp")->as_uint64(), 3u);
  EXPECT_EQ(*latest->Find("rank")->as_uint64(), 2u);
  const ShellRun table = Shell(Exlr8d() + " list" + c);
  EXPECT_EQ(table.status, 0);
  EXPECT_THAT(table.out, HasSubstr("exlr8/test"));
  EXPECT_THAT(table.out, HasSubstr("TP 3 rank 2: done"));

  // Two holders, by revision and by a commit prefix.
  ShellRun pin = Shell(Exlr8d() + " pin --repo exlr8/test --holder node-a" + c);
  ASSERT_EQ(pin.status, 0) << pin.out;
  EXPECT_THAT(pin.out, HasSubstr("pinned exlr8/test@main"));
  ASSERT_EQ(Shell(Exlr8d() + " pin --repo exlr8/test --commit " + s->commit.substr(0, 7) + c).status, 0);
  ASSERT_EQ(Shell(Exlr8d() + " pin --repo exlr8/test --holder node-a" + c).status, 0);  // idempotent
  EXPECT_EQ(Pins(ListJson(cache.path())), (std::vector<std::string>{"node-a", "user"}));

  // gc keeps a pinned fileset whatever the budget, saying the cache stays
  // over it, and will not evict it by name.
  const ShellRun over = Shell(Exlr8d() + " gc --budget 1K" + c);
  ASSERT_EQ(over.status, 0) << over.out;
  EXPECT_THAT(over.out, HasSubstr("warning: the cache stays"));
  EXPECT_THAT(over.out, HasSubstr("over its budget of 1.00 kB: what remains is pinned"));
  EXPECT_TRUE(fs::exists(s->root));
  const ShellRun refused = Shell(Exlr8d() + " gc --repo exlr8/test" + c);
  EXPECT_EQ(refused.status, 7) << refused.out;
  EXPECT_THAT(refused.out, HasSubstr("pinned by node-a, user; unpin it first"));
  EXPECT_TRUE(fs::exists(s->root));
  ASSERT_EQ(Shell(Exlr8d() + " unpin --repo exlr8/test --holder node-a" + c).status, 0);
  ASSERT_EQ(Shell(Exlr8d() + " gc --budget 0" + c).status, 0);
  EXPECT_TRUE(fs::exists(s->root));  // still pinned by "user"
  // A holder that holds no pin is not quietly "unpinned": the command says
  // so, since the real pin stays.
  const ShellRun mistyped = Shell(Exlr8d() + " unpin --repo exlr8/test --holder usr" + c);
  EXPECT_EQ(mistyped.status, 0) << mistyped.out;
  EXPECT_THAT(mistyped.out, HasSubstr("has no pin of 'usr': nothing to unpin (its pins: 'user')"));
  ASSERT_EQ(Shell(Exlr8d() + " unpin --repo exlr8/test" + c).status, 0);
  const ShellRun again = Shell(Exlr8d() + " unpin --repo exlr8/test" + c);
  ASSERT_EQ(again.status, 0) << again.out;  // idempotent
  EXPECT_THAT(again.out, HasSubstr("nothing to unpin (it has no pins)"));
  const ShellRun all = Shell(Exlr8d() + " gc --budget 0" + c);
  ASSERT_EQ(all.status, 0) << all.out;
  EXPECT_THAT(all.out, Not(HasSubstr("warning")));
  EXPECT_FALSE(fs::exists(s->root));
  EXPECT_TRUE(ListJson(cache.path()).Find("filesets")->as_array().empty());
  EXPECT_THAT(Shell(Exlr8d() + " list" + c).out, HasSubstr("no filesets"));
}

// gc --repo evicts one named fileset, whatever its place in LRU order.
// `hf download ORG/NAME` habits: the repository as the argument of every
// command that names one, --repo still taken, a conflict or none a usage error.
TEST(CacheCommandsTest, TheRepositoryIsTheCommandsArgument) {
  auto sim = StartSim(TinyRelease());
  TempDir cache;
  const std::string c = " --cache " + Quote(cache.path().string());
  const std::string rank = " --manifest home --tp 4 --rank 1 --no-progress --endpoint " + sim->hub_url() + c;
  const ShellRun pulled = Shell(Exlr8d() + " pull exlr8/test" + rank);
  ASSERT_EQ(pulled.status, 0) << pulled.out;
  EXPECT_THAT(pulled.out, HasSubstr("pulled exlr8/test@main"));
  EXPECT_EQ(Shell(Exlr8d() + " pull exlr8/test --repo exlr8/test" + rank).status, 0);  // the same twice

  const ShellRun both = Shell(Exlr8d() + " pull exlr8/test --repo exlr8/other" + rank);
  EXPECT_EQ(both.status, 2) << both.out;
  EXPECT_THAT(both.out, HasSubstr("'exlr8/test'"));
  EXPECT_THAT(both.out, HasSubstr("--repo 'exlr8/other'"));
  const ShellRun none = Shell(Exlr8d() + " pull" + rank);
  EXPECT_EQ(none.status, 2) << none.out;
  EXPECT_THAT(none.out, HasSubstr("missing the repository: give ORG/NAME (or --repo ORG/NAME)"));
  const ShellRun stray = Shell(Exlr8d() + " pull exlr8/test 4" + rank);
  EXPECT_EQ(stray.status, 2) << stray.out;
  EXPECT_THAT(stray.out, HasSubstr("unexpected argument '4'"));

  const ShellRun status = Shell(Exlr8d() + " status exlr8/test --manifest home --tp 4 --rank 1" + c);
  EXPECT_EQ(status.status, 0) << status.out;
  EXPECT_EQ(Shell(Exlr8d() + " status exlr8/test --manifest home --tp 4 --rank 2" + c).status, 1);
  const ShellRun pin = Shell(Exlr8d() + " pin exlr8/test --holder node-a" + c);
  ASSERT_EQ(pin.status, 0) << pin.out;
  EXPECT_EQ(Pins(ListJson(cache.path())), std::vector<std::string>{"node-a"});
  const ShellRun verify = Shell(Exlr8d() + " verify exlr8/test --check-only --no-progress" + c);
  EXPECT_EQ(verify.status, 0) << verify.out;
  EXPECT_THAT(verify.out, HasSubstr("exlr8/test"));
  EXPECT_EQ(Shell(Exlr8d() + " verify exlr8/none --check-only --no-progress" + c).status, 3);
  ASSERT_EQ(Shell(Exlr8d() + " unpin exlr8/test --holder node-a" + c).status, 0);
  EXPECT_TRUE(Pins(ListJson(cache.path())).empty());
  EXPECT_EQ(Shell(Exlr8d() + " pin" + c).status, 2);
  const ShellRun gc = Shell(Exlr8d() + " gc exlr8/test" + c);
  EXPECT_EQ(gc.status, 0) << gc.out;
  EXPECT_THAT(Shell(Exlr8d() + " list" + c).out, HasSubstr("no filesets"));
}

// `exlr8d list` is read in a 100-column terminal: names wider than their
// column get a line of their own (never cut), details wrap; --json keeps
// every field.
TEST(CacheCommandsTest, ListFitsInAHundredColumns) {
  auto sim = StartSim(TinyRelease());
  TempDir cache;
  auto s = Pull(cache.path(), Options(*sim, "home", 4, 1));
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  const std::string long_repo = "a-rather-long-organisation/glm-5.3-exlr8-k2-k3-k4-with-a-long-model-name";
  const std::string long_revision = "release-candidate-12-03";
  const std::string commit(40, 'c');
  std::vector<std::string> holders;
  for (int i = 0; i < 12; ++i) holders.push_back("inference-node-" + std::to_string(i));
  {
    auto owner = Cache::Open(cache.path());
    ASSERT_TRUE(owner.ok()) << owner.status().ToString();
    auto set = (*owner)->PutFileset(long_repo, long_revision, commit);
    ASSERT_TRUE(set.ok());
    for (const std::string& h : holders) ASSERT_TRUE((*owner)->Pin(*set, h).ok());
    ASSERT_TRUE((*owner)->PutFileset("exlr8/short", long_revision, std::string(40, 'd')).ok());
  }
  const std::string c = " --cache " + Quote(cache.path().string());
  const ShellRun table = Shell(Exlr8d() + " list" + c);
  ASSERT_EQ(table.status, 0) << table.out;
  std::istringstream lines(table.out);
  std::string line;
  int n = 0;
  while (std::getline(lines, line)) {
    ++n;
    EXPECT_LE(line.size(), 100u) << "line " << n << ": " << line;
  }
  EXPECT_GE(n, 7);
  EXPECT_THAT(table.out, HasSubstr("\n" + long_repo + "@" + long_revision + "\n"));  // in full
  EXPECT_THAT(table.out, HasSubstr("\nexlr8/short@" + long_revision + "\n"));
  for (const std::string& h : holders) EXPECT_THAT(table.out, HasSubstr(h));
  EXPECT_THAT(table.out,
              HasSubstr("\n  latest pull: manifests/exlr8-manifest-home.json TP 4 rank 1: done\n"));
  EXPECT_THAT(table.out, HasSubstr(HumanBytes(s->bytes_planned)));

  const JsonValue list = ListJson(cache.path());
  ASSERT_EQ(list.Find("filesets")->as_array().size(), 3u);
  bool found = false;
  for (const JsonValue& set : list.Find("filesets")->as_array()) {
    if (set.Find("repo")->as_string() != long_repo) continue;
    found = true;
    EXPECT_EQ(set.Find("revision")->as_string(), long_revision);
    EXPECT_EQ(set.Find("commit")->as_string(), commit);
    EXPECT_EQ(set.Find("pins")->as_array().size(), holders.size());
  }
  EXPECT_TRUE(found) << list.Dump();
}

TEST(CacheCommandsTest, GcByNameEvictsThatFilesetOnly) {
  auto sim = StartSim(TinyRelease(), "", {}, {"exlr8/test", "exlr8/other"});
  TempDir cache;
  auto first = Pull(cache.path(), Options(*sim, "home", 3, 2));
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  PullOptions o = Options(*sim, "home", 3, 1);
  o.repo = "exlr8/other";
  auto second = Pull(cache.path(), o);
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  const std::string c = " --cache " + Quote(cache.path().string());

  EXPECT_EQ(Shell(Exlr8d() + " gc --repo exlr8/test --budget 0" + c).status, 2);
  EXPECT_EQ(Shell(Exlr8d() + " gc --commit " + first->commit + c).status, 2);
  const ShellRun unknown = Shell(Exlr8d() + " gc --repo exlr8/none" + c);
  EXPECT_EQ(unknown.status, 3) << unknown.out;
  // exlr8/other is the most recently used; gc --budget would take exlr8/test first.
  const ShellRun evicted = Shell(Exlr8d() + " gc --repo exlr8/other --commit " + second->commit.substr(0, 7) + c);
  ASSERT_EQ(evicted.status, 0) << evicted.out;
  EXPECT_THAT(evicted.out, HasSubstr("evicted exlr8/other@main (commit " + second->commit + ")"));
  EXPECT_FALSE(fs::exists(second->root));
  EXPECT_TRUE(fs::exists(first->root));
  const JsonValue list = ListJson(cache.path());
  ASSERT_EQ(list.Find("filesets")->as_array().size(), 1u);
  EXPECT_EQ(list.Find("filesets")->as_array()[0].Find("repo")->as_string(), "exlr8/test");
  EXPECT_EQ(*list.Find("filesets")->as_array()[0].Find("bytes_cached")->as_uint64(), first->bytes_planned);
}

// A process pin (exlr8d-stage holding the rank; here this test process) is
// shown by list and respected by gc, and goes with its holder.
TEST(CacheCommandsTest, ListAndGcSeeAProcessThatHoldsTheFileset) {
  auto sim = StartSim(TinyRelease());
  TempDir cache;
  auto s = Pull(cache.path(), Options(*sim, "home", 2, 1));
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  const std::string c = " --cache " + Quote(cache.path().string());
  auto pin = ProcessPin::Acquire(cache.path(), "exlr8/test", s->commit, "exlr8d-stage home tp2 rank1");
  ASSERT_TRUE(pin.ok()) << pin.status().ToString();
  const std::string holder = "exlr8d-stage home tp2 rank1 (pid " + std::to_string(::getpid()) + ")";
  EXPECT_THAT(Shell(Exlr8d() + " list" + c).out, HasSubstr(holder));
  const JsonValue list = ListJson(cache.path());
  const JsonValue& held = list.Find("filesets")->as_array()[0].Find("process_pins")->as_array().at(0);
  EXPECT_EQ(held.Find("holder")->as_string(), "exlr8d-stage home tp2 rank1");
  EXPECT_EQ(*held.Find("pid")->as_uint64(), static_cast<std::uint64_t>(::getpid()));
  const ShellRun refused = Shell(Exlr8d() + " gc --repo exlr8/test" + c);
  EXPECT_EQ(refused.status, 7) << refused.out;
  EXPECT_THAT(refused.out, HasSubstr("is held by " + holder));
  ASSERT_EQ(Shell(Exlr8d() + " gc --budget 0" + c).status, 0);
  EXPECT_TRUE(fs::exists(s->root));
  pin->reset();  // the holder is gone
  EXPECT_THAT(Shell(Exlr8d() + " list" + c).out, Not(HasSubstr("exlr8d-stage")));
  ASSERT_EQ(Shell(Exlr8d() + " gc --budget 0" + c).status, 0);
  EXPECT_FALSE(fs::exists(s->root));
}

TEST(CacheCommandsTest, BadNamesAndABusyCacheAreClearErrors) {
  auto sim = StartSim(TinyRelease());
  TempDir cache;
  auto s = Pull(cache.path(), Options(*sim, "down1", 2, 0));
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  const std::string c = " --cache " + Quote(cache.path().string());
  const std::string pin = Exlr8d() + " pin" + c;

  ShellRun r = Shell(pin + " --repo exlr8/other");
  EXPECT_EQ(r.status, 3) << r.out;  // NotFound
  EXPECT_THAT(r.out, HasSubstr("exlr8/other@main was never pulled"));
  r = Shell(pin + " --repo exlr8/test --revision v2");
  EXPECT_EQ(r.status, 3) << r.out;
  r = Shell(pin + " --repo exlr8/test --commit 0000000");
  EXPECT_EQ(r.status, 3) << r.out;
  EXPECT_THAT(r.out, HasSubstr("not in"));
  EXPECT_EQ(Shell(pin + " --repo exlr8/test --commit xyz1234").status, 2);
  EXPECT_EQ(Shell(pin + " --repo exlr8/test --commit abc").status, 2);  // too short
  EXPECT_EQ(Shell(pin + " --repo exlr8/test --revision main --commit " + s->commit).status, 2);
  r = Shell(pin + " --repo exlr8/test --holder " + Quote("a\tb"));
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_THAT(r.out, HasSubstr("pin holder"));
  EXPECT_EQ(Shell(pin + " --repo exlr8/test --holder " + std::string(256, 'x')).status, 2);
  EXPECT_EQ(Shell(pin).status, 2);  // no --repo
  EXPECT_TRUE(Pins(ListJson(cache.path())).empty());  // nothing pinned by the failures

  // One process owns a cache at a time: changes fail at once, saying why;
  // list reads a read-only view meanwhile.
  {
    auto held = Cache::Open(cache.path());
    ASSERT_TRUE(held.ok());
    r = Shell(pin + " --repo exlr8/test");
    EXPECT_EQ(r.status, 7) << r.out;
    EXPECT_THAT(r.out, HasSubstr("lock"));
    EXPECT_EQ(Shell(Exlr8d() + " gc --budget 0" + c).status, 7);
    r = Shell(Exlr8d() + " list" + c);
    EXPECT_EQ(r.status, 0) << r.out;
    EXPECT_THAT(r.out, HasSubstr("read-only view"));
    EXPECT_THAT(r.out, HasSubstr("exlr8/test"));
    EXPECT_TRUE(ListJson(cache.path()).Find("owned_by_another_process")->as_bool());
  }
  EXPECT_FALSE(ListJson(cache.path()).Find("owned_by_another_process")->as_bool());
  EXPECT_EQ(Shell(pin + " --repo exlr8/test").status, 0);
  // A cache that never pulled anything: NotFound (exit 3).
  TempDir empty;
  const fs::path none = empty.path() / "none";
  const std::string at_none = " --cache " + Quote(none.string());
  r = Shell(Exlr8d() + " pin --repo exlr8/test" + at_none);
  EXPECT_EQ(r.status, 3) << r.out;
  EXPECT_THAT(r.out, HasSubstr("no exlr8d cache in"));
  // Reading or tidying such a directory answers without making a cache there.
  r = Shell(Exlr8d() + " list" + at_none);
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("no filesets"));
  r = Shell(Exlr8d() + " list --json" + at_none);
  EXPECT_EQ(r.status, 0) << r.out;
  auto listed = ParseJson(r.out);
  ASSERT_TRUE(listed.ok()) << r.out;
  EXPECT_TRUE(listed->Find("filesets")->as_array().empty());
  r = Shell(Exlr8d() + " gc --budget 0" + at_none);
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("nothing to evict"));
  EXPECT_EQ(Shell(Exlr8d() + " gc --repo exlr8/test" + at_none).status, 3);
  EXPECT_EQ(Shell(Exlr8d() + " unpin --repo exlr8/test" + at_none).status, 3);
  EXPECT_FALSE(fs::exists(none)) << "a command that reads made a cache directory";
}

// A pull no one could serve is refused before anything starts: no cache
// directory made, no progress line, one error naming the option.
// The latest pull of fileset `repo` as `exlr8d list --json` shows it.
const JsonValue* LatestPull(const JsonValue& list, const std::string& repo) {
  for (const JsonValue& set : list.Find("filesets")->as_array())
    if (set.Find("repo")->as_string() == repo) return set.Find("latest_pull");
  return nullptr;
}

// After a pull ends with exit 6 on a full file system, `gc --budget`, `gc
// --repo`, `pull --make-room`, `unpin`, `verify` and `list` still work: the
// dead pull's row stays 'running', and SQLite has no room to mark it failed,
// so no command may depend on that UPDATE. These are the commands that free
// space. Each command here meets a file system filled to the last byte.
TEST(CacheCommandsTest, CommandsThatFreeSpaceWorkOnAFullDisk) {
  TmpfsMount mnt("64m");
  if (!mnt.mounted())
    GTEST_SKIP() << "cannot mount a tmpfs here (" << mnt.error() << "); needs CAP_SYS_ADMIN";
  const fs::path cache = mnt.path() / "cache";
  const fs::path filler = mnt.path() / "filler";
  const std::string c = " --cache " + Quote(cache.string());
  auto sim = StartSim(TinyRelease(), "", {}, {"exlr8/test", "exlr8/a", "exlr8/b", "exlr8/c", "exlr8/d"});
  // Four filesets, least recently used first.
  std::map<std::string, fs::path> roots;
  for (const char* repo : {"exlr8/a", "exlr8/b", "exlr8/c", "exlr8/d"}) {
    PullOptions o = Options(*sim, "home", 4, 0);
    o.repo = repo;
    auto s = Pull(cache, o);
    ASSERT_TRUE(s.ok()) << repo << ": " << s.status().ToString();
    roots[repo] = s->root;
  }
  ASSERT_EQ(Shell(Exlr8d() + " pin --repo exlr8/a" + c).status, 0);
  {  // c's pull died: its row stays 'running' (as when a pull's end could not be recorded)
    auto owner = Cache::Open(cache);
    ASSERT_TRUE(owner.ok()) << owner.status().ToString();
    const FilesetId set =
        *(*owner)->PutFileset("exlr8/c", "main", *(*owner)->LookupCommit("exlr8/c", "main"));
    ASSERT_TRUE((*owner)->StartPull({set, "exlr8-manifest-home.json", 4, 1}).ok());
  }
  EXPECT_TRUE(fs::exists(cache / "exlr8d.reserve"));
  ASSERT_TRUE(FillUp(filler));

  // A pull fails cleanly, and leaves the reserve to the commands below.
  const std::string rank =
      " --repo exlr8/test --manifest home --tp 4 --rank 0 --no-progress --endpoint " + sim->hub_url() + c;
  const ShellRun full_pull = Shell(Exlr8d() + " pull" + rank);
  EXPECT_EQ(full_pull.status, 6) << full_pull.out;
  EXPECT_TRUE(fs::exists(cache / "exlr8d.reserve"));

  // list: the dead pull is reported as what it is.
  ASSERT_TRUE(FillUp(filler));
  const ShellRun list = Shell(Exlr8d() + " list --json" + c);
  ASSERT_EQ(list.status, 0) << list.out;
  auto listed = ParseJson(list.out);
  ASSERT_TRUE(listed.ok()) << list.out;
  EXPECT_EQ(listed->Find("filesets")->as_array().size(), 4u) << list.out;
  const JsonValue* dead = LatestPull(*listed, "exlr8/c");
  ASSERT_TRUE(dead != nullptr && dead->is_object()) << list.out;
  EXPECT_EQ(dead->Find("state")->as_string(), "failed");
  EXPECT_THAT(dead->Find("error")->as_string(), HasSubstr("interrupted"));

  ASSERT_TRUE(FillUp(filler));
  const ShellRun check = Shell(Exlr8d() + " verify --check-only --no-progress" + c);
  EXPECT_EQ(check.status, 0) << check.out;
  ASSERT_TRUE(FillUp(filler));
  const ShellRun verify = Shell(Exlr8d() + " verify --no-progress" + c);
  EXPECT_EQ(verify.status, 0) << verify.out;
  EXPECT_FALSE(ListJson(cache).Find("filesets")->as_array()[0].Find("verified")->is_null());  // recorded

  ASSERT_TRUE(FillUp(filler));
  const ShellRun unpin = Shell(Exlr8d() + " unpin --repo exlr8/a" + c);
  EXPECT_EQ(unpin.status, 0) << unpin.out;
  EXPECT_THAT(unpin.out, HasSubstr("unpinned exlr8/a@main"));
  EXPECT_TRUE(Pins(ListJson(cache)).empty());
  // Freeing nothing, it gave the room it borrowed back to the reserve.
  EXPECT_TRUE(fs::exists(cache / "exlr8d.reserve"));

  ASSERT_TRUE(FillUp(filler));
  const ShellRun by_name = Shell(Exlr8d() + " gc --repo exlr8/b" + c);
  EXPECT_EQ(by_name.status, 0) << by_name.out;
  EXPECT_THAT(by_name.out, HasSubstr("evicted exlr8/b@main"));
  EXPECT_FALSE(fs::exists(roots["exlr8/b"]));

  // pull --make-room evicts for the rank (a, least recently used first),
  // not into the room kept for the index.
  ASSERT_TRUE(FillUp(filler));
  const ShellRun make_room = Shell(Exlr8d() + " pull --make-room" + rank);
  EXPECT_EQ(make_room.status, 0) << make_room.out;
  EXPECT_THAT(make_room.out, HasSubstr("made room"));
  EXPECT_FALSE(fs::exists(roots["exlr8/a"]));
  EXPECT_EQ(Shell(Exlr8d() + " status --repo exlr8/test --manifest home --tp 4 --rank 0" + c).status, 0);
  EXPECT_TRUE(fs::exists(cache / "exlr8d.reserve"));

  // c's dead pull keeps nothing from eviction.
  ASSERT_TRUE(FillUp(filler));
  const ShellRun budget = Shell(Exlr8d() + " gc --budget 1" + c);
  EXPECT_EQ(budget.status, 0) << budget.out;
  EXPECT_THAT(budget.out, HasSubstr("0 B remain cached"));
  EXPECT_FALSE(fs::exists(roots["exlr8/c"]));
  EXPECT_FALSE(fs::exists(roots["exlr8/d"]));
  EXPECT_TRUE(ListJson(cache).Find("filesets")->as_array().empty());

  // The index is sound: the rank pulled again into it, and checked clean.
  fs::remove(filler);
  ASSERT_EQ(Shell(Exlr8d() + " pull" + rank).status, 0);
  const ShellRun clean = Shell(Exlr8d() + " verify --no-progress" + c);
  EXPECT_EQ(clean.status, 0) << clean.out;
}

// A rank pulled with a local manifest (a custom width mix) can be checked:
// status looks the path up on disk too, not in the release only.
TEST(CacheCommandsTest, StatusChecksARankPulledWithALocalManifest) {
  auto sim = StartSim(TinyRelease());
  TempDir cache, local;
  const fs::path mix = local.path() / "mix.json";
  fs::copy_file(TinyRelease() / "manifests" / "exlr8-manifest-down1.json", mix);
  const std::string rank = " --repo exlr8/test --manifest " + Quote(mix.string()) + " --tp 4 --rank 1 --cache " +
                           Quote(cache.path().string());
  const ShellRun before = Shell(Exlr8d() + " pull --endpoint " + sim->hub_url() + rank + " --no-progress --dry-run");
  ASSERT_EQ(before.status, 0) << before.out;
  EXPECT_EQ(Shell(Exlr8d() + " status" + rank).status, 1);  // planned, not fetched yet
  const ShellRun pull = Shell(Exlr8d() + " pull --endpoint " + sim->hub_url() + rank + " --no-progress");
  ASSERT_EQ(pull.status, 0) << pull.out;
  const ShellRun status = Shell(Exlr8d() + " status" + rank);
  EXPECT_EQ(status.status, 0) << status.out;
  EXPECT_THAT(status.out, HasSubstr(": complete"));
  // Still the release's manifest first; a path that is neither is NotFound.
  EXPECT_EQ(Shell(Exlr8d() + " status --repo exlr8/test --manifest down1 --tp 4 --rank 1 --cache " +
                  Quote(cache.path().string())).status, 0);
  EXPECT_EQ(Shell(Exlr8d() + " status --repo exlr8/test --manifest " + Quote((local.path() / "nope.json").string()) +
                  " --tp 4 --rank 1 --cache " + Quote(cache.path().string())).status, 3);
}

// With the hub down, `exlr8d pull` of a rank the cache holds complete exits
// 0, naming the cached commit and why the hub was not asked, so exlr8d-pull@
// does not restart it every 30 s; a rank the cache lacks exits 4, saying
// what is missing.
TEST(CacheCommandsTest, PullWithTheHubDownServesARankTheCacheHoldsCompleteAndSaysSo) {
  auto sim = StartSim(TinyRelease());
  TempDir cache;
  testing::RefusingPort down;
  ASSERT_NE(down.port(), 0);
  const std::string c = " --cache " + Quote(cache.path().string()) + " --no-progress";
  const std::string rank3 = " --repo exlr8/test --manifest down1 --tp 5 --rank 3" + c;
  const ShellRun first = Shell(Exlr8d() + " pull --endpoint " + sim->hub_url() + rank3);
  ASSERT_EQ(first.status, 0) << first.out;
  EXPECT_THAT(first.out, Not(HasSubstr("served from the cache")));
  const std::string commit = sim->commit("exlr8/test");
  sim->Stop();

  const ShellRun again = Shell(Exlr8d() + " pull --endpoint " + down.url() + rank3);
  EXPECT_EQ(again.status, 0) << again.out;
  EXPECT_THAT(again.out, HasSubstr("hub              could not be asked what main is now (revision 'main' of "
                                   "exlr8/test: Couldn't connect to server"));
  EXPECT_THAT(again.out, HasSubstr("served from the cache: commit " + commit +
                                   ", what main last resolved to here, where the rank is complete"));
  EXPECT_THAT(again.out, HasSubstr("verified         yes"));

  const ShellRun json = Shell(Exlr8d() + " pull --json --endpoint " + down.url() + rank3 + " 2>/dev/null");
  EXPECT_EQ(json.status, 0) << json.out;
  auto v = ParseJson(json.out);
  ASSERT_TRUE(v.ok()) << json.out;
  EXPECT_TRUE(v->Find("served_from_cache")->as_bool());
  EXPECT_EQ(v->Find("commit")->as_string(), commit);
  EXPECT_THAT(v->Find("hub_error")->as_string(), HasSubstr("Couldn't connect to server"));
  EXPECT_TRUE(v->Find("complete")->as_bool());

  // Another rank, never pulled: the network error as before (exit 4), and
  // what the cache lacks.
  const ShellRun other = Shell(Exlr8d() + " pull --endpoint " + down.url() +
                               " --repo exlr8/test --manifest down1 --tp 5 --rank 4" + c);
  EXPECT_EQ(other.status, 4) << other.out;
  EXPECT_THAT(other.out, HasSubstr("exlr8d pull: error: revision 'main' of exlr8/test: Couldn't connect to server"));
  EXPECT_THAT(other.out, HasSubstr("(after 5 attempts); not served from the cache: it holds commit " + commit +
                                   " for main, but TP 5 rank 4 of manifest down1 is not complete there"));
  EXPECT_THAT(other.out, HasSubstr("is not verified in the cache [IOError]"));
}

TEST(CacheCommandsTest, PullWithImpossibleOptionsFailsBeforeTouchingTheCache) {
  TempDir dir;
  const fs::path cache = dir.path() / "cache";
  const std::string pull = Exlr8d() + " pull --endpoint http://127.0.0.1:9 --cache " + Quote(cache.string());
  for (const auto& [args, names] : std::vector<std::pair<std::string, std::string>>{
           {" --repo justaname --manifest home --tp 4 --rank 1", "--repo must be ORG/NAME, got 'justaname'"},
           {" --repo a/b --revision '' --manifest home --tp 4 --rank 1", "--revision"},
           {" --repo a/b --manifest '' --tp 4 --rank 1", "--manifest"},
           {" --repo a/b --manifest home --tp 4 --rank 4", "--rank"}}) {
    SCOPED_TRACE(args);
    const ShellRun r = Shell(pull + args);
    EXPECT_EQ(r.status, 2) << r.out;
    EXPECT_THAT(r.out, HasSubstr(names));
    EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << "one line, the error: " << r.out;
    EXPECT_FALSE(fs::exists(cache));
  }
}

// A read-only view changes nothing and refuses to, whatever is asked.
TEST(CacheCommandsTest, ReadOnlyViewRefusesEveryChange) {
  auto sim = StartSim(TinyRelease());
  TempDir cache;
  auto s = Pull(cache.path(), Options(*sim, "down1", 2, 1));
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  auto owner = Cache::Open(cache.path());
  ASSERT_TRUE(owner.ok());
  auto view = Cache::OpenReadOnly(cache.path());
  ASSERT_TRUE(view.ok()) << view.status().ToString();
  Cache& v = **view;
  EXPECT_TRUE(v.read_only());
  auto sets = v.ListFilesets();
  ASSERT_TRUE(sets.ok());
  ASSERT_EQ(sets->size(), 1u);
  const FilesetId id = (*sets)[0].id;
  auto files = v.ListFiles(id);
  ASSERT_TRUE(files.ok());
  const FileInfo& f = files->front();
  const std::uint64_t before = *v.RecordedBytes();
  const std::byte b{1};
  for (const Status& st : {v.Pin(id, "x"), v.Unpin(id, "x"), v.Touch(id), v.WriteAt(f.id, 0, {&b, 1}),
                           v.CommitVerified({{VerifiedExtent{f.id, 0, 1}}}), v.MarkWholeFileVerified(f.id),
                           v.PutFileset("exlr8/test", "main", s->commit).status(),
                           v.PutFile(id, "new.bin", 1).status(), v.Gc(0).status(), v.Evict(id).status(),
                           v.StartPull(PullSpec{id, "m", 1, 0, "{}"}).status(), v.UpdatePull(1, {}),
                           v.FinishPull(1, PullState::kFailed)}) {
    EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition) << st.ToString();
    EXPECT_THAT(st.message(), HasSubstr("read-only"));
  }
  EXPECT_EQ(*v.RecordedBytes(), before);
  EXPECT_TRUE(fs::exists(s->root));
  EXPECT_TRUE((*owner)->Pin(id, "owner").ok());  // the owner still can
  EXPECT_EQ(Cache::OpenReadOnly(cache.path() / "nothing").status().code(), StatusCode::kNotFound);
}

// While a pull runs in this process (holding the lock), `exlr8d list` in
// another shows it running, with its progress as of its last commit.
// A user who may read the cache but not write it (an operator's account,
// a stage running as another user) gets list, status and verify
// --check-only, also once the owner has closed the cache: the index's -shm
// file is then gone, SQLite must still open it read-only (not "attempt to
// write a readonly database"), and list must not fail on the lock.
TEST(CacheCommandsTest, AUserWhoMayNotWriteTheCacheStillReadsIt) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root, to run the commands as another user (nobody)";
  if (Shell("command -v setpriv").status != 0) GTEST_SKIP() << "needs setpriv (util-linux)";
  auto sim = StartSim(TinyRelease());
  TempDir cache;
  ASSERT_TRUE(Pull(cache.path(), Options(*sim, "home", 4, 1)).ok());
  ASSERT_EQ(Shell("chmod -R a+rX " + Quote(cache.path().string()) + " && chmod a+x " +
                  Quote(cache.path().parent_path().string())).status, 0);
  const std::string as_nobody = "setpriv --reuid=65534 --regid=65534 --clear-groups " + Exlr8d();
  const std::string c = " --cache " + Quote(cache.path().string());
  const ShellRun list = Shell(as_nobody + " list" + c);
  EXPECT_EQ(list.status, 0) << list.out;
  EXPECT_THAT(list.out, HasSubstr("exlr8/test"));
  const ShellRun status = Shell(as_nobody + " status --repo exlr8/test --manifest home --tp 4 --rank 1" + c);
  EXPECT_EQ(status.status, 0) << status.out;
  EXPECT_THAT(status.out, HasSubstr("verified"));
  const ShellRun verify = Shell(as_nobody + " verify --check-only --repo exlr8/test" + c);
  EXPECT_EQ(verify.status, 0) << verify.out;
  // Nothing of it may change.
  const ShellRun gc = Shell(as_nobody + " gc" + c);
  EXPECT_NE(gc.status, 0) << gc.out;
}

TEST(CacheCommandsTest, ListShowsAPullWhileItRuns) {
  hubsim::FaultConfig slow;
  slow.throttle_bps = 100'000;  // per body: the pull takes seconds
  auto sim = StartSim(TinyRelease(), "", slow);
  TempDir cache;
  Result<PullSummary> result = InternalError("not run");
  std::string last;
  const bool seen = WhilePullRuns(cache.path(), Options(*sim, "home", 4, 1), [&] {
    const ShellRun r = Shell(Exlr8d() + " list --json --cache " + Quote(cache.path().string()));
    last = r.out;
    auto v = ParseJson(r.out);
    if (r.status != 0 || !v.ok() || v->Find("filesets")->as_array().empty()) return false;
    const JsonValue* p = v->Find("filesets")->as_array()[0].Find("latest_pull");
    EXPECT_TRUE(v->Find("owned_by_another_process")->as_bool());
    return p->is_object() && p->Find("state")->as_string() == "running" &&
           *p->Find("bytes_fetched")->as_uint64() > 0 && *p->Find("bytes_per_second")->as_uint64() > 0;
  }, &result);
  EXPECT_TRUE(seen) << "never saw the pull running with bytes fetched; last list: " << last;
  EXPECT_EQ(result.status().code(), StatusCode::kCancelled) << result.status().ToString();
  const JsonValue after = ListJson(cache.path());
  EXPECT_EQ(after.Find("filesets")->as_array()[0].Find("latest_pull")->Find("state")->as_string(), "cancelled");
}

// ---- systemd units ----

// A unit file's [Service] settings, continuation lines joined; repeated keys
// keep every value in order.
std::multimap<std::string, std::string> ReadUnit(const fs::path& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << path;
  std::multimap<std::string, std::string> out;
  std::string line, pending, section;
  while (std::getline(in, line)) {
    if (!pending.empty()) {
      line = pending + " " + line;
      pending.clear();
    }
    if (!line.empty() && line.back() == '\\') {
      pending = line.substr(0, line.size() - 1);
      continue;
    }
    const auto start = line.find_first_not_of(" \t");
    if (start == std::string::npos || line[start] == '#' || line[start] == ';') continue;
    if (line[start] == '[') {
      section = line.substr(start);
      continue;
    }
    const auto eq = line.find('=');
    if (section == "[Service]" && eq != std::string::npos) out.emplace(line.substr(0, eq), line.substr(eq + 1));
  }
  return out;
}

// KEY=VALUE lines of an environment file.
void ReadEnvFile(const fs::path& path, std::map<std::string, std::string>* env) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << path;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    const auto eq = line.find('=');
    if (eq != std::string::npos) (*env)[line.substr(0, eq)] = line.substr(eq + 1);
  }
}

// A command line as systemd expands it: %i is the instance, ${VAR} one word,
// $VAR split at whitespace into words (none when empty). An unset variable
// fails the test: the unit would run with an empty argument.
std::vector<std::string> Expand(const std::string& command, const std::map<std::string, std::string>& env,
                                const std::string& instance) {
  std::vector<std::string> words;
  std::istringstream in(command);
  std::string w;
  while (in >> w) {
    for (std::size_t p; (p = w.find("%i")) != std::string::npos;) w.replace(p, 2, instance);
    if (w.size() > 1 && w[0] == '$' && w[1] != '{') {
      auto it = env.find(w.substr(1));
      EXPECT_NE(it, env.end()) << "unset variable in: " << command;
      if (it == env.end()) continue;
      std::istringstream split(it->second);
      for (std::string part; split >> part;) words.push_back(part);
      continue;
    }
    for (std::size_t p; (p = w.find("${")) != std::string::npos;) {
      const auto end = w.find('}', p);
      const std::string name = w.substr(p + 2, end - p - 2);
      auto it = env.find(name);
      EXPECT_NE(it, env.end()) << "unset variable ${" << name << "} in: " << command;
      w.replace(p, end - p + 1, it == env.end() ? "" : it->second);
    }
    words.push_back(w);
  }
  return words;
}

// Runs the expanded words with `env` exported, the installed binary path
// replaced by the one just built.
ShellRun RunUnitCommand(std::vector<std::string> words, const std::map<std::string, std::string>& env) {
  std::string cmd = "env -u HF_TOKEN -u HF_HUB_OFFLINE -u HF_ENDPOINT";
  for (const auto& [k, v] : env) cmd += " " + k + "=" + Quote(v);
  EXPECT_FALSE(words.empty());
  if (!words.empty() && words[0] == "/usr/local/bin/exlr8d") words[0] = Exlr8d();
  for (const auto& w : words) cmd += " " + Quote(w);
  return Shell(cmd);
}

std::map<std::string, std::string> UnitEnvironment(const std::multimap<std::string, std::string>& unit,
                                                   const std::string& instance) {
  std::map<std::string, std::string> env;
  auto [b, e] = unit.equal_range("Environment");
  for (auto it = b; it != e; ++it) {
    std::string kv = it->second;
    for (std::size_t p; (p = kv.find("%i")) != std::string::npos;) kv.replace(p, 2, instance);
    const auto eq = kv.find('=');
    env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  return env;
}

TEST(SystemdUnitsTest, PullUnitStagesPinsAndGcUnitKeepsIt) {
  const fs::path dir = fs::path(EXLR8_SOURCE_DIR) / "systemd";
  auto sim = StartSim(TinyRelease());
  TempDir cache;

  const auto pull_unit = ReadUnit(dir / "exlr8d-pull@.service");
  ASSERT_EQ(pull_unit.count("ExecStart"), 1u);
  ASSERT_EQ(pull_unit.count("ExecStartPost"), 1u);
  std::map<std::string, std::string> env = UnitEnvironment(pull_unit, "tiny");
  EXPECT_EQ(env["EXLR8_HOLDER"], "systemd-tiny");
  ReadEnvFile(dir / "exlr8d-pull.env.example", &env);  // as EnvironmentFile=/etc/exlr8d/tiny.env
  // This test's hub and cache instead of the example's.
  env["EXLR8_REPO"] = "exlr8/test";
  env["EXLR8_PULL_OPTIONS"] = "--endpoint " + sim->hub_url() + " --json";
  env["EXLR8_CACHE"] = cache.path().string();

  const ShellRun pulled = RunUnitCommand(Expand(pull_unit.find("ExecStart")->second, env, "tiny"), env);
  ASSERT_EQ(pulled.status, 0) << pulled.out;
  auto summary = ParseJson(pulled.out);
  ASSERT_TRUE(summary.ok()) << pulled.out;
  EXPECT_TRUE(summary->Find("complete")->as_bool());
  const ShellRun pinned = RunUnitCommand(Expand(pull_unit.find("ExecStartPost")->second, env, "tiny"), env);
  ASSERT_EQ(pinned.status, 0) << pinned.out;
  EXPECT_EQ(Pins(ListJson(cache.path())), (std::vector<std::string>{"systemd-tiny"}));
  // The rank is the example's: TP 4 rank 1 under home.
  const JsonValue list = ListJson(cache.path());
  const JsonValue* latest = list.Find("filesets")->as_array()[0].Find("latest_pull");
  EXPECT_EQ(latest->Find("manifest")->as_string(), "manifests/exlr8-manifest-home.json");
  EXPECT_EQ(*latest->Find("tp")->as_uint64(), 4u);
  EXPECT_EQ(*latest->Find("rank")->as_uint64(), 1u);

  // Restart policy: the statuses a person must fix are not retried, the
  // ones a retry can fix (1 incomplete, 4 network, 7 cache busy) are.
  std::istringstream prevent(pull_unit.find("RestartPreventExitStatus")->second);
  std::vector<int> no_retry;
  for (int x; prevent >> x;) no_retry.push_back(x);
  EXPECT_THAT(no_retry, ::testing::IsSupersetOf({2, 3, 5, 6}));
  for (int retried : {1, 4, 7}) EXPECT_THAT(no_retry, ::testing::Not(::testing::Contains(retried)));

  // The gc unit at budget 0 keeps the pinned fileset.
  const auto gc_unit = ReadUnit(dir / "exlr8d-gc.service");
  ASSERT_EQ(gc_unit.count("ExecStart"), 1u);
  std::map<std::string, std::string> gc_env = UnitEnvironment(gc_unit, "");
  EXPECT_TRUE(gc_env.contains("EXLR8_GC_BUDGET"));
  gc_env["EXLR8_GC_BUDGET"] = "0";
  gc_env["EXLR8_CACHE"] = cache.path().string();
  const ShellRun gc = RunUnitCommand(Expand(gc_unit.find("ExecStart")->second, gc_env, ""), gc_env);
  ASSERT_EQ(gc.status, 0) << gc.out;
  EXPECT_THAT(gc.out, HasSubstr("evicted 0 filesets"));
  EXPECT_EQ(ListJson(cache.path()).Find("filesets")->as_array().size(), 1u);
}

// The scrub unit, as systemd expands it: clean, then a rotted byte is found
// and forgotten (exit 1: the unit fails, so monitoring sees it), then clean.
TEST(SystemdUnitsTest, VerifyUnitForgetsWhatRotted) {
  const fs::path dir = fs::path(EXLR8_SOURCE_DIR) / "systemd";
  auto sim = StartSim(TinyRelease());
  TempDir cache;
  auto s = Pull(cache.path(), Options(*sim, "home", 2, 0));
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  const auto unit = ReadUnit(dir / "exlr8d-verify.service");
  ASSERT_EQ(unit.count("ExecStart"), 1u);
  std::map<std::string, std::string> env = UnitEnvironment(unit, "");
  env["EXLR8_CACHE"] = cache.path().string();
  const std::vector<std::string> words = Expand(unit.find("ExecStart")->second, env, "");
  ShellRun r = RunUnitCommand(words, env);
  ASSERT_EQ(r.status, 0) << r.out;

  const PlanFile* width = nullptr;
  for (const PlanFile& f : s->plan.files)
    if (!f.whole) width = &f;
  ASSERT_NE(width, nullptr);
  const PlanRange& half = width->ranges.back();
  ASSERT_EQ(half.kind, PlanRange::Kind::kHalf);
  {
    std::fstream f(s->root / width->path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(half.offset + 7));
    f.put('\x42');
    f.put('\x24');
    ASSERT_TRUE(f.good());
  }
  r = RunUnitCommand(words, env);
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_THAT(r.out, HasSubstr("FAILED " + half.What()));
  r = RunUnitCommand(words, env);
  EXPECT_EQ(r.status, 0) << r.out;
  const JsonValue list = ListJson(cache.path());
  EXPECT_EQ(*list.Find("filesets")->as_array()[0].Find("bytes_cached")->as_uint64(), s->bytes_planned - half.length);
}

// The holder's unit, as systemd expands it, with systemd's readiness
// socket: it reads the rank the pull unit staged and holds it (host memory
// everywhere, device memory on a machine with a GPU), says READY=1, leases
// it over protocol v2, and on SIGTERM sends its lessee the release line and
// waits for it. `memory`: EXLR8_MEMORY in the env file ("": the unit's
// default, device).
void RunStageUnit(const std::string& memory) {
  if (!fs::exists(std::string(EXLR8_BIN_DIR) + "/exlr8d-stage"))
    GTEST_SKIP() << "exlr8d-stage is built only with the CUDA Toolkit";
  const fs::path dir = fs::path(EXLR8_SOURCE_DIR) / "systemd";
  auto sim = StartSim(TinyRelease());
  TempDir cache;
  ASSERT_TRUE(Pull(cache.path(), Options(*sim, "home", 4, 1)).ok());
  const auto unit = ReadUnit(dir / "exlr8d-stage@.service");
  ASSERT_EQ(unit.count("ExecStart"), 1u);
  EXPECT_EQ(unit.find("Type")->second, "notify");
  std::map<std::string, std::string> env = UnitEnvironment(unit, "tiny");
  EXPECT_EQ(env["EXLR8_MEMORY"], "device");
  EXPECT_EQ(env["EXLR8_LEASE"], "v2");
  ReadEnvFile(dir / "exlr8d-pull.env.example", &env);  // the pull unit's file, shared
  env["EXLR8_REPO"] = "exlr8/test";
  env["EXLR8_RELEASE_WAIT"] = "20";
  if (!memory.empty()) env["EXLR8_MEMORY"] = memory;
  std::vector<std::string> words = Expand(unit.find("ExecStart")->second, env, "tiny");
  ASSERT_EQ(words[0], "/usr/local/bin/exlr8d-stage");
  for (const auto& [option, value] :
       {std::pair<std::string, std::string>{"--memory", memory.empty() ? "device" : memory},
        {"--lease", "v2"}}) {
    auto it = std::find(words.begin(), words.end(), option);
    ASSERT_NE(it, words.end()) << option;
    ASSERT_NE(it + 1, words.end()) << option;
    EXPECT_EQ(*(it + 1), value) << option;
  }
  // This test's places for the socket and the cache.
  const fs::path socket = cache.path() / "lease.sock";
  auto hold = std::find(words.begin(), words.end(), "--hold");
  ASSERT_NE(hold, words.end());
  EXPECT_EQ(*(hold + 1), "/run/exlr8d/tiny/lease.sock");  // in the unit's RuntimeDirectory
  *(hold + 1) = socket.string();
  // systemd's end of the readiness protocol.
  const fs::path notify = cache.path() / "notify.sock";
  UniqueFd ready(::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, notify.c_str(), notify.native().size() + 1);
  ASSERT_EQ(::bind(ready.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr), 0);
  ::setenv("EXLR8_CACHE", cache.path().c_str(), 1);
  ::setenv("NOTIFY_SOCKET", notify.c_str(), 1);
  ChildProcess holder("exlr8d-stage", std::vector<std::string>(words.begin() + 1, words.end()));
  ::unsetenv("NOTIFY_SOCKET");
  ::unsetenv("EXLR8_CACHE");
  if (!holder.ReadUntil("until SIGINT or SIGTERM")) {
    const int status = holder.Signal(SIGTERM);
    // No device: the GPU part could not run (host memory needs none, and
    // finds the rank the pull unit staged everywhere).
    ASSERT_NE(memory, "host") << holder.printed();
    ASSERT_EQ(status, 4) << holder.printed();
    GTEST_SKIP() << "no CUDA device: the holding part in device memory runs on the device machine";
  }
  EXPECT_THAT(holder.printed(),
              HasSubstr("(protocol v2, " + (memory.empty() ? "device" : memory) + " memory)"));
  pollfd p{ready.get(), POLLIN, 0};
  ASSERT_EQ(::poll(&p, 1, 10'000), 1) << "no READY=1";
  char msg[64] = {};
  ASSERT_GT(::recv(ready.get(), msg, sizeof msg - 1, 0), 0);
  EXPECT_STREQ(msg, "READY=1");
  // While it holds the rank, the fileset is pinned by the holder's process.
  const std::string c = " --cache " + Quote(cache.path().string());
  EXPECT_THAT(Shell(Exlr8d() + " list" + c).out, HasSubstr("exlr8d-stage home tp4 rank1 (pid "));
  const ShellRun refused = Shell(Exlr8d() + " gc --repo exlr8/test" + c);
  EXPECT_EQ(refused.status, 7) << refused.out;
  EXPECT_THAT(refused.out, HasSubstr("is held by exlr8d-stage home tp4 rank1"));
  {
    // A lessee: reads the description (lease v2: a line and descriptors)
    // and keeps the connection.
    std::string text;
    int fds = 0;
    const UniqueFd lessee = ConnectAsLesseeV2(socket.string(), &text, &fds);
    ASSERT_TRUE(lessee.valid()) << socket;
    auto description = ParseJson(text);
    ASSERT_TRUE(description.ok()) << text.substr(0, 200);
    EXPECT_EQ(*description->Find("version")->as_uint64(), 2u);
    EXPECT_EQ(*description->Find("rank")->as_uint64(), 1u);
    EXPECT_GE(fds, 1);
    holder.Send(SIGTERM);
    EXPECT_TRUE(holder.ReadUntil("lessee(s) to let go")) << holder.printed();
  }  // lets go
  EXPECT_THAT(holder.ReadAll(), HasSubstr("released after 1 lease"));
  EXPECT_EQ(holder.Signal(SIGTERM), 0);
  EXPECT_THAT(Shell(Exlr8d() + " list" + c).out, Not(HasSubstr("exlr8d-stage")));
}

TEST(SystemdUnitsTest, StageUnitHoldsTheRankAndSaysWhenReady) { RunStageUnit(""); }

TEST(SystemdUnitsTest, StageUnitHoldsTheRankInHostMemoryAndSaysWhenReady) { RunStageUnit("host"); }

// The API unit's command line, as systemd expands it, serves the cache the
// pull unit staged.
TEST(SystemdUnitsTest, ServeUnitAnswersOnTheCacheSocket) {
  const fs::path dir = fs::path(EXLR8_SOURCE_DIR) / "systemd";
  auto sim = StartSim(TinyRelease());
  TempDir cache;
  auto s = Pull(cache.path(), Options(*sim, "down1", 2, 1));
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  const auto unit = ReadUnit(dir / "exlr8d-serve.service");
  ASSERT_EQ(unit.count("ExecStart"), 1u);
  std::map<std::string, std::string> env = UnitEnvironment(unit, "");
  env["EXLR8_CACHE"] = cache.path().string();
  env["EXLR8_SERVE_OPTIONS"] = "--listen 127.0.0.1:0";
  EXPECT_EQ(unit.find("Type")->second, "notify");
  // systemd's end of the readiness protocol, in the abstract namespace.
  const std::string notify = "@exlr8d-test-notify-" + std::to_string(::getpid());
  UniqueFd ready_socket(::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path + 1, notify.data() + 1, notify.size() - 1);
  ASSERT_EQ(::bind(ready_socket.get(), reinterpret_cast<const sockaddr*>(&addr),
                   static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + notify.size())),
            0);
  env["NOTIFY_SOCKET"] = notify;
  std::vector<std::string> words = Expand(unit.find("ExecStart")->second, env, "");
  ASSERT_EQ(words.size(), 4u);  // exlr8d serve --listen 127.0.0.1:0
  words[0] = Exlr8d();
  // Started in the background with the unit's environment; its first line
  // says where it listens.
  const fs::path out = cache.path() / "serve.out";
  std::string cmd = "env";
  for (const auto& [k, v] : env) cmd += " " + k + "=" + Quote(v);
  for (const auto& w : words) cmd += " " + Quote(w);
  ASSERT_EQ(std::system((cmd + " > " + Quote(out.string()) + " 2>&1 & echo $! > " +
                         Quote((cache.path() / "serve.pid").string()))
                            .c_str()),
            0);
  const fs::path socket = cache.path() / "exlr8d.sock";
  auto ready = [&] {
    const auto text = ReadAll(out);
    return std::string(text.begin(), text.end()).find("listening on unix:" + socket.string()) != std::string::npos;
  };
  for (int i = 0; i < 200 && !ready(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_TRUE(ready());
  pollfd p{ready_socket.get(), POLLIN, 0};
  ASSERT_EQ(::poll(&p, 1, 5'000), 1) << "no READY=1";
  char msg[64] = {};
  ASSERT_GT(::recv(ready_socket.get(), msg, sizeof msg - 1, 0), 0);
  EXPECT_STREQ(msg, "READY=1");
  const ShellRun sets = Shell("curl -s --unix-socket " + Quote(socket.string()) + " http://exlr8d/v1/filesets");
  // Stopped, and waited for: a server still shutting down would write into
  // the cache directory after the test removed it. Not our child (the shell
  // above started it), so it is gone once its /proc entry is, or is a
  // zombie waiting for init to reap it.
  const ShellRun kill = Shell("pid=$(cat " + Quote((cache.path() / "serve.pid").string()) +
                              "); kill $pid && for i in $(seq 200); do "
                              "[ \"$(awk '{print $3}' /proc/$pid/stat 2>/dev/null || echo gone)\" = Z ] && exit 0; "
                              "[ -e /proc/$pid ] || exit 0; sleep 0.05; done; exit 1");
  ASSERT_EQ(sets.status, 0) << sets.out;
  auto v = ParseJson(sets.out);
  ASSERT_TRUE(v.ok()) << sets.out;
  ASSERT_EQ(v->Find("filesets")->as_array().size(), 1u);
  EXPECT_EQ(*v->Find("filesets")->as_array()[0].Find("bytes_cached")->as_uint64(), s->bytes_planned);
  EXPECT_EQ(kill.status, 0);
}

}  // namespace
}  // namespace exlr8
