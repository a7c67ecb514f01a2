// Files of distcomm-train-mlp: the checkpoint (--checkpoint / --resume) and the parameter dump
// (--dump-params). Both are written atomically: a temporary file in the same directory, fsync,
// rename over the target, fsync of the directory; a crash leaves the old file or the new one,
// never half of one. Numbers are little-endian whatever the host.
//
// Checkpoint, version 1 (offsets in bytes; P = parameter count):
//     0  magic "DCMLPCKP"            8  u32 version, u32 zero
//    16  u64 inputs, hidden1, hidden2, classes
//    48  u64 seed                    56  u64 training samples       64  u64 global batch
//    72  u64 epoch (completed)       80  u64 step in that epoch     88  u64 steps since the start
//    96  4 x u64 shuffle generator state at the start of the current epoch
//   128  u64 P                      136  P x f32 parameters, then P x f32 momentum
//   136 + 8P  u64 FNV-1a hash of every byte before it
// Parameter dump: magic "DCMLPPRM", u32 version (1), u32 zero, u64 P, P x f32.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "data.hpp"
#include "mlp.hpp"

namespace train_mlp {

// What a checkpoint must agree on with the run that resumes it: the network, the data set and
// the order the samples are visited in (global batch = ranks x per-rank batch).
struct run_identity {
  mlp_shape shape;
  std::uint64_t seed = 0;
  std::uint64_t samples = 0;
  std::uint64_t global_batch = 0;
};

// Where training stands.
struct train_position {
  std::uint64_t epoch = 0;        // epochs completed
  std::uint64_t step = 0;         // steps done in the current epoch
  std::uint64_t global_step = 0;  // steps done since training started
  rng::state_type epoch_rng{};    // shuffle generator before it drew the current epoch's order
};

// train_position as i64 words, for a broadcast from rank 0.
inline std::array<std::int64_t, 7> position_words(const train_position& p) {
  const std::array<std::uint64_t, 7> u = {p.epoch,        p.step,         p.global_step,
                                          p.epoch_rng[0], p.epoch_rng[1], p.epoch_rng[2],
                                          p.epoch_rng[3]};
  std::array<std::int64_t, 7> w;
  std::memcpy(w.data(), u.data(), sizeof w);
  return w;
}

inline train_position position_from_words(const std::array<std::int64_t, 7>& w) {
  std::array<std::uint64_t, 7> u;
  std::memcpy(u.data(), w.data(), sizeof u);
  train_position p;
  p.epoch = u[0];
  p.step = u[1];
  p.global_step = u[2];
  for (std::size_t i = 0; i < 4; ++i) p.epoch_rng[i] = u[3 + i];
  return p;
}

struct checkpoint {
  run_identity id;
  train_position position;
  std::vector<float> params;
  std::vector<float> velocity;  // momentum buffer
};

void write_checkpoint(const std::string& path, const checkpoint& c);
// Reads `path` and checks it against this run (magic, version, network, exact size, hash, seed,
// data set size, global batch); throws std::runtime_error naming the file and what is wrong.
checkpoint read_checkpoint(const std::string& path, const run_identity& expected);

void write_params(const std::string& path, const std::vector<float>& params);
std::vector<float> read_params(const std::string& path);

}  // namespace train_mlp
