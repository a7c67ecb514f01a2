// distcomm-train-mlp: data-parallel training of a small multi-layer perceptron on synthetic data,
// with DistComm averaging the gradients. No framework: forward, backward and SGD are written out.
//   distcomm-train-mlp --np 4                          ranks as threads (local backend)
//   distcomm-run -np 4 distcomm-train-mlp              one rank per process (gloo by default)
//   distcomm-run -np 2 --backend mpi distcomm-train-mlp
// The backend is --backend, else DISTCOMM_BACKEND, else gloo when a launcher started several
// ranks (the local backend cannot reach other processes), else local. See README.md here.
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "distcomm/distcomm.hpp"
#include "distcomm/rendezvous/bootstrap.hpp"
#include "trainer.hpp"
#ifdef DISTCOMM_HAVE_MPI
#include "distcomm/backends/mpi.hpp"
#endif
#ifdef DISTCOMM_HAVE_GLOO
#include "distcomm/backends/gloo.hpp"
#endif
#ifdef DISTCOMM_HAVE_UCX
#include "distcomm/backends/ucx.hpp"
#endif

namespace {

using train_mlp::options;

const std::vector<std::string> built_backends = {
    "local",
#ifdef DISTCOMM_HAVE_MPI
    "mpi",
#endif
#ifdef DISTCOMM_HAVE_GLOO
    "gloo",
#endif
#ifdef DISTCOMM_HAVE_UCX
    "ucx",
#endif
};

bool is_built(const std::string& backend) {
  return std::find(built_backends.begin(), built_backends.end(), backend) != built_backends.end();
}

std::string join(const std::vector<std::string>& names) {
  std::string s;
  for (const auto& n : names) s += (s.empty() ? "" : ", ") + n;
  return s;
}

template <class Strategy, class Backend>
void train_on(Backend backend, const options& o, const distcomm::config& cfg) {
  distcomm::communicator<Backend, Strategy> comm(std::move(backend), cfg);
  train_mlp::train(comm, o);
}

// make() builds the backend once the strategy is known to suit it, so a strategy the backend
// cannot run is reported before any connection is made.
template <class Make>
void train_with(Make&& make, const options& o, const distcomm::config& cfg) {
  using backend = decltype(make());
  namespace s = distcomm::strategy;
  if (o.strategy == "ring") return train_on<s::ring>(make(), o, cfg);
  if (o.strategy == "tree") return train_on<s::tree>(make(), o, cfg);
  if (o.strategy == "ps") return train_on<s::parameter_server>(make(), o, cfg);
  if (o.strategy == "rd") return train_on<s::recursive_doubling>(make(), o, cfg);
  if (o.strategy == "native") {
    if constexpr (distcomm::has_native_allreduce_v<backend>) {
      return train_on<s::native>(make(), o, cfg);
    } else {
      throw distcomm::invalid_argument_error(
          std::string("--strategy native: the ") + backend::name +
          " backend has no native allreduce; use auto, ring, tree or ps");
    }
  }
  train_on<s::automatic>(make(), o, cfg);
}

void train_threads(const options& o, const distcomm::config& cfg) {
  distcomm::local_world world(o.np);
  world.run([&](distcomm::local_backend b) { train_with([&] { return std::move(b); }, o, cfg); });
}

void train_process(const options& o, const distcomm::config& cfg) {
#ifdef DISTCOMM_HAVE_MPI
  if (o.backend == "mpi") return train_with([] { return distcomm::mpi_backend(); }, o, cfg);
#endif
#ifdef DISTCOMM_HAVE_GLOO
  if (o.backend == "gloo") {
    const auto make = [&] {
      distcomm::gloo_options go;
      go.timeout = cfg.timeout;
      return distcomm::gloo_backend(distcomm::bootstrap(cfg), go);
    };
    return train_with(make, o, cfg);
  }
#endif
#ifdef DISTCOMM_HAVE_UCX
  if (o.backend == "ucx") {
    const auto make = [&] { return distcomm::ucx_backend(distcomm::bootstrap(cfg), cfg.timeout); };
    return train_with(make, o, cfg);
  }
#endif
  (void)cfg;
  throw distcomm::invalid_argument_error("backend '" + o.backend + "' is not built in");
}

}  // namespace

int main(int argc, char** argv) {
  options o;
  std::string fusion_threshold;
  CLI::App app{
      "DistComm example: data-parallel training of a multi-layer perceptron on synthetic data"};
  app.add_option("--backend", o.backend,
                 "Transport (default: DISTCOMM_BACKEND, else gloo under a launcher with several "
                 "ranks, else local); built: " +
                     join(built_backends))
      ->check(CLI::IsMember(built_backends));
  app.add_option("--strategy", o.strategy, "Allreduce algorithm")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "ring", "tree", "ps", "rd", "native"}));
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
  app.add_option("--dump-params", o.dump_params, "Write the final parameters to this file");
  app.add_option("--checkpoint", o.checkpoint,
                 "Write a checkpoint to this file after every epoch and at the end");
  app.add_option("--resume", o.resume, "Continue from this checkpoint");
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
    const bool threads_asked = app.count("--np") != 0;
    const distcomm::world_info launched = distcomm::detect_world();
    if (o.backend.empty()) {
      if (!cfg.backend.empty()) {
        if (!is_built(cfg.backend)) {
          throw distcomm::invalid_argument_error(
              "DISTCOMM_BACKEND=" + cfg.backend + " is not built into this distcomm-train-mlp " +
              "(built: " + join(built_backends) + "); pass --backend");
        }
        o.backend = cfg.backend;
      } else if (!threads_asked && launched.size > 1 && is_built("gloo")) {
        o.backend = "gloo";
      } else {
        o.backend = "local";
      }
    }
    if (o.backend != "local") {
      if (threads_asked) {
        throw distcomm::invalid_argument_error(
            "--np runs ranks as threads, which only the local backend can; start " + o.backend +
            " ranks as processes: distcomm-run -np N distcomm-train-mlp --backend " + o.backend);
      }
      train_process(o, cfg);
    } else {
      if (!threads_asked && launched.size > 1) {
        throw distcomm::invalid_argument_error(
            "the local backend runs ranks as threads of one process (--np N), but a launcher "
            "started this process as rank " +
            std::to_string(launched.rank) + " of " + std::to_string(launched.size) +
            "; pass --backend " + (is_built("gloo") ? "gloo" : join(built_backends)));
      }
      train_threads(o, cfg);
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "distcomm-train-mlp: %s\n", e.what());
    return 2;
  }
}
