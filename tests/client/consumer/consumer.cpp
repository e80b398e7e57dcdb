// A serving process in miniature, built outside the tree against an
// installed libexlr8client: takes the lease at argv[1], checks every
// tensor's bytes against its XXH64 and its lookup, logs the proof, lets
// go. Exits 0 and prints "consumer ok" when everything holds.
#include <cstdio>
#include <exception>
#include <exlr8/exlr8client.hpp>
#include <string>

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s SOCKET\n", argv[0]);
    return 2;
  }
  try {
    exlr8client::Lease lease = exlr8client::Lease::Open(argv[1], {exlr8client::MemoryKind::kHost});
    const exlr8client::Info info = lease.info();
    int bad = 0;
    const std::uint64_t n = lease.tensor_count();
    for (std::uint64_t i = 0; i < n; ++i) {
      const exlr8client::Tensor t = lease.tensor(i);
      bad += exlr8_xxh64(t.data, t.length) != t.xxh64;
      if (t.kind == EXLR8_TENSOR_HALF_RECORD) {
        auto same = lease.FindHalf(t.layer, t.expert, t.proj, t.half);
        bad += !same || same->index != i;
      } else if (t.kind == EXLR8_TENSOR_DENSE_DATA || t.kind == EXLR8_TENSOR_PLAIN) {
        auto same = lease.Find(t.name);
        bad += !same || same->index != i;
      }
    }
    bad += lease.Find("no.such.tensor").has_value();
    const exlr8client::Proof proof = lease.proof();
    bad += proof.hashed_mismatches != 0 || proof.has_mismatch != 0;
    std::printf("%s %s tp %d rank %d: %llu tensors, proof %s\n", info.repo, info.commit, info.tp, info.rank,
                static_cast<unsigned long long>(n), std::string(lease.proof_json()).c_str());
    lease.Close();
    try {
      lease.Close();
      ++bad;  // a second close must throw
    } catch (const exlr8client::Error& e) {
      bad += e.status() != EXLR8_FAILED_PRECONDITION;
    }
    if (bad != 0) {
      std::fprintf(stderr, "consumer: %d checks failed\n", bad);
      return 1;
    }
    std::printf("consumer ok (library %s)\n", exlr8_client_version());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "consumer: %s\n", e.what());
    return 1;
  }
}
