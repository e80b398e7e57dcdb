/* libexlr8client: the library a serving process links to use a rank image
 * that exlr8d-stage holds (a lease, protocol v2: schema/lease/PROTOCOL.md;
 * the image and its tables: schema/lease/IMAGE.md; a guide with examples:
 * docs/CLIENT.md).
 *
 * One header, about 620 lines, most of them the contract of each call: a
 * serving process includes this and nothing else.
 *
 *   exlr8_lease* lease = NULL;
 *   if (exlr8_lease_open("/run/exlr8d/stage-7.sock", NULL, &lease) != EXLR8_OK) {
 *     fprintf(stderr, "%s\n", exlr8_last_error_message());
 *     return 1;
 *   }
 *   uint64_t i;
 *   exlr8_tensor t = {sizeof t};
 *   if (exlr8_lease_find_half(lease, 3, 7, EXLR8_PROJ_UP, 0, &i) == EXLR8_OK &&
 *       exlr8_lease_tensor(lease, i, &t) == EXLR8_OK)
 *     use(t.data, t.length);  // host or device memory, read only
 *   exlr8_lease_free(lease);  // lets go: unmaps, then closes the connection
 *
 * The same library is a client of exlr8d serve's REST API (exlr8_api_*,
 * below: filesets, rank status, pulls and jobs, stages).
 *
 * ABI. This is the library's only ABI (C, stable within a major version:
 * the SONAME is libexlr8client.so.<major>). Handles are opaque. Structures
 * the library fills start with `struct_size`: the caller sets it to
 * sizeof(the structure it was compiled with) and the library fills the
 * fields up to that size, so a program built against an older header keeps
 * working with a newer library (fields are only ever appended). Enumerated
 * values are fixed numbers; new ones may be added.
 *
 * Errors. Every function that can fail returns an exlr8_status: EXLR8_OK
 * (0) or an error code. On an error the library also keeps a message for
 * the calling thread (thread-local): exlr8_last_error_message() returns it,
 * valid until the next failing call of this library on that thread. Success
 * leaves it as it was. Messages name what failed and where ("connect to
 * the lease holder at /run/x.sock: No such file or directory").
 * Output arguments are written only on EXLR8_OK.
 *
 * Threads. Functions are safe to call from any thread. One exlr8_lease may
 * be read (every function taking `const exlr8_lease*`) from several
 * threads at once; exlr8_lease_close, exlr8_lease_free and
 * exlr8_lease_poll_release need the caller to hold it alone.
 *
 * Memory. Pointers and strings a lease hands out are owned by the lease:
 * strings stay valid until exlr8_lease_free; pointers into the image
 * (exlr8_tensor.data, image and table pointers) until exlr8_lease_close or
 * exlr8_lease_free. The image is read only (host kind: mapped PROT_READ;
 * device kind: mapped for reading): a write faults.
 */
#ifndef EXLR8_EXLR8CLIENT_H_
#define EXLR8_EXLR8CLIENT_H_

#include <stddef.h>
#include <stdint.h>

/* The export macro: EXLR8_CLIENT_BUILD is defined while the library itself
 * is compiled (with -fvisibility=hidden); EXLR8_CLIENT_STATIC for a program
 * that links the static library (nothing to import). */
#if defined(_WIN32)
#define EXLR8_API
#elif defined(EXLR8_CLIENT_BUILD)
#define EXLR8_API __attribute__((visibility("default")))
#else
#define EXLR8_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ---- version ----------------------------------------------------------- */

#define EXLR8_CLIENT_VERSION_MAJOR 0
#define EXLR8_CLIENT_VERSION_MINOR 1
#define EXLR8_CLIENT_VERSION_PATCH 0
/* One number that compares: major * 10000 + minor * 100 + patch. */
#define EXLR8_CLIENT_VERSION \
  (EXLR8_CLIENT_VERSION_MAJOR * 10000 + EXLR8_CLIENT_VERSION_MINOR * 100 + EXLR8_CLIENT_VERSION_PATCH)

/* The library's version as "MAJOR.MINOR.PATCH" (static storage): what the
 * process runs, which may be newer than the header it was built with. */
EXLR8_API const char* exlr8_client_version(void);
/* EXLR8_CLIENT_VERSION of the library the process runs. */
EXLR8_API int exlr8_client_version_number(void);

/* ---- errors ------------------------------------------------------------- */

typedef enum exlr8_status {
  EXLR8_OK = 0,
  EXLR8_INVALID_ARGUMENT = 1,    /* a NULL handle, an index out of range, a bad struct_size */
  EXLR8_NOT_FOUND = 2,           /* no socket at the path; no tensor of that name or half */
  EXLR8_CORRUPTION = 3,          /* the holder sent something the protocol refuses */
  EXLR8_IO_ERROR = 4,            /* the OS failed (connect, mmap, ...) */
  EXLR8_RESOURCE_EXHAUSTED = 5,  /* out of memory (host or device) */
  EXLR8_UNAVAILABLE = 6,         /* the holder is stopping or full; no GPU; no CUDA driver */
  EXLR8_PERMISSION_DENIED = 7,   /* the socket may not be used by this user */
  EXLR8_FAILED_PRECONDITION = 8, /* a v1 holder; another memory kind than asked; a closed lease */
  EXLR8_CANCELLED = 9,
  EXLR8_UNIMPLEMENTED = 10, /* a capability this version does not have */
  EXLR8_INTERNAL = 11       /* a bug in libexlr8client */
} exlr8_status;

/* The calling thread's message of its last failing call ("" if none).
 * Valid until the next failing call on this thread. Never NULL. */
EXLR8_API const char* exlr8_last_error_message(void);
/* "OK", "NOT_FOUND", ... ("UNKNOWN" for another value). Static storage. */
EXLR8_API const char* exlr8_status_name(exlr8_status status);

/* ---- values of the tables (schema/lease/IMAGE.md) ----------------------- */

typedef enum exlr8_memory_kind {
  EXLR8_MEMORY_ANY = 0,    /* open options only: whichever the holder has */
  EXLR8_MEMORY_DEVICE = 1, /* GPU memory (CUDA) */
  EXLR8_MEMORY_HOST = 2    /* pinned host memory (a memfd this process maps) */
} exlr8_memory_kind;

/* A tensor entry's kind (IMAGE.md, tensor entry byte 30). */
typedef enum exlr8_tensor_kind {
  EXLR8_TENSOR_HALF_RECORD = 1, /* trellis bytes | slice | block row of one half */
  EXLR8_TENSOR_SIGNS_IN = 2,
  EXLR8_TENSOR_SIGNS_OUT = 3,
  EXLR8_TENSOR_DENSE_DATA = 4, /* a dense tensor in one of spec 10.3's formats */
  EXLR8_TENSOR_PLAIN = 5       /* a tensor stored as is (norms, ...) */
} exlr8_tensor_kind;

/* Projections of a half record. */
#define EXLR8_PROJ_GATE 0u
#define EXLR8_PROJ_UP 1u
#define EXLR8_PROJ_DOWN 2u

/* "None" values of exlr8_tensor's fields, and the shared expert: the
 * tables' own values (IMAGE.md). */
#define EXLR8_NO_LAYER 0xFFFFu
#define EXLR8_SHARED_EXPERT 0xFFFEu
#define EXLR8_NO_EXPERT 0xFFFFu
#define EXLR8_NO_PROJ 0xFFu
#define EXLR8_NO_HALF 0xFFu
/* An offset table entry where the rank owns no half. */
#define EXLR8_ABSENT UINT64_MAX

/* Element dtypes (IMAGE.md's dtype codes). */
typedef enum exlr8_dtype {
  EXLR8_DTYPE_BOOL = 0,
  EXLR8_DTYPE_U8 = 1,
  EXLR8_DTYPE_I8 = 2,
  EXLR8_DTYPE_F8_E4M3 = 3,
  EXLR8_DTYPE_F8_E5M2 = 4,
  EXLR8_DTYPE_I16 = 5,
  EXLR8_DTYPE_U16 = 6,
  EXLR8_DTYPE_F16 = 7,
  EXLR8_DTYPE_BF16 = 8,
  EXLR8_DTYPE_I32 = 9,
  EXLR8_DTYPE_U32 = 10,
  EXLR8_DTYPE_F32 = 11,
  EXLR8_DTYPE_F64 = 12,
  EXLR8_DTYPE_I64 = 13,
  EXLR8_DTYPE_U64 = 14
} exlr8_dtype;

/* Dense data formats (spec 10.3's codes; exlr8_tensor.format of dense data). */
typedef enum exlr8_dense_format {
  EXLR8_DENSE_TRELLIS = 1,
  EXLR8_DENSE_INT4 = 2,
  EXLR8_DENSE_MXFP8 = 3,
  EXLR8_DENSE_FP8_BLOCK = 4,
  EXLR8_DENSE_FP8_ROW = 5,
  EXLR8_DENSE_BF16 = 6,
  EXLR8_DENSE_FP32 = 7
} exlr8_dense_format;

/* Plain tensor formats (exlr8_tensor.format of a plain tensor; IMAGE.md
 * "Plain tensor formats"): 0 for an EXLR8 plain tensor; the parts of an
 * LVQ5 fileset's records carry their record's format. TETRA48 and
 * INT4G128: out and inp are the matrix's d_out and d_in; QUANT: k is the
 * bits (4 or 8) and inp the group size. */
typedef enum exlr8_plain_format {
  EXLR8_PLAIN_STORED = 0,
  EXLR8_PLAIN_TETRA48 = 1, /* Tetra codes in the served layout, centroids, row scales, tail */
  EXLR8_PLAIN_INT4G128 = 2,
  EXLR8_PLAIN_F16 = 3,
  EXLR8_PLAIN_QUANT = 4
} exlr8_plain_format;

/* Names for logs ("F16", "half record", "gate", "host", "FP8_BLOCK");
 * "?" for a value out of range. Static storage. */
EXLR8_API const char* exlr8_dtype_name(uint32_t dtype);
EXLR8_API const char* exlr8_tensor_kind_name(uint32_t kind);
EXLR8_API const char* exlr8_proj_name(uint32_t proj);
EXLR8_API const char* exlr8_memory_kind_name(uint32_t kind);
EXLR8_API const char* exlr8_dense_format_name(uint32_t format);

/* ---- opening a lease ---------------------------------------------------- */

typedef struct exlr8_lease exlr8_lease;

typedef struct exlr8_open_options {
  uint32_t struct_size; /* sizeof(exlr8_open_options) */
  /* The memory kind the caller takes: EXLR8_MEMORY_ANY (default) or one
   * kind; a holder of the other kind is EXLR8_FAILED_PRECONDITION. */
  uint32_t memory_kind;
  /* Bounds the wait for the holder's description, in milliseconds (0: 30 s). */
  uint32_t timeout_ms;
} exlr8_open_options;

/* Fills `options` with the defaults (and struct_size). */
EXLR8_API void exlr8_open_options_init(exlr8_open_options* options);

/* Connects to the lease holder (exlr8d-stage --hold) at the Unix socket
 * `socket_path` and opens its lease: receives the description and the
 * descriptors, checks them (PROTOCOL.md's rules), maps the image read only
 * and keeps the connection open; the lease lasts until exlr8_lease_close
 * or exlr8_lease_free. Blocking. `options` may be NULL (the defaults).
 * On EXLR8_OK `*out` is a new lease the caller frees with exlr8_lease_free.
 * Errors (each message names the path):
 *   EXLR8_INVALID_ARGUMENT     a NULL path or out, a path over 107 bytes, bad options
 *   EXLR8_NOT_FOUND            no socket at the path
 *   EXLR8_PERMISSION_DENIED    the socket may not be used
 *   EXLR8_IO_ERROR             another socket or mapping error
 *   EXLR8_UNAVAILABLE          the holder closed without a description (stopping,
 *                              full) or sent none in time; device memory where the
 *                              CUDA driver cannot be loaded ("the CUDA driver
 *                              (libcuda.so.1) could not be loaded: <dlerror>"), where
 *                              cuInit fails, or where this process sees no GPU
 *   EXLR8_NOT_FOUND            (device memory) no GPU this process sees has the
 *                              description's UUID (the message names the UUID, the
 *                              PCI bus id and the GPUs visible: CUDA_VISIBLE_DEVICES)
 *   EXLR8_FAILED_PRECONDITION  a v1 holder; a memory kind other than options asked
 *   EXLR8_CORRUPTION           what the holder sent breaks the protocol
 *   EXLR8_INVALID_ARGUMENT, EXLR8_INTERNAL, EXLR8_RESOURCE_EXHAUSTED
 *                              (device memory) the driver refused the import
 *                              ("import allocation 0 (N bytes, handle fd) ...")
 *
 * Device memory. The library links no CUDA library: it loads the CUDA
 * driver (libcuda.so.1) with dlopen at the first device open, finds the
 * holder's GPU by its UUID among the GPUs this process sees (whatever
 * CUDA_VISIBLE_DEVICES says; exlr8_lease_info.cuda_device is its ordinal
 * here, for cudaSetDevice), retains its primary context (the one the CUDA
 * runtime uses, so the caller's runtime calls and kernels see the mapping)
 * and maps the image there: a VMM allocation read only (a kernel that
 * writes it faults), a legacy IPC allocation ("ipc:" handle) as the driver
 * maps it. Pointers the lease hands out are then device pointers
 * (CUdeviceptr values) valid in that context.
 */
EXLR8_API exlr8_status exlr8_lease_open(const char* socket_path, const exlr8_open_options* options,
                                        exlr8_lease** out);

/* Lets go of the lease in the order PROTOCOL.md requires: unmaps the image
 * (device kind: waits for the context's work, unmaps, releases the import
 * or closes the IPC mapping; the primary context is released after the
 * connection), then closes the connection, so the
 * holder counts this process gone only once nothing here maps its memory.
 * The caller must have finished its own use of the image (device kind:
 * synchronized its work on it). The handle stays valid (for
 * exlr8_lease_is_open and exlr8_lease_free); every other call on it then
 * fails with EXLR8_FAILED_PRECONDITION. Closing a closed lease is
 * EXLR8_FAILED_PRECONDITION ("already closed"); NULL is
 * EXLR8_INVALID_ARGUMENT. */
EXLR8_API exlr8_status exlr8_lease_close(exlr8_lease* lease);

/* Lets go (as exlr8_lease_close) if still open, and frees the handle. NULL
 * is a no-op. The handle must not be used afterwards. */
EXLR8_API void exlr8_lease_free(exlr8_lease* lease);

/* 1 while open, 0 once closed (or for NULL). */
EXLR8_API int exlr8_lease_is_open(const exlr8_lease* lease);

/* ---- the description ---------------------------------------------------- */

#define EXLR8_MAX_ALLOCATIONS 8

typedef struct exlr8_lease_info {
  uint32_t struct_size; /* set by the caller: sizeof(exlr8_lease_info) */
  const char* socket_path;
  const char* repo;     /* "org/model" */
  const char* commit;   /* the release commit */
  const char* manifest; /* the manifest name */
  int32_t tp, rank;
  uint32_t memory_kind;          /* EXLR8_MEMORY_DEVICE or EXLR8_MEMORY_HOST */
  const char* gpu_uuid;          /* "GPU-..." or "MIG-...", "" when the description names none */
  const char* gpu_pci_bus_id;    /* "0000:4E:00.0", or "" */
  int32_t gpu_ordinal_in_holder; /* for logs only; -1 when none */
  int32_t cuda_device;           /* device kind: the GPU's CUDA ordinal in this process; else -1 */
  uint32_t allocation_count;     /* 1..EXLR8_MAX_ALLOCATIONS */
  uint64_t allocation_bytes[EXLR8_MAX_ALLOCATIONS]; /* each allocation's size */
  uint32_t image_allocation;                        /* the allocation holding the image */
  uint64_t image_header_offset;                     /* the image's offset in it */
  uint64_t image_bytes;                             /* the image's size */
  uint64_t offset_table_offset;                     /* the offset table's offset in the image */
  uint64_t offset_table_bytes;
  uint32_t layers, experts, halves; /* the offset table's dimensions (experts: routed) */
  uint64_t tensor_count, check_count;
  uint64_t tables_bytes;       /* the tables file's size */
  uint32_t release_deadline_s; /* how long a release gives a lessee to let go */
  const void* allocation;      /* the image's allocation, mapped (host or device pointer) */
  const void* image;           /* its first byte: allocation + image_header_offset */
} exlr8_lease_info;

/* The description's fields. REQUIRES: info->struct_size set. */
EXLR8_API exlr8_status exlr8_lease_get_info(const exlr8_lease* lease, exlr8_lease_info* info);

/* The description as the holder sent it (one JSON object, schema/lease/
 * description-v2.schema.json; written again from the parsed fields, so
 * keys in the schema's order), NUL-terminated; `*size` (may be NULL) its
 * length. Owned by the lease. */
EXLR8_API exlr8_status exlr8_lease_description_json(const exlr8_lease* lease, const char** json,
                                                    size_t* size);

/* ---- the proof of contents ---------------------------------------------- */

typedef struct exlr8_proof {
  uint32_t struct_size; /* set by the caller: sizeof(exlr8_proof) */
  const char* commit;   /* the release commit checked (= the description's) */
  uint64_t hashed_regions, hashed_bytes, hashed_mismatches;
  uint64_t decoded_halves, decoded_of, decoded_seed;
  int32_t every_layer_width_projection; /* 0 or 1 */
  int32_t tiles_bit_exact;              /* 0 or 1 */
  double max_block_error;
  uint64_t dense_decoded_tensors, dense_decoded_mismatches;
  double seconds_read, seconds_upload, seconds_hash, seconds_decode;
  int32_t has_mismatch;     /* 1 when a check found a difference */
  uint64_t mismatch_tensor; /* its tensor index, when has_mismatch */
  uint64_t mismatch_offset; /* the image offset of the first difference */
} exlr8_proof;

/* What the holder checked on the memory this process maps. A clean proof
 * has hashed_mismatches 0, dense_decoded_mismatches 0, tiles_bit_exact 1
 * and has_mismatch 0. */
EXLR8_API exlr8_status exlr8_lease_proof(const exlr8_lease* lease, exlr8_proof* proof);
/* The proof as JSON (the description's "proof" object), to log. */
EXLR8_API exlr8_status exlr8_lease_proof_json(const exlr8_lease* lease, const char** json, size_t* size);

/* ---- tensors ------------------------------------------------------------ */

typedef struct exlr8_tensor {
  uint32_t struct_size; /* set by the caller: sizeof(exlr8_tensor) */
  uint32_t kind;        /* exlr8_tensor_kind */
  uint64_t index;       /* in the tensor table */
  const char* name;     /* dense and plain tensors: the name; else "" */
  uint32_t layer;       /* EXLR8_NO_LAYER when not a layer's */
  uint32_t expert;      /* half records: the expert or EXLR8_SHARED_EXPERT; else EXLR8_NO_EXPERT */
  uint32_t proj;        /* half records: EXLR8_PROJ_*; else EXLR8_NO_PROJ */
  uint32_t half;        /* half records: the half; else EXLR8_NO_HALF */
  uint32_t format;      /* dense data: exlr8_dense_format; half record: K; plain: exlr8_plain_format */
  uint32_t dtype;       /* exlr8_dtype of the elements (a half record's: its slice's) */
  uint32_t block_dtype; /* half record: its block row's dtype; else 0 */
  uint32_t k;           /* trellis width (half records, TRELLIS dense data); QUANT plain: bits; else 0 */
  uint32_t side;        /* dense data: spec 10.2 field 4; else 0 */
  uint32_t shape_rank;  /* 0..4 */
  uint64_t shape[4];    /* half record: {trellis bytes, slice elements, block row elements} */
  uint32_t out, inp;    /* dense data, TETRA48/INT4G128 plain: the matrix's out and inp; QUANT: inp = group */
  uint64_t offset;      /* from the image's first byte */
  uint64_t length;      /* bytes */
  uint64_t xxh64;       /* the region's XXH64 (seed 0) as staged */
  const void* data;     /* image + offset: a host pointer (host kind) or a device pointer */
} exlr8_tensor;

/* The number of tensor entries (regions). */
EXLR8_API exlr8_status exlr8_lease_tensor_count(const exlr8_lease* lease, uint64_t* count);
/* Tensor entry `index` (< the count: else EXLR8_INVALID_ARGUMENT). */
EXLR8_API exlr8_status exlr8_lease_tensor(const exlr8_lease* lease, uint64_t index, exlr8_tensor* tensor);
/* The index of the dense or plain tensor `name` (a dense layer's tensor is
 * "layers.{L}.name"); EXLR8_NOT_FOUND when the image has none. */
EXLR8_API exlr8_status exlr8_lease_find_by_name(const exlr8_lease* lease, const char* name, uint64_t* index);
/* The index of the half record (layer, expert or EXLR8_SHARED_EXPERT,
 * proj, half); EXLR8_NOT_FOUND when the rank does not own it or it lies
 * outside the image's dimensions. */
EXLR8_API exlr8_status exlr8_lease_find_half(const exlr8_lease* lease, uint32_t layer, uint32_t expert,
                                             uint32_t proj, uint32_t half, uint64_t* index);
/* The index of a layer's signs.in (`out` 0) or signs.out (`out` 1). */
EXLR8_API exlr8_status exlr8_lease_find_signs(const exlr8_lease* lease, uint32_t layer, int out,
                                              uint64_t* index);

/* ---- the pointer table -------------------------------------------------- */

/* The offset table off[layer][expert + 1][3][halves] (IMAGE.md): u64
 * offsets of half records from the image's first byte, EXLR8_ABSENT where
 * the rank owns no half; entry ((l * (experts + 1) + e) * 3 + p) * halves
 * + h, e = experts for the shared expert. `host_table` (may be NULL): a
 * copy in host memory; `image_table` (may be NULL): the same table inside
 * the image (device memory for the device kind: what kernels index);
 * `entries` (may be NULL): its length. */
EXLR8_API exlr8_status exlr8_lease_offset_table(const exlr8_lease* lease, const uint64_t** host_table,
                                                const void** image_table, uint64_t* entries);

/* ---- the holder's release ----------------------------------------------- */

/* The connection's descriptor, for the caller's poll loop: readable when
 * the holder sent its release line or went away. Read it only through
 * exlr8_lease_poll_release. */
EXLR8_API exlr8_status exlr8_lease_release_fd(const exlr8_lease* lease, int* fd);

/* Reads what the holder sent, waiting up to `timeout_ms` (0: not at all).
 * `*released` 1 once the holder asked this lessee to let go (its release
 * line) or went away (`*holder_gone` 1, `*deadline_s` 0), else 0;
 * `*deadline_s`: seconds after which the holder frees the memory. Let go
 * (exlr8_lease_close) before the deadline. `holder_gone` and `deadline_s`
 * may be NULL. EXLR8_CORRUPTION for anything else the holder sent. */
EXLR8_API exlr8_status exlr8_lease_poll_release(exlr8_lease* lease, uint32_t timeout_ms, int* released,
                                                uint32_t* deadline_s, int* holder_gone);

/* ---- helpers ------------------------------------------------------------ */

/* Copies `size` bytes of the image, from `offset` (bytes from the image's
 * first byte), to host memory at `dst`: a memcpy for the host kind;
 * cuMemcpyDtoH in the GPU's primary context for the device kind
 * (synchronous: it returns once the bytes are in `dst`). For checks and
 * small reads (a region to hash against exlr8_tensor.xxh64, a header); a
 * serving process reads the image with its own kernels. Errors:
 * EXLR8_INVALID_ARGUMENT when [offset, offset + size) is not inside the
 * image or `dst` is NULL; the driver's failure (EXLR8_INTERNAL, ...). */
EXLR8_API exlr8_status exlr8_lease_read(const exlr8_lease* lease, uint64_t offset, void* dst, size_t size);

/* ---- weights ------------------------------------------------------------ */

/* The reconstructed weights W of half record `index` (spec 9: the record's
 * trellis tiles decoded (section 7), placed (8.1 gate/up, 8.2 down), and
 * W = diag(u) . B_k . T . B_n . diag(v) with u, v built (9.2) from the
 * record's slice and block row and the layer's signs.in / signs.out, in the
 * order of 9.3), fp32, row-major, (input, output) orientation:
 *   gate/up half: hidden x 128  (W[i][j], i < hidden input, j < 128 output)
 *   down half:    128 x hidden  (W[j][o])
 * (HF weight = W transposed, spec 8.4.) `out_elems` must be 128 * hidden
 * (hidden = the record's trellis bytes / (16 * K)). Where `out` is:
 *   host lease:   host memory; computed on the calling thread; `stream`
 *                 ignored; returns when done.
 *   device lease: device memory on the lease's GPU (e.g. from the CUDA
 *                 runtime's cudaMalloc in this process); enqueued on
 *                 `stream` (a CUstream / cudaStream_t of the GPU's primary
 *                 context; NULL: the legacy default stream); the caller
 *                 synchronises before reading `out`. The kernels are the
 *                 library's own (embedded, loaded through the CUDA driver at
 *                 first use); a build without them answers
 *                 EXLR8_UNAVAILABLE "not built with CUDA kernels".
 * The result is within spec 9.3's tolerance of the CPU reference (per
 * 128 x 128 block max|a - b| <= 1e-5 * max|b|), not bit-identical across
 * implementations. Errors: EXLR8_INVALID_ARGUMENT (index not a half record,
 * out NULL, out_elems wrong), EXLR8_CORRUPTION (the record does not decode:
 * named), EXLR8_FAILED_PRECONDITION (the lease is closed), the driver's
 * failures (EXLR8_INTERNAL naming the call). */
EXLR8_API exlr8_status exlr8_lease_half_weights(exlr8_lease* lease, uint64_t index, float* out,
                                                uint64_t out_elems, void* stream);

/* XXH64 (seed 0) of `size` bytes of host memory at `data` (a lessee that
 * checks a host image's regions against exlr8_tensor.xxh64). */
EXLR8_API uint64_t exlr8_xxh64(const void* data, size_t size);

/* ---- the REST API of exlr8d serve -------------------------------------- */

/* A client of `exlr8d serve`'s REST API (docs/OPERATIONS.md, "The REST
 * API"; schema/openapi.json; docs/CLIENT.md): HTTP/1.1 over the server's
 * Unix socket or a TCP host:port, one connection per request, no other
 * library. Answers are handed out as JSON text the caller frees with
 * exlr8_free_string; the typed helpers unwrap the answer's one member
 * ({"job": {...}} gives the job) and read what they return apart (a
 * job's id and state).
 *
 *   exlr8_api* api = NULL;
 *   char* job = NULL;
 *   uint64_t id = 0;
 *   exlr8_pull_request r;
 *   exlr8_pull_request_init(&r);
 *   r.repo = "exlr8/tiny"; r.manifest = "home"; r.tp = 4; r.rank = 1;
 *   if (exlr8_api_open("unix:/var/cache/exlr8/exlr8d.sock", NULL, &api) != EXLR8_OK ||
 *       exlr8_api_submit_pull(api, &r, &id, NULL) != EXLR8_OK ||
 *       exlr8_api_follow_job(api, id, 500, 0, NULL, NULL, NULL, &job) != EXLR8_OK)
 *     fprintf(stderr, "%s\n", exlr8_last_error_message());
 *   exlr8_free_string(job);
 *   exlr8_api_close(api);
 *
 * Errors. An answer with an error status maps to a code: 400, 405, 411,
 * 413, 415, 431 and other 4xx EXLR8_INVALID_ARGUMENT; 401, 403
 * EXLR8_PERMISSION_DENIED; 404 EXLR8_NOT_FOUND; 409
 * EXLR8_FAILED_PRECONDITION; 429 EXLR8_RESOURCE_EXHAUSTED; 501
 * EXLR8_UNIMPLEMENTED; other 5xx EXLR8_UNAVAILABLE; 1xx/3xx
 * EXLR8_FAILED_PRECONDITION. The message is "METHOD PATH: STATUS: the
 * server's message" (its problem details' error.message, else detail, else
 * the start of the body). No answer (no server at the endpoint, a refused
 * or broken connection, no whole answer within the timeout) is
 * EXLR8_UNAVAILABLE ("GET /v1/filesets: cannot connect to
 * unix:/x.sock: No such file or directory"; EXLR8_PERMISSION_DENIED when
 * the socket's permissions refuse this user); an answer that is not HTTP
 * as this client reads it (RFC 9112, strictly: CRLF lines, one framing) is
 * EXLR8_CORRUPTION, one over the limits (64 KiB of header, 64 MiB of
 * body) EXLR8_RESOURCE_EXHAUSTED; a 2xx answer that is not the JSON a
 * typed helper needs is EXLR8_CORRUPTION.
 *
 * Threads. One exlr8_api may be used by several threads at once (each
 * request has its own connection); exlr8_api_set_timeout and
 * exlr8_api_close need the caller to hold it alone. */

typedef struct exlr8_api exlr8_api;

/* `endpoint`: "unix:/var/cache/exlr8/exlr8d.sock" (or an absolute path),
 * or "http://127.0.0.1:8478" (a host name, an IPv4 address or [IPv6], an
 * optional path prefix). `token` (NULL or "": none): the API token, sent as
 * "Authorization: Bearer" (over TCP every route but /v1/health and
 * /v1/openapi.json needs it; the socket needs none). Connects to nothing
 * yet: a server that is not there is the first request's error. The
 * timeout of each request starts at 30 s. EXLR8_INVALID_ARGUMENT for an
 * endpoint that cannot be read (the message names it) or a token with a
 * space or control character. */
EXLR8_API exlr8_status exlr8_api_open(const char* endpoint, const char* token, exlr8_api** out);
/* Frees the handle (NULL: no-op). */
EXLR8_API void exlr8_api_close(exlr8_api* api);
/* Bounds each request (connect, send, the whole answer) to `timeout_ms`
 * milliseconds (0: 30 s). */
EXLR8_API exlr8_status exlr8_api_set_timeout(exlr8_api* api, uint32_t timeout_ms);

/* Frees a string this library returned (NULL: no-op). */
EXLR8_API void exlr8_free_string(char* s);

/* One request: `method` ("GET", "POST", "DELETE", ...), `path` ("/v1/...",
 * with its query, percent-encoded), `json_body` (NULL: none; sent as
 * application/json). `*http_status` (may be NULL): the answer's status;
 * `*response_json` (may be NULL): its body as text (NUL-terminated; JSON
 * for the API's routes; "" when it has none), for the caller to free with
 * exlr8_free_string. EXLR8_OK for a 2xx answer; an error status maps as
 * above, and then, unlike the rest of this API, both outputs are still
 * written (the server's problem details). No answer: outputs untouched. */
EXLR8_API exlr8_status exlr8_api_request(exlr8_api* api, const char* method, const char* path,
                                         const char* json_body, int* http_status, char** response_json);

/* GET /v1/filesets: `*json` the array of the cache's filesets (`exlr8d
 * list --json`'s objects); `*count` (may be NULL) its length. */
EXLR8_API exlr8_status exlr8_api_filesets(exlr8_api* api, char** json, size_t* count);

/* GET /v1/ranks: whether rank `rank` of TP `tp` of `repo`'s `manifest`
 * (`revision` NULL: "main") is complete in the cache: `*complete` (may be
 * NULL) 0 or 1; `*json` (may be NULL) the rank's status object. */
EXLR8_API exlr8_status exlr8_api_rank_status(exlr8_api* api, const char* repo, const char* manifest,
                                             int32_t tp, int32_t rank, const char* revision, int* complete,
                                             char** json);

/* A pull (POST /v1/pulls). NULL strings and negative numbers are left to
 * the server. */
typedef struct exlr8_pull_request {
  uint32_t struct_size; /* sizeof(exlr8_pull_request) */
  const char* repo;     /* "org/name" (required) */
  const char* manifest; /* "home", or a repo path (required) */
  int32_t tp, rank;     /* required */
  const char* revision; /* default "main" */
  const char* endpoint; /* a hub or mirror for this job (then without the server's hub token) */
  const char* pin;      /* a holder to pin the fileset for once done */
  int32_t make_room;    /* -1: the server's default (no); 0 or 1 */
} exlr8_pull_request;

/* Fills `request` with the defaults (NULL strings, -1 numbers, struct_size). */
EXLR8_API void exlr8_pull_request_init(exlr8_pull_request* request);

/* Queues a pull job. `*job_id`: its id (for exlr8_api_get_job and
 * exlr8_api_follow_job); `*job_json` (may be NULL): the job. A bad field
 * is EXLR8_INVALID_ARGUMENT with the server's message naming it. */
EXLR8_API exlr8_status exlr8_api_submit_pull(exlr8_api* api, const exlr8_pull_request* request,
                                             uint64_t* job_id, char** job_json);

/* GET /v1/jobs/{id}: `*state` (may be NULL) "queued", "running", "done",
 * "failed" or "cancelled"; `*job_json` (may be NULL) the job (its
 * "progress", and "error" once failed). Both freed with exlr8_free_string. */
EXLR8_API exlr8_status exlr8_api_get_job(exlr8_api* api, uint64_t job_id, char** state, char** job_json);

/* DELETE /v1/jobs/{id}: cancels a queued or running job (409,
 * EXLR8_FAILED_PRECONDITION, once it has ended). `*job_json` (may be
 * NULL): the job. */
EXLR8_API exlr8_status exlr8_api_cancel_job(exlr8_api* api, uint64_t job_id, char** job_json);

/* Called by exlr8_api_follow_job after each poll with the job; returning
 * non-zero stops following (EXLR8_CANCELLED; the job itself goes on:
 * exlr8_api_cancel_job cancels it). */
typedef int (*exlr8_job_progress_fn)(void* user, uint64_t job_id, const char* state, const char* job_json);

/* Polls the job every `period_ms` (0: 200 ms) until it is done, failed or
 * cancelled, and returns it (EXLR8_OK whatever its end: check `*state`).
 * `timeout_ms` 0: no limit; else EXLR8_UNAVAILABLE once the job is still
 * running after it ("job 3 is still running after 600000 ms"). `progress`
 * (may be NULL) as above. A failed poll ends the wait with its error. */
EXLR8_API exlr8_status exlr8_api_follow_job(exlr8_api* api, uint64_t job_id, uint32_t period_ms,
                                            uint32_t timeout_ms, exlr8_job_progress_fn progress, void* user,
                                            char** state, char** job_json);

/* A holder of a pulled rank (POST /v1/stages). NULL strings and negative
 * numbers are left to the server. */
typedef struct exlr8_stage_request {
  uint32_t struct_size;   /* sizeof(exlr8_stage_request) */
  const char* repo;       /* required */
  const char* manifest;   /* required */
  int32_t tp, rank;       /* required */
  const char* revision;   /* default "main" */
  const char* memory;     /* "device" (the server's default: GPU memory) or "host" (a sealed memfd, no GPU) */
  const char* lease;      /* "v2" (default) or "v1" (deprecated, device memory only) */
  int32_t device;         /* the GPU, default 0 */
  const char* check;      /* what is checked on the GPU ("sample", "all", "none", ...) */
  int32_t release_wait_s; /* how long a release waits for lessees */
} exlr8_stage_request;

EXLR8_API void exlr8_stage_request_init(exlr8_stage_request* request);

/* Starts a holder: `*stage_id` its id; `*stage_json` (may be NULL) the
 * stage. 409 (EXLR8_FAILED_PRECONDITION) when a live stage holds that rank
 * there; 501 (EXLR8_UNIMPLEMENTED) when the server has no exlr8d-stage. */
EXLR8_API exlr8_status exlr8_api_start_stage(exlr8_api* api, const exlr8_stage_request* request,
                                             uint64_t* stage_id, char** stage_json);

/* GET /v1/stages/{id}: `*state` (may be NULL) "starting", "reading",
 * "staging", "hashing", "decoding", "holding", "releasing", "released",
 * "failed" or "died"; `*stage_json` (may be NULL) the stage ("lease": the
 * socket for exlr8_lease_open once holding; "error" once failed). */
EXLR8_API exlr8_status exlr8_api_get_stage(exlr8_api* api, uint64_t stage_id, char** state,
                                           char** stage_json);

/* Polls the stage every `period_ms` (0: 200 ms) until it has settled:
 * holding, releasing, released, failed or died (EXLR8_OK whatever it is:
 * check `*state`). `timeout_ms` as exlr8_api_follow_job's. */
EXLR8_API exlr8_status exlr8_api_wait_stage(exlr8_api* api, uint64_t stage_id, uint32_t period_ms,
                                            uint32_t timeout_ms, char** state, char** stage_json);

/* DELETE /v1/stages/{id}: a live holder is told to release (its lessees
 * get the release line); a finished record is forgotten. `*json` (may be
 * NULL): the answer ({"stage": ...}, with "forgotten": true for the latter). */
EXLR8_API exlr8_status exlr8_api_delete_stage(exlr8_api* api, uint64_t stage_id, char** json);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* EXLR8_EXLR8CLIENT_H_ */
