/* A lessee in C, linked with libexlr8client alone (no CUDA library): opens
 * the lease at argv[1] whatever its memory kind, reads every tensor back to
 * host memory with exlr8_lease_read (device kind: from the GPU through the
 * driver the library loaded) and checks its XXH64, each lookup, and the
 * image's offset table against the tables'. Run by exlr8client_test (host
 * kind; a device lease where the driver cannot be loaded) and by
 * tests/gpu/exlr8client_device_test.cpp (device kind, VMM and IPC).
 *
 *   exlr8client_read_check SOCKET [--uuid UUID] [--wait-release]
 *
 * Prints, one line each:
 *   REFUSED <STATUS_NAME>: <message>          the open failed (exit 3)
 *   OPENED kind=<k> cuda_device=<d> uuid=<u> tensors=<n>
 *   CHECKED tensors=<n> halves=<h> named=<m> mismatches=<x> offset_table=<equal|differs>
 *   RELEASE deadline_s=<d>                    (--wait-release) the holder's release came
 *   CLOSED
 * and exits 0 when every check passed, 1 otherwise. --uuid: the GPU the
 * lease must be on (device kind). */
#include <exlr8/exlr8client.h>
#include "c_check.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char** argv) {
  const char* sock = NULL;
  const char* uuid = NULL;
  int wait_release = 0;
  for (int i = 1; i < argc; ++i) {
    if (strcmp(argv[i], "--uuid") == 0 && i + 1 < argc) {
      uuid = argv[++i];
    } else if (strcmp(argv[i], "--wait-release") == 0) {
      wait_release = 1;
    } else if (sock == NULL && argv[i][0] != '-') {
      sock = argv[i];
    } else {
      fprintf(stderr, "usage: %s SOCKET [--uuid UUID] [--wait-release]\n", argv[0]);
      return 2;
    }
  }
  if (sock == NULL) {
    fprintf(stderr, "usage: %s SOCKET [--uuid UUID] [--wait-release]\n", argv[0]);
    return 2;
  }
  setvbuf(stdout, NULL, _IOLBF, 0);

  exlr8_lease* lease = NULL;
  exlr8_status s = exlr8_lease_open(sock, NULL, &lease);
  if (s != EXLR8_OK) {
    printf("REFUSED %s: %s\n", exlr8_status_name(s), exlr8_last_error_message());
    return lease == NULL ? 3 : 1;
  }
  exlr8_lease_info info;
  memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  if (exlr8_lease_get_info(lease, &info) != EXLR8_OK) {
    fprintf(stderr, "get_info: %s\n", exlr8_last_error_message());
    return 1;
  }
  const int device = info.memory_kind == EXLR8_MEMORY_DEVICE;
  printf("OPENED kind=%s cuda_device=%d uuid=%s tensors=%llu\n", exlr8_memory_kind_name(info.memory_kind),
         info.cuda_device, info.gpu_uuid, (unsigned long long)info.tensor_count);
  if (device) {
    CHECK(info.cuda_device >= 0);
    CHECK(info.allocation != NULL);
    if (uuid != NULL) CHECK(strcmp(info.gpu_uuid, uuid) == 0);
  } else {
    CHECK(info.cuda_device == -1);
  }
  CHECK(info.image == (const char*)info.allocation + info.image_header_offset);

  /* Every tensor, copied back and hashed; each lookup finds it again. */
  uint64_t halves = 0, named = 0, mismatches = 0;
  size_t room = 1 << 20;
  unsigned char* buf = malloc(room);
  CHECK(buf != NULL);
  for (uint64_t i = 0; buf != NULL && i < info.tensor_count; ++i) {
    exlr8_tensor t;
    memset(&t, 0, sizeof t);
    t.struct_size = sizeof t;
    CHECK_OK(exlr8_lease_tensor(lease, i, &t));
    CHECK(t.data == (const char*)info.image + t.offset);
    if (t.length > room) {
      free(buf);
      room = (size_t)t.length;
      buf = malloc(room);
      if (buf == NULL) {
        fprintf(stderr, "out of memory for tensor %llu\n", (unsigned long long)i);
        return 1;
      }
    }
    CHECK_OK(exlr8_lease_read(lease, t.offset, buf, (size_t)t.length));
    if (exlr8_xxh64(buf, (size_t)t.length) != t.xxh64) {
      fprintf(stderr, "tensor %llu (%s at %llu, %llu bytes): its bytes do not hash to its xxh64\n",
              (unsigned long long)i, exlr8_tensor_kind_name(t.kind), (unsigned long long)t.offset,
              (unsigned long long)t.length);
      ++mismatches;
    }
    uint64_t found = UINT64_MAX;
    if (t.kind == EXLR8_TENSOR_HALF_RECORD) {
      ++halves;
      CHECK_OK(exlr8_lease_find_half(lease, t.layer, t.expert, t.proj, t.half, &found));
    } else if (t.kind == EXLR8_TENSOR_SIGNS_IN || t.kind == EXLR8_TENSOR_SIGNS_OUT) {
      CHECK_OK(exlr8_lease_find_signs(lease, t.layer, t.kind == EXLR8_TENSOR_SIGNS_OUT, &found));
    } else {
      ++named;
      CHECK_OK(exlr8_lease_find_by_name(lease, t.name, &found));
    }
    CHECK(found == i);
  }

  /* The offset table in the image equals the tables' copy. */
  const uint64_t* table = NULL;
  const void* image_table = NULL;
  uint64_t entries = 0;
  CHECK_OK(exlr8_lease_offset_table(lease, &table, &image_table, &entries));
  CHECK(image_table == (const char*)info.image + info.offset_table_offset);
  int table_equal = 0;
  uint64_t* copy = malloc(entries * 8 + 1);
  if (copy != NULL && table != NULL) {
    CHECK_OK(exlr8_lease_read(lease, info.offset_table_offset, copy, entries * 8));
    table_equal = memcmp(copy, table, entries * 8) == 0;
  }
  free(copy);

  /* A read past the image is refused. */
  unsigned char one[1];
  CHECK(exlr8_lease_read(lease, info.image_bytes, one, 1) == EXLR8_INVALID_ARGUMENT);
  CHECK(exlr8_lease_read(lease, 0, NULL, 1) == EXLR8_INVALID_ARGUMENT);
  CHECK(halves > 0 && named > 0);
  printf("CHECKED tensors=%llu halves=%llu named=%llu mismatches=%llu offset_table=%s\n",
         (unsigned long long)info.tensor_count, (unsigned long long)halves, (unsigned long long)named,
         (unsigned long long)mismatches, table_equal ? "equal" : "differs");
  if (mismatches != 0 || !table_equal) ++failures;
  free(buf);

  if (wait_release) {
    int released = 0, gone = 0;
    uint32_t deadline = 0;
    CHECK_OK(exlr8_lease_poll_release(lease, 60000, &released, &deadline, &gone));
    CHECK(released == 1 && gone == 0);
    printf("RELEASE deadline_s=%u\n", deadline);
  }
  CHECK_OK(exlr8_lease_close(lease));
  CHECK(exlr8_lease_is_open(lease) == 0);
  exlr8_lease_free(lease);
  printf("CLOSED\n");
  if (failures != 0) fprintf(stderr, "%d checks failed\n", failures);
  return failures == 0 ? 0 : 1;
}
