// distcomm-train-libtorch: data-parallel SGD on a small torch::nn model, DistComm averaging the
// gradients between libtorch's backward pass and the optimizer step.
//   distcomm-run -np 2 distcomm-train-libtorch --backend gloo     one rank per process
//   distcomm-train-libtorch --np 2                                ranks as threads (local backend)
// Every rank starts from rank 0's parameters (a broadcast per parameter: the ranks initialise
// differently on purpose), trains on its own shard of a synthetic regression task, and averages
// the gradients through distcomm::engine: an autograd hook on each parameter hands its gradient
// to the engine as soon as backward produces it, so averaging overlaps the rest of backward. The
// ranks then take the same steps and end with bitwise-identical parameters: each prints a hash of
// them, with the loss (mean over ranks) before and after training.
#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <string>
#include <vector>

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>
#include <CLI/CLI.hpp>

#include "distcomm/distcomm.hpp"
#include "distcomm/engine/engine.hpp"
#include "distcomm/init.hpp"
#include "distcomm/registry/backends.hpp"

namespace {

struct options {
  std::string backend;  // empty: DISTCOMM_BACKEND, else local
  int np = 2;
  int steps = 200;
  int batch = 32;
  int samples = 512;  // per rank
  int features = 8;
  int hidden = 32;
  double lr = 0.05;
  std::uint64_t seed = 1;
};

std::mutex print_mu;

// The task every rank learns: y = tanh(x A) b, with A and b drawn from the seed alone, so all
// ranks agree on it; each rank's inputs come from its own stream.
struct shard {
  torch::Tensor x, y;
};

shard make_shard(const options& o, int rank) {
  auto task = at::make_generator<at::CPUGeneratorImpl>(o.seed);
  const torch::Tensor a = torch::randn({o.features, 16}, task);
  const torch::Tensor b = torch::randn({16, 1}, task) / 4.0;
  auto mine = at::make_generator<at::CPUGeneratorImpl>(o.seed * 7919 + 1000 + rank);
  shard s;
  s.x = torch::randn({o.samples, o.features}, mine);
  s.y = torch::tanh(s.x.matmul(a)).matmul(b);
  return s;
}

torch::nn::Sequential make_model(const options& o, int rank) {
  torch::nn::Sequential model(torch::nn::Linear(o.features, o.hidden), torch::nn::ReLU(),
                              torch::nn::Linear(o.hidden, 1));
  // A different start on every rank (from this rank's own generator, never libtorch's global
  // one, which threads would share): only the broadcast from rank 0 makes them agree.
  torch::NoGradGuard no_grad;
  auto init = at::make_generator<at::CPUGeneratorImpl>(o.seed * 104729 + rank);
  for (auto& p : model->parameters()) {
    const double bound = 1.0 / std::sqrt(static_cast<double>(p.dim() > 1 ? p.size(1) : o.hidden));
    p.uniform_(-bound, bound, init);
  }
  return model;
}

// DistComm reads and writes a tensor's memory in place through a tensor_view, so the tensor must
// be a contiguous float32 tensor in host memory.
distcomm::tensor_view host_f32_view(const torch::Tensor& t, const char* what) {
  if (!t.defined()) {
    throw distcomm::invalid_argument_error(std::string(what) + " is undefined (no backward yet?)");
  }
  if (!t.device().is_cpu() || t.scalar_type() != torch::kFloat32 || !t.is_contiguous()) {
    throw distcomm::invalid_argument_error(std::string(what) +
                                           " must be a contiguous float32 CPU tensor, got " +
                                           t.toString() + (t.is_contiguous() ? "" : " (strided)"));
  }
  return distcomm::view(t.data_ptr<float>(), static_cast<std::size_t>(t.numel()));
}

// FNV-1a over the parameters' bytes: equal on every rank exactly when the parameters are.
std::uint64_t parameter_hash(const std::vector<torch::Tensor>& params) {
  std::uint64_t h = 0xcbf29ce484222325ULL;
  for (const auto& p : params) {
    const torch::Tensor c = p.detach().contiguous();
    const auto* bytes = static_cast<const unsigned char*>(c.data_ptr());
    for (std::size_t i = 0; i < c.nbytes(); ++i) h = (h ^ bytes[i]) * 0x100000001b3ULL;
  }
  return h;
}

bool train(distcomm::any_communicator comm, const options& o) {
  const int rank = comm.rank();
  const shard data = make_shard(o, rank);
  torch::nn::Sequential model = make_model(o, rank);
  const std::vector<torch::Tensor> params = model->parameters();

  {
    torch::NoGradGuard no_grad;
    for (const auto& p : params) comm.broadcast(host_f32_view(p, "a parameter"), 0);
  }

  // From here on the engine owns the communicator. Each parameter's hook copies the gradient
  // backward just produced (autograd accumulates the original into .grad after the hook, so it
  // must not change under it) and submits the copy; after backward the averaged copies become
  // the gradients the optimizer steps with.
  distcomm::engine eng(comm);
  std::vector<torch::Tensor> averaged(params.size());
  std::vector<distcomm::work> works(params.size());
  for (std::size_t i = 0; i < params.size(); ++i) {
    params[i].register_hook([&, i](torch::Tensor grad) {
      averaged[i] = grad.detach().to(torch::kFloat32).contiguous().clone();
      works[i] =
          eng.allreduce_async("param" + std::to_string(i), host_f32_view(averaged[i], "a gradient"),
                              distcomm::reduce_op::avg);
      return grad;
    });
  }

  torch::optim::SGD sgd(params, torch::optim::SGDOptions(o.lr));
  float first_loss = 0, last_loss = 0;
  for (int step = 0; step < o.steps; ++step) {
    const int64_t start = (static_cast<int64_t>(step) * o.batch) % (o.samples - o.batch + 1);
    const torch::Tensor x = data.x.narrow(0, start, o.batch);
    const torch::Tensor y = data.y.narrow(0, start, o.batch);
    sgd.zero_grad();
    const torch::Tensor loss = torch::mse_loss(model->forward(x), y);
    loss.backward();  // the hooks submit every gradient as it is produced

    {
      torch::NoGradGuard no_grad;
      for (std::size_t i = 0; i < params.size(); ++i) {
        works[i].wait();
        params[i].mutable_grad().copy_(averaged[i]);
      }
    }
    sgd.step();

    if (step == 0 || step == o.steps - 1) {
      float mean_loss = loss.item<float>();
      eng.allreduce_async("loss", distcomm::view(&mean_loss, 1), distcomm::reduce_op::avg).wait();
      (step == 0 ? first_loss : last_loss) = mean_loss;
    }
  }

  const bool fell = last_loss < first_loss;
  std::lock_guard<std::mutex> lk(print_mu);
  std::printf(
      "rank %d/%d: loss %.6f -> %.6f after %d steps (mean over ranks), parameters "
      "fnv1a %016" PRIx64 " (backend %s)\n",
      rank, comm.size(), static_cast<double>(first_loss), static_cast<double>(last_loss), o.steps,
      parameter_hash(params), comm.backend_name());
  std::fflush(stdout);
  return fell;
}

bool train_threads(const options& o, const distcomm::config& cfg) {
  bool all_ok = true;
  std::mutex mu;
  distcomm::local_world world(o.np);
  world.run([&](distcomm::local_backend b) {
    const bool ok = train(distcomm::make_communicator(std::move(b), "auto", cfg), o);
    std::lock_guard<std::mutex> lk(mu);
    all_ok = all_ok && ok;
  });
  return all_ok;
}

}  // namespace

int main(int argc, char** argv) {
  options o;
  CLI::App app{
      "DistComm + libtorch: data-parallel SGD on a small MLP, gradients averaged by "
      "distcomm::engine from autograd hooks"};
  const std::string built = distcomm::join_names(distcomm::built_backends());
  app.add_option("--backend", o.backend,
                 "Transport (default: DISTCOMM_BACKEND, else local); built: " + built);
  app.add_option("--np", o.np, "Ranks as threads of this process (local backend)")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  app.add_option("--steps", o.steps, "SGD steps")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000000));
  app.add_option("--batch", o.batch, "Samples per step and rank")
      ->capture_default_str()
      ->check(CLI::Range(1, 4096));
  app.add_option("--lr", o.lr, "Learning rate")->capture_default_str();
  app.add_option("--seed", o.seed, "Seed of the task, the data and the initial parameters")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  o.samples = std::max(o.samples, o.batch);

  try {
    // One intra-op thread: the ranks already occupy the cores, and fewer threads keep the
    // reductions inside libtorch in one order.
    torch::set_num_threads(1);
    const distcomm::config cfg = distcomm::config::from_env();
    if (o.backend.empty()) o.backend = cfg.backend.empty() ? "local" : cfg.backend;
    bool ok = false;
    if (o.backend == "local") {
      if (app.count("--np") == 0 &&
          distcomm::detect_world().launcher != distcomm::launcher_kind::none) {
        throw distcomm::invalid_argument_error(
            "started by a launcher with the local backend, which runs ranks as threads of one "
            "process: pass --backend with a transport between processes (built: " +
            built + "), or run without the launcher, with --np N");
      }
      ok = train_threads(o, cfg);
    } else {
      if (app.count("--np") != 0) {
        throw distcomm::invalid_argument_error(
            "--np runs ranks as threads, which only the local backend can; start " + o.backend +
            " ranks as processes: distcomm-run -np N distcomm-train-libtorch --backend " +
            o.backend);
      }
      ok = train(distcomm::init({o.backend, "", cfg}), o);
    }
    if (!ok) std::fprintf(stderr, "distcomm-train-libtorch: the loss did not fall\n");
    return ok ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "distcomm-train-libtorch: %s\n", e.what());
    return 2;
  }
}
