// distcomm-train-mlp: data-parallel training of a small multi-layer perceptron on synthetic data,
// with DistComm averaging the gradients. No framework: forward, backward and SGD are written out.
//   distcomm-train-mlp --np 4                          ranks as threads (local backend)
//   distcomm-run -np 4 distcomm-train-mlp              one rank per process (gloo by default)
//   distcomm-run -np 2 --backend mpi distcomm-train-mlp
// The backend is --backend, else DISTCOMM_BACKEND, else local for ranks as threads, else what
// distcomm::init() picks for the job (mpi under mpirun, else gloo). See README.md here.
#include <cstdio>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "distcomm/distcomm.hpp"
#include "distcomm/init.hpp"
#include "distcomm/registry/backends.hpp"
#include "trainer.hpp"

namespace {

using train_mlp::options;

void train_threads(const options& o, const distcomm::config& cfg) {
  distcomm::local_world world(o.np);
  world.run([&](distcomm::local_backend b) {
    distcomm::any_communicator comm = distcomm::make_communicator(std::move(b), o.strategy, cfg);
    train_mlp::train(comm, o);
  });
}

}  // namespace

int main(int argc, char** argv) {
  options o;
  std::string fusion_threshold;
  CLI::App app{
      "DistComm example: data-parallel training of a multi-layer perceptron on synthetic data"};
  app.add_option("--backend", o.backend,
                 "Transport (default: DISTCOMM_BACKEND, else the fastest built for the job: "
                 "local for ranks as threads, mpi under mpirun, else gloo); built: " +
                     distcomm::join_names(distcomm::built_backends()));
  app.add_option("--strategy", o.strategy,
                 "Allreduce algorithm: " + distcomm::join_names(distcomm::strategies()))
      ->capture_default_str();
  app.add_option("--np", o.np, "Ranks as threads of this process (local backend only)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1024));
  app.add_option("--epochs", o.epochs, "Epochs to train (in all, counting resumed ones)")
      ->capture_default_str();
  app.add_option("--steps", o.steps, "Stop after this many steps of this run (0: no limit)")
      ->capture_default_str();
  app.add_option("--batch-size", o.batch_size, "Samples per rank per step")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option(
      "--shard-size", o.shard_size,
      "Samples per gradient shard; must divide --batch-size (default: --batch-size). "
      "1 rank with --batch-size N*b --shard-size b sums like N ranks with --batch-size b");
  app.add_option("--lr", o.lr, "Learning rate")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--momentum", o.momentum, "SGD momentum")
      ->capture_default_str()
      ->check(CLI::Range(0.0f, 0.999f));
  app.add_option("--seed", o.seed, "Seed of the data set, the initial weights and the shuffles")
      ->capture_default_str();
  app.add_option("--samples", o.samples, "Training samples (the test set has a quarter as many)")
      ->capture_default_str()
      ->check(CLI::Range(std::size_t{4}, std::size_t{1} << 28));
  app.add_option("--fusion-threshold", fusion_threshold,
                 "Tensor Fusion buffer in bytes, e.g. 0, 4K, 64M (default: "
                 "DISTCOMM_FUSION_THRESHOLD)");
  app.add_option("--dump-params", o.dump_params,
                 "Write the final parameters to this file (rank 0; with %r in the name, every "
                 "rank its own)");
  app.add_option("--checkpoint", o.checkpoint,
                 "Write a checkpoint to this file after every epoch and at the end");
  app.add_option("--resume", o.resume, "Continue from this checkpoint");
  app.add_flag("--elastic", o.elastic,
               "Survive a lost rank: the others shrink the job, go back to the step the slowest "
               "of them is at, scale the learning rate with the global batch and go on "
               "(README.md here)");
  CLI11_PARSE(app, argc, argv);

  try {
    distcomm::config cfg = distcomm::config::from_env();
    if (!fusion_threshold.empty()) {
      cfg.fusion_threshold = distcomm::parse_bytes(fusion_threshold, "--fusion-threshold");
    }
    if (o.shard_size != 0 && o.batch_size % o.shard_size != 0) {
      throw distcomm::invalid_argument_error("--shard-size " + std::to_string(o.shard_size) +
                                             " does not divide --batch-size " +
                                             std::to_string(o.batch_size));
    }
    o.strategy = distcomm::find_strategy(o.strategy).name;  // fails before connecting
    const bool threads_asked = app.count("--np") != 0;
    const distcomm::world_info launched = distcomm::detect_world();
    if (o.backend.empty()) o.backend = cfg.backend;
    // Ranks as threads, or a job of one: local. Else, with nothing named, init() picks.
    if (o.backend.empty() && (threads_asked || launched.size <= 1)) o.backend = "local";
    if (o.backend == "local" && (threads_asked || launched.size <= 1)) {
      train_threads(o, cfg);
    } else {
      if (threads_asked) {
        throw distcomm::invalid_argument_error(
            "--np runs ranks as threads, which only the local backend can; start " + o.backend +
            " ranks as processes: distcomm-run -np N distcomm-train-mlp --backend " + o.backend);
      }
      distcomm::any_communicator comm = distcomm::init({o.backend, o.strategy, cfg});
      train_mlp::train(comm, o);
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "distcomm-train-mlp: %s\n", e.what());
    return 2;
  }
}
