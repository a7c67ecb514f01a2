// distcomm-train-mlp --elastic: what the survivors of a lost rank do before they go on, and how
// a replacement gets the job's state (trainer.hpp calls it; README.md here, "Elastic training").
//
// A rank lost in step k leaves the others in one of two places: still in step k, their
// parameters as before it (the update comes after the averaged gradient), or, where the last
// collective of step k completed on them but not elsewhere, already in step k + 1. So each rank
// keeps the state from before its last update; after shrink() the survivors take the lowest step
// any of them is at, each restores that step's state (its current one, or the one before its
// last update), and rank 0's copy is broadcast so that every survivor holds the same bits.
//
// A replacement for a lost rank waits in distcomm::init() until the running ranks admit it: their
// rank 0 counts the waiting ones every step and the count travels with the gradients (one more f32
// averaged in their allreduce: above 0 when rank 0 saw any), so every rank sees it after the same
// step; at the next step boundary they grow() and share their state with the new member, which
// receives it as any rank does at the start (from the lowest rank that ran before: a replacement
// for job rank 0 is rank 0 of the grown job).
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "checkpoint.hpp"
#include "distcomm/any_communicator.hpp"
#include "distcomm/core/error.hpp"

namespace train_mlp::elastic {

// The state before an update.
struct snapshot {
  bool taken = false;
  train_position pos;
  std::vector<float> params, velocity;

  void take(const train_position& p, const std::vector<float>& w, const std::vector<float>& v) {
    taken = true;
    pos = p;
    params = w;
    velocity = v;
  }
};

// The failures that mean a rank is gone (killed, or stopped past the deadline).
inline bool is_loss(const distcomm::error& e) {
  return dynamic_cast<const distcomm::peer_lost_error*>(&e) != nullptr ||
         dynamic_cast<const distcomm::timeout_error*>(&e) != nullptr;
}

// The learning rate for `world` ranks when `first_world` started: scaled with the global batch
// (each rank keeps its batch size, so the global batch shrinks with the job).
inline float rescaled(float lr, std::size_t world, std::size_t first_world) {
  return lr * static_cast<float>(world) / static_cast<float>(first_world);
}

inline std::string first_line(const std::string& s) {
  const std::size_t n = s.find('\n');
  return n == std::string::npos ? s : s.substr(0, n);
}

// The position, parameters and optimiser state of the lowest rank that `holds` them, and the
// job's first size (the learning rate scales with it), to every rank: at the start (rank 0
// holds them), after a shrink (every survivor does), and for the ranks that join a running job
// (their start is the old ranks' sharing after grow(); a replacement for job rank 0 is rank 0
// and holds nothing). Returns the rank that sent it.
inline int share_state(distcomm::any_communicator& comm, train_position& pos,
                       std::vector<float>& params, std::vector<float>& velocity,
                       std::size_t& first_world, bool holds) {
  std::int64_t root = holds ? comm.rank() : comm.size();
  comm.allreduce(distcomm::view(&root, 1), distcomm::reduce_op::min);
  if (root >= comm.size()) {
    throw distcomm::error("elastic: no rank holds the training state to share");
  }
  const int from = static_cast<int>(root);
  std::array<std::int64_t, 8> wire{};
  const std::array<std::int64_t, 7> at = position_words(pos);
  std::copy(at.begin(), at.end(), wire.begin());
  wire[7] = static_cast<std::int64_t>(first_world);
  comm.broadcast(distcomm::view(wire.data(), wire.size()), from);
  std::array<std::int64_t, 7> got{};
  std::copy(wire.begin(), wire.begin() + 7, got.begin());
  pos = position_from_words(got);
  first_world = static_cast<std::size_t>(wire[7]);
  comm.broadcast(distcomm::view(params), from);
  comm.broadcast(distcomm::view(velocity), from);
  return from;
}

// On the survivors' new communicator: the lowest step of any survivor, its state restored on
// every rank, rank 0's copy sent to all.
inline void agree_on_state(distcomm::any_communicator& comm, train_position& pos,
                           std::vector<float>& params, std::vector<float>& velocity,
                           std::size_t& first_world, const snapshot& before_update) {
  auto lowest = static_cast<std::int64_t>(pos.global_step);
  comm.allreduce(distcomm::view(&lowest, 1), distcomm::reduce_op::min);
  if (static_cast<std::int64_t>(pos.global_step) != lowest) {
    if (!before_update.taken ||
        static_cast<std::int64_t>(before_update.pos.global_step) != lowest) {
      throw distcomm::error("elastic: rank " + std::to_string(comm.rank()) + " is at step " +
                            std::to_string(pos.global_step) + " and cannot go back to step " +
                            std::to_string(lowest) + ", where another survivor is");
    }
    pos = before_update.pos;
    params = before_update.params;
    velocity = before_update.velocity;
  }
  share_state(comm, pos, params, velocity, first_world, true);
}

}  // namespace train_mlp::elastic
