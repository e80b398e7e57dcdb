/* libexlr8client's C API from C, linked with the shared library alone:
 * opens the lease at argv[1] (a host image of the shared fixture that
 * exlr8client_test staged), checks every tensor's bytes against the XXH64
 * in its table, the lookups and the offset table against the tensor
 * entries, the proof, and the error paths a C caller meets. Prints "ok:
 * N tensors" and exits 0, or names the first failure and exits 1. */
#include <exlr8/exlr8client.h>
#include "c_check.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s SOCKET\n", argv[0]);
    return 2;
  }
  const char* sock = argv[1];
  CHECK(strcmp(exlr8_client_version(), "0.1.0") == 0 ||
        exlr8_client_version_number() >= EXLR8_CLIENT_VERSION);

  /* No socket there: NOT_FOUND naming the path. */
  exlr8_lease* none = NULL;
  char missing[4096];
  snprintf(missing, sizeof missing, "%s.missing", sock);
  CHECK(exlr8_lease_open(missing, NULL, &none) == EXLR8_NOT_FOUND);
  CHECK(strstr(exlr8_last_error_message(), missing) != NULL);
  CHECK(none == NULL);

  /* The wrong kind: FAILED_PRECONDITION naming both kinds. */
  exlr8_open_options device;
  exlr8_open_options_init(&device);
  device.memory_kind = EXLR8_MEMORY_DEVICE;
  CHECK(exlr8_lease_open(sock, &device, &none) == EXLR8_FAILED_PRECONDITION);
  CHECK(strstr(exlr8_last_error_message(), "host memory") != NULL);
  CHECK(strstr(exlr8_last_error_message(), "asked for device memory") != NULL);

  exlr8_open_options host;
  exlr8_open_options_init(&host);
  host.memory_kind = EXLR8_MEMORY_HOST;
  exlr8_lease* lease = NULL;
  REQUIRE_OK(exlr8_lease_open(sock, &host, &lease));
  CHECK(exlr8_lease_is_open(lease) == 1);

  exlr8_lease_info info;
  memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  REQUIRE_OK(exlr8_lease_get_info(lease, &info));
  CHECK(strcmp(info.repo, "exlr8/test") == 0);
  CHECK(strcmp(info.manifest, "home") == 0);
  CHECK(strlen(info.commit) > 0);
  CHECK(info.tp == 3 && info.rank == 1);
  CHECK(info.memory_kind == EXLR8_MEMORY_HOST);
  CHECK(info.cuda_device == -1);
  CHECK(info.allocation_count >= 1);
  CHECK(info.allocation_bytes[info.image_allocation] >= info.image_header_offset + info.image_bytes);
  CHECK(info.image == (const char*)info.allocation + info.image_header_offset);
  CHECK(info.tensor_count > 0);
  CHECK(strcmp(info.socket_path, sock) == 0);

  uint64_t count = 0;
  REQUIRE_OK(exlr8_lease_tensor_count(lease, &count));
  CHECK(count == info.tensor_count);

  const uint64_t* table = NULL;
  const void* image_table = NULL;
  uint64_t entries = 0;
  REQUIRE_OK(exlr8_lease_offset_table(lease, &table, &image_table, &entries));
  CHECK(entries * 8 == info.offset_table_bytes);
  CHECK(image_table == (const char*)info.image + info.offset_table_offset);
  CHECK(memcmp(table, image_table, entries * 8) == 0);

  uint64_t halves = 0, named = 0, present = 0;
  for (uint64_t i = 0; i < count; ++i) {
    exlr8_tensor t;
    memset(&t, 0, sizeof t);
    t.struct_size = sizeof t;
    REQUIRE_OK(exlr8_lease_tensor(lease, i, &t));
    CHECK(t.index == i);
    CHECK(t.data == (const char*)info.image + t.offset);
    CHECK(t.offset + t.length <= info.image_bytes);
    if (exlr8_xxh64(t.data, t.length) != t.xxh64) {
      fprintf(stderr, "tensor %llu (%s): bytes do not hash to its xxh64\n", (unsigned long long)i,
              exlr8_tensor_kind_name(t.kind));
      ++failures;
    }
    uint64_t found = UINT64_MAX;
    if (t.kind == EXLR8_TENSOR_HALF_RECORD) {
      ++halves;
      CHECK(t.proj <= EXLR8_PROJ_DOWN && t.shape_rank == 3 && t.k == t.format);
      REQUIRE_OK(exlr8_lease_find_half(lease, t.layer, t.expert, t.proj, t.half, &found));
      CHECK(found == i);
      uint64_t e = t.expert == EXLR8_SHARED_EXPERT ? info.experts : t.expert;
      uint64_t at = ((t.layer * (uint64_t)(info.experts + 1) + e) * 3 + t.proj) * info.halves + t.half;
      CHECK(at < entries && table[at] == t.offset);
    } else if (t.kind == EXLR8_TENSOR_SIGNS_IN || t.kind == EXLR8_TENSOR_SIGNS_OUT) {
      REQUIRE_OK(exlr8_lease_find_signs(lease, t.layer, t.kind == EXLR8_TENSOR_SIGNS_OUT, &found));
      CHECK(found == i);
    } else {
      ++named;
      CHECK(t.name[0] != '\0');
      REQUIRE_OK(exlr8_lease_find_by_name(lease, t.name, &found));
      CHECK(found == i);
    }
  }
  for (uint64_t i = 0; i < entries; ++i) present += table[i] != EXLR8_ABSENT;
  CHECK(halves > 0 && named > 0);
  CHECK(present == halves);

  /* Lookups of what is not there. */
  uint64_t idx = 0;
  CHECK(exlr8_lease_find_by_name(lease, "no.such.tensor", &idx) == EXLR8_NOT_FOUND);
  CHECK(strstr(exlr8_last_error_message(), "no.such.tensor") != NULL);
  CHECK(exlr8_lease_find_half(lease, info.layers + 5, 0, EXLR8_PROJ_UP, 0, &idx) == EXLR8_NOT_FOUND);
  CHECK(exlr8_lease_find_half(lease, 0, 0, 7, 0, &idx) == EXLR8_INVALID_ARGUMENT);
  exlr8_tensor past;
  past.struct_size = sizeof past;
  CHECK(exlr8_lease_tensor(lease, count, &past) == EXLR8_INVALID_ARGUMENT);
  past.struct_size = 4;
  CHECK(exlr8_lease_tensor(lease, 0, &past) == EXLR8_INVALID_ARGUMENT);

  /* The proof. */
  exlr8_proof proof;
  memset(&proof, 0, sizeof proof);
  proof.struct_size = sizeof proof;
  REQUIRE_OK(exlr8_lease_proof(lease, &proof));
  CHECK(strcmp(proof.commit, info.commit) == 0);
  CHECK(proof.hashed_regions == info.check_count && proof.hashed_mismatches == 0 && proof.has_mismatch == 0);
  const char* json = NULL;
  size_t json_size = 0;
  REQUIRE_OK(exlr8_lease_proof_json(lease, &json, &json_size));
  CHECK(json_size == strlen(json) && json[0] == '{' && strstr(json, info.commit) != NULL);
  REQUIRE_OK(exlr8_lease_description_json(lease, &json, &json_size));
  CHECK(strncmp(json, "{\"version\":2,", 13) == 0);

  int released = -1;
  REQUIRE_OK(exlr8_lease_poll_release(lease, 0, &released, NULL, NULL));
  CHECK(released == 0);

  /* Closed twice; a closed lease refuses the rest. */
  REQUIRE_OK(exlr8_lease_close(lease));
  CHECK(exlr8_lease_is_open(lease) == 0);
  CHECK(exlr8_lease_close(lease) == EXLR8_FAILED_PRECONDITION);
  CHECK(strstr(exlr8_last_error_message(), "already closed") != NULL);
  CHECK(exlr8_lease_tensor_count(lease, &count) == EXLR8_FAILED_PRECONDITION);
  CHECK(exlr8_lease_close(NULL) == EXLR8_INVALID_ARGUMENT);
  exlr8_lease_free(lease);
  exlr8_lease_free(NULL);

  if (failures != 0) {
    fprintf(stderr, "%d checks failed\n", failures);
    return 1;
  }
  printf("ok: %llu tensors, %llu halves, %llu named\n", (unsigned long long)count, (unsigned long long)halves,
         (unsigned long long)named);
  return 0;
}
