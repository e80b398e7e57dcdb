// The device kind of an LVQ5 fileset's image (lvq5_image.h):
// exlr8d-stage --repo ORG/NAME without --manifest (memory device, the
// default).
//
// Steps: the host image (BuildHostLvq5Image: plan, fill with the Tetra codes
// transcoded, every check hashed on the CPU, sealed); one device allocation
// of its size (an exportable VMM allocation, or cudaMalloc with a legacy
// IPC handle where the driver cannot export descriptors); the image copied
// up; every check entry hashed on the GPU over the device bytes
// (gpu/region_hash.h); then the Tetra check: the codes of every Tetra record
// decoded on the GPU in place from the image (LaunchTetraDecode over the
// served rows) and compared byte for byte (LaunchCompareBytes) with the CPU
// reference, tetra::DecodeDiskWords of the file's disk code stream: every
// word of the records up to options.full_check_code_bytes of codes (1 GB;
// records taken in image order), and for every record beyond a seeded
// sample of ceil(1 % of its rows) rows (at least one), or every row with
// check_all.
//
// The proof: hashed_* as for EXLR8 ranks; dense_decoded_tensors counts the
// Tetra records decoded and compared (dense_decoded_mismatches 0),
// decoded_seed the sample's seed, seconds_decode the check's time; the
// counts of rows and words compared are in Lvq5DeviceImage.
//
// Any mismatch is Corruption naming the record, the row, block and
// coordinate of the first differing byte; nothing is kept.
#pragma once

#include <cstdint>

#include "daemon/stage/device_image.h"
#include "daemon/stage/lvq5_image.h"

namespace exlr8 {

struct Lvq5DeviceOptions {
  DeviceImageOptions image;  // device, threads, force_ipc, check_all, seed, cancel
  // Tetra records checked on every word while the codes checked so far
  // stay within this (disk bytes).
  std::uint64_t full_check_code_bytes = std::uint64_t{1} << 30;
  double sample_fraction = 0.01;  // of the rows of every record beyond
};

struct Lvq5DeviceImage {
  // The device image and what DescribeDeviceImage needs (image.plan holds
  // the layout, the commit and the pin; no sources: nothing to re-copy).
  DeviceRankImage image;
  Lvq5ImagePlan plan;  // the mapped cache files, for the CPU reference
  std::uint64_t tetra_records_full = 0, tetra_records_sampled = 0;
  std::uint64_t tetra_rows_checked = 0, tetra_words_checked = 0;
};

// Errors: BuildHostLvq5Image's (NotFound, Corruption, ...); Unavailable
// without a device; ResourceExhausted when device memory runs out;
// Corruption for a region whose device bytes differ from their digest or a
// decoded word that differs from the CPU reference; Cancelled.
Result<Lvq5DeviceImage> StageDeviceLvq5Image(const RankRequest& request, const Lvq5DeviceOptions& options);

// The decode check alone over a staged image (what the stage ran last): OK
// with the counts refreshed, or Corruption as above. For tests.
Status CheckLvq5TetraDecode(Lvq5DeviceImage& image, const Lvq5DeviceOptions& options);

}  // namespace exlr8
