// CUDA streams: an owning CudaStream and a non-owning CudaStreamView.
//
// Every exlr8d upload, copy and kernel launcher takes a CudaStreamView, so the
// stream a piece of work runs on is always written at the call site. A view
// is built from a CudaStream (view()) or from an explicit cudaStream_t; the
// literal 0 / nullptr conversions are deleted so that "the legacy default
// stream" is never chosen by accident. Code that really means the default
// stream says CudaStreamView::LegacyDefault() or ::PerThreadDefault().
//
// Ownership: CudaStream owns its cudaStream_t (created non-blocking, so it
// does not synchronise with the legacy default stream) and destroys it in its
// destructor; it is move-only. A view must not outlive the stream it names.
// Thread safety: streams may be used from any thread, as CUDA allows; a
// CudaStream object itself is not synchronised (do not move it while another
// thread uses it).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "format/status.h"

namespace exlr8 {

class CudaStreamView {
 public:
  constexpr explicit CudaStreamView(cudaStream_t stream) noexcept : stream_(stream) {}
  CudaStreamView(int) = delete;             // no literal 0
  CudaStreamView(std::nullptr_t) = delete;  // no nullptr

  static CudaStreamView LegacyDefault() noexcept { return CudaStreamView(cudaStreamLegacy); }
  static CudaStreamView PerThreadDefault() noexcept { return CudaStreamView(cudaStreamPerThread); }

  cudaStream_t value() const noexcept { return stream_; }

  // Blocks the calling thread until all work queued on the stream is done.
  // Errors: the stream's first failure (a kernel fault is Internal).
  Status Synchronize() const;

 private:
  cudaStream_t stream_;
};

class CudaStream {
 public:
  // A new non-blocking stream on the current device.
  // Errors: Unavailable when there is no device, Internal otherwise.
  static Result<CudaStream> Create();

  CudaStream(CudaStream&& other) noexcept;
  CudaStream& operator=(CudaStream&& other) noexcept;
  CudaStream(const CudaStream&) = delete;
  CudaStream& operator=(const CudaStream&) = delete;
  ~CudaStream();  // destroys the stream; queued work still completes (CUDA semantics)

  // REQUIRES: *this was not moved from.
  CudaStreamView view() const noexcept { return CudaStreamView(stream_); }
  Status Synchronize() const { return view().Synchronize(); }

 private:
  explicit CudaStream(cudaStream_t s) noexcept : stream_(s) {}
  cudaStream_t stream_ = nullptr;  // nullptr only after a move
};

}  // namespace exlr8
