// The device half of moe_layer: one half's partial output on the GPU.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

// y[o] = sum_j a[j] * wd[j][o] with a[j] = silu(sum_i x[i] wg[i][j]) *
// (sum_i x[i] wu[i][j]), j < 128 (double accumulation). x: hidden floats;
// wg, wu: hidden x 128; wd: 128 x hidden; y: hidden doubles (overwritten);
// all device memory of the current device. Enqueued on `stream`; returns
// the launch's error.
cudaError_t LaunchHalfPartial(const float* x, const float* wg, const float* wu, const float* wd,
                              std::uint64_t hidden, double* y, cudaStream_t stream);
