// The model of distcomm-train-mlp: inputs -> hidden1 -> hidden2 -> classes, ReLU between the
// layers, softmax cross-entropy on top, forward and backward written out by hand in float.
// All parameters live in one flat float array (W1 b1 W2 b2 W3 b3, each weight matrix stored
// input-major, W[i * outputs + o]); tensors() names the slices, which is what the trainer hands to
// the grouped allreduce, one tensor_view per slice, as a framework would hand its gradients.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "data.hpp"

namespace train_mlp {

struct mlp_shape {
  std::size_t inputs = 16;
  std::size_t hidden1 = 64;
  std::size_t hidden2 = 64;
  std::size_t classes = 4;

  std::string to_string() const;  // `16-64-64-4`
};

struct tensor_slice {
  const char* name;
  std::size_t offset;  // elements from the start of the flat array
  std::size_t count;
};

// Sums over samples: loss in double (reporting only; the gradients are float throughout).
struct sample_stats {
  double loss_sum = 0;
  double correct = 0;
  double count = 0;

  sample_stats& operator+=(const sample_stats& o) noexcept {
    loss_sum += o.loss_sum;
    correct += o.correct;
    count += o.count;
    return *this;
  }
};

class mlp {
 public:
  explicit mlp(const mlp_shape& shape);

  const mlp_shape& shape() const noexcept { return shape_; }
  std::size_t parameter_count() const noexcept { return parameter_count_; }
  const std::vector<tensor_slice>& tensors() const noexcept { return tensors_; }

  // He-normal weights (standard deviation sqrt(2 / inputs of the layer)), zero biases.
  void initialize(float* params, rng& r) const;

  // grad = the mean over samples d[index[0]], ..., d[index[n-1]] of the per-sample gradients of
  // the loss. The per-sample gradients are summed in the order given, then divided by n with
  // DistComm's divide kernel, the one its allreduce finishes avg with: the mean of one shard is
  // the same bits whichever rank, and whichever run, computes it.
  // `ready(t)`, when given, is called as soon as tensor t's mean gradient is final, top layer
  // first (during the last sample's backward), so a trainer can hand it over while the layers
  // below are still being computed.
  sample_stats mean_gradient(const float* params, const dataset& d, const std::uint32_t* index,
                             std::size_t n, float* grad,
                             const std::function<void(std::size_t tensor)>& ready = {});

  // Loss and correct predictions over samples [first, first + n) of d.
  sample_stats evaluate(const float* params, const dataset& d, std::size_t first, std::size_t n);

 private:
  // Forward pass of one sample into the activations below; returns its loss and whether the
  // arg-max class is the label.
  double forward(const float* params, const float* x, std::int32_t label, bool& correct);

  mlp_shape shape_;
  std::vector<tensor_slice> tensors_;
  std::size_t parameter_count_ = 0;
  // Activations and deltas of the sample in flight.
  std::vector<float> z1_, h1_, z2_, h2_, z3_, d1_, d2_, d3_;
};

// SGD with momentum (the PyTorch form): v = momentum * v + grad, params -= lr * v. Compiled once
// here rather than in the trainer template, which is instantiated per backend and strategy, so
// every run updates its parameters with the same machine code.
void sgd_step(float* params, float* velocity, const float* grad, std::size_t n, float lr,
              float momentum) noexcept;

}  // namespace train_mlp
