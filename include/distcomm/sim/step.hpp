// One training step in the cost model (distcomm-sim step): a model's gradients, produced by
// backward one tensor after another, averaged as the engine does (engine.cpp): a cycle starts
// when a tensor arrives at an idle engine, or, while tensors keep coming, a cycle time after the
// last one started and once its collectives ended; it first agrees with the other ranks on what
// is ready (one small allreduce), then fuses every tensor ready into buckets of at most the
// fusion threshold and runs them one after another. With overlap the tensors arrive as backward
// produces them, without it all at its end. Weak scaling: every rank computes the same, so the
// efficiency at p ranks is compute / step.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "distcomm/sim/cost.hpp"

namespace distcomm::sim {

// A gradient tensor, in the order backward produces it, and the backward time that produces it.
struct layer {
  std::size_t bytes = 0;
  double backward_seconds = 0;
};

struct step_options {
  algorithm algo = algorithm::ring;
  int ranks = 1;
  int ps_servers = 1;
  std::size_t fusion_threshold = 64u << 20;  // bytes; 0: a collective per tensor
  double cycle_seconds = 0;                  // the engine's cycle time (DISTCOMM_CYCLE_TIME)
  bool overlap = true;                       // allreduce during backward (the engine)
  // The engine's agreement at the start of every cycle: a byte per tensor (ready or not) and two,
  // allreduced by recursive doubling. False: free.
  bool negotiation = true;
  double forward_seconds = 0;
  double optimizer_seconds = 0;
  // ps only: each tensor whole on one server, round robin in the model's order (TensorFlow's
  // replica_device_setter), pushed and pulled by every rank as soon as it is ready; each server's
  // link serves its tensors one after another, every rank's link all of them. Fusion and cycles
  // do not apply. False: DistComm's ps, every bucket sharded over all the servers.
  bool ps_whole_tensors = false;
};

struct step_result {
  double step_seconds = 0;
  double compute_seconds = 0;  // forward + backward + optimizer: the step of one rank
  double comm_seconds = 0;     // allreduce time, summed over buckets
  double exposed_seconds = 0;  // the part of it backward did not hide
  double efficiency = 1;       // compute / step
  std::size_t buckets = 0;
  std::size_t cycles = 0;          // the engine's cycles that ran collectives
  double negotiation_seconds = 0;  // their agreements, summed
};

step_result simulate_step(const machine& m, const std::vector<layer>& layers,
                          const step_options& o);

// The layers of a gradient profile (element counts in the order the file lists them, input side
// first: bench/profiles/) for `element_bytes` each, in backward order (reversed), with
// `backward_seconds` split in proportion to their sizes.
std::vector<layer> layers_of(const std::vector<std::size_t>& counts, std::size_t element_bytes,
                             double backward_seconds);

// Reads a gradient profile (bench/profiles/*.txt): one tensor's element count per line; blank
// lines and lines starting with '#' are skipped. invalid_argument_error naming the file and line.
std::vector<std::size_t> read_profile(const std::string& file);

}  // namespace distcomm::sim
