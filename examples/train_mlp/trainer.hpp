// The data-parallel training loop of distcomm-train-mlp, written once for any communicator.
//
// Every step visits one global batch of ranks x --batch-size samples of the epoch's shuffled
// order; rank r takes the r-th slice. Each rank splits its slice into shards of --shard-size
// samples (default: the whole slice), computes each shard's mean gradient, and combines the
// shard means in order with DistComm's own fold and divide kernels, and hands each gradient
// tensor to the engine (distcomm::engine, avg) as soon as it is final: with one shard, during
// backward, top layer first, so averaging the top layers overlaps the backward of the layers
// below; the engine fuses what is ready together. The gradient of a global
// batch is therefore always "the per-shard means, summed in shard order, divided by the number of
// shards". With DISTCOMM_DETERMINISTIC=1 the allreduce is exactly that fold over ranks too, so
// N ranks x batch b and 1 rank x batch N*b with --shard-size b compute the same float operations
// in the same order and end with bitwise identical parameters (examples/train_mlp/README.md).
#pragma once

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "checkpoint.hpp"
#include "data.hpp"
#include "distcomm/any_communicator.hpp"
#include "distcomm/core/error.hpp"
#include "distcomm/core/partition.hpp"
#include "distcomm/core/reduce.hpp"
#include "distcomm/core/tensor_view.hpp"
#include "distcomm/engine/engine.hpp"
#include "distcomm/init.hpp"
#include "distcomm/rendezvous/world.hpp"
#include "distcomm/strategy/table.hpp"
#include "elastic.hpp"
#include "mlp.hpp"

namespace train_mlp {

struct options {
  std::string backend;  // resolved by main()
  std::string strategy = "auto";
  int np = 1;
  std::uint64_t epochs = 10;
  std::uint64_t steps = 0;  // steps this run may take; 0: no limit
  std::size_t batch_size = 32;
  std::size_t shard_size = 0;  // 0: batch_size
  float lr = 0.02f;
  float momentum = 0.9f;
  std::uint64_t seed = 1;
  std::size_t samples = 4096;
  std::string dump_params;
  std::string checkpoint;
  std::string resume;
  bool elastic = false;  // survive a lost rank: shrink and go on (README.md here, "Elastic")
};

namespace detail {

using clock = std::chrono::steady_clock;

inline double seconds_since(clock::time_point t) {
  return std::chrono::duration<double>(clock::now() - t).count();
}

inline double percent(double part, double whole) { return whole > 0 ? 100.0 * part / whole : 0.0; }

}  // namespace detail

inline void train(distcomm::any_communicator& comm, const options& o) {
  using detail::clock;
  // Rank, world and what follows from them change when --elastic shrinks the job.
  // Names this process's --dump-params file: the launcher's rank, which a replacement admitted to
  // a job still missing lower ranks does not have in its communicator.
  const int job_rank = distcomm::is_replacement() ? distcomm::detect_world().rank : comm.rank();
  int rank = job_rank;
  bool leader = rank == 0;
  auto world = static_cast<std::size_t>(comm.size());
  std::size_t first_world = world;  // a replacement learns it from the others (share_state)
  const std::size_t batch = o.batch_size;
  const std::size_t shard = o.shard_size != 0 ? o.shard_size : batch;
  const std::size_t shards = batch / shard;  // main() checked that shard divides batch
  std::size_t global_batch = 0, steps_per_epoch = 0;
  float lr = o.lr;
  const auto size_batches = [&] {
    global_batch = world * batch;
    steps_per_epoch = o.samples / global_batch;
    if (steps_per_epoch == 0) {
      throw distcomm::invalid_argument_error(
          "--samples " + std::to_string(o.samples) + " is smaller than one global batch (" +
          std::to_string(world) + " ranks x --batch-size " + std::to_string(batch) + ")");
    }
  };
  size_batches();

  const blob_spec spec;
  const data_split data = make_blobs(spec, o.seed, o.samples, o.samples / 4);
  const mlp_shape shape{spec.features, 64, 64, spec.classes};
  mlp model(shape);
  const std::size_t n = model.parameter_count();
  std::vector<float> params(n), velocity(n), grad(n);
  // Shard s's mean gradient goes to shard_grads[s]; the first shard writes straight into grad.
  std::vector<std::vector<float>> extra_shards(shards - 1, std::vector<float>(n));
  std::vector<float*> shard_grads{grad.data()};
  for (auto& g : extra_shards) shard_grads.push_back(g.data());
  const std::vector<const void*> fold_inputs(shard_grads.begin(), shard_grads.end());
  std::vector<distcomm::tensor_view> grad_views;
  for (const tensor_slice& t : model.tensors()) {
    grad_views.push_back(distcomm::view(grad.data() + t.offset, t.count));
  }

  // Rank 0 initialises or restores; every rank then starts from rank 0's state. A replacement
  // that joined a running job (as any rank, 0 included) takes the running ranks' state instead.
  const bool replacement = distcomm::is_replacement();
  run_identity id{shape, o.seed, o.samples, global_batch};
  train_position pos;
  pos.epoch_rng = make_rng(o.seed, stream::shuffle).state();
  if (leader && !replacement) {
    if (!o.resume.empty()) {
      checkpoint c = read_checkpoint(o.resume, id);
      if (c.position.step >= steps_per_epoch) {
        throw std::runtime_error("checkpoint " + o.resume + ": corrupt: step " +
                                 std::to_string(c.position.step) + " of an epoch of " +
                                 std::to_string(steps_per_epoch) + " steps");
      }
      params = std::move(c.params);
      velocity = std::move(c.velocity);
      pos = c.position;
    } else {
      rng init = make_rng(o.seed, stream::init);
      model.initialize(params.data(), init);
    }
  }
  elastic::share_state(comm, pos, params, velocity, first_world, leader && !replacement);
  // A replacement joins a job of another size than the first (elastic.hpp).
  if (world != first_world) lr = elastic::rescaled(o.lr, world, first_world);

  if (leader) {
    const distcomm::config& cfg = comm.settings();
    std::printf(
        "distcomm-train-mlp: %zu rank%s, backend %s, strategy %s, fusion threshold %s, "
        "deterministic %s\n"
        "  network %s (%zu parameters in %zu tensors), %zu training / %zu test samples\n"
        "  global batch %zu = %zu x %zu (shards of %zu), %zu steps per epoch, lr %g, "
        "momentum %g, seed %llu\n"
        "  comm: the share of rank 0's training time spent waiting for the averaged gradients "
        "after backward (what overlapping them with backward did not hide), waiting for the "
        "slowest rank included\n",
        world, world == 1 ? "" : "s", comm.backend_name(), comm.strategy_name(),
        distcomm::format_bytes(cfg.fusion_threshold).c_str(), cfg.deterministic ? "on" : "off",
        shape.to_string().c_str(), n, model.tensors().size(), data.train.size(), data.test.size(),
        global_batch, world, batch, shard, steps_per_epoch, static_cast<double>(o.lr),
        static_cast<double>(o.momentum), static_cast<unsigned long long>(o.seed));
    if (!o.resume.empty()) {
      std::printf("  resumed from %s: epoch %llu, step %llu (%llu steps so far)\n",
                  o.resume.c_str(), static_cast<unsigned long long>(pos.epoch + 1),
                  static_cast<unsigned long long>(pos.step),
                  static_cast<unsigned long long>(pos.global_step));
    }
    std::fflush(stdout);
  }
  std::uint64_t saved_at = 0;  // global step of the last checkpoint written by this run
  bool saved = false;
  const auto save = [&] {
    if (!leader || o.checkpoint.empty() || (saved && saved_at == pos.global_step)) return;
    write_checkpoint(o.checkpoint, checkpoint{id, pos, params, velocity});
    saved = true;
    saved_at = pos.global_step;
  };

  // From here on every collective goes through the engine, which owns the communicator.
  std::optional<distcomm::engine> eng(std::in_place, comm);
  std::vector<distcomm::work> pending;
  const auto submit = [&](std::size_t t) {
    pending.push_back(
        eng->allreduce_async(model.tensors()[t].name, grad_views[t], distcomm::reduce_op::avg));
  };

  // --elastic: the state before the last update, for a rank that completed a step the others
  // did not (elastic.hpp), what a lost rank turns into, and how replacements join.
  elastic::snapshot before_update;
  // The new communicator (of the survivors, or grown): ranks, batches, the learning rate.
  const auto regroup = [&](distcomm::any_communicator next) {
    comm = std::move(next);
    rank = comm.rank();
    leader = rank == 0;
    world = static_cast<std::size_t>(comm.size());
    size_batches();
    id.global_batch = global_batch;
    lr = elastic::rescaled(o.lr, world, first_world);
  };
  // The epoch goes on where it was, counted in samples: a step of a smaller global batch repeats
  // at most one batch's worth of them.
  const auto same_samples = [&](std::size_t old_global_batch) {
    pos.step = std::min<std::uint64_t>(pos.step * old_global_batch / global_batch, steps_per_epoch);
  };
  // Said by rank 0, or by `speaker` (the rank that shared its state with replacements).
  const auto report = [&](const std::string& what, int speaker = 0) {
    if (rank != speaker) return;
    std::printf(
        "elastic: %s\n  %zu of %zu ranks go on from step %llu (epoch %llu, step %llu of "
        "%zu), global batch %zu, lr %g\n",
        what.c_str(), world, first_world, static_cast<unsigned long long>(pos.global_step),
        static_cast<unsigned long long>(pos.epoch + 1), static_cast<unsigned long long>(pos.step),
        steps_per_epoch, global_batch, static_cast<double>(lr));
    std::fflush(stdout);
  };
  const auto lost = [&](const distcomm::error& e) {
    if (!o.elastic || !elastic::is_loss(e)) throw;
    pending.clear();
    eng.reset();
    const std::size_t old_global_batch = global_batch;
    regroup(comm.shrink());
    elastic::agree_on_state(comm, pos, params, velocity, first_world, before_update);
    same_samples(old_global_batch);
    report(elastic::first_line(e.what()));
    eng.emplace(comm);
  };
  // Replacements wait (the count rank 0 saw travelled with the last step's gradients): every rank
  // admits them at this step boundary; false when none could join after all.
  const auto admit = [&]() -> bool {
    pending.clear();
    eng.reset();
    try {
      std::optional<distcomm::any_communicator> grown = distcomm::grow(comm);
      if (!grown) {
        eng.emplace(comm);
        return false;
      }
      const std::size_t old_world = world, old_global_batch = global_batch;
      regroup(std::move(*grown));
      same_samples(old_global_batch);
      const int sender = elastic::share_state(comm, pos, params, velocity, first_world, true);
      report(std::to_string(world - old_world) + " rank" + (world - old_world == 1 ? "" : "s") +
                 " joined",
             sender);
      eng.emplace(comm);
    } catch (const distcomm::error& e) {
      lost(e);  // a member lost while growing: the survivors of the old or the grown job go on
    }
    return true;
  };
  const std::function<void(std::size_t)> no_hook;

  float joiners = 0;  // --elastic: replacements waiting to join, as of the last step (/ ranks)
  std::uint64_t run_steps = 0;
  const auto step_limit_reached = [&] { return o.steps != 0 && run_steps == o.steps; };
  double last_test_accuracy = -1;
  while (pos.epoch < o.epochs && !step_limit_reached()) {
    rng shuffle(pos.epoch_rng);
    const std::vector<std::uint32_t> order = shuffled(o.samples, shuffle);
    sample_stats train_stats;
    double comm_seconds = 0;
    std::size_t epoch_steps = 0;
    const clock::time_point start = clock::now();
    bool shrunk = false;  // --elastic: the job lost or gained ranks in this epoch
    for (; pos.step < steps_per_epoch && !step_limit_reached(); ++pos.step) {
      if (joiners > 0) {
        joiners = 0;
        if (admit()) {
          shrunk = true;
          break;  // the epoch again from rank 0's position, with its order recomputed
        }
      }
      const std::uint32_t* mine = order.data() + pos.step * global_batch + rank * batch;
      pending.clear();
      try {
        for (std::size_t s = 0; s < shards; ++s) {
          train_stats += model.mean_gradient(params.data(), data.train, mine + s * shard, shard,
                                             shard_grads[s], shards == 1 ? submit : no_hook);
        }
        if (shards > 1) {
          distcomm::fold(grad.data(), fold_inputs.data(), shards, n, distcomm::dtype::f32,
                         distcomm::reduce_op::sum);
          distcomm::divide(grad.data(), grad.data(), n, distcomm::dtype::f32, shards);
          for (std::size_t t = grad_views.size(); t-- > 0;) submit(t);
        }
        if (o.elastic) {
          // Rank 0's count of waiting replacements, averaged with the gradients (f32, avg: fused
          // into their last allreduce, no collective of its own): above 0 on every rank alike.
          joiners = static_cast<float>(distcomm::waiting_to_join(comm));
          pending.push_back(eng->allreduce_async("joiners", distcomm::view(&joiners, 1),
                                                 distcomm::reduce_op::avg));
        }
        const clock::time_point c0 = clock::now();
        for (const distcomm::work& w : pending) w.wait();
        comm_seconds += detail::seconds_since(c0);
      } catch (const distcomm::error& e) {
        lost(e);
        shrunk = true;
        break;  // the epoch again from the agreed position, with its order recomputed
      }
      if (o.elastic) before_update.take(pos, params, velocity);
      sgd_step(params.data(), velocity.data(), grad.data(), n, lr, o.momentum);
      ++pos.global_step;
      ++run_steps;
      ++epoch_steps;
    }
    if (shrunk) continue;
    const double train_seconds = detail::seconds_since(start);
    const bool finished = pos.step == steps_per_epoch;

    // Loss and accuracy over every rank's samples; the test set is split across the ranks.
    const distcomm::block mine = distcomm::partition(data.test.size(), world, rank);
    const sample_stats test = model.evaluate(params.data(), data.test, mine.begin, mine.count);
    std::vector<double> sums = {train_stats.loss_sum, train_stats.correct, train_stats.count,
                                test.loss_sum,        test.correct,        test.count};
    try {
      eng->allreduce_async("epoch statistics", distcomm::view(sums), distcomm::reduce_op::sum)
          .wait();
    } catch (const distcomm::error& e) {
      lost(e);  // the epoch's statistics are lost with the rank; its training is not
      continue;
    }
    last_test_accuracy = detail::percent(sums[4], sums[5]);
    if (leader) {
      std::string note;
      if (!finished) {
        note = " (stopped after step " + std::to_string(pos.step) + " of " +
               std::to_string(steps_per_epoch) + ")";
      }
      std::printf(
          "epoch %3llu/%llu  loss %.4f  train acc %5.1f%%  test acc %5.1f%%  %8.0f samples/s  "
          "comm %4.1f%%%s\n",
          static_cast<unsigned long long>(pos.epoch + 1), static_cast<unsigned long long>(o.epochs),
          sums[0] / sums[2], detail::percent(sums[1], sums[2]), last_test_accuracy,
          static_cast<double>(epoch_steps * global_batch) / train_seconds,
          detail::percent(comm_seconds, train_seconds), note.c_str());
      std::fflush(stdout);
    }
    if (finished) {
      ++pos.epoch;
      pos.step = 0;
      pos.epoch_rng = shuffle.state();
      save();
    }
  }

  save();
  // --dump-params with %r: every rank writes its own (the elastic test compares them).
  if (const std::size_t at = o.dump_params.find("%r"); at != std::string::npos) {
    std::string path = o.dump_params;
    write_params(path.replace(at, 2, std::to_string(job_rank)), params);
  }
  if (leader) {
    if (!o.dump_params.empty() && o.dump_params.find("%r") == std::string::npos) {
      write_params(o.dump_params, params);
    }
    if (last_test_accuracy >= 0) {
      std::printf("final: test accuracy %.1f%% after %llu steps (%llu in this run)\n",
                  last_test_accuracy, static_cast<unsigned long long>(pos.global_step),
                  static_cast<unsigned long long>(run_steps));
    } else {
      std::printf("nothing to train: already at epoch %llu of %llu\n",
                  static_cast<unsigned long long>(pos.epoch),
                  static_cast<unsigned long long>(o.epochs));
    }
    std::fflush(stdout);
  }
}

}  // namespace train_mlp
